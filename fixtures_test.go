package main

// Test helpers that the plumbing's tests and the policy's tests share:
// reviews as the apiserver sends them (captured in testdata/, or made by
// hand with newReview), posting them, and reading the answers; and what
// every policy's tests use: TestFixtures with the goldens, the policy's
// flags, and SubjectAccessReviews made by hand. policy_test.go holds only
// what one policy decides.

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/example/webhook/body"
	"github.com/example/webhook/jsonpatch"
	"github.com/example/webhook/part"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/ with the answers the policy gives now")

// fixtures returns every review in testdata/, by name: bodies recorded from
// a real kube-apiserver by e2e's TestCapture (make capture), and any made by
// hand with newReview.
func fixtures(t testing.TB) map[string][]byte {
	t.Helper()
	return readBodies(t, "testdata")
}

// readBodies returns every dir/*.json by its name without ".json", failing
// the test when there is none.
func readBodies(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string][]byte, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".json")] = b
	}
	if len(out) == 0 {
		t.Fatalf("no reviews in %s/", dir)
	}
	return out
}

// newReview returns an admission.k8s.io/v1 AdmissionReview as the
// apiserver sends it, for a kind or a case no fixture in testdata/ has
// captured. object and oldObject are whole Kubernetes objects in YAML or
// JSON, as `kubectl get -o yaml` prints them; give "" for the one the
// operation lacks: CREATE sends object, UPDATE both, DELETE only oldObject.
//
// What it fills in, as the apiserver does (testdata/ holds its reviews of
// each scope):
//   - request.kind from the object's apiVersion and kind;
//   - request.resource from the kind as the apiserver guesses a plural
//     (meta.UnsafeGuessKindToResource: lowercased, "s", "es" after "s",
//     "ies" for "y"), right for the built-in kinds; write the body to a
//     file and correct it for a custom resource whose plural is another;
//   - request.name and request.namespace from the object's metadata: no
//     namespace for a kind of cluster scope, and for a Namespace its own
//     name, as the apiserver sends it (k8s.io/apiserver v0.37.2,
//     pkg/endpoints/handlers/create.go, createHandler: "if len(namespace)
//     == 0 && scope.Resource == namespaceGVR { namespace = name }"; on
//     UPDATE and DELETE the URL, /api/v1/namespaces/NAME, names it);
//   - request.userInfo: user "admin" (uid "admin") in the groups
//     system:masters and system:authenticated, the e2e suite's
//     cluster-admin, whose reviews testdata/ holds;
//   - dryRun false, and the options of the operation (CreateOptions,
//     UpdateOptions, DeleteOptions).
//
// The uid is derived from the content, so a review made twice is the same.
func newReview(t testing.TB, operation admissionv1.Operation, object, oldObject string) []byte {
	t.Helper()
	return makeReview(t, operation, object, oldObject, nil)
}

// newSubresourceReview is newReview for a request of the subresource
// subresource of the object namespace/name ("" namespace for a kind of
// cluster scope) of resource, as group/version/resource ("apps/v1/deployments")
// or version/resource ("v1/pods"). object and oldObject are what the
// apiserver sends for it, of their own kind: for an UPDATE of
// deployments/scale, Scales (autoscaling/v1); of status, the objects; for a
// CREATE of pods/eviction, an Eviction (policy/v1); for a CONNECT of
// pods/exec, attach or portforward, the options alone (PodExecOptions,
// PodAttachOptions, PodPortForwardOptions), with no oldObject and no
// options, as the apiserver sends a CONNECT (testdata/v1-pod-exec-connect.json).
func newSubresourceReview(t testing.TB, operation admissionv1.Operation, resource, subresource, namespace, name, object, oldObject string) []byte {
	t.Helper()
	parts := strings.Split(resource, "/")
	if len(parts) < 2 || len(parts) > 3 {
		t.Fatalf("newSubresourceReview: resource %q: want group/version/resource or version/resource, such as apps/v1/deployments", resource)
	}
	gvr := metav1.GroupVersionResource{Version: parts[len(parts)-2], Resource: parts[len(parts)-1]}
	if len(parts) == 3 {
		gvr.Group = parts[0]
	}
	return makeReview(t, operation, object, oldObject, &subresourceTarget{gvr, subresource, namespace, name})
}

