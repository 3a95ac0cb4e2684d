package review

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/example/webhook/jsonpatch"
)

// fakeWebhook is a webhook of the tests' own, speaking the apiserver's
// protocol, so that review is tested without any policy: /mutate adds the
// annotation seen=yes (or, counting, a new one each time), /validate denies
// an object whose name begins with "bad" (on a dry run too, unless
// dryRunAllows), /authorize denies jane. It records the requests and the
// SubjectAccessReviews.
type fakeWebhook struct {
	counting, dryRunAllows, broken bool

	mu       sync.Mutex
	requests []*admissionv1.AdmissionRequest
	routes   []string // the path each request was sent on
	sars     []authorizationv1.SubjectAccessReviewSpec
	calls    int
}

func (f *fakeWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.broken {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	if r.URL.Path == "/authorize" {
		var sar authorizationv1.SubjectAccessReview
		_ = json.NewDecoder(r.Body).Decode(&sar)
		f.mu.Lock()
		f.sars = append(f.sars, sar.Spec)
		f.mu.Unlock()
		out := authorizationv1.SubjectAccessReview{TypeMeta: sar.TypeMeta}
		if sar.Spec.User == "jane" {
			out.Status = authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: "jane may not"}
		}
		_ = json.NewEncoder(w).Encode(out)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	req := review.Request
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.routes = append(f.routes, r.URL.Path)
	f.calls++
	calls := f.calls
	f.mu.Unlock()
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	var obj struct {
		Metadata struct {
			Name        string            `json:"name"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(req.Object.Raw, &obj)
	switch r.URL.Path {
	case "/mutate":
		var ops []map[string]any
		switch {
		case f.counting:
			ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations", "value": map[string]string{"count": fmt.Sprint(calls)}})
		case obj.Metadata.Annotations["seen"] == "" && len(req.Object.Raw) > 0:
			ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations", "value": map[string]string{"seen": "yes"}})
		}
		if len(ops) > 0 {
			resp.Patch, _ = json.Marshal(ops)
			pt := admissionv1.PatchTypeJSONPatch
			resp.PatchType = &pt
		}
	case "/validate":
		if strings.HasPrefix(obj.Metadata.Name, "bad") && !(f.dryRunAllows && *req.DryRun) {
			resp.Allowed = false
			resp.Result = &metav1.Status{Code: 403, Message: obj.Metadata.Name + " is bad"}
		}
		if obj.Metadata.Name == "warned" {
			resp.Warnings = []string{"careful"}
		}
	}
	_ = json.NewEncoder(w).Encode(admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp})
}

// reviewRun runs `webhook review args` against f, with files written from
// files (name → content) into a directory it returns.
func reviewRun(t *testing.T, f *fakeWebhook, stdin string, files map[string]string, args ...string) (stdout, stderr string, code int, dir string) {
	t.Helper()
	dir = t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "DIR", dir)
	}
	stdout, stderr, code = runReplayArgs(t, f, stdin, args...)
	if !slices.Contains(args, "-o") {
		// Text is read as a terminal shows it: the results on stdout, the
		// header and the summary on stderr (TestSummaryOnStderr).
		stdout += stderr
	}
	return stdout, stderr, code, dir
}

func deployment(name, namespace string, labels string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %s
  namespace: %s
  labels: {%s}
spec:
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec: {containers: [{name: x, image: nginx}]}
`, name, namespace, labels)
}

// TestInputShapes reads each shape the issue names: several YAML
// documents, JSON, a directory, stdin, a List and a *List whose items lack
// kind and apiVersion, as kubectl get -o json prints them.
func TestInputShapes(t *testing.T) {
	list := `{"apiVersion": "apps/v1", "kind": "DeploymentList", "items": [{"metadata": {"name": "one", "namespace": "ns"}}, {"metadata": {"name": "two", "namespace": "ns"}}]}`
	generic := `{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}]}`
	files := map[string]string{
		"multi.yaml":       deployment("a", "ns", "") + "---\n---\n" + deployment("b", "ns", ""),
		"one.json":         `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}}`,
		"dir/x.yml":        deployment("d", "ns", ""),
		"dir/ignored.txt":  "not read",
		"list.json":        list,
		"generic-list.yml": generic,
	}
	out, errOut, code, _ := reviewRun(t, &fakeWebhook{}, deployment("stdin", "ns", ""), files,
		"-f", "DIR/multi.yaml", "-f", "DIR/one.json", "-f", "DIR/dir", "-f", "-", "-f", "DIR/list.json", "-f", "DIR/generic-list.yml")
	if code != 0 {
		t.Fatalf("got exit %d, want 0:\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"multi.yaml#1: Deployment ns/a: patched", "multi.yaml#2: Deployment ns/b: patched", "one.json#1: ConfigMap ns/c:",
		"x.yml#1: Deployment ns/d:", "stdin#1: Deployment ns/stdin:", "list.json#1[0]: Deployment ns/one:", "list.json#1[1]: Deployment ns/two:",
		"generic-list.yml#1[0]: ConfigMap default/cm:", "8 reviewed"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ignored") {
		t.Errorf("a .txt file of the directory was read:\n%s", out)
	}
}

// TestBadInput: each bad input is an error naming where it is and what is
// wrong; the other documents are still reviewed; the exit status is 2.
func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		args          []string
		want          string
	}{
		{"not YAML", "kind: [unclosed\n", nil, "bad#1: error: not YAML or JSON: line 1:"},
		{"no kind", "apiVersion: v1\nmetadata: {name: x}\n", nil, "bad#1: error: line 1: the document has no kind"},
		{"no apiVersion", "kind: ConfigMap\nmetadata: {name: x}\n", nil, "bad#1: error: line 1: the document has no apiVersion"},
		{"an item without a kind in a List", `{"apiVersion": "v1", "kind": "List", "items": [{"metadata": {"name": "x"}}]}`, nil, "bad#1[0]: error: line 1: the document has no apiVersion or kind"},
		// The YAML library quotes the value, which may be a Secret's.
		{"a value not of its tag's type", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData:\n  password: !!int hunter2SECRET\n", nil, "bad#1: error: not YAML or JSON: the document beginning at line 1: cannot decode !!str (a value, not shown) as a !!int"},
		{"a value with backticks, not of its tag's type", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData:\n  password: !!int 'x`y`SECRETz'\n", nil, "bad#1: error: not YAML or JSON: the document beginning at line 1: cannot decode !!str (a value, not shown) as a !!int"},
		{"a value of two lines, not of its tag's type", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData:\n  password: !!int \"hunter2\\nSECRET\"\n", nil, "bad#1: error: not YAML or JSON: the document beginning at line 1: cannot decode !!str (a value, not shown) as a !!int"},
		{"a value not of its tag's type, in a flow mapping", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {password: !!float hunter2SECRET}\n", nil, "bad#1: error: not YAML or JSON: the document beginning at line 1: cannot decode !!str (a value, not shown) as a !!float"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"good.yaml": deployment("good", "ns", ""), "bad": tc.content}
			out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", files, "-f", "DIR/bad", "-f", "DIR/good.yaml")
			if code != 2 || !strings.Contains(out, tc.want) || !strings.Contains(out, "good.yaml#1: Deployment ns/good: patched") {
				t.Errorf("got exit %d:\n%s\nwant 2, %q, and the good document reviewed", code, out, tc.want)
			}
			if strings.Contains(out, "SECRET") {
				t.Errorf("the error shows a value of the document:\n%s", out)
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "-f is required"},
		{[]string{"-f", "DIR/x.yaml", "-operation", "UPDATE"}, "needs -old"},
		{[]string{"-f", "DIR/x.yaml", "-old", "DIR/x.yaml"}, "-old is for -operation UPDATE"},
		{[]string{"-f", "DIR/x.yaml", "-operation", "PATCH"}, "want CREATE, UPDATE, DELETE or CONNECT"},
		{[]string{"-f", "DIR/x.yaml", "-operation", "CONNECT"}, "needs -subresource exec, attach, portforward or proxy"},
		{[]string{"-f", "DIR/x.yaml", "-subresource", "exec"}, "give -operation CONNECT"},
		{[]string{"-f", "DIR/x.yaml", "-connect-query", "command=sh"}, "-connect-query is for -operation CONNECT"},
		{[]string{"-f", "DIR/x.yaml", "-operation", "DELETE", "-subresource", "status"}, "the apiserver deletes whole objects"},
		{[]string{"-f", "DIR/x.yaml", "-skip-kind", "apps/v1/"}, "-skip-kind"},
		{[]string{"-f", "DIR/x.yaml", "-skip-file", "[a"}, "-skip-file"},
		{[]string{"-f", "DIR/x.yaml", "-resource", "Widget=widgets,Sideways"}, "want Kind=plural"},
		{[]string{"-f", "DIR/x.yaml", "-api-resources", "DIR/missing"}, "-api-resources"},
		{[]string{"-f", "DIR/x.yaml", "stray"}, "unexpected argument"},
		{[]string{"-f", "DIR/x.yaml", "-o", "xml"}, "want text, json, yaml or junit"},
		{[]string{"-f", "DIR/x.yaml", "-resource", "Widget"}, "want Kind=plural"},
		{[]string{"-f", "DIR/missing.yaml"}, "no such file"},
	} {
		out, errOut, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"x.yaml": deployment("x", "ns", "")}, tc.args...)
		if code != 2 || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("review %q: got exit %d, %q; want 2 and %q", tc.args, code, out+errOut, tc.want)
		}
	}
}

// TestVerdicts: admitted, patched, warned and denied objects, each said on
// its line, and the exit status: 1 once one is denied or errors.
func TestVerdicts(t *testing.T) {
	files := map[string]string{"all.yaml": strings.Join([]string{
		deployment("plain", "ns", ""), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: seen, namespace: ns, annotations: {seen: \"yes\"}}\n",
		deployment("warned", "ns", ""), deployment("bad-one", "ns", "")}, "---\n")}
	out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", files, "-f", "DIR/all.yaml")
	for _, want := range []string{"Deployment ns/plain: patched (1 operation)", "ConfigMap ns/seen: admitted", "Deployment ns/warned: patched (1 operation); warned: careful",
		"Deployment ns/bad-one: denied: bad-one is bad", "4 reviewed: 1 admitted, 1 patched, 1 warned, 1 denied"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code != 1 {
		t.Errorf("with a denial: got exit %d, want 1", code)
	}
	if _, _, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"ok.yaml": deployment("ok", "ns", "")}, "-f", "DIR/ok.yaml"); code != 0 {
		t.Errorf("every object admitted: got exit %d, want 0", code)
	}
	out, _, code, _ = reviewRun(t, &fakeWebhook{broken: true}, "", map[string]string{"ok.yaml": deployment("ok", "ns", "")}, "-f", "DIR/ok.yaml")
	if code != 1 || !strings.Contains(out, "error: /mutate: HTTP 500") {
		t.Errorf("a webhook answering 500: got exit %d:\n%s\nwant 1 and the error", code, out)
	}
}

// TestNotIdempotent: /mutate patches its own result again, as the
// apiserver may call it twice (reinvocationPolicy: IfNeeded).
func TestNotIdempotent(t *testing.T) {
	out, _, code, _ := reviewRun(t, &fakeWebhook{counting: true}, "", map[string]string{"d.yaml": deployment("d", "ns", "")}, "-f", "DIR/d.yaml")
	if code != 1 || !strings.Contains(out, "not idempotent") {
		t.Errorf("got exit %d:\n%s\nwant 1 and not idempotent", code, out)
	}
}

// TestDiffersOnDryRun: a webhook that answers a dry run otherwise, which
// breaks kubectl diff and apply --dry-run=server.
func TestDiffersOnDryRun(t *testing.T) {
	out, _, code, _ := reviewRun(t, &fakeWebhook{dryRunAllows: true}, "", map[string]string{"d.yaml": deployment("bad-d", "ns", "")}, "-f", "DIR/d.yaml", "-o", "json")
	var results []map[string]any
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatal(err)
	}
	if code != 1 || len(results) != 1 || results[0]["dryRunSame"] != false || results[0]["verdict"] != "denied" {
		t.Errorf("got exit %d, %v; want 1, denied, dryRunSame false", code, results)
	}
}

