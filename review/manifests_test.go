package review

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

// validateConfig is a ValidatingWebhookConfiguration of one webhook,
// valid.example.com, whose one rule is rule (a YAML flow mapping), with
// more lines for the webhook.
func validateConfig(rule, more string) string {
	return fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: v}
webhooks:
- name: valid.example.com
  clientConfig: {service: {name: w, namespace: w, path: /validate}, caBundle: __CA_BUNDLE__}
  rules: [%s]
  sideEffects: None
  admissionReviewVersions: [v1]
%s`, rule, more)
}

// gadgetCRD defines the cluster-scoped Gadget of example.com, served in
// v1 and v2.
const gadgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.com}
spec:
  group: example.com
  scope: Cluster
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// requestsTo are the requests f was sent on route's path, not dry runs.
func requestsTo(f *fakeWebhook, kind string) []*admissionv1.AdmissionRequest {
	var out []*admissionv1.AdmissionRequest
	for _, r := range f.requests {
		if r.RequestKind.Kind == kind && !*r.DryRun {
			out = append(out, r)
		}
	}
	return out
}

// TestScope: the scope of each kind is the apiserver's, from its
// discovery for a built-in kind, from a CustomResourceDefinition in the
// input wherever it stands, from -api-resources or -resource; a
// cluster-scoped object is sent in no namespace, with none in the object;
// a kind whose scope no source names is reviewed both ways, its verdict
// known when they agree and unknown when not, never reviewed in
// namespace default.
func TestScope(t *testing.T) {
	gadget := "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: bad-gadget}\n"
	files := map[string]string{
		// The custom resource before its definition.
		"all.yaml": strings.Join([]string{gadget,
			"apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: reader, namespace: ignored}\n",
			"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n", gadgetCRD}, "---\n"),
		"config.yaml": validateConfig(`{apiGroups: [example.com], apiVersions: [v1], operations: [CREATE], resources: [gadgets], scope: Cluster}`, ""),
	}
	f := &fakeWebhook{}
	out, _, code, _ := reviewRun(t, f, "", files, "-f", "DIR/all.yaml", "-namespace", "team", "-config", "DIR/config.yaml")
	if want := "all.yaml#1: Gadget bad-gadget: denied: bad-gadget is bad"; !strings.Contains(out, want) || code != exitRefused {
		t.Errorf("a cluster-scoped custom resource under a rule of scope Cluster: got exit %d:\n%s\nwant %q, exit 1", code, out, want)
	}
	if got := requestsTo(f, "Gadget"); len(got) != 1 || got[0].Namespace != "" || strings.Contains(string(got[0].Object.Raw), `"namespace"`) {
		t.Errorf("the Gadget was sent %d times, %+v; want once, in no namespace, none in the object", len(got), got)
	}

	f = &fakeWebhook{}
	reviewRun(t, f, "", files, "-f", "DIR/all.yaml", "-namespace", "team")
	for kind, want := range map[string]string{"ClusterRole": "", "ConfigMap": "team", "Gadget": ""} {
		for _, r := range requestsTo(f, kind) {
			var meta struct {
				Metadata struct{ Namespace string }
			}
			_ = json.Unmarshal(r.Object.Raw, &meta)
			if r.Namespace != want || meta.Metadata.Namespace != want {
				t.Errorf("%s: sent in namespace %q, the object's %q; want %q, as the apiserver sets it (EnsureObjectNamespaceMatchesRequestNamespace)", kind, r.Namespace, meta.Metadata.Namespace, want)
			}
		}
	}

	// No source names Octopus: reviewed both ways. The fake webhook's
	// verdict does not depend on the namespace: known, and said so.
	octopus := "apiVersion: sea.example.com/v1\nkind: Octopus\nmetadata: {name: o}\n"
	out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", map[string]string{"o.yaml": octopus}, "-f", "DIR/o.yaml")
	if !strings.Contains(out, "o.yaml#1: Octopus o: patched (1 operation)\n  note: not known: whether it is namespaced; the verdict is the same either way") || code != 0 {
		t.Errorf("an Octopus whose scope no source names, its verdict the same either way: got exit %d:\n%s", code, out)
	}
	// A rule for namespaced Octopuses: sent if it is namespaced, not if
	// not, so its verdict is not known.
	config := validateConfig(`{apiGroups: ["*"], apiVersions: ["*"], operations: [CREATE], resources: [octopuses], scope: Namespaced}`, "")
	bad := strings.Replace(octopus, "name: o", "name: bad-o", 1)
	out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", map[string]string{"o.yaml": bad, "c.yaml": config}, "-f", "DIR/o.yaml", "-config", "DIR/c.yaml")
	if want := "Octopus bad-o: unknown: denied: bad-o is bad as namespaced (in default) and if the resource of Octopus is one that valid.example.com's rules name; admitted otherwise (its scope is not known"; !strings.Contains(out, want) || code != exitUnknown || strings.Contains(out, "default/bad-o") {
		t.Errorf("got exit %d:\n%s\nwant %q, exit %d, and never default/bad-o", code, out, want, exitUnknown)
	}
	// Its plural a guess, a rule that names another is not known to miss
	// it: the CustomResourceDefinition's plural may be that one (a
	// PodChaos's is podchaos, not the guess podchaoses). Before, review
	// said no webhook matched.
	other := validateConfig(`{apiGroups: ["*"], apiVersions: ["*"], operations: [CREATE], resources: [octopi]}`, "")
	out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", map[string]string{"o.yaml": bad, "c.yaml": other}, "-f", "DIR/o.yaml", "-config", "DIR/c.yaml", "-resource", "Octopus=octopuses,Cluster")
	if !strings.Contains(out, "Octopus bad-o: admitted\n  note: no webhook of -config matches it") || code != 0 {
		t.Errorf("-resource naming the plural, a rule of another: got exit %d:\n%s\nwant it not sent", code, out)
	}
	out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", map[string]string{"o.yaml": bad, "c.yaml": other}, "-f", "DIR/o.yaml", "-config", "DIR/c.yaml")
	if want := "Octopus bad-o: unknown: denied: bad-o is bad as namespaced (in default) and if the resource of Octopus is one that valid.example.com's rules name, or as cluster-scoped and if"; !strings.Contains(out, want) || !strings.Contains(out, "review guessed octopuses") || code != exitUnknown {
		t.Errorf("its plural guessed, a rule of another: got exit %d:\n%s\nwant %q, exit %d", code, out, want, exitUnknown)
	}
	// Told the scope, it is known.
	apiResources := "NAME        SHORTNAMES   APIVERSION            NAMESPACED   KIND      VERBS\noctopuses   oc           sea.example.com/v1    false        Octopus   create,get\n"
	for _, args := range [][]string{{"-api-resources", "DIR/api-resources.txt"}, {"-resource", "Octopus=octopuses,Cluster"}} {
		files := map[string]string{"o.yaml": bad, "c.yaml": config, "api-resources.txt": apiResources}
		out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", files, append([]string{"-f", "DIR/o.yaml", "-config", "DIR/c.yaml"}, args...)...)
		if !strings.Contains(out, "Octopus bad-o: admitted\n  note: no webhook of -config matches it") || code != 0 {
			t.Errorf("%q: got exit %d:\n%s\nwant it cluster-scoped, and so not sent", args, code, out)
		}
	}
}

// TestMatchPolicy: under matchPolicy Equivalent, the default, a webhook
// whose rules name another version of the resource is sent the request as
// that version: an autoscaling/v1 HorizontalPodAutoscaler to a rule of
// autoscaling/v2, a Gadget of v2 to a rule of v1; under Exact it is not.
// A version the apiserver does not serve is an error.
func TestMatchPolicy(t *testing.T) {
	hpa := "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: bad-hpa, namespace: ns}\nspec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}, maxReplicas: 3}\n"
	gadget := "apiVersion: example.com/v2\nkind: Gadget\nmetadata: {name: bad-gadget}\n"
	rules := `{apiGroups: [autoscaling], apiVersions: [v2], operations: [CREATE], resources: [horizontalpodautoscalers]}, {apiGroups: [example.com], apiVersions: [v1], operations: [CREATE], resources: [gadgets]}`
	files := map[string]string{"m.yaml": hpa + "---\n" + gadget + "---\n" + gadgetCRD, "equivalent.yaml": validateConfig(rules, ""),
		"exact.yaml": validateConfig(rules, "  matchPolicy: Exact\n")}
	f := &fakeWebhook{}
	out, _, code, _ := reviewRun(t, f, "", files, "-f", "DIR/m.yaml", "-config", "DIR/equivalent.yaml", "-o", "json")
	var results []result
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatal(err)
	}
	if len(results) != 3 || results[0].Verdict != "denied" || results[1].Verdict != "denied" || code != exitRefused {
		t.Fatalf("under Equivalent: got exit %d:\n%s\nwant the HorizontalPodAutoscaler and the Gadget denied", code, out)
	}
	for kind, want := range map[string][2]string{"HorizontalPodAutoscaler": {"autoscaling/v2", "autoscaling/v1"}, "Gadget": {"example.com/v1", "example.com/v2"}} {
		got := requestsTo(f, kind)
		if len(got) != 1 {
			t.Fatalf("%s: sent %d times, want once", kind, len(got))
		}
		r := got[0]
		var obj struct{ APIVersion string }
		_ = json.Unmarshal(r.Object.Raw, &obj)
		if r.Kind.Group+"/"+r.Kind.Version != want[0] || r.Resource.Version != strings.Split(want[0], "/")[1] ||
			r.RequestKind.Group+"/"+r.RequestKind.Version != want[1] || r.RequestResource.Version != strings.Split(want[1], "/")[1] || obj.APIVersion != want[0] {
			t.Errorf("%s: got kind %v, resource %v, requestKind %v, requestResource %v, object of %s; want it sent as %s, requested as %s (WebhookInvocation)",
				kind, r.Kind, r.Resource, r.RequestKind, r.RequestResource, obj.APIVersion, want[0], want[1])
		}
	}
	if n := results[0].Notes; len(n) == 0 || !strings.Contains(strings.Join(n, "\n"), "valid.example.com is sent it as autoscaling/v2 HorizontalPodAutoscaler (matchPolicy Equivalent") {
		t.Errorf("no note of the conversion: %q", n)
	}

	out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", files, "-f", "DIR/m.yaml", "-config", "DIR/exact.yaml")
	if !strings.Contains(out, "HorizontalPodAutoscaler ns/bad-hpa: admitted\n  note: no webhook of -config matches it") || !strings.Contains(out, "Gadget bad-gadget: admitted") || code != 0 {
		t.Errorf("under Exact: got exit %d:\n%s\nwant both not sent", code, out)
	}

	old := "apiVersion: apps/v1beta1\nkind: Deployment\nmetadata: {name: d, namespace: ns}\n"
	out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", map[string]string{"old.yaml": old}, "-f", "DIR/old.yaml")
	if want := "Deployment ns/d: error: kube-apiserver v1.37.2 does not serve apps/v1beta1 (of apps it serves v1)"; !strings.Contains(out, want) || code != exitRefused {
		t.Errorf("got exit %d:\n%s\nwant %q", code, out, want)
	}
}

// TestNeverSent: the apiserver sends no webhook its own webhook and
// admission policy configurations, nor the reviews it does not store.
func TestNeverSent(t *testing.T) {
	f := &fakeWebhook{}
	doc := validateConfig(`{apiGroups: ["*"], apiVersions: ["*"], operations: ["*"], resources: ["*"]}`, "")
	out, _, code, _ := reviewRun(t, f, "", map[string]string{"c.yaml": doc}, "-f", "DIR/c.yaml")
	if !strings.Contains(out, "ValidatingWebhookConfiguration v: admitted\n  note: the apiserver sends no webhook a ValidatingWebhookConfiguration") || code != 0 || len(f.requests) != 0 {
		t.Errorf("got exit %d, %d requests:\n%s\nwant it admitted, never sent", code, len(f.requests), out)
	}
}

// TestConnect: -operation CONNECT reviews a kubectl exec, attach,
// port-forward or proxy to each object: the request the apiserver's
// ConnectResource admits, of kind PodExecOptions and its like, resource
// pods and the subresource, the options from the query, no oldObject,
// options or dry run.
func TestConnect(t *testing.T) {
	pod := "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop, labels: {app: web}}\nspec: {containers: [{name: c, image: nginx}]}\n"
	f := &fakeWebhook{}
	out, _, code, _ := reviewRun(t, f, "", map[string]string{"p.yaml": pod}, "-f", "DIR/p.yaml", "-operation", "CONNECT", "-subresource", "exec",
		"-connect-query", "command=sh&command=-c&container=c&stdin=true&tty=true")
	if code != 0 || !strings.Contains(out, "CONNECT exec?command=sh&command=-c&container=c&stdin=true&tty=true as user") || !strings.Contains(out, "Pod shop/web: admitted") {
		t.Fatalf("got exit %d:\n%s", code, out)
	}
	if len(f.requests) != 2 {
		t.Fatalf("got %d requests, want /mutate and /validate once each, no dry run", len(f.requests))
	}
	r := f.requests[1]
	if r.Operation != admissionv1.Connect || r.Kind.Kind != "PodExecOptions" || r.Kind.Version != "v1" || r.Resource.Resource != "pods" || r.SubResource != "exec" ||
		r.Name != "web" || r.Namespace != "shop" || len(r.OldObject.Raw) != 0 || len(r.Options.Raw) != 0 || *r.DryRun {
		t.Errorf("got %+v, want a CONNECT of pods/exec as the apiserver sends it", r)
	}
	if want := `{"apiVersion":"v1","command":["sh","-c"],"container":"c","kind":"PodExecOptions","stdin":true,"tty":true}`; string(r.Object.Raw) != want {
		t.Errorf("got the object %s, want %s", r.Object.Raw, want)
	}
	// No objectSelector matches a CONNECT: its object is the options.
	config := validateConfig(`{apiGroups: [""], apiVersions: [v1], operations: [CONNECT], resources: [pods/exec]}`, "  objectSelector: {matchLabels: {app: web}}\n")
	out, _, _, _ = reviewRun(t, &fakeWebhook{}, "", map[string]string{"p.yaml": pod, "c.yaml": config}, "-f", "DIR/p.yaml", "-config", "DIR/c.yaml", "-operation", "CONNECT", "-subresource", "exec")
	if !strings.Contains(out, "Pod shop/web: admitted\n  note: no webhook of -config matches it") {
		t.Errorf("a CONNECT under an objectSelector:\n%s\nwant it not sent", out)
	}
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: shop}\n"
	out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", map[string]string{"c.yaml": cm}, "-f", "DIR/c.yaml", "-operation", "CONNECT", "-subresource", "exec")
	if !strings.Contains(out, "ConfigMap shop/c: error: configmaps has no exec to CONNECT to") || code != exitRefused {
		t.Errorf("exec into a ConfigMap: got exit %d:\n%s", code, out)
	}
}

// TestEmptyInput: an empty file, a file of comments, and a List of no
// items are one outcome: no object, said, and exit status 3, so that a CI
// gate does not pass on nothing, nor an audit of a cluster that has none
// of a kind fail as bad input.
func TestEmptyInput(t *testing.T) {
	for _, tc := range []struct{ name, content, says string }{
		{"empty.yaml", "", "an empty file"},
		{"comments.yaml", "# nothing here\n---\n# nor here\n", "an empty file"},
		{"list.yaml", "apiVersion: v1\nitems: []\nkind: List\n", "an empty List"},
		{"list-block.yaml", "apiVersion: v1\nitems:\nkind: DeploymentList\n", "an empty DeploymentList"},
		{"list.json", `{"apiVersion": "v1", "items": [], "kind": "List", "metadata": {"resourceVersion": ""}}`, "an empty List"},
		// As `items:` with nothing after it, and as kubectl's decoder reads it.
		{"null-items.json", `{"apiVersion": "v1", "items": null, "kind": "List"}`, "an empty List"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{tc.name: tc.content}, "-f", "DIR/"+tc.name)
			if code != exitUnknown || !strings.Contains(out, "no object: "+tc.says) || !strings.Contains(out, "0 reviewed: the input holds no object to review") {
				t.Errorf("got exit %d:\n%s%s\nwant %d, %q, and 0 reviewed", code, out, errOut, exitUnknown, tc.says)
			}
			out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", map[string]string{tc.name: tc.content}, "-f", "DIR/"+tc.name, "-o", "json")
			if code != exitUnknown || strings.TrimSpace(out) != "[]" {
				t.Errorf("-o json: got exit %d, %q; want %d, []", code, out, exitUnknown)
			}
		})
	}
}

// TestEveryDocumentCounted: a document that cannot be read is an error
// naming its file, its number and its line in the file; the documents
// after it are still reviewed and counted; a Helm template says it is
// one, and the YAML library's types never show.
func TestEveryDocumentCounted(t *testing.T) {
	file := strings.Join([]string{
		deployment("first", "ns", ""),
		"kind: [unclosed\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Values.name }}\n",
		"--- extra\n" + deployment("refused", "ns", ""),
		deployment("last", "ns", ""),
	}, "---\n")
	out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"f.yaml": file}, "-f", "DIR/f.yaml")
	for _, want := range []string{
		"f.yaml#1: Deployment ns/first: patched",
		"f.yaml#2: error: not YAML or JSON: line 13:",
		"f.yaml#3: error: line 18: a Helm template ({{ … }}), not a manifest: render it first (helm template)",
		`f.yaml#4: error: line 20: "extra" follows the document separator, where kubectl takes only a comment`,
		"f.yaml#5: Deployment ns/last: patched",
		"5 reviewed: 2 patched, 3 error",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "interface {}") || code != exitUsage {
		t.Errorf("got exit %d:\n%s\nwant 2 and no Go types", code, out)
	}
}