// subresourceTarget is what a subresource's review names: the resource
// and the object, whose subresource it is.
type subresourceTarget struct {
	resource                     metav1.GroupVersionResource
	subresource, namespace, name string
}

// makeReview makes newReview's review, of target's subresource when it is
// not nil.
func makeReview(t testing.TB, operation admissionv1.Operation, object, oldObject string, target *subresourceTarget) []byte {
	t.Helper()
	var req admissionv1.AdmissionRequest
	req.Operation = operation
	var typeMeta struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
	}
	for _, o := range []struct {
		text string
		into *runtime.RawExtension
	}{{oldObject, &req.OldObject}, {object, &req.Object}} {
		if o.text == "" {
			continue
		}
		// Not yaml.ToJSON: it passes any text that starts with "{" through
		// as JSON, and so refuses flow-style YAML such as {kind: Pod}.
		var raw json.RawMessage
		if err := yaml.NewYAMLToJSONDecoder(strings.NewReader(o.text)).Decode(&raw); err != nil {
			t.Fatalf("newReview: the object is neither YAML nor JSON: %v", err)
		}
		if err := json.Unmarshal(raw, &typeMeta); err != nil {
			t.Fatalf("newReview: the object is not a Kubernetes object: %v", err)
		}
		o.into.Raw = raw
	}
	if typeMeta.Kind == "" {
		t.Fatal("newReview: give an object with apiVersion and kind")
	}
	gv, err := schema.ParseGroupVersion(typeMeta.APIVersion)
	if err != nil {
		t.Fatalf("newReview: apiVersion %q: %v", typeMeta.APIVersion, err)
	}
	req.Kind = metav1.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: typeMeta.Kind}
	plural, _ := meta.UnsafeGuessKindToResource(gv.WithKind(typeMeta.Kind))
	req.Resource = metav1.GroupVersionResource{Group: plural.Group, Version: plural.Version, Resource: plural.Resource}
	req.Name, req.Namespace = typeMeta.Metadata.Name, typeMeta.Metadata.Namespace
	if target != nil {
		req.Resource, req.SubResource, req.Namespace, req.Name = target.resource, target.subresource, target.namespace, target.name
		req.RequestSubResource = target.subresource
	}
	req.RequestKind, req.RequestResource = &req.Kind, &req.Resource
	if req.Resource.Group == "" && req.Resource.Resource == "namespaces" && req.SubResource == "" {
		req.Namespace = req.Name
	}
	req.UserInfo = authenticationv1.UserInfo{Username: "admin", UID: "admin", Groups: []string{"system:masters", "system:authenticated"}}
	dryRun := false
	req.DryRun = &dryRun
	optionsKind := map[admissionv1.Operation]string{admissionv1.Create: "CreateOptions", admissionv1.Update: "UpdateOptions", admissionv1.Delete: "DeleteOptions"}[operation]
	if optionsKind != "" {
		req.Options.Raw = []byte(`{"kind":"` + optionsKind + `","apiVersion":"meta.k8s.io/v1"}`)
	}
	seed := string(operation)
	if target != nil { // a CONNECT's options do not name the object
		seed += target.subresource + "/" + target.namespace + "/" + target.name
	}
	sum := sha256.Sum256(append(append([]byte(seed), req.Object.Raw...), req.OldObject.Raw...))
	req.UID = types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16]))
	body, err := json.MarshalIndent(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &req,
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(body, '\n')
}