// TestJSONOutput has the fields the issue names, for an admission review
// and a SubjectAccessReview.
func TestJSONOutput(t *testing.T) {
	sar := "apiVersion: authorization.k8s.io/v1\nkind: SubjectAccessReview\nspec: {user: jane, resourceAttributes: {verb: get, resource: pods}}\n"
	out, _, _, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"d.yaml": deployment("d", "ns", "") + "---\n" + sar}, "-f", "DIR/d.yaml", "-o", "json")
	var results []map[string]any
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("got %d results, want 2:\n%s", len(results), out)
	}
	d := results[0]
	for _, key := range []string{"apiVersion", "kind", "namespace", "name", "verdict", "mutate", "dryRunSame", "validate"} {
		if _, ok := d[key]; !ok {
			t.Errorf("the result has no %q: %v", key, d)
		}
	}
	mutate, _ := d["mutate"].(map[string]any)
	validate, _ := d["validate"].(map[string]any)
	if d["verdict"] != "admitted" || mutate["idempotent"] != true || len(mutate["patch"].([]any)) != 1 || validate["allowed"] != true {
		t.Errorf("got %v, want admitted, a patch of one operation, idempotent, allowed", d)
	}
	if s := results[1]; s["kind"] != "SubjectAccessReview" || s["verdict"] != "denied" || s["reason"] != "jane may not" {
		t.Errorf("got %v, want the SubjectAccessReview denied, with its reason", s)
	}
	out, _, _, _ = reviewRun(t, &fakeWebhook{}, "", map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, annotations: {seen: \"yes\"}}\n"}, "-f", "DIR/cm.yaml", "-o", "json")
	if !strings.Contains(out, `"patch": []`) {
		t.Errorf("an object /mutate leaves as it is: want \"patch\": [], got\n%s", out)
	}
}

