package review

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

// TestOneAnswerPerFault: what the apiserver refuses before any webhook is
// one answer, an error naming the field, whether -config sends the object
// to a webhook or not: metadata that does not decode into ObjectMeta (a
// boolean or a list as an annotation, a number as a name), and, after the
// mutating webhooks, metadata its validation refuses (a name it does not
// take, as each kind's rule says; a Helm expression; metadata: null). The
// exit status is 1, as for any refusal.
func TestOneAnswerPerFault(t *testing.T) {
	cm := func(metadata string) string { return "apiVersion: v1\nkind: ConfigMap\n" + metadata + "data: {a: b}\n" }
	// A webhook for Deployments only: the ConfigMaps are sent none.
	config := validateConfig(`{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}`, "")
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"a boolean annotation", cm("metadata:\n  name: c\n  namespace: ns\n  annotations: {enabled: true}\n"),
			"metadata.annotations.enabled is a JSON bool, where the apiserver takes a string: it refuses the object (400 Bad Request) before any webhook"},
		{"a list annotation", cm("metadata:\n  name: c\n  namespace: ns\n  annotations: {hosts: [a, b]}\n"),
			"metadata.annotations.hosts is a JSON array, where the apiserver takes a string"},
		{"a number as name", cm("metadata: {name: 42, namespace: ns}\n"), "metadata.name is a JSON number, where the apiserver takes a string"},
		{"managedFields that are not a list", cm("metadata: {name: c, namespace: ns, managedFields: oops}\n"), "metadata.managedFields is a JSON string, where the apiserver takes a list"},
		{"a Helm expression as name", cm("metadata: {name: \"{{ .Release.Name }}-cm\", namespace: ns}\n"),
			`the apiserver refuses it (422 Invalid) before any validating webhook: metadata.name: Invalid value: "{{ .Release.Name }}-cm": a lowercase RFC 1123 subdomain`},
		// Every fault said, in one order run after run: labels are
		// validated walking a map.
		{"bad labels", cm("metadata: {name: c, namespace: ns, labels: {a: \"{{ x }}\", b: \"{{ y }}\", c: \"{{ z }}\", d: \"-\"}}\n"),
			`metadata.labels: Invalid value: "-": a valid label must be`},
		{"an upper-case name", cm("metadata: {name: Settings, namespace: ns}\n"), `metadata.name: Invalid value: "Settings"`},
		{"metadata null", cm("metadata: null\n"), "metadata.name: Required value: name or generateName is required"},
		{"a bad label key", cm("metadata: {name: c, namespace: ns, labels: {\"a b\": c}}\n"), `metadata.labels: Invalid value: "a b"`},
		// Each kind's own rule: a Service's name is a DNS label, a Role's
		// anything that can be a path segment.
		{"a Service named with a dot", "apiVersion: v1\nkind: Service\nmetadata: {name: web.v1, namespace: ns}\nspec: {ports: [{port: 80}]}\n",
			`metadata.name: Invalid value: "web.v1": must not contain dots`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"o.yaml": tc.doc, "c.yaml": config}
			for _, args := range [][]string{{"-f", "DIR/o.yaml"}, {"-f", "DIR/o.yaml", "-config", "DIR/c.yaml"}} {
				out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", files, args...)
				if code != exitRefused || !strings.Contains(out, ": error: ") || !strings.Contains(out, tc.want) {
					t.Errorf("%q: got exit %d:\n%s\nwant exit 1 and an error saying %q", args, code, out, tc.want)
				}
			}
		})
	}
	// The same faults, said in the same order every time.
	doc := cm("metadata: {name: c, namespace: ns, labels: {a: \"{{ x }}\", b: \"{{ y }}\", c: \"{{ z }}\", d: \"{{ w }}\"}}\n")
	first, _, _, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"o.yaml": doc}, "-f", "DIR/o.yaml", "-o", "json")
	for range 10 {
		again, _, _, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"o.yaml": doc}, "-f", "DIR/o.yaml", "-o", "json")
		if stripDir(again) != stripDir(first) {
			t.Fatalf("the same faults said otherwise:\n%s\nthen\n%s", first, again)
		}
	}
	if !strings.Contains(first, "render it first") {
		t.Errorf("a template's expression as label values, not said to be one:\n%s", first)
	}
	// What the apiserver takes is not refused: a Role named as a path
	// segment may hold a colon, a generateName is checked as the name
	// the apiserver makes of it.
	for _, doc := range []string{
		"apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: \"system:reader\", namespace: ns}\n",
		cm("metadata: {generateName: settings-, namespace: ns}\n"),
		// Managed fields the field manager cannot read it resets, rather
		// than refuse the object.
		cm("metadata: {name: c, namespace: ns, managedFields: [{manager: m, operation: Bogus}]}\n"),
	} {
		out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"o.yaml": doc}, "-f", "DIR/o.yaml")
		if code != 0 || strings.Contains(out, "error") {
			t.Errorf("%s: got exit %d:\n%s\nwant it taken", doc, code, out)
		}
	}
}