// reviewAs returns body, an AdmissionReview such as newReview's, sent by
// user in groups instead: for a policy that decides by who asks.
func reviewAs(t testing.TB, body []byte, user string, groups ...string) []byte {
	t.Helper()
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		t.Fatalf("reviewAs: the body is not an AdmissionReview with a request: %v", err)
	}
	review.Request.UserInfo = authenticationv1.UserInfo{Username: user, Groups: groups}
	out, err := json.MarshalIndent(&review, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

var (
	newFixture       = flag.String("new-fixture", "", "with TestNewFixture: write a review made by newReview to testdata/`NAME`.json")
	newFixtureOp     = flag.String("operation", "CREATE", "with -new-fixture: the `operation`, CREATE, UPDATE, DELETE or CONNECT")
	newFixtureObject = flag.String("object", "", "with -new-fixture: the object's YAML or JSON `file` (of a subresource, what the apiserver sends for it: a Scale, an Eviction, a PodExecOptions)")
	newFixtureOld    = flag.String("old-object", "", "with -new-fixture: the old object's YAML or JSON `file`, for UPDATE and DELETE")
	newFixtureSub    = flag.String("subresource", "", "with -new-fixture: a request of this subresource (scale, status, eviction, exec, …) of -of's object")
	newFixtureOf     = flag.String("of", "", "with -subresource: the object whose subresource it is, as `resource/namespace/name` such as apps/v1/deployments/shop/web or v1/pods/shop/web (namespace empty for a kind of cluster scope)")
	newFixtureUser   = flag.String("user", "", "with -new-fixture: the `name` of the user the request is made as, in place of admin in system:masters")
	newFixtureGroups = flag.String("groups", "", "with -user: the user's `groups`, separated by commas")
)

// TestNewFixture writes a fixture made by hand, when asked (-v shows what
// it wrote):
//
//	go test -v -run TestNewFixture . -args -new-fixture v1-mykind-create -object mykind.yaml
//	go test -v -run TestNewFixture . -args -new-fixture v1-pod-exec -operation CONNECT -subresource exec -of v1/pods/shop/web -object exec-options.yaml
//	go test -v -run TestNewFixture . -args -new-fixture v1-configmap-create-by-jane -object cm.yaml -user jane -groups dev,system:authenticated
func TestNewFixture(t *testing.T) {
	if *newFixture == "" {
		t.Skip("only with -new-fixture NAME")
	}
	read := func(path string) string {
		if path == "" {
			return ""
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	body := newReview(t, admissionv1.Operation(*newFixtureOp), read(*newFixtureObject), read(*newFixtureOld))
	if *newFixtureSub != "" {
		parts := strings.Split(*newFixtureOf, "/")
		if len(parts) < 4 {
			t.Fatalf("-of %q: want resource/namespace/name, such as v1/pods/shop/web", *newFixtureOf)
		}
		resource := strings.Join(parts[:len(parts)-2], "/")
		body = newSubresourceReview(t, admissionv1.Operation(*newFixtureOp), resource, *newFixtureSub, parts[len(parts)-2], parts[len(parts)-1], read(*newFixtureObject), read(*newFixtureOld))
	}
	if *newFixtureUser != "" {
		var groups []string
		if *newFixtureGroups != "" {
			groups = strings.Split(*newFixtureGroups, ",")
		}
		body = reviewAs(t, body, *newFixtureUser, groups...)
	}
	path := filepath.Join("testdata", *newFixture+".json")
	if err := os.WriteFile(path, body, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s; add its entry to fixtureExpectations in policy_test.go, then write its goldens with go test -run TestFixtures -update .", path)
}

// TestNewReviewReadsYAMLAndJSON checks newReview takes an object as block
// YAML, flow-style YAML and JSON alike, and reads name and namespace.
func TestNewReviewReadsYAMLAndJSON(t *testing.T) {
	for _, object := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: b\n",
		"{apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: b}}",
		`{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "b"}}`,
	} {
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(newReview(t, admissionv1.Create, object, ""), &review); err != nil {
			t.Fatal(err)
		}
		if r := review.Request; r.Kind.Kind != "ConfigMap" || r.Name != "a" || r.Namespace != "b" || !json.Valid(r.Object.Raw) {
			t.Errorf("newReview(%q): got kind %q, name %q, namespace %q, object %s; want ConfigMap b/a as JSON", object, r.Kind.Kind, r.Name, r.Namespace, r.Object.Raw)
		}
	}
}

// TestNewReviewSendsWhatTheAPIServerSends makes, with newReview, the
// review of each captured fixture's objects and operation, and checks it
// names them as the apiserver did: kind, resource, name, namespace (a
// Namespace's own name, none for a kind of cluster scope), operation and
// user. The fixtures are of every scope: namespaced kinds, a Namespace
// created, updated and deleted, and a ClusterRole.
func TestNewReviewSendsWhatTheAPIServerSends(t *testing.T) {
	scopes := map[string]bool{}
	for name, body := range fixtures(t) {
		var captured admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &captured); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c := captured.Request
		if c == nil || c.Kind.Group == "example.com" {
			continue // a v1beta1 review, a custom resource's plural: newReview does not guess it
		}
		object := func(raw []byte) string {
			if string(raw) == "null" {
				return ""
			}
			return string(raw)
		}
		var body []byte
		if c.SubResource == "" {
			body = newReview(t, c.Operation, object(c.Object.Raw), object(c.OldObject.Raw))
		} else {
			r := c.Resource
			body = newSubresourceReview(t, c.Operation, strings.TrimPrefix(r.Group+"/"+r.Version+"/"+r.Resource, "/"), c.SubResource, c.Namespace, c.Name, object(c.Object.Raw), object(c.OldObject.Raw))
			scopes["a subresource"] = true
		}
		var made admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &made); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m := made.Request
		for _, field := range []struct {
			name      string
			got, want any
		}{
			{"kind", m.Kind, c.Kind},
			{"resource", m.Resource, c.Resource},
			{"subResource", m.SubResource, c.SubResource},
			{"options' kind", optionsKind(m.Options.Raw), optionsKind(c.Options.Raw)},
			{"name", m.Name, c.Name},
			{"namespace", m.Namespace, c.Namespace},
			{"operation", m.Operation, c.Operation},
			{"userInfo.username", m.UserInfo.Username, c.UserInfo.Username},
			{"userInfo.groups", m.UserInfo.Groups, c.UserInfo.Groups},
		} {
			if !reflect.DeepEqual(field.got, field.want) {
				t.Errorf("%s: newReview gives %s %v, the apiserver sent %v", name, field.name, field.got, field.want)
			}
		}
		switch {
		case c.Operation == admissionv1.Connect:
			scopes["a CONNECT"] = true
		case c.Resource.Resource == "namespaces":
			scopes["a Namespace"] = true
		case c.Namespace == "":
			scopes["a kind of cluster scope"] = true
		default:
			scopes["a namespaced kind"] = true
		}
	}
	if len(scopes) != 5 {
		t.Errorf("the fixtures compared hold %v, want a namespaced kind, a Namespace, a kind of cluster scope, a subresource and a CONNECT: make capture records them", scopes)
	}
}

// newTestReviews is what the server's review routes share, as newServer
// builds it: the default byte budget, and metrics of its own.
func newTestReviews(logger *slog.Logger) *reviewRoutes {
	bodies := body.NewBudget(defaultMaxInflightBytes)
	return &reviewRoutes{logger: logger, metrics: newMetrics(bodies), bodyBudget: bodies}
}

// admissionHandler is the generic path for one admit function, as the
// server runs it: what most tests drive.
func admissionHandler(logger *slog.Logger, admit admitFunc) http.Handler {
	return newTestReviews(logger).admissionRoute("/test", admit, nil)
}

// admissionRoute is an admission route as routes makes it: admit's
// answers, a denial rewritten by denied when it is set.
func (rs *reviewRoutes) admissionRoute(path string, admit admitFunc, denied part.RewriteDenial) http.Handler {
	return rs.handle(path, acceptedAdmissionReviews, admission(admit, denied))
}

// post sends body to h as the apiserver does and returns the recorded answer.
func post(h http.Handler, target string, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, target, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// recorded reads a response that came over the network into a recorder,
// so that it is checked as a handler's answer is.
func recorded(t testing.TB, resp *http.Response) *httptest.ResponseRecorder {
	t.Helper()
	defer resp.Body.Close()
	w := httptest.NewRecorder()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	if _, err := io.Copy(w, resp.Body); err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return w
}

// reviewIn is the part of any review, request or response, that tests read.
// It is decoded with encoding/json, independently of the handler's decoder.
type reviewIn struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Request    *requestIn  `json:"request"`
	Response   *responseIn `json:"response"`
}

type requestIn struct {
	UID         string          `json:"uid"`
	Operation   string          `json:"operation"`
	SubResource string          `json:"subResource"`
	Object      json.RawMessage `json:"object"`
}

type responseIn struct {
	UID       string         `json:"uid"`
	Allowed   bool           `json:"allowed"`
	Status    *metav1.Status `json:"status"`
	Patch     []byte         `json:"patch"`
	PatchType *string        `json:"patchType"`
}

func decodeReviewIn(t testing.TB, b []byte) reviewIn {
	t.Helper()
	var r reviewIn
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return r
}

// withObject returns the review body with request.object replaced.
func withObject(t testing.TB, body []byte, object json.RawMessage) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	var obj any
	if err := json.Unmarshal(object, &obj); err != nil {
		t.Fatal(err)
	}
	m["request"].(map[string]any)["object"] = obj
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkReview checks what every answer to a review must be: HTTP 200, an
// AdmissionReview in the request's version holding only a response, with
// the request's uid; a patch only with its patchType, and from a mutating
// route only.
func checkReview(t testing.TB, route string, in reviewIn, w *httptest.ResponseRecorder) reviewIn {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("%s: got HTTP %d %s, want 200", route, w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: got Content-Type %q, want application/json", route, ct)
	}
	out := decodeReviewIn(t, w.Body.Bytes())
	if out.APIVersion != in.APIVersion || out.Kind != "AdmissionReview" {
		t.Errorf("%s: got %s %s, want %s AdmissionReview", route, out.APIVersion, out.Kind, in.APIVersion)
	}
	if out.Request != nil {
		t.Errorf("%s: the answer echoes the request; it should hold only the response", route)
	}
	if out.Response == nil {
		t.Fatalf("%s: got no response in %s", route, w.Body)
	}
	if out.Response.UID != in.Request.UID {
		t.Errorf("%s: got uid %q, want %q", route, out.Response.UID, in.Request.UID)
	}
	if (out.Response.Patch == nil) != (out.Response.PatchType == nil) {
		t.Errorf("%s: got patch %s with patchType %v; the apiserver wants both or neither", route, out.Response.Patch, out.Response.PatchType)
	}
	if out.Response.PatchType != nil && *out.Response.PatchType != "JSONPatch" {
		t.Errorf("%s: got patchType %q, want JSONPatch", route, *out.Response.PatchType)
	}
	if strings.HasPrefix(route, "/validate") && out.Response.Patch != nil {
		t.Errorf("%s: a validating answer carries a patch", route)
	}
	return out
}

func decodePatch(t testing.TB, patch []byte) []patchOp {
	t.Helper()
	if patch == nil {
		return nil
	}
	var ops []patchOp
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatalf("patch %s is not a JSON Patch: %v", patch, err)
	}
	return ops
}

