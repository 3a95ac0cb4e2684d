package review

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// TestBuiltinNotes: each built-in admission plugin on by default is noted
// on an object it would change, naming the fields, and only then: not
// when the object already has what it would add, not on an operation or a
// subresource it leaves alone, not on an object admission has already
// changed (a PATCH's stored result). e2e TestAuditReplay holds the notes
// of a Pod and a PVC to what a real apiserver changed.
func TestBuiltinNotes(t *testing.T) {
	for _, tc := range []struct {
		name        string
		op          admissionregistrationv1.OperationType
		resource    string
		subresource string
		object      string
		want, not   []string // substrings of some note, of none
	}{
		{"a bare Pod", admissionregistrationv1.Create, "pods", "", `{kind: Pod, apiVersion: v1, metadata: {name: p}, spec: {initContainers: [{name: i}], containers: [{name: a}, {name: b}]}}`,
			[]string{`ServiceAccount sets spec.serviceAccountName and spec.serviceAccount to "default"`,
				"kube-api-access-<random> (spec.volumes) at /var/run/secrets/kubernetes.io/serviceaccount in 1 init container (spec.initContainers[*].volumeMounts) and 2 containers (spec.containers[*].volumeMounts), unless the ServiceAccount sets automountServiceAccountToken: false",
				"imagePullSecrets (spec.imagePullSecrets), if it has any",
				"Priority sets spec.priority and spec.preemptionPolicy from the PriorityClass marked globalDefault",
				"DefaultTolerationSeconds adds the tolerations node.kubernetes.io/not-ready:NoExecute and node.kubernetes.io/unreachable:NoExecute",
				"LimitRanger"},
			[]string{"RuntimeClass"}},
		{"a Pod that has what they add", admissionregistrationv1.Create, "pods", "", `{kind: Pod, apiVersion: v1, metadata: {name: p}, spec: {serviceAccountName: robot, automountServiceAccountToken: false,
			imagePullSecrets: [{name: s}], priorityClassName: high, runtimeClassName: gvisor, tolerations: [{operator: Exists}], containers: [{name: a}]}}`,
			[]string{"Priority sets spec.priority and spec.preemptionPolicy from the PriorityClass high", "RuntimeClass sets spec.overhead", "from the RuntimeClass gvisor"},
			[]string{"ServiceAccount", "DefaultTolerationSeconds"}},
		{"a Pod mounting its own token", admissionregistrationv1.Create, "pods", "", `{kind: Pod, apiVersion: v1, metadata: {name: p}, spec: {automountServiceAccountToken: true,
			containers: [{name: a, volumeMounts: [{name: t, mountPath: /var/run/secrets/kubernetes.io/serviceaccount}]}], tolerations: [{key: node.kubernetes.io/unreachable, effect: NoExecute}]}}`,
			[]string{"adds the tolerations node.kubernetes.io/not-ready:NoExecute for 300 s"},
			[]string{"kube-api-access", "unreachable:NoExecute"}},
		{"a mirror Pod: ServiceAccount leaves it", admissionregistrationv1.Create, "pods", "", `{kind: Pod, apiVersion: v1, metadata: {name: p, annotations: {kubernetes.io/config.mirror: x}}, spec: {containers: [{name: a}]}}`,
			[]string{"DefaultTolerationSeconds"}, []string{"ServiceAccount", "Priority sets"}},
		{"a Pod updated: tolerations only", admissionregistrationv1.Update, "pods", "", `{kind: Pod, apiVersion: v1, metadata: {name: p}, spec: {containers: [{name: a}]}}`,
			[]string{"DefaultTolerationSeconds"}, []string{"ServiceAccount", "Priority", "LimitRanger"}},
		{"a Pod's status: none", admissionregistrationv1.Update, "pods", "status", `{kind: Pod, apiVersion: v1, metadata: {name: p}, spec: {containers: [{name: a}]}}`,
			nil, []string{"built-in"}},
		{"a PVC", admissionregistrationv1.Create, "persistentvolumeclaims", "", `{kind: PersistentVolumeClaim, apiVersion: v1, metadata: {name: c}, spec: {}}`,
			[]string{"DefaultStorageClass sets spec.storageClassName, if a StorageClass is marked default", "StorageObjectInUseProtection adds the finalizer kubernetes.io/pvc-protection (metadata.finalizers)"}, nil},
		{"a PVC with its class and finalizer", admissionregistrationv1.Create, "persistentvolumeclaims", "", `{kind: PersistentVolumeClaim, apiVersion: v1, metadata: {name: c, finalizers: [kubernetes.io/pvc-protection]}, spec: {storageClassName: ""}}`,
			nil, []string{"built-in"}},
		{"a PV", admissionregistrationv1.Create, "persistentvolumes", "", `{kind: PersistentVolume, apiVersion: v1, metadata: {name: v}}`,
			[]string{"kubernetes.io/pv-protection"}, nil},
		{"an Ingress", admissionregistrationv1.Create, "ingresses", "", `{kind: Ingress, apiVersion: networking.k8s.io/v1, metadata: {name: i}, spec: {}}`,
			[]string{"DefaultIngressClass sets spec.ingressClassName, if an IngressClass is marked default"}, nil},
		{"an Ingress with the class annotation", admissionregistrationv1.Create, "ingresses", "", `{kind: Ingress, apiVersion: networking.k8s.io/v1, metadata: {name: i, annotations: {kubernetes.io/ingress.class: nginx}}}`,
			nil, []string{"built-in"}},
		{"a Node", admissionregistrationv1.Create, "nodes", "", `{kind: Node, apiVersion: v1, metadata: {name: n}}`,
			[]string{"TaintNodesByCondition adds the taint node.kubernetes.io/not-ready:NoSchedule (spec.taints)"}, nil},
		{"a Deployment: none", admissionregistrationv1.Create, "deployments", "", `{kind: Deployment, apiVersion: apps/v1, metadata: {name: d}}`,
			nil, []string{"built-in"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var obj unstructured.Unstructured
			if err := yaml.NewYAMLOrJSONDecoder(strings.NewReader(tc.object), 4096).Decode(&obj.Object); err != nil {
				t.Fatal(err)
			}
			gvk := obj.GroupVersionKind()
			object, err := obj.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			notes := builtinNotes(request{operation: tc.op, kind: gvk, resource: gvk.GroupVersion().WithResource(tc.resource), subresource: tc.subresource, object: object})
			all := strings.Join(notes, "\n")
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("the notes lack %q:\n%s", w, all)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(all, n) {
					t.Errorf("the notes have %q:\n%s", n, all)
				}
			}
			for _, n := range notes {
				if !strings.HasPrefix(n, builtinPrefix) {
					t.Errorf("note %q does not begin %q", n, builtinPrefix)
				}
			}
			if after := builtinNotes(request{operation: tc.op, kind: gvk, resource: gvk.GroupVersion().WithResource(tc.resource), object: object, admitted: true}); after != nil {
				t.Errorf("an object already through admission: got notes %q, want none", after)
			}
		})
	}
}

// TestBuiltinNotesOnManifests: `webhook review -f` says them on the
// object's line.
func TestBuiltinNotesOnManifests(t *testing.T) {
	pod := "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: ns}\nspec: {containers: [{name: web, image: nginx}]}\n"
	out, _, _, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"pod.yaml": pod}, "-f", "DIR/pod.yaml")
	if !strings.Contains(out, "pod.yaml#1: Pod ns/web: patched (1 operation)\n  note: "+builtinPrefix+`ServiceAccount sets spec.serviceAccountName`) {
		t.Errorf("the Pod's line has no note of the built-in plugins:\n%s", out)
	}
}
