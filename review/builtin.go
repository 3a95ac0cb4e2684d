package review

// What the apiserver's built-in admission plugins, on by default, change in
// an object before any webhook sees it. review does not model them: each
// reads the cluster (the ServiceAccount, the PriorityClasses, LimitRanges,
// the default StorageClass or IngressClass), and the token volume's name is
// random, so a model would look exact while being a guess. It says instead,
// on each object they would change, what they would change, so that an
// offline review of a Pod policy is not silently different from the
// apiserver's. docs/review.md argues the choice.
//
// Read in k8s.io/kubernetes v1.37.2: pkg/kubeapiserver/options/plugins.go
// (DefaultOffAdmissionPlugins names those on by default; AllOrderedPlugins
// runs them all before MutatingAdmissionWebhook) and each plugin's Admit in
// plugin/pkg/admission/: serviceaccount, priority,
// defaulttolerationseconds, runtimeclass, limitranger,
// storage/storageclass/setdefault, storage/storageobjectinuseprotection,
// network/defaultingressclass, nodetaint.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// builtinPrefix begins every note of builtinNotes.
const builtinPrefix = "built-in admission, before any webhook: "

// builtinNotes says what the built-in admission plugins on by default
// would change in req's object before the webhook is called. A note that
// depends on what the cluster holds says so with "if" or "unless".
func builtinNotes(req request) []string {
	if req.object == nil || req.admitted || req.subresource != "" {
		return nil
	}
	group, resource := req.resource.Group, req.resource.Resource
	if !slices.Contains([]string{"/pods", "/persistentvolumeclaims", "/persistentvolumes", "storage.k8s.io/volumeattributesclasses",
		"networking.k8s.io/ingresses", "/nodes"}, group+"/"+resource) {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(req.object, &m) != nil {
		return nil
	}
	obj := &unstructured.Unstructured{Object: m}
	create := req.operation == admissionregistrationv1.Create
	update := req.operation == admissionregistrationv1.Update
	var notes []string
	note := func(format string, args ...any) { notes = append(notes, builtinPrefix+fmt.Sprintf(format, args...)) }
	switch {
	case group == "" && resource == "pods" && (create || update):
		if create {
			podCreateNotes(obj, note)
		}
		if tolerations := missingTolerations(obj); len(tolerations) > 0 {
			note("DefaultTolerationSeconds adds the tolerations %s:NoExecute for 300 s (spec.tolerations; --default-not-ready-toleration-seconds and --default-unreachable-toleration-seconds)", strings.Join(tolerations, ":NoExecute and "))
		}
		if create {
			note("LimitRanger sets the requests and limits a container lacks (spec.containers[*].resources, spec.initContainers[*].resources) and says so in metadata.annotations, if the namespace has a LimitRange with defaults")
		}
	case group == "" && resource == "persistentvolumeclaims" && create:
		_, hasClass := obj.GetAnnotations()["volume.beta.kubernetes.io/storage-class"]
		if _, set, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "storageClassName"); !set && !hasClass {
			note("DefaultStorageClass sets spec.storageClassName, if a StorageClass is marked default")
		}
		finalizerNote(obj, "kubernetes.io/pvc-protection", "StorageObjectInUseProtection", note)
	case group == "" && resource == "persistentvolumes" && create:
		finalizerNote(obj, "kubernetes.io/pv-protection", "StorageObjectInUseProtection", note)
	case group == "storage.k8s.io" && resource == "volumeattributesclasses" && create:
		finalizerNote(obj, "kubernetes.io/vac-protection", "StorageObjectInUseProtection", note)
	case group == "networking.k8s.io" && resource == "ingresses" && create:
		_, hasClass := obj.GetAnnotations()["kubernetes.io/ingress.class"]
		if _, set, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "ingressClassName"); !set && !hasClass {
			note("DefaultIngressClass sets spec.ingressClassName, if an IngressClass is marked default")
		}
	case group == "" && resource == "nodes" && create:
		taints, _, _ := unstructured.NestedSlice(obj.Object, "spec", "taints")
		if !slices.ContainsFunc(taints, func(t any) bool {
			m, _ := t.(map[string]any)
			return m["key"] == "node.kubernetes.io/not-ready" && m["effect"] == "NoSchedule"
		}) {
			note("TaintNodesByCondition adds the taint node.kubernetes.io/not-ready:NoSchedule (spec.taints)")
		}
	}
	return notes
}

