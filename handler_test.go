package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/ with the responses the handlers give now")

// defaultPolicy is the policy the binary runs with when given no flags.
var defaultPolicy = policy{
	annotate: []annotation{{"webhook.example.com/allow", "true"}},
	require:  []annotation{{"webhook.example.com/allow", "true"}},
}

// discardLogger drops what handlers log in tests that do not read it.
var discardLogger = slog.New(slog.DiscardHandler)

// fixtureExpectations says, for each review in testdata/ (captured from a
// real kube-apiserver by e2e's TestCapture), what /mutate and /validate
// must answer under defaultPolicy.
var fixtureExpectations = map[string]struct {
	mutateOps       int  // patch operations /mutate returns
	validateAllowed bool // whether /validate admits it as it is
}{
	"v1-deployment-create":                   {mutateOps: 1, validateAllowed: false},
	"v1beta1-deployment-create":              {mutateOps: 1, validateAllowed: false},
	"v1-deployment-create-dryrun":            {mutateOps: 1, validateAllowed: false},
	"v1-deployment-update-mutated":           {mutateOps: 0, validateAllowed: true},
	"v1-deployment-update-other-annotations": {mutateOps: 1, validateAllowed: false},
	"v1-deployment-scale":                    {mutateOps: 0, validateAllowed: true},
	"v1-deployment-delete":                   {mutateOps: 0, validateAllowed: true},
	"v1-configmap-create-escaped-keys":       {mutateOps: 1, validateAllowed: false},
	"v1-widget-create":                       {mutateOps: 1, validateAllowed: false},
	"v1-secret-create":                       {mutateOps: 1, validateAllowed: false},
}

// fixtures returns every captured review in testdata/, by name.
func fixtures(t testing.TB) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "*.json"))
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
		t.Fatal("no fixtures in testdata/")
	}
	return out
}

// post sends body to h as the apiserver does and returns the recorded answer.
func post(h http.Handler, target string, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, target, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// reviewIn is the part of any review, request or response, that tests read.
// It is decoded with encoding/json, independently of the handler's decoder.
type reviewIn struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID         string          `json:"uid"`
		Operation   string          `json:"operation"`
		SubResource string          `json:"subResource"`
		Object      json.RawMessage `json:"object"`
	} `json:"request"`
	Response *struct {
		UID       string         `json:"uid"`
		Allowed   bool           `json:"allowed"`
		Status    *metav1.Status `json:"status"`
		Patch     []byte         `json:"patch"`
		PatchType *string        `json:"patchType"`
	} `json:"response"`
}

func decodeReviewIn(t *testing.T, b []byte) reviewIn {
	t.Helper()
	var r reviewIn
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return r
}