// applyPatch applies ops to doc as the kube-apiserver applies a webhook's
// patch (package jsonpatch), failing the test where the apiserver would
// refuse the patch.
func applyPatch(t testing.TB, doc json.RawMessage, ops []patchOp) json.RawMessage {
	t.Helper()
	patch, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jsonpatch.Apply(doc, patch)
	if err != nil {
		t.Fatalf("the apiserver would refuse the patch %s: %v", patch, err)
	}
	return out
}

// unescapePointer reverses RFC 6901 escaping, "~1" before "~0" as the RFC
// says, so "~01" reads back as "~1".
func unescapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}

// metadataMap returns metadata.<field> of object, such as its labels.
func metadataMap(t testing.TB, object json.RawMessage, field string) map[string]string {
	t.Helper()
	var o struct {
		Metadata map[string]json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(object, &o); err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if raw, ok := o.Metadata[field]; ok {
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("metadata.%s: %v", field, err)
		}
	}
	return m
}

// statusIn is a metav1.Status as a client reads it off the wire.
type statusIn struct {
	Kind, APIVersion, Status, Message string
	Reason                            metav1.StatusReason
	Code                              int
}

// checkStatusBody checks an error answer: the HTTP code and a metav1.Status
// body the apiserver can pass on.
func checkStatusBody(t testing.TB, w *httptest.ResponseRecorder, code int, reason metav1.StatusReason) statusIn {
	t.Helper()
	if w.Code != code {
		t.Fatalf("got HTTP %d %s, want %d", w.Code, w.Body, code)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("got Content-Type %q, want application/json", ct)
	}
	var s statusIn
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
		t.Fatalf("body %s is not a Status: %v", w.Body, err)
	}
	if s.Kind != "Status" || s.APIVersion != "v1" || s.Status != metav1.StatusFailure || s.Code != code || s.Reason != reason || s.Message == "" {
		t.Errorf("got Status %+v, want kind Status, apiVersion v1, status Failure, code %d, reason %s and a message", s, code, reason)
	}
	return s
}