// TestUpdateAndDelete: UPDATE carries the old object, paired by kind,
// namespace and name; DELETE carries only oldObject; an UPDATE without its
// old object is an error.
func TestUpdateAndDelete(t *testing.T) {
	f := &fakeWebhook{}
	files := map[string]string{"new.yaml": deployment("d", "ns", "v: new") + "---\n" + deployment("lonely", "ns", ""), "old.yaml": deployment("d", "ns", "v: old")}
	out, _, code, _ := reviewRun(t, f, "", files, "-f", "DIR/new.yaml", "-operation", "UPDATE", "-old", "DIR/old.yaml")
	if code != 1 || !strings.Contains(out, "Deployment ns/lonely: error: no old object") {
		t.Errorf("got exit %d:\n%s\nwant 1 and an error for the object without its old one", code, out)
	}
	req := f.requests[0]
	if req.Operation != admissionv1.Update || !bytes.Contains(req.Object.Raw, []byte(`"new"`)) || !bytes.Contains(req.OldObject.Raw, []byte(`"old"`)) {
		t.Errorf("got %s with object %s, oldObject %s; want UPDATE, the new and the old", req.Operation, req.Object.Raw, req.OldObject.Raw)
	}
	if string(req.Options.Raw) != `{"kind":"UpdateOptions","apiVersion":"meta.k8s.io/v1"}` {
		t.Errorf("got options %s, want UpdateOptions", req.Options.Raw)
	}

	f = &fakeWebhook{}
	if _, _, code, _ := reviewRun(t, f, "", map[string]string{"d.yaml": deployment("d", "ns", "")}, "-f", "DIR/d.yaml", "-operation", "DELETE"); code != 0 {
		t.Errorf("DELETE: got exit %d, want 0", code)
	}
	req = f.requests[0]
	if req.Operation != admissionv1.Delete || len(req.Object.Raw) != 0 || len(req.OldObject.Raw) == 0 || req.Name != "d" || req.Namespace != "ns" {
		t.Errorf("DELETE: got %+v, want no object, the oldObject, its name and namespace", req)
	}
}