// withObject returns the review body with request.object replaced.
func withObject(t *testing.T, body []byte, object json.RawMessage) []byte {
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

func TestFixtures(t *testing.T) {
	mutateHandler := serve(discardLogger, mutate(defaultPolicy))
	validateHandler := serve(discardLogger, validate(defaultPolicy))
	all := fixtures(t)
	for name := range fixtureExpectations {
		if _, ok := all[name]; !ok {
			t.Errorf("fixture %s has expectations but no testdata/%s.json; regenerate with e2e's TestCapture -capture", name, name)
		}
	}
	for name, body := range all {
		t.Run(name, func(t *testing.T) {
			want, ok := fixtureExpectations[name]
			if !ok {
				t.Fatalf("testdata/%s.json has no entry in fixtureExpectations", name)
			}
			in := decodeReviewIn(t, body)

			// /mutate
			w := post(mutateHandler, "/mutate?timeout=10s", body)
			out := checkReview(t, "/mutate", in, w)
			checkGolden(t, name+".mutate", w)
			if !out.Response.Allowed {
				t.Fatalf("/mutate: got allowed=false (%v), want true", out.Response.Status)
			}
			ops := decodePatch(t, out.Response.Patch)
			if len(ops) != want.mutateOps {
				t.Errorf("/mutate: got %d patch operations %s, want %d", len(ops), out.Response.Patch, want.mutateOps)
			}
			patchedObject := in.Request.Object
			if len(ops) > 0 {
				if out.Response.PatchType == nil || *out.Response.PatchType != "JSONPatch" {
					t.Errorf("/mutate: got patchType %v, want JSONPatch", out.Response.PatchType)
				}
				patchedObject = applyPatch(t, in.Request.Object, ops)
				before, after := annotationsOf(t, in.Request.Object), annotationsOf(t, patchedObject)
				for k, v := range before {
					if after[k] != v {
						t.Errorf("/mutate: annotation %s=%q became %q; every other annotation must be kept", k, v, after[k])
					}
				}
				for _, a := range defaultPolicy.annotate {
					if after[a.Key] != a.Value {
						t.Errorf("/mutate: patched object has %s=%q, want %q", a.Key, after[a.Key], a.Value)
					}
				}
				// A second pass over the patched object changes nothing.
				again := checkReview(t, "/mutate again", in, post(mutateHandler, "/mutate", withObject(t, body, patchedObject)))
				if again.Response.Patch != nil || again.Response.PatchType != nil {
					t.Errorf("/mutate of the patched object: got patch %s, want none", again.Response.Patch)
				}
			} else if out.Response.PatchType != nil {
				t.Errorf("/mutate: got patchType %s without a patch", *out.Response.PatchType)
			}

			// /validate, on the object as sent.
			w = post(validateHandler, "/validate", body)
			out = checkReview(t, "/validate", in, w)
			checkGolden(t, name+".validate", w)
			if out.Response.Allowed != want.validateAllowed {
				t.Errorf("/validate: got allowed=%v, want %v (status %+v)", out.Response.Allowed, want.validateAllowed, out.Response.Status)
			}
			if !out.Response.Allowed {
				s := out.Response.Status
				if s == nil || s.Code != http.StatusForbidden || s.Reason != metav1.StatusReasonForbidden {
					t.Fatalf("/validate denial: got status %+v, want code 403 reason Forbidden", s)
				}
				for _, part := range []string{"webhook.example.com/allow=true", "metadata.annotations"} {
					if !strings.Contains(s.Message, part) {
						t.Errorf("/validate denial message %q does not name %q", s.Message, part)
					}
				}
			}
			// Mutate then validate: the demonstration's whole point.
			out = checkReview(t, "/validate after /mutate", in, post(validateHandler, "/validate", withObject(t, body, patchedObject)))
			if !out.Response.Allowed {
				t.Errorf("/validate after /mutate: got denied (%+v), want allowed", out.Response.Status)
			}
		})
	}
}

// checkReview checks what every answer to a review must be: HTTP 200, an
// AdmissionReview in the request's version, the request's uid, and for
// /validate never a patch.
func checkReview(t *testing.T, route string, in reviewIn, w *httptest.ResponseRecorder) reviewIn {
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
	if strings.HasPrefix(route, "/validate") && (out.Response.Patch != nil || out.Response.PatchType != nil) {
		t.Errorf("%s: a validating answer carries a patch", route)
	}
	return out
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
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("answer differs from %s (go test -update rewrites it):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

func decodePatch(t *testing.T, patch []byte) []patchOp {
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

// applyPatch applies "add" operations as RFC 6902 and the apiserver's
// json-patch library do: the parent must exist, and an existing member is
// replaced. It fails the test on anything else.
func applyPatch(t *testing.T, doc json.RawMessage, ops []patchOp) json.RawMessage {
	t.Helper()
	var root any
	if err := json.Unmarshal(doc, &root); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if op.Op != "add" {
			t.Fatalf("unexpected operation %q", op.Op)
		}
		if !strings.HasPrefix(op.Path, "/") {
			t.Fatalf("path %q is not a JSON Pointer", op.Path)
		}
		tokens := strings.Split(op.Path[1:], "/")
		parent := root
		for _, tok := range tokens[:len(tokens)-1] {
			m, ok := parent.(map[string]any)
			if !ok {
				t.Fatalf("patch %s: parent of %q is not an object", op.Path, tok)
			}
			if parent, ok = m[unescapePointer(tok)]; !ok || parent == nil {
				t.Fatalf("patch %s: missing path at %q (the apiserver would fail this patch)", op.Path, tok)
			}
		}
		m, ok := parent.(map[string]any)
		if !ok {
			t.Fatalf("patch %s: target's parent is not an object", op.Path)
		}
		// Round-trip the value so it is the same kind of tree as the doc.
		raw, _ := json.Marshal(op.Value)
		var v any
		_ = json.Unmarshal(raw, &v)
		m[unescapePointer(tokens[len(tokens)-1])] = v
	}
	out, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// unescapePointer reverses RFC 6901 escaping, "~1" before "~0" as the RFC
// says, so "~01" reads back as "~1".
func unescapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}

func annotationsOf(t *testing.T, object json.RawMessage) map[string]string {
	t.Helper()
	var o struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(object, &o); err != nil {
		t.Fatal(err)
	}
	return o.Metadata.Annotations
}

// statusIn is a metav1.Status as a client reads it off the wire.
type statusIn struct {
	Kind, APIVersion, Status, Message string
	Reason                            metav1.StatusReason
	Code                              int
}

func TestBadInput(t *testing.T) {
	all := fixtures(t)
	deployment := all["v1-deployment-create"]
	secret := all["v1-secret-create"]
	huge := bytes.Repeat([]byte(" "), maxBodyBytes+1)
	tests := []struct {
		name        string
		method      string
		contentType string
		target      string
		body        io.Reader
		wantCode    int
		wantReason  metav1.StatusReason
		wantMessage string // a part of the message
	}{
		{"GET", http.MethodGet, "application/json", "/mutate", nil, 405, metav1.StatusReasonMethodNotAllowed, "POST"},
		{"PUT", http.MethodPut, "application/json", "/validate", bytes.NewReader(deployment), 405, metav1.StatusReasonMethodNotAllowed, "PUT"},
		{"text/plain", http.MethodPost, "text/plain", "/mutate", bytes.NewReader(deployment), 415, metav1.StatusReasonUnsupportedMediaType, "text/plain"},
		{"no Content-Type", http.MethodPost, "", "/mutate", bytes.NewReader(deployment), 415, metav1.StatusReasonUnsupportedMediaType, "application/json"},
		{"YAML", http.MethodPost, "application/yaml", "/mutate", bytes.NewReader(deployment), 415, metav1.StatusReasonUnsupportedMediaType, "application/yaml"},
		{"too large, declared", http.MethodPost, "application/json", "/mutate", bytes.NewReader(huge), 413, metav1.StatusReasonRequestEntityTooLarge, fmt.Sprint(maxBodyBytes)},
		{"too large, chunked", http.MethodPost, "application/json", "/mutate", io.MultiReader(bytes.NewReader(huge)) /* unknown length, as chunked */, 413, metav1.StatusReasonRequestEntityTooLarge, fmt.Sprint(maxBodyBytes)},
		{"empty body", http.MethodPost, "application/json", "/mutate", nil, 400, metav1.StatusReasonBadRequest, "empty"},
		{"malformed JSON", http.MethodPost, "application/json", "/mutate", strings.NewReader(`{"apiVersion": "admission.k8s.io/v1", "kind": `), 400, metav1.StatusReasonBadRequest, "does not decode"},
		{"JSON array", http.MethodPost, "application/json", "/mutate", strings.NewReader(`[]`), 400, metav1.StatusReasonBadRequest, "AdmissionReview"},
		{"no kind", http.MethodPost, "application/json", "/mutate", strings.NewReader(`{}`), 400, metav1.StatusReasonBadRequest, "no apiVersion or kind"},
		{"secret without kind is not echoed", http.MethodPost, "application/json", "/mutate", bytes.NewReader(bytes.Replace(secret, []byte(`"kind": "AdmissionReview",`), nil, 1)), 400, metav1.StatusReasonBadRequest, "no apiVersion or kind"},
		{"not a review", http.MethodPost, "application/json", "/mutate", strings.NewReader(`{"apiVersion":"v1","kind":"Status"}`), 400, metav1.StatusReasonBadRequest, `kind "Status"`},
		{"unknown version", http.MethodPost, "application/json", "/validate", strings.NewReader(`{"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview","request":{"uid":"x"}}`), 400, metav1.StatusReasonBadRequest, "admission.k8s.io/v2"},
		{"no request", http.MethodPost, "application/json", "/mutate", strings.NewReader(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), 400, metav1.StatusReasonBadRequest, "no request"},
		{"v1beta1 no request", http.MethodPost, "application/json", "/mutate", strings.NewReader(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","response":{"allowed":true}}`), 400, metav1.StatusReasonBadRequest, "no request"},
		{"request of the wrong type", http.MethodPost, "application/json", "/mutate", strings.NewReader(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":"yes"}`), 400, metav1.StatusReasonBadRequest, "does not decode"},
		{"bad timeout", http.MethodPost, "application/json", "/mutate?timeout=soon", bytes.NewReader(deployment), 400, metav1.StatusReasonBadRequest, `timeout="soon"`},
		{"negative timeout", http.MethodPost, "application/json", "/mutate?timeout=-1s", bytes.NewReader(deployment), 400, metav1.StatusReasonBadRequest, "timeout"},
	}
	h := serve(discardLogger, mutate(defaultPolicy))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.target, tc.body)
			if tc.contentType != "" {
				r.Header.Set("Content-Type", tc.contentType)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			s := checkStatusBody(t, w, tc.wantCode, tc.wantReason)
			if !strings.Contains(s.Message, tc.wantMessage) {
				t.Errorf("got message %q, want it to mention %q", s.Message, tc.wantMessage)
			}
			if strings.Contains(s.Message, "s3cr3t") || strings.Contains(s.Message, base64.StdEncoding.EncodeToString([]byte("s3cr3t"))[:6]) || len(s.Message) > 1024 {
				t.Errorf("message %q quotes the body or is too long", s.Message)
			}
			if tc.wantCode == http.StatusMethodNotAllowed && w.Header().Get("Allow") != http.MethodPost {
				t.Errorf("got Allow %q, want POST", w.Header().Get("Allow"))
			}
		})
	}
}

// checkStatusBody checks an error answer: the HTTP code and a metav1.Status
// body the apiserver can pass on.
func checkStatusBody(t *testing.T, w *httptest.ResponseRecorder, code int, reason metav1.StatusReason) statusIn {
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

func TestUndecodableObject(t *testing.T) {
	all := fixtures(t)
	tests := []struct {
		name, fixture string
		object        string // replaces request.object; "" removes it
		wantMessage   string
	}{
		{"array", "v1-deployment-create", `[1, 2, 3]`, "does not decode"},
		{"string", "v1beta1-deployment-create", `"a deployment"`, "does not decode"},
		{"metadata of the wrong type", "v1-widget-create", `{"metadata": {"annotations": ["a"]}}`, "does not decode"},
		{"missing on CREATE", "v1-deployment-create", ``, "request.object is missing"},
	}
	for _, tc := range tests {
		for _, route := range []string{"/mutate", "/validate"} {
			t.Run(tc.name+route, func(t *testing.T) {
				body := all[tc.fixture]
				if tc.object == "" {
					body = withObject(t, body, json.RawMessage("null"))
				} else {
					body = withObject(t, body, json.RawMessage(tc.object))
				}
				admit := mutate(defaultPolicy)
				if route == "/validate" {
					admit = validate(defaultPolicy)
				}
				out := checkReview(t, route, decodeReviewIn(t, all[tc.fixture]), post(serve(discardLogger, admit), route, body))
				s := out.Response.Status
				if out.Response.Allowed || s == nil || s.Code != http.StatusBadRequest || s.Reason != metav1.StatusReasonBadRequest {
					t.Fatalf("got allowed=%v status %+v, want allowed=false, code 400, reason BadRequest", out.Response.Allowed, s)
				}
				if !strings.Contains(s.Message, tc.wantMessage) {
					t.Errorf("got message %q, want it to mention %q", s.Message, tc.wantMessage)
				}
				if out.Response.Patch != nil {
					t.Errorf("got a patch with an error")
				}
			})
		}
	}
}

// TestObjectWithoutMetadata covers an object with no metadata at all, which
// the apiserver never sends but a hand-made request can: /mutate must make
// the whole path, /validate must deny rather than crash.
func TestObjectWithoutMetadata(t *testing.T) {
	body := withObject(t, fixtures(t)["v1-widget-create"], json.RawMessage(`{"apiVersion":"example.com/v1","kind":"Widget"}`))
	in := decodeReviewIn(t, body)
	out := checkReview(t, "/mutate", in, post(serve(discardLogger, mutate(defaultPolicy)), "/mutate", body))
	patched := applyPatch(t, in.Request.Object, decodePatch(t, out.Response.Patch))
	if got := annotationsOf(t, patched)["webhook.example.com/allow"]; got != "true" {
		t.Errorf("patched object has webhook.example.com/allow=%q, want true", got)
	}
	out = checkReview(t, "/validate", in, post(serve(discardLogger, validate(defaultPolicy)), "/validate", body))
	if out.Response.Allowed {
		t.Errorf("/validate admitted an object without the required annotation")
	}
}

func TestPanicIsAnswered(t *testing.T) {
	body := fixtures(t)["v1-deployment-create"]
	uid := decodeReviewIn(t, body).Request.UID
	tests := []struct {
		name      string
		admit     admitFunc
		wantLog   string
		forbidLog string
	}{
		{"panic with a value of the policy's", func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			panic("password=hunter2")
		}, "panic_type=string", "hunter2"},
		{"runtime error", func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			var m map[string]int
			m[req.Name]++ // assignment to a nil map
			return allowed()
		}, "assignment to entry in nil map", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			w := post(serve(slog.New(slog.NewTextHandler(&logs, nil)), tc.admit), "/mutate", body)
			s := checkStatusBody(t, w, http.StatusInternalServerError, metav1.StatusReasonInternalError)
			if !strings.Contains(s.Message, uid) {
				t.Errorf("got message %q, want it to name the uid %s", s.Message, uid)
			}
			if w.Header().Get("Retry-After") != "" {
				t.Errorf("a 500 with Retry-After makes the apiserver retry; got %q", w.Header().Get("Retry-After"))
			}
			for _, want := range []string{"panicked", "uid=" + uid, tc.wantLog} {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("log %q does not contain %q", logs.String(), want)
				}
			}
			if tc.forbidLog != "" && strings.Contains(logs.String(), tc.forbidLog) {
				t.Errorf("log contains the panic's value %q, which may be an object's content", tc.forbidLog)
			}
		})
	}
}

func TestNilResponseIsAnError(t *testing.T) {
	body := fixtures(t)["v1-deployment-create"]
	admit := func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse { return nil }
	out := checkReview(t, "/mutate", decodeReviewIn(t, body), post(serve(discardLogger, admit), "/mutate", body))
	if out.Response.Allowed || out.Response.Status == nil || out.Response.Status.Code != http.StatusInternalServerError {
		t.Errorf("got %+v, want a denial with code 500", out.Response)
	}
}

func TestTimeoutIsTheDeadline(t *testing.T) {
	body := fixtures(t)["v1-deployment-create"]
	tests := []struct {
		query    string
		min, max time.Duration
	}{
		{"?timeout=2s", time.Second, 2 * time.Second},
		{"?timeout=500ms", 0, 500 * time.Millisecond},
		{"", maxWebhookTimeout - time.Second, maxWebhookTimeout},
		{"?timeout=1h", maxWebhookTimeout - time.Second, maxWebhookTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			var left time.Duration
			admit := func(ctx context.Context, _ *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
				deadline, ok := ctx.Deadline()
				if !ok {
					t.Error("the admit function's context has no deadline")
				}
				left = time.Until(deadline)
				return allowed()
			}
			checkReview(t, "/validate", decodeReviewIn(t, body), post(serve(discardLogger, admit), "/validate"+tc.query, body))
			if left <= tc.min || left > tc.max {
				t.Errorf("got %s left before the deadline, want (%s, %s]", left, tc.min, tc.max)
			}
		})
	}
}