// TestLists: the items of a List are read one at a time, YAML or JSON,
// whichever order its keys come in; an item without kind and apiVersion
// takes its *List's; an item that cannot be read is an error at its line,
// the others reviewed.
func TestLists(t *testing.T) {
	yamlList := `apiVersion: v1
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: one
    namespace: ns
- metadata: {name: two, namespace: ns}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: three, namespace: ns}
  data: {a: [unclosed
kind: List
metadata:
  resourceVersion: ""
`
	typedList := `apiVersion: apps/v1
kind: DeploymentList
items:
  - metadata: {name: typed, namespace: ns}
    spec: {replicas: 1}
`
	// Strings that hold what the scan of the items must not take for
	// structure: brackets, a quote, a backslash.
	jsonList := `{"apiVersion":"v1","items":[{"metadata":{"name":"j1","namespace":"ns","annotations":{"a":"}]\"{[\\"}}},` + "\r\n" +
		`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"j2","namespace":"ns"}}],"kind":"SecretList","metadata":{}}` + "\n" +
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"after","namespace":"ns"}}`
	// A List in a List makes the List it is in an error, whole, as
	// kubectl's FlattenListVisitor fails it (errListInList); before, it was
	// flattened. A null item is an error, as kubectl's validation makes
	// it, not nothing.
	nestedList := `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: beside, namespace: ns}