// checkAnyAnswer checks the answer to an arbitrary body, for the fuzzers:
// a 200 is a well-formed review answer; anything else is a Status; the
// webhook never fails with 500, which is how a panic is answered.
func checkAnyAnswer(t *testing.T, route string, body []byte, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code == http.StatusInternalServerError {
		t.Fatalf("%s: HTTP 500 (a panic?) for body %q: %s", route, body, w.Body)
	}
	if w.Code != http.StatusOK {
		var s statusIn
		if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil || s.Kind != "Status" || s.Code != w.Code || s.Message == "" {
			t.Fatalf("%s: HTTP %d with body %q, want a Status", route, w.Code, w.Body)
		}
		return
	}
	// The request decoded, so it names its version and uid.
	gvk, req, err := decodeAdmissionReview(body)
	if err != nil {
		t.Fatalf("%s: HTTP 200 for a body that does not decode: %v", route, err)
	}
	checkReview(t, route, reviewIn{APIVersion: gvk.GroupVersion().String(), Request: &requestIn{UID: string(req.UID)}}, w)
}

// policyWithDefaults is the policy the binary runs with when given no
// flags, made as main.go makes it, every part started as `webhook review`
// starts them: the views of the cluster (cluster/, for a policy with a
// Reads method) hold the objects in testdata/cluster/, what the fixtures'
// reviews need to find there, as `kubectl get KIND -A -o json` lists them
// (a kind none holds is empty).
func policyWithDefaults(tb testing.TB) policy {
	tb.Helper()
	return policyReading(tb, testdataCluster(tb)...)
}