// podCreateNotes are what ServiceAccount, Priority and RuntimeClass change
// in a Pod being created.
func podCreateNotes(pod *unstructured.Unstructured, note func(string, ...any)) {
	if _, mirror := pod.GetAnnotations()["kubernetes.io/config.mirror"]; mirror {
		return // ServiceAccount leaves a mirror pod's spec as it is
	}
	if name, _, _ := unstructured.NestedString(pod.Object, "spec", "serviceAccountName"); name == "" {
		note(`ServiceAccount sets spec.serviceAccountName and spec.serviceAccount to "default"`)
	}
	automount, set, _ := unstructured.NestedBool(pod.Object, "spec", "automountServiceAccountToken")
	if !set || automount {
		mounting := containersWithoutMount(pod, "/var/run/secrets/kubernetes.io/serviceaccount")
		if mounting != "" {
			unless := ", unless the ServiceAccount sets automountServiceAccountToken: false"
			if set {
				unless = "" // the Pod's own setting wins
			}
			note("ServiceAccount mounts a projected token volume kube-api-access-<random> (spec.volumes) at /var/run/secrets/kubernetes.io/serviceaccount in %s%s", mounting, unless)
		}
	}
	if secrets, _, _ := unstructured.NestedSlice(pod.Object, "spec", "imagePullSecrets"); len(secrets) == 0 {
		note("ServiceAccount copies the ServiceAccount's imagePullSecrets (spec.imagePullSecrets), if it has any")
	}
	class, _, _ := unstructured.NestedString(pod.Object, "spec", "priorityClassName")
	if class == "" {
		note("Priority sets spec.priority and spec.preemptionPolicy from the PriorityClass marked globalDefault, if there is one (and spec.priorityClassName to its name), or to 0 and PreemptLowerPriority")
	} else {
		note("Priority sets spec.priority and spec.preemptionPolicy from the PriorityClass %s", class)
	}
	if runtime, _, _ := unstructured.NestedString(pod.Object, "spec", "runtimeClassName"); runtime != "" {
		note("RuntimeClass sets spec.overhead, and adds to spec.nodeSelector and spec.tolerations, from the RuntimeClass %s, if it defines them", runtime)
	}
}

// missingTolerations are the NoExecute taints DefaultTolerationSeconds
// adds a toleration for: those the Pod does not tolerate already (a
// toleration with no key tolerates every taint; with no effect, every
// effect).
func missingTolerations(pod *unstructured.Unstructured) []string {
	tolerations, _, _ := unstructured.NestedSlice(pod.Object, "spec", "tolerations")
	var missing []string
	for _, taint := range []string{"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"} {
		if !slices.ContainsFunc(tolerations, func(t any) bool {
			m, _ := t.(map[string]any)
			key, _ := m["key"].(string)
			effect, _ := m["effect"].(string)
			return (key == taint || key == "") && (effect == "NoExecute" || effect == "")
		}) {
			missing = append(missing, taint)
		}
	}
	return missing
}

// containersWithoutMount says which of the Pod's containers and init
// containers have no volume mounted at path: "2 containers
// (spec.containers[*].volumeMounts)"; "" when all have one.
func containersWithoutMount(pod *unstructured.Unstructured, path string) string {
	var parts []string
	for _, field := range []string{"initContainers", "containers"} {
		containers, _, _ := unstructured.NestedSlice(pod.Object, "spec", field)
		n := 0
		for _, c := range containers {
			m, _ := c.(map[string]any)
			mounts, _ := m["volumeMounts"].([]any)
			if !slices.ContainsFunc(mounts, func(v any) bool {
				mount, _ := v.(map[string]any)
				return mount["mountPath"] == path
			}) {
				n++
			}
		}
		if n > 0 {
			noun := map[string]string{"initContainers": "init container", "containers": "container"}[field]
			parts = append(parts, fmt.Sprintf("%s (spec.%s[*].volumeMounts)", count(n, noun), field))
		}
	}
	return strings.Join(parts, " and ")
}

// finalizerNote notes a finalizer a plugin adds unless it is there.
func finalizerNote(obj *unstructured.Unstructured, finalizer, plugin string, note func(string, ...any)) {
	if !slices.Contains(obj.GetFinalizers(), finalizer) {
		note("%s adds the finalizer %s (metadata.finalizers)", plugin, finalizer)
	}
}

func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