// TestKindsNotServed: a kind the apiserver does not serve says why, and
// never that a version is not served while naming it served: a Scale is
// the object of a subresource, a Policy of a served version is no kind
// of it.
func TestKindsNotServed(t *testing.T) {
	for _, tc := range []struct{ doc, want, never string }{
		{"apiVersion: autoscaling/v1\nkind: Scale\nmetadata: {name: web, namespace: ns}\nspec: {replicas: 3}\n",
			"autoscaling/v1 Scale is the object of a subresource (deployments/scale, replicasets/scale, replicationcontrollers/scale, statefulsets/scale), not a kind the apiserver stores: review it with -subresource scale", "does not serve autoscaling/v1"},
		{"apiVersion: v1\nkind: Policy\nrules: []\n", `serves v1, but no kind Policy in it`, "does not serve v1"},
		{"apiVersion: apps/v1beta1\nkind: Deployment\nmetadata: {name: d}\n", "does not serve apps/v1beta1 (of apps it serves v1)", ""},
	} {
		out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"o.yaml": tc.doc}, "-f", "DIR/o.yaml")
		if code != exitRefused || !strings.Contains(out, tc.want) || (tc.never != "" && strings.Contains(out, tc.never)) {
			t.Errorf("%s: got exit %d:\n%s\nwant %q", tc.doc, code, out, tc.want)
		}
	}
}