// policyReading is policyWithDefaults whose views hold objects instead,
// each a file's text (YAML or JSON; several documents, Lists), as a test of
// a lookup gives what the cluster holds:
//
//	p := policyReading(t, `{apiVersion: v1, kind: ServiceAccount, metadata: {name: builder, namespace: shop}}`)
//
// The objects reach the views as -cluster's files (cluster/); without the
// cluster part, objects are an error.
func policyReading(tb testing.TB, objects ...string) policy {
	tb.Helper()
	var p policy
	all := parts(&p)
	flags := flag.NewFlagSet("webhook", flag.ContinueOnError)
	if err := p.addFlags(flags); err != nil {
		tb.Fatal(err)
	}
	for _, pt := range all {
		if pt.Flags != nil {
			pt.Flags(flags, true)
		}
	}
	var args []string
	if flags.Lookup("cluster") != nil {
		// At least one file, empty or not: a kind none holds is empty.
		dir := tb.TempDir()
		for i, text := range append([]string{`{"apiVersion": "v1", "kind": "List", "items": []}`}, objects...) {
			file := filepath.Join(dir, fmt.Sprintf("objects-%d.yaml", i))
			if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
				tb.Fatal(err)
			}
			args = append(args, "-cluster", file)
		}
	} else if len(objects) > 0 {
		tb.Fatal("policyReading: objects for the views, and no cluster part to hold them")
	}
	if err := flags.Parse(args); err != nil {
		tb.Fatal(err)
	}
	env := part.Env{Logger: slog.New(slog.DiscardHandler), Getenv: func(string) string { return "" }, Offline: true}
	if _, err := startParts(all, env); err != nil {
		tb.Fatal(err)
	}
	return p
}