// TestLogsNoObjectValues checks the one log line per review, and that no
// value of the object reaches it: the object may be a Secret.
func TestLogsNoObjectValues(t *testing.T) {
	secretValue := "s3cr3t-value-that-must-never-be-logged"
	forbidden := []string{
		secretValue,
		base64.StdEncoding.EncodeToString([]byte(secretValue)),
		"nginx:1.14.2", // a container image from the Deployments' spec
		"payments",     // an annotation value
	}
	for name, body := range fixtures(t) {
		for _, admit := range []admitFunc{mutate(defaultPolicy), validate(defaultPolicy)} {
			var logs bytes.Buffer
			checkReview(t, name, decodeReviewIn(t, body), post(serve(slog.New(slog.NewJSONHandler(&logs, nil)), admit), "/x", body))
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("%s: got %d log lines, want 1:\n%s", name, len(lines), logs.String())
			}
			var line map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{"path", "uid", "operation", "kind", "name", "user", "allowed", "patch_ops", "duration", "proto"} {
				if _, ok := line[key]; !ok {
					t.Errorf("%s: log line %s has no %q", name, lines[0], key)
				}
			}
			for _, f := range forbidden {
				if strings.Contains(logs.String(), f) {
					t.Errorf("%s: log %s contains %q, a value of the object", name, lines[0], f)
				}
			}
		}
	}
}