- apiVersion: v1
  kind: List
  items:
  - apiVersion: v1
    kind: ConfigMap
    metadata: {name: inner, namespace: ns}
---
apiVersion: v1
kind: List
items:
-
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: after-null, namespace: ns}
`
	nestedJSON := `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"beside-json","namespace":"ns"}},{"apiVersion":"v1","kind":"ConfigMapList","items":[{"metadata":{"name":"inner-json","namespace":"ns"}}]}]}
{"apiVersion":"v1","kind":"List","items":[null]}`
	out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"l.yaml": yamlList, "t.yaml": typedList, "l.json": jsonList, "n.yaml": nestedList, "n.json": nestedJSON},
		"-f", "DIR/l.yaml", "-f", "DIR/t.yaml", "-f", "DIR/l.json", "-f", "DIR/n.yaml", "-f", "DIR/n.json")
	for _, want := range []string{
		"n.yaml#1: error: line 1: its item [1] is itself a List",
		"n.yaml#2[0]: error: line 17: the List's item is null, not an object",
		"n.yaml#2[1]: ConfigMap ns/after-null: patched",
		"n.json#1: error: line 1: its item [1] is itself a List",
		"n.json#2[0]: error: line 2: the List's item is null, not an object",
		"l.yaml#1[0]: ConfigMap ns/one: patched",
		"l.yaml#1[1]: error: line 8: the document has no apiVersion or kind",
		"l.yaml#1[2]: error: not YAML or JSON: line 12:",
		"t.yaml#1[0]: Deployment ns/typed: patched",
		"l.json#1[0]: Secret ns/j1: patched",
		"l.json#1[1]: Secret ns/j2: patched",
		"l.json#2: ConfigMap ns/after: patched",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code != exitUsage {
		t.Errorf("got exit %d, want 2", code)
	}
	for _, notWant := range []string{"beside", "inner"} {
		if strings.Contains(out, notWant) {
			t.Errorf("output names %q, an item of a List with a List in it, which kubectl does not read:\n%s", notWant, out)
		}
	}
}

// TestInterrupted: a review whose context ends, as SIGINT and SIGTERM end
// it, stops reading, says how far it got, and exits 130.
func TestInterrupted(t *testing.T) {
	var docs []string
	for i := range 50 {
		docs = append(docs, deployment(fmt.Sprintf("d%d", i), "ns", ""))
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "many.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	var out, errOut strings.Builder
	interrupting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cancel(fmt.Errorf("interrupt signal received"))
		(&fakeWebhook{}).ServeHTTP(w, r)
	})
	err := Run(ctx, flag.NewFlagSet("webhook review", flag.ContinueOnError), []string{"-f", path}, nil, &out, &errOut, func() http.Handler { return interrupting })
	exit, ok := err.(*ExitError)
	if !ok || exit.Code != exitInterrupted || !strings.Contains(errOut.String(), "interrupted (interrupt signal received): 0 reviewed before it; the rest of the input was not read") {
		t.Errorf("got %v:\n%s%s\nwant exit 130 and the summary", err, &out, &errOut)
	}
}

// TestEditScript holds -v's diff, Myers' shortest edit script, to the
// longest common subsequence of small random inputs: as many lines kept,
// every line of each side in order.
func TestEditScript(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		a, b := make([]string, r.IntN(12)), make([]string, r.IntN(12))
		for i := range a {
			a[i] = string(rune('a' + r.IntN(4)))
		}
		for i := range b {
			b[i] = string(rune('a' + r.IntN(4)))
		}
		script, ok := editScript(a, b)
		if !ok {
			t.Fatalf("%q, %q: no script", a, b)
		}
		var gotA, gotB []string
		kept := 0
		for _, l := range script {
			switch l[0] {
			case ' ':
				gotA, gotB, kept = append(gotA, l[2:]), append(gotB, l[2:]), kept+1
			case '-':
				gotA = append(gotA, l[2:])
			case '+':
				gotB = append(gotB, l[2:])
			}
		}
		if strings.Join(gotA, "") != strings.Join(a, "") || strings.Join(gotB, "") != strings.Join(b, "") || kept != lcsLength(a, b) {
			t.Fatalf("%q → %q: script %q keeps %d lines, want %d, and each side whole", a, b, script, kept, lcsLength(a, b))
		}
	}
	// Past maxDiffEdits changed lines it says so, in bounded memory.
	big := func(prefix string) []string {
		lines := make([]string, 3*maxDiffEdits)
		for i := range lines {
			lines[i] = fmt.Sprintf("%s%d", prefix, i)
		}
		return lines
	}
	if _, ok := editScript(big("a"), big("b")); ok {
		t.Error("a diff of 6000 changed lines was made, want the cut-off")
	}
}

// lcsLength is the length of the longest common subsequence, by dynamic
// programming: the reference for small inputs.
func lcsLength(a, b []string) int {
	table := make([][]int, len(a)+1)
	for i := range table {
		table[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				table[i][j] = table[i+1][j+1] + 1
			} else {
				table[i][j] = max(table[i+1][j], table[i][j+1])
			}
		}
	}
	return table[0][0]
}