// testdataCluster returns the text of each file in testdata/cluster/,
// none when there is no such directory.
func testdataCluster(tb testing.TB) []string {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "cluster", "*"))
	if err != nil {
		tb.Fatal(err)
	}
	var texts []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		texts = append(texts, string(b))
	}
	return texts
}

// testCredentials are the flags that give the server what the policy
// reads of the cluster, without an apiserver: with the cluster part,
// -cluster with a file that holds nothing, so that every view is synced
// and empty; none without it. views is how many views will log that they
// synced: none, filled from files.
func testCredentials(tb testing.TB) (flags []string, views int) {
	tb.Helper()
	var p policy
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	for _, pt := range parts(&p) {
		if pt.Flags != nil {
			pt.Flags(fs, false)
		}
	}
	if fs.Lookup("cluster") == nil {
		return nil, 0
	}
	empty := filepath.Join(tb.TempDir(), "cluster.json")
	if err := os.WriteFile(empty, []byte(`{"apiVersion": "v1", "kind": "List", "items": []}`), 0o600); err != nil {
		tb.Fatal(err)
	}
	return []string{"-cluster", empty}, 0
}

// ---------------------------------------------------------------------------
// What every policy's tests use: the fixtures through the policy, goldens,
// the policy's flags, and SubjectAccessReviews made by hand.
// ---------------------------------------------------------------------------

// TestFixtures sends every review in testdata/ to /mutate and /validate as
// the binary runs them, with no flags, and checks each answer against
// fixtureExpectations and its golden file in testdata/golden/ (go test -run
// TestFixtures -update . rewrites them). Each patch must apply to the
// object and give no patch a second time, as the apiserver may call a
// mutating webhook again (reinvocationPolicy: IfNeeded); each denial is a
// 403 with a message.
func TestFixtures(t *testing.T) {
	p := policyWithDefaults(t)
	mutateHandler := admissionHandler(discardLogger, mutate(p))
	validateHandler := admissionHandler(discardLogger, validate(p))
	all := fixtures(t)
	for name := range fixtureExpectations {
		if _, ok := all[name]; !ok {
			t.Errorf("fixture %s has expectations but no testdata/%s.json", name, name)
		}
	}
	for name, body := range all {
		t.Run(name, func(t *testing.T) {
			want, ok := fixtureExpectations[name]
			if !ok {
				t.Fatalf("testdata/%s.json has no entry in fixtureExpectations", name)
			}
			in := decodeReviewIn(t, body)

			w := post(mutateHandler, "/mutate?timeout=10s", body)
			out := checkReview(t, "/mutate", in, w)
			checkGolden(t, name+".mutate", w)
			ops := decodePatch(t, out.Response.Patch)
			if len(ops) != want.mutateOps {
				t.Errorf("/mutate: got %d patch operations %s, want %d", len(ops), out.Response.Patch, want.mutateOps)
			}
			patchedObject := in.Request.Object
			if len(ops) > 0 {
				patchedObject = applyPatch(t, in.Request.Object, ops)
				again := checkReview(t, "/mutate again", in, post(mutateHandler, "/mutate", withObject(t, body, patchedObject)))
				if again.Response.Patch != nil {
					t.Errorf("/mutate of the patched object: got patch %s, want none", again.Response.Patch)
				}
			}

			w = post(validateHandler, "/validate", body)
			out = checkReview(t, "/validate", in, w)
			checkGolden(t, name+".validate", w)
			if out.Response.Allowed != want.validateAllowed {
				t.Errorf("/validate: got allowed=%v, want %v (status %+v)", out.Response.Allowed, want.validateAllowed, out.Response.Status)
			}
			if s := out.Response.Status; !out.Response.Allowed && (s == nil || s.Code != http.StatusForbidden || s.Reason != metav1.StatusReasonForbidden || s.Message == "") {
				t.Errorf("/validate denial: got status %+v, want code 403, reason Forbidden and a message", s)
			}
			out = checkReview(t, "/validate after /mutate", in, post(validateHandler, "/validate", withObject(t, body, patchedObject)))
			if out.Response.Allowed != want.allowedAfterMutate {
				t.Errorf("/validate after /mutate: got allowed=%v, want %v (status %+v)", out.Response.Allowed, want.allowedAfterMutate, out.Response.Status)
			}
		})
	}
}