// TestVersionConversion checks that every field survives the copy between
// v1beta1 and v1, so a field added to both versions cannot be forgotten.
func TestVersionConversion(t *testing.T) {
	dryRun := true
	pt := admissionv1.PatchTypeJSONPatch
	beta := &admissionv1beta1.AdmissionRequest{
		UID: "u", Kind: metav1.GroupVersionKind{Kind: "K"}, Resource: metav1.GroupVersionResource{Resource: "r"},
		SubResource: "s", RequestKind: &metav1.GroupVersionKind{Kind: "RK"}, RequestResource: &metav1.GroupVersionResource{Resource: "rr"},
		RequestSubResource: "rs", Name: "n", Namespace: "ns", Operation: admissionv1beta1.Update, DryRun: &dryRun,
	}
	beta.UserInfo.Username = "user"
	beta.Object.Raw = []byte(`{"o":1}`)
	beta.OldObject.Raw = []byte(`{"o":0}`)
	beta.Options.Raw = []byte(`{"p":1}`)
	compareJSON(t, "request", beta, requestFromV1beta1(beta))

	v1 := &admissionv1.AdmissionResponse{
		UID: "u", Allowed: true, Result: &metav1.Status{Message: "m"}, Patch: []byte(`[]`), PatchType: &pt,
		AuditAnnotations: map[string]string{"a": "b"}, Warnings: []string{"w"},
	}
	compareJSON(t, "response", v1, responseToV1beta1(v1))
}

