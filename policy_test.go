package main

// The tests of what policy.go decides. Change them with the policy; the
// plumbing's tests (handler_test.go and the rest) never read the policy, so
// they pass whatever it says.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// allow is the demonstration's annotation: /mutate sets it, /validate
// requires it.
var allow = keyValue{Key: "webhook.example.com/allow", Value: "true"}

// fixtureExpectations says, for each review in testdata/, what /mutate and
// /validate answer with the policy's defaults. A new fixture needs an entry.
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
	"v1-pod-create":                          {mutateOps: 1, validateAllowed: false},
	"v1-pod-update":                          {mutateOps: 1, validateAllowed: false},
}

// TestFixtures sends every review in testdata/ to /mutate and /validate as
// the binary runs them, with no flags, and compares each answer with its
// golden file in testdata/golden/ (go test -run TestFixtures -update .
// rewrites them). Each patch is applied to the object, which must then
// carry the annotation, keep all others, get no patch a second time, and
// pass /validate: mutate then validate is the demonstration's point.
func TestFixtures(t *testing.T) {
	p := policyWithDefaults(t)
	mutateHandler := serve(discardLogger, mutate(p))
	validateHandler := serve(discardLogger, validate(p))
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
			if !out.Response.Allowed {
				t.Fatalf("/mutate: got allowed=false (%v), want true", out.Response.Status)
			}
			ops := decodePatch(t, out.Response.Patch)
			if len(ops) != want.mutateOps {
				t.Errorf("/mutate: got %d patch operations %s, want %d", len(ops), out.Response.Patch, want.mutateOps)
			}
			patchedObject := in.Request.Object
			if len(ops) > 0 {
				patchedObject = applyPatch(t, in.Request.Object, ops)
				before, after := metadataMap(t, in.Request.Object, "annotations"), metadataMap(t, patchedObject, "annotations")
				for k, v := range before {
					if k != allow.Key && after[k] != v {
						t.Errorf("/mutate: annotation %s=%q became %q; every other annotation must be kept", k, v, after[k])
					}
				}
				if after[allow.Key] != allow.Value {
					t.Errorf("/mutate: patched object has %s=%q, want %q", allow.Key, after[allow.Key], allow.Value)
				}
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
			if !out.Response.Allowed {
				s := out.Response.Status
				if s == nil || s.Code != http.StatusForbidden || s.Reason != metav1.StatusReasonForbidden {
					t.Fatalf("/validate denial: got status %+v, want code 403 reason Forbidden", s)
				}
				for _, part := range []string{allow.String(), "metadata.annotations"} {
					if !strings.Contains(s.Message, part) {
						t.Errorf("/validate denial message %q does not name %q", s.Message, part)
					}
				}
			}
			out = checkReview(t, "/validate after /mutate", in, post(validateHandler, "/validate", withObject(t, body, patchedObject)))
			if !out.Response.Allowed {
				t.Errorf("/validate after /mutate: got denied (%+v), want allowed", out.Response.Status)
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

// TestObjectWithoutMetadataIsAnnotated covers a hand-made object with no
// metadata at all: /mutate makes the whole path, /validate denies.
func TestObjectWithoutMetadataIsAnnotated(t *testing.T) {
	p := policyWithDefaults(t)
	body := newReview(t, admissionv1.Create, `{"apiVersion": "example.com/v1", "kind": "Widget"}`, "")
	in := decodeReviewIn(t, body)
	out := checkReview(t, "/mutate", in, post(serve(discardLogger, mutate(p)), "/mutate", body))
	patched := applyPatch(t, in.Request.Object, decodePatch(t, out.Response.Patch))
	if got := metadataMap(t, patched, "annotations"); got[allow.Key] != allow.Value {
		t.Errorf("patched object has annotations %v, want %s", got, allow)
	}
	out = checkReview(t, "/validate", in, post(serve(discardLogger, validate(p)), "/validate", body))
	if out.Response.Allowed {
		t.Errorf("/validate admitted an object without the required annotation")
	}
}

// TestMessagesNameTheObject checks the denial a kubectl user reads.
func TestMessagesNameTheObject(t *testing.T) {
	p := policy{require: []keyValue{{"a.example.com/x", "1"}, {"b.example.com/y", "2"}}}
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

// parsePolicyFlags parses args with the policy's flags alone.
func parsePolicyFlags(args ...string) (policy, string, error) {
	var p policy
	var out bytes.Buffer
	flags := flag.NewFlagSet("webhook", flag.ContinueOnError)
	flags.SetOutput(&out)
	p.addFlags(flags)
	err := flags.Parse(args)
	return p, out.String(), err
}

func TestPolicyFlags(t *testing.T) {
	tests := []struct {
		name         string
		args         []string
		wantAnnotate []keyValue
		wantRequire  []keyValue
	}{
		{"defaults", nil, []keyValue{allow}, []keyValue{allow}},
		{"repeated flags replace the default",
			[]string{"-annotate", "a.example.com/x=1", "-annotate", "b.example.com/y=", "-require", "a.example.com/x=1"},
			[]keyValue{{"a.example.com/x", "1"}, {"b.example.com/y", ""}}, []keyValue{{"a.example.com/x", "1"}}},
		{"value with an equals sign", []string{"-annotate", "a=b=c"}, []keyValue{{"a", "b=c"}}, []keyValue{allow}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, _, err := parsePolicyFlags(tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.annotate, tc.wantAnnotate) || !reflect.DeepEqual(p.require, tc.wantRequire) {
				t.Errorf("got annotate %v require %v, want %v and %v", p.annotate, p.require, tc.wantAnnotate, tc.wantRequire)
			}
		})
	}
}

func TestBadPolicyFlags(t *testing.T) {
	tests := []struct {
		args []string
		want []string // parts of what is printed and returned
	}{
		{[]string{"-annotate", "no-equals-sign"}, []string{"-annotate", "key=value"}},
		{[]string{"-require", "Bad Key=1"}, []string{"-require", "Bad Key", "name part must consist of"}},
		{[]string{"-annotate", "a/b/c=1"}, []string{"-annotate", "a/b/c"}},
		{[]string{"-annotate", "a=1", "-annotate", "a=2"}, []string{"-annotate", `"a" is given twice`}},
		{[]string{"-annotate", "big=" + strings.Repeat("x", 300<<10)}, []string{"-annotate", "Too long"}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " ")[:min(40, len(strings.Join(tc.args, " ")))], func(t *testing.T) {
			_, printed, err := parsePolicyFlags(tc.args...)
			if err == nil {
				t.Fatal("got no error, want one")
			}
			got := err.Error() + "\n" + printed
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("got %.300q…, want it to mention %q", got, w)
				}
			}
		})
	}
	// The server refuses to start on a bad policy flag, naming it.
	err := run(context.Background(), []string{"-annotate", "no-equals-sign"}, func(string) string { return "" }, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-annotate") {
		t.Errorf("run with a bad -annotate: got %v, want an error naming the flag", err)
	}
}

// FuzzPolicy feeds arbitrary bodies to the policy's routes: whatever comes
// in, the policy answers (never a panic, which serve answers with 500), in
// the request's version and with its uid, and /validate never patches.
func FuzzPolicy(f *testing.F) {
	addReviewSeeds(f)
	p := policyWithDefaults(f)
	handlers := map[bool]http.Handler{
		false: serve(discardLogger, mutate(p)),
		true:  serve(discardLogger, validate(p)),
	}
	f.Fuzz(func(t *testing.T, body []byte, validating bool) {
		route := "/mutate"
		if validating {
			route = "/validate"
		}
		checkAnyAnswer(t, route, body, post(handlers[validating], route, body))
	})
}