// TestRequestAsTheAPIServerBuildsIt: kind, resource (the plural guessed,
// or -resource's), namespace (-namespace for an object that names none,
// none for a cluster-scoped kind; one naming another is TestNamespaceGivenDiffers's), userInfo, a fresh uid per request.
func TestRequestAsTheAPIServerBuildsIt(t *testing.T) {
	f := &fakeWebhook{}
	files := map[string]string{"x.yaml": strings.Join([]string{
		"apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: np}\n",
		"apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n",
		"apiVersion: example.com/v1\nkind: Octopus\nmetadata: {name: o, namespace: mine}\n"}, "---\n")}
	reviewRun(t, f, "", files, "-f", "DIR/x.yaml", "-namespace", "mine", "-user", "jane", "-group", "devs", "-resource", "Octopus=octopodes,Namespaced")
	got := map[string]*admissionv1.AdmissionRequest{}
	uids := map[string]bool{}
	for _, r := range f.requests {
		got[r.Kind.Kind] = r
		uids[string(r.UID)] = true
	}
	if uids[""] || len(uids) != len(f.requests) {
		t.Errorf("got %d distinct uids for %d requests, want one each", len(uids), len(f.requests))
	}
	for kind, want := range map[string][3]string{"NetworkPolicy": {"networkpolicies", "mine"}, "Namespace": {"namespaces", "team"}, "Octopus": {"octopodes", "mine"}} {
		r := got[kind]
		if r == nil || r.Resource.Resource != want[0] || r.Namespace != want[1] || r.UserInfo.Username != "jane" || r.UserInfo.Groups[0] != "devs" {
			t.Errorf("%s: got %+v, want resource %s in namespace %q, by jane of devs", kind, r, want[0], want[1])
		}
	}
}