// TestSubresources: a subresource's write reviewed offline as the
// apiserver sends it: kubectl scale's UPDATE of deployments/scale, the
// object a Scale (autoscaling/v1) made of -old's Deployment with -f's
// replicas (or a Scale given itself, its Deployment in -old); an UPDATE of
// pods/ephemeralcontainers, whose objects are the Pods; a CREATE of
// pods/eviction, whose object is the Eviction.
func TestSubresources(t *testing.T) {
	deploy := func(replicas string) string {
		return "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop, uid: u-1, resourceVersion: \"7\"}\n" +
			"spec: {replicas: " + replicas + ", selector: {matchLabels: {app: web}}, template: {metadata: {labels: {app: web}}, spec: {containers: [{name: c, image: nginx}]}}}\n" +
			"status: {replicas: 2}\n"
	}
	scale := "apiVersion: autoscaling/v1\nkind: Scale\nmetadata: {name: web, namespace: shop}\nspec: {replicas: 9}\n"
	pod := func(debug string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: shop}\nspec:\n  containers: [{name: c, image: nginx}]\n" + debug
	}
	files := map[string]string{
		"new.yaml": deploy("5"), "old.yaml": deploy("2"), "scale.yaml": scale,
		"pod.yaml": pod(""), "debug.yaml": pod("  ephemeralContainers: [{name: dbg, image: busybox}]\n"),
		"eviction.yaml": "apiVersion: policy/v1\nkind: Eviction\nmetadata: {name: p, namespace: shop}\n",
	}
	type sent struct{ object, oldObject map[string]any }
	decode := func(raw []byte) map[string]any {
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		return m
	}
	for _, tc := range []struct {
		name      string
		args      []string
		kind      string // group/version/kind sent
		resource  string // group/version/resource sent
		sub       string
		operation admissionv1.Operation
		check     func(t *testing.T, object, oldObject map[string]any)
	}{
		{"the Scale of a Deployment", []string{"-f", "DIR/new.yaml", "-old", "DIR/old.yaml", "-operation", "UPDATE", "-subresource", "scale"},
			"autoscaling/v1/Scale", "apps/v1/deployments", "scale", admissionv1.Update, func(t *testing.T, object, oldObject map[string]any) {
				want := `{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"web","namespace":"shop","resourceVersion":"7","uid":"u-1"},"spec":{"replicas":5},"status":{"replicas":2,"selector":"app=web"}}`
				if got, _ := json.Marshal(object); string(got) != want {
					t.Errorf("got the object %s, want %s", got, want)
				}
				if spec, _ := oldObject["spec"].(map[string]any); spec["replicas"] != 2.0 {
					t.Errorf("got the oldObject %v, want the Scale of -old's, replicas 2", oldObject)
				}
			}},
		{"a Scale given", []string{"-f", "DIR/scale.yaml", "-old", "DIR/old.yaml", "-operation", "UPDATE", "-subresource", "scale"},
			"autoscaling/v1/Scale", "apps/v1/deployments", "scale", admissionv1.Update, func(t *testing.T, object, oldObject map[string]any) {
				if spec, _ := object["spec"].(map[string]any); spec["replicas"] != 9.0 || oldObject["kind"] != "Scale" {
					t.Errorf("got the object %v and oldObject %v, want the Scale given and the old one made", object, oldObject)
				}
			}},
		{"ephemeral containers", []string{"-f", "DIR/debug.yaml", "-old", "DIR/pod.yaml", "-operation", "UPDATE", "-subresource", "ephemeralcontainers"},
			"/v1/Pod", "/v1/pods", "ephemeralcontainers", admissionv1.Update, func(t *testing.T, object, oldObject map[string]any) {
				spec, _ := object["spec"].(map[string]any)
				oldSpec, _ := oldObject["spec"].(map[string]any)
				if spec["ephemeralContainers"] == nil || oldSpec["ephemeralContainers"] != nil {
					t.Errorf("got the object %v and oldObject %v, want the Pods with and without the debug container", object, oldObject)
				}
			}},
		{"an eviction", []string{"-f", "DIR/eviction.yaml", "-subresource", "eviction"},
			"policy/v1/Eviction", "/v1/pods", "eviction", admissionv1.Create, func(t *testing.T, object, oldObject map[string]any) {
				if object["kind"] != "Eviction" || oldObject != nil {
					t.Errorf("got the object %v and oldObject %v, want the Eviction alone", object, oldObject)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeWebhook{}
			out, _, code, _ := reviewRun(t, f, "", files, tc.args...)
			if code != 0 || len(f.requests) == 0 {
				t.Fatalf("got exit %d, %d requests:\n%s", code, len(f.requests), out)
			}
			for _, r := range f.requests {
				kind := r.Kind.Group + "/" + r.Kind.Version + "/" + r.Kind.Kind
				resource := r.Resource.Group + "/" + r.Resource.Version + "/" + r.Resource.Resource
				if kind != tc.kind || resource != tc.resource || r.SubResource != tc.sub || r.Operation != tc.operation || r.Name != "p" && r.Name != "web" || r.Namespace != "shop" ||
					*r.RequestKind != r.Kind || *r.RequestResource != r.Resource || r.RequestSubResource != tc.sub {
					t.Errorf("sent %s %s %s/%s %s/%s, requested as %v %v %s; want %s %s %s", r.Operation, kind, resource, r.SubResource, r.Namespace, r.Name, r.RequestKind, r.RequestResource, r.RequestSubResource, tc.operation, tc.kind, tc.resource)
				}
			}
			tc.check(t, decode(f.requests[0].Object.Raw), decode(f.requests[0].OldObject.Raw))
		})
	}

	// A Scale's validating webhooks are sent the Scale made of the
	// Deployment the apiserver stores: of a mutating webhook's changes
	// only spec.replicas reaches them.
	f := &fakeWebhook{}
	reviewRun(t, f, "", files, "-f", "DIR/new.yaml", "-old", "DIR/old.yaml", "-operation", "UPDATE", "-subresource", "scale")
	for _, r := range f.requests {
		if strings.Contains(string(r.Object.Raw), `"seen"`) && r.Kind.Kind == "Scale" && validateRequest(f, r) {
			t.Errorf("/validate was sent the mutated Scale %s; want it made again of the Deployment", r.Object.Raw)
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-f", "DIR/new.yaml", "-old", "DIR/old.yaml", "-operation", "UPDATE", "-subresource", "scales"}, "the apiserver serves no scales of deployments (it serves scale, status)"},
		{[]string{"-f", "DIR/new.yaml", "-subresource", "scale"}, "the apiserver does not create deployments/scale (it serves the verbs get, patch, update)"},
		{[]string{"-f", "DIR/scale.yaml", "-old", "DIR/pod.yaml", "-operation", "UPDATE", "-subresource", "scale"}, "give the one object it is of, of its namespace and name, in -old (found 0)"},
		{[]string{"-f", "DIR/pod.yaml", "-subresource", "eviction"}, "pods/eviction is sent a policy/v1 Eviction, not the Pod"},
	} {
		out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", files, tc.args...)
		if code != exitRefused || !strings.Contains(out, tc.want) {
			t.Errorf("%q: got exit %d:\n%s\nwant 1 and %q", tc.args, code, out, tc.want)
		}
	}
}

// validateRequest reports whether r is one f was sent on /validate.
func validateRequest(f *fakeWebhook, r *admissionv1.AdmissionRequest) bool {
	for i, q := range f.requests {
		if q == r {
			return f.routes[i] == "/validate"
		}
	}
	return false
}

// TestCapturedAdmissionReview: an AdmissionReview a real apiserver sent
// (testdata/, captured by e2e TestCapture) is reviewed as it is, its
// request sent as captured with a uid of its own, not taken for a
// manifest.
func TestCapturedAdmissionReview(t *testing.T) {
	captured, err := filepath.Glob(filepath.Join("..", "testdata", "v1*.json"))
	if err != nil || len(captured) == 0 {
		t.Fatalf("no captured reviews in ../testdata: %v", err)
	}
	for _, path := range captured {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(raw, &review); err != nil || review.Request == nil {
			t.Fatalf("%s: %v", path, err)
		}
		want := review.Request
		f := &fakeWebhook{}
		out, _, _, _ := reviewRun(t, f, "", nil, "-f", path)
		if strings.Contains(out, ": error: ") || !strings.Contains(out, "note: a captured admission.k8s.io/") || len(f.requests) == 0 {
			t.Errorf("%s:\n%s\nwant it reviewed as a captured AdmissionReview", path, out)
			continue
		}
		got := f.requests[0]
		if got.UID == want.UID || got.Operation != want.Operation || got.Kind != want.Kind || got.Resource != want.Resource || got.SubResource != want.SubResource ||
			got.Name != want.Name || got.Namespace != want.Namespace || got.UserInfo.Username != want.UserInfo.Username || *got.DryRun != *want.DryRun ||
			!sameJSON(got.Object.Raw, want.Object.Raw) || !sameJSON(got.OldObject.Raw, want.OldObject.Raw) {
			t.Errorf("%s: sent %s %v %v %s/%s by %s, uid %s; want it as captured: %s %v %v %s/%s by %s, another uid", path, got.Operation, got.Kind, got.Resource, got.Namespace, got.Name, got.UserInfo.Username, got.UID,
				want.Operation, want.Kind, want.Resource, want.Namespace, want.Name, want.UserInfo.Username)
		}
	}
}

func sameJSON(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

// TestUnknownSaysBothSides: an unknown verdict whose two ways read alike
// says what each patch is; and a kind whose scope is not known, whose
// verdict is the same either way, is not said to be in namespace default.
func TestUnknownSaysBothSides(t *testing.T) {
	config := `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: m}
webhooks:
- name: m.example.com
  clientConfig: {service: {name: w, namespace: w, path: /mutate}}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
  namespaceSelector: {matchLabels: {team: a}}
  sideEffects: None
  admissionReviewVersions: [v1]
- name: other.example.com
  clientConfig: {service: {name: w, namespace: w, path: /mutate}}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
  namespaceSelector: {matchLabels: {team: b}}
  sideEffects: None
  admissionReviewVersions: [v1]
`
	// The counting webhook sets the annotation count to its call's
	// number: called by one webhook or the other, the patch has one
	// operation of one path, its value another.
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: elsewhere}\n"
	out, _, _, _ := reviewRun(t, &fakeWebhook{counting: true}, "", map[string]string{"c.yaml": config, "cm.yaml": cm}, "-f", "DIR/cm.yaml", "-config", "DIR/c.yaml")
	line := grepLines(out, "ConfigMap elsewhere/c: unknown:")
	if n := strings.Count(line, `"path":"/metadata/annotations","value":{"count":`); n < 2 {
		t.Errorf("an unknown verdict whose ways read alike:\n%s\nwant each way's patch said, %d are", out, n)
	}

	// The fake's message names the object's namespace, if any: reviewed
	// as cluster-scoped and as namespaced, the verdict is the same, and
	// what is said is the cluster-scoped run's.
	octopus := "apiVersion: sea.example.com/v1\nkind: Octopus\nmetadata: {name: bad-o}\n"
	out, _, _, _ = reviewRun(t, &fakeWebhook{}, "", map[string]string{"o.yaml": octopus}, "-f", "DIR/o.yaml", "-o", "json")
	var results []result
	if err := json.Unmarshal([]byte(out), &results); err != nil || len(results) != 1 {
		t.Fatalf("%v: %s", err, out)
	}
	for _, r := range results[0].Requests {
		if r.Namespace != "" {
			t.Errorf("the result of an Octopus of unknown scope, the same either way, says it was sent in namespace %q; want the cluster-scoped run's", r.Namespace)
		}
	}
}

// stripDir is out with the temporary directories of sources left out.
func stripDir(out string) string {
	return regexp.MustCompile(`/tmp/[^"#]*/`).ReplaceAllString(out, "")
}