// checkGolden compares the answer with testdata/golden/<name>.json, which
// holds the HTTP status, the review, and its patch decoded for reading.
func checkGolden(t *testing.T, name string, w *httptest.ResponseRecorder) {
	t.Helper()
	type golden struct {
		HTTPStatus int             `json:"httpStatus"`
		Patch      json.RawMessage `json:"decodedPatch,omitempty"`
		Review     json.RawMessage `json:"review"`
	}
	g := golden{HTTPStatus: w.Code, Review: w.Body.Bytes()}
	if p := decodeReviewIn(t, w.Body.Bytes()).Response; p != nil && p.Patch != nil {
		g.Patch = p.Patch
	}
	got, err := json.MarshalIndent(g, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "golden", name+".json")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run TestFixtures -update . writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("answer differs from %s (go test -run TestFixtures -update . rewrites it):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// parsePolicyFlags parses args with the policy's flags alone.
func parsePolicyFlags(args ...string) (policy, string, error) {
	var p policy
	var out bytes.Buffer
	flags := flag.NewFlagSet("webhook", flag.ContinueOnError)
	flags.SetOutput(&out)
	if err := p.addFlags(flags); err != nil {
		return p, "", err
	}
	err := flags.Parse(args)
	return p, out.String(), err
}

// checkFlagError checks that the policy's flags refuse args with an error
// (or usage text) that mentions each of want.
func checkFlagError(t *testing.T, args, want []string) {
	t.Helper()
	_, printed, err := parsePolicyFlags(args...)
	if err == nil {
		t.Fatalf("flags %q: got no error, want one", args)
	}
	got := err.Error() + "\n" + printed
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("flags %q: got %.300q…, want it to mention %q", args, got, w)
		}
	}
}

// TestReviewAs checks reviewAs gives the review another user and leaves
// the rest as it was.
func TestReviewAs(t *testing.T) {
	body := newReview(t, admissionv1.Delete, "", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"prod"}}`)
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(reviewAs(t, body, "jane", "developers"), &review); err != nil {
		t.Fatal(err)
	}
	if r := review.Request; r.UserInfo.Username != "jane" || !reflect.DeepEqual(r.UserInfo.Groups, []string{"developers"}) || r.Name != "prod" || r.Operation != admissionv1.Delete {
		t.Errorf("reviewAs(jane, developers): got user %q in %v, %s of %q; want jane in [developers], DELETE of prod", r.UserInfo.Username, r.UserInfo.Groups, r.Operation, r.Name)
	}
}

// optionsKind is the kind of a review's options, "" for none (a CONNECT's).
func optionsKind(raw []byte) string {
	var o struct{ Kind string }
	_ = json.Unmarshal(raw, &o)
	return o.Kind
}