// TestConfigMatching: with -config, an object goes only to the webhooks
// whose rules and objectSelector match it; a namespaceSelector is
// TestNamespaceNameLabel: a Namespace written with a name is sent with
// the label of its name, as the apiserver defaults it before any webhook,
// and an objectSelector reads it; before, neither had it, and a webhook
// selecting namespaces by name was said not to be called.
func TestNamespaceNameLabel(t *testing.T) {
	config := `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: v}
webhooks:
- name: v.example.com
  clientConfig: {service: {name: w, namespace: w, path: /validate}}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [namespaces]}]
  objectSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [team-a]}]}
  sideEffects: None
  admissionReviewVersions: [v1]
`
	f := &fakeWebhook{}
	files := map[string]string{"config.yaml": config, "ns.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: team-b, labels: {kubernetes.io/metadata.name: other}}\n"}
	out, _, _, _ := reviewRun(t, f, "", files, "-f", "DIR/ns.yaml", "-config", "DIR/config.yaml")
	if strings.Contains(out, "Namespace team-a: admitted\n  note: no webhook of -config matches it") || !strings.Contains(out, "Namespace team-b: admitted\n  note: no webhook of -config matches it") {
		t.Errorf("got:\n%s\nwant team-a sent to the webhook that selects it by its name's label, team-b (whose label the apiserver sets to team-b) not", out)
	}
	var sent []string
	for _, r := range f.requests {
		var ns struct {
			Metadata struct{ Labels map[string]string } `json:"metadata"`
		}
		if err := json.Unmarshal(r.Object.Raw, &ns); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, r.Name+"="+ns.Metadata.Labels["kubernetes.io/metadata.name"])
	}
	if len(sent) == 0 || slices.ContainsFunc(sent, func(s string) bool { return s != "team-a=team-a" }) {
		t.Errorf("sent %v, want team-a, labelled with its name, alone", sent)
	}
}