func compareJSON(t *testing.T, what string, a, b any) {
	t.Helper()
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	var ma, mb map[string]any
	_ = json.Unmarshal(ja, &ma)
	_ = json.Unmarshal(jb, &mb)
	// Every field was set, so a dropped one shows as a missing key.
	if len(ma) != len(mb) || !bytes.Equal(ja, jb) {
		t.Errorf("%s changed in conversion:\n got %s\nwant %s", what, jb, ja)
	}
}

// TestMessagesNameTheObject checks the denial a kubectl user reads.
func TestMessagesNameTheObject(t *testing.T) {
	p := policy{require: []annotation{{"a.example.com/x", "1"}, {"b.example.com/y", "2"}}}
	req := &admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Kind: metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
		Namespace: "shop",
	}
	req.Object.Raw = []byte(`{"metadata":{"generateName":"web-","annotations":{"a.example.com/x":"1","b.example.com/y":"3"}}}`)
	resp := validate(p)(context.Background(), req)
	want := "Deployment shop/web-* must have the annotation b.example.com/y=2 in metadata.annotations"
	if resp.Allowed || !strings.HasPrefix(resp.Result.Message, want) {
		t.Errorf("got %q, want it to start with %q", resp.Result.Message, want)
	}
	req.Object.Raw = []byte(`{"metadata":{"name":"cluster-wide"}}`)
	req.Kind.Kind, req.Namespace, req.Name = "ClusterRole", "", "cluster-wide"
	resp = validate(p)(context.Background(), req)
	want = "ClusterRole cluster-wide must have the annotations a.example.com/x=1, b.example.com/y=2 in"
	if resp.Allowed || !strings.HasPrefix(resp.Result.Message, want) {
		t.Errorf("got %q, want it to start with %q", resp.Result.Message, want)
	}
}