// evaluated when the input holds the Namespace, else said to be not.
func TestConfigMatching(t *testing.T) {
	config := `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: m}
webhooks:
- name: m.example.com
  clientConfig: {service: {name: w, namespace: w, path: /mutate}, caBundle: __CA_BUNDLE__}
  rules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments], scope: Namespaced}]
  objectSelector: {matchLabels: {inject: "yes"}}
  namespaceSelector: {matchLabels: {team: a}}
  sideEffects: None
  admissionReviewVersions: [v1]
`
	objects := strings.Join([]string{
		deployment("selected", "a-ns", "inject: \"yes\""),
		deployment("not-labelled", "a-ns", ""),
		deployment("other-ns", "b-ns", "inject: \"yes\""),
		deployment("unknown-ns", "c-ns", "inject: \"yes\""),
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, namespace: a-ns, labels: {inject: \"yes\"}}\n",
		"apiVersion: v1\nkind: Namespace\nmetadata: {name: a-ns, labels: {team: a}}\n",
		"apiVersion: v1\nkind: Namespace\nmetadata: {name: b-ns, labels: {team: b}}\n",
	}, "---\n")
	out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"config.yaml": config, "objects.yaml": objects}, "-f", "DIR/objects.yaml", "-config", "DIR/config.yaml")
	for _, want := range []string{
		"Deployment a-ns/selected: patched",
		"Deployment a-ns/not-labelled: admitted\n  note: no webhook of -config matches it",
		"Deployment b-ns/other-ns: admitted\n  note: no webhook of -config matches it",
		"Deployment c-ns/unknown-ns: unknown: patched (1 operation) if the labels of the namespace c-ns match team=a; admitted otherwise (give the Namespace c-ns in -f, or the cluster's with -namespaces)",
		"ConfigMap a-ns/cm: admitted\n  note: no webhook of -config matches it",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code != exitUnknown {
		t.Errorf("got exit %d, want %d: a verdict is not known", code, exitUnknown)
	}

	// The cluster's namespaces (-namespaces) tell the labels of one the
	// input does not hold; a Namespace of the input is what will be, and
	// is read first.
	listed := `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"c-ns","labels":{"team":"a"}}},` +
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a-ns","labels":{"team":"b"}}}]}`
	out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", map[string]string{"config.yaml": config, "objects.yaml": objects, "ns.json": listed},
		"-f", "DIR/objects.yaml", "-config", "DIR/config.yaml", "-namespaces", "DIR/ns.json")
	if !strings.Contains(out, "Deployment c-ns/unknown-ns: patched") || !strings.Contains(out, "Deployment a-ns/selected: patched") || code != 0 {
		t.Errorf("-namespaces: got exit %d:\n%s\nwant c-ns's labels from the list, a-ns's from -f", code, out)
	}
	if _, errOut, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"objects.yaml": objects, "cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"},
		"-f", "DIR/objects.yaml", "-namespaces", "DIR/cm.yaml"); code != exitUsage || !strings.Contains(errOut, "not a Namespace") {
		t.Errorf("-namespaces of a ConfigMap: got exit %d, %q; want bad usage", code, errOut)
	}

	// A namespace whose labels are not known, but whatever they are the
	// verdict is one: it is known, and a note says what was not.
	noPatch := strings.Replace(config, "inject: \"yes\"", "never: \"true\"", 1)
	out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", map[string]string{"config.yaml": noPatch, "d.yaml": deployment("d", "c-ns", "")}, "-f", "DIR/d.yaml", "-config", "DIR/config.yaml")
	if code != 0 || !strings.Contains(out, "Deployment c-ns/d: admitted\n") {
		t.Errorf("got exit %d:\n%s\nwant 0, admitted", code, out)
	}

	// matchConditions are CEL review does not evaluate: a verdict that
	// depends on them is not known.
	conditional := strings.Replace(config, "  sideEffects: None", "  matchConditions: [{name: c, expression: \"true\"}]\n  sideEffects: None", 1)
	out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", map[string]string{"config.yaml": conditional, "objects.yaml": objects}, "-f", "DIR/objects.yaml", "-config", "DIR/config.yaml")
	if want := "Deployment a-ns/selected: unknown: patched (1 operation) if the matchConditions of m.example.com hold; admitted otherwise (matchConditions are CEL, which review does not evaluate)"; code != exitUnknown || !strings.Contains(out, want) {
		t.Errorf("got exit %d:\n%s\nwant %d and %q", code, out, exitUnknown, want)
	}
}

// TestDiffLines: -v shows each change with up to context unchanged lines
// around it, "..." where it leaves lines out between two changes, and no
// unchanged line at all with a context of 0 (a Secret's).
func TestDiffLines(t *testing.T) {
	before := `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7}`
	after := `{"a":1,"b":2,"c":30,"d":4,"e":5,"f":6,"g":70}`
	for _, tc := range []struct {
		context int
		want    []string
	}{
		// Two lines apart, two lines of context join the changes.
		{2, []string{
			`    "a": 1,`, `    "b": 2,`, `-   "c": 3,`, `+   "c": 30,`, `    "d": 4,`, `    "e": 5,`,
			`    "f": 6,`, `-   "g": 7`, `+   "g": 70`, `  }`,
		}},
		{1, []string{
			`    "b": 2,`, `-   "c": 3,`, `+   "c": 30,`, `    "d": 4,`,
			`  ...`,
			`    "f": 6,`, `-   "g": 7`, `+   "g": 70`, `  }`,
		}},
		{0, []string{`-   "c": 3,`, `+   "c": 30,`, `  ...`, `-   "g": 7`, `+   "g": 70`}},
	} {
		got := diffLines(json.RawMessage(before), json.RawMessage(after), tc.context)
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("context %d:\ngot\n%s\nwant\n%s", tc.context, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}

// TestVerboseDiff: -v shows a patch with the lines around it, but a
// Secret's alone: a line beside a change may be its data.
func TestVerboseDiff(t *testing.T) {
	for _, tc := range []struct {
		manifest string
		context  bool
	}{
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: ns}\ndata: {key: visible}\n", true},
		{"apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: ns}\nstringData: {password: hunter2}\n", false},
	} {
		out, _, _, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"m.yaml": tc.manifest}, "-f", "DIR/m.yaml", "-v")
		if !strings.Contains(out, `+       "seen": "yes"`) {
			t.Errorf("%s: no added annotation in the diff:\n%s", tc.manifest, out)
		}
		if got := strings.Contains(out, `"namespace": "ns"`); got != tc.context {
			t.Errorf("%s: the line beside the change shown: %v, want %v:\n%s", tc.manifest, got, tc.context, out)
		}
		if strings.Contains(out, "hunter2") {
			t.Errorf("a Secret's data in -v's diff:\n%s", out)
		}
	}
}

// TestApplyJSONPatchToMetadata: a patch below /metadata applied to the
// metadata alone gives the bytes, and the errors, jsonpatch.Apply gives
// applied to the whole object.
func TestApplyJSONPatchToMetadata(t *testing.T) {
	docs := []string{
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"},"data":{"a":"b"}}`,
		`{"apiVersion":"v1","data":{"metadata":"x"},"kind":"ConfigMap","metadata":{"annotations":{"a/b":"c"},"labels":{"x":"y"},"name":"c"},"spec":{"metadata":{"name":"inner"}}}`,
		`{"metadata":{"finalizers":["f"],"name":"c"}}`,
		`{"kind":"X","metadata":{}}`,
		`{"kind":"X","metadata":null}`,
		`{"kind":"X"}`,
	}
	patches := []string{
		`[{"op":"add","path":"/metadata/annotations","value":{"seen":"yes"}}]`,
		`[{"op":"add","path":"/metadata/annotations/a~1b","value":"d"}]`,
		`[{"op":"add","path":"/metadata/labels/z","value":"1"},{"op":"remove","path":"/metadata/labels/x"}]`,
		`[{"op":"replace","path":"/metadata/name","value":"d"},{"op":"test","path":"/metadata/name","value":"d"}]`,
		`[{"op":"copy","from":"/metadata/name","path":"/metadata/generateName"}]`,
		`[{"op":"move","from":"/metadata/name","path":"/metadata/labels/name"}]`,
		`[{"op":"add","path":"/metadata/finalizers/-","value":"g"}]`,
		`[{"op":"test","path":"/metadata/name","value":"nope"}]`,
		`[{"op":"add","path":"/spec/x","value":1}]`,
		`[{"op":"copy","from":"/data/a","path":"/metadata/annotations"}]`,
		`[]`,
	}
	for _, doc := range docs {
		for _, patch := range patches {
			canonical, err := canonicalJSON([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			want, wantErr := jsonpatch.Apply(canonical, []byte(patch))
			got, gotErr := applyJSONPatch(canonical, []byte(patch))
			if string(got) != string(want) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Errorf("patch %s of %s: got %s, %v; want %s, %v", patch, doc, got, gotErr, want, wantErr)
			}
		}
	}
}
