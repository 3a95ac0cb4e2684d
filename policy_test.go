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
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// allow is the demonstration's annotation: /mutate sets it, /validate
// requires it.
var allow = keyValue{Key: "webhook.example.com/allow", Value: "true"}

// fixtureExpectations says, for each review in testdata/, what the policy
// answers with its defaults. A new fixture needs an entry.
var fixtureExpectations = map[string]struct {
	mutateOps          int  // patch operations /mutate returns
	validateAllowed    bool // whether /validate admits the object as it is
	allowedAfterMutate bool // whether /validate admits it once /mutate's patch is applied
}{
	"v1-deployment-create":                   {mutateOps: 1, validateAllowed: false, allowedAfterMutate: true},
	"v1beta1-deployment-create":              {mutateOps: 1, validateAllowed: false, allowedAfterMutate: true},
	"v1-deployment-create-dryrun":            {mutateOps: 1, validateAllowed: false, allowedAfterMutate: true},
	"v1-deployment-update-mutated":           {mutateOps: 0, validateAllowed: true, allowedAfterMutate: true},
	"v1-deployment-update-other-annotations": {mutateOps: 1, validateAllowed: false, allowedAfterMutate: true},
	"v1-deployment-scale":                    {mutateOps: 0, validateAllowed: true, allowedAfterMutate: true},
	"v1-deployment-delete":                   {mutateOps: 0, validateAllowed: true, allowedAfterMutate: true},
	"v1-configmap-create-escaped-keys":       {mutateOps: 1, validateAllowed: false, allowedAfterMutate: true},
	"v1-widget-create":                       {mutateOps: 1, validateAllowed: false, allowedAfterMutate: true},
	"v1-secret-create":                       {mutateOps: 1, validateAllowed: false, allowedAfterMutate: true},
	"v1-pod-create":                          {mutateOps: 1, validateAllowed: false, allowedAfterMutate: true},
	"v1-pod-update":                          {mutateOps: 1, validateAllowed: false, allowedAfterMutate: true},
}

// TestFixtures sends every review in testdata/ to /mutate and /validate as
// the binary runs them, with no flags, and checks each answer against
// fixtureExpectations and its golden file in testdata/golden/ (go test -run
// TestFixtures -update . rewrites them). Each patch must apply to the
// object and give no patch a second time, as the apiserver may call a
// mutating webhook again (reinvocationPolicy: IfNeeded); each denial is a
// 403 with a message.
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

// TestAnnotationOnEveryFixture checks what the demonstration does to each
// fixture: /mutate sets the annotation and keeps every other one, and a
// denial of /validate names the annotation it wants.
func TestAnnotationOnEveryFixture(t *testing.T) {
	p := policyWithDefaults(t)
	for name, body := range fixtures(t) {
		in := decodeReviewIn(t, body)
		out := checkReview(t, name+" /mutate", in, post(serve(discardLogger, mutate(p)), "/mutate", body))
		if ops := decodePatch(t, out.Response.Patch); len(ops) > 0 {
			patched := applyPatch(t, in.Request.Object, ops)
			before, after := metadataMap(t, in.Request.Object, "annotations"), metadataMap(t, patched, "annotations")
			for k, v := range before {
				if k != allow.Key && after[k] != v {
					t.Errorf("%s: /mutate turned annotation %s=%q into %q; every other annotation must be kept", name, k, v, after[k])
				}
			}
			if after[allow.Key] != allow.Value {
				t.Errorf("%s: the patched object has %s=%q, want %q", name, allow.Key, after[allow.Key], allow.Value)
			}
		}
		out = checkReview(t, name+" /validate", in, post(serve(discardLogger, validate(p)), "/validate", body))
		if !out.Response.Allowed {
			for _, part := range []string{allow.String(), "metadata.annotations"} {
				if !strings.Contains(out.Response.Status.Message, part) {
					t.Errorf("%s: denial %q does not name %q", name, out.Response.Status.Message, part)
				}
			}
		}
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
			checkFlagError(t, tc.args, tc.want)
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

// resourceReview is the spec of a SubjectAccessReview for a resource, as
// the apiserver sends it for user in groups.
func resourceReview(user string, groups []string, verb, apiGroup, resource, subresource, namespace, name string) *authorizationv1.SubjectAccessReviewSpec {
	return &authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &authorizationv1.ResourceAttributes{
		Verb: verb, Group: apiGroup, Version: "v1", Resource: resource, Subresource: subresource, Namespace: namespace, Name: name,
	}}
}

// pathReview is the spec of a SubjectAccessReview for a non-resource path.
func pathReview(user string, groups []string, verb, path string) *authorizationv1.SubjectAccessReviewSpec {
	return &authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: verb, Path: path}}
}

func TestDenyRules(t *testing.T) {
	jane := []string{"developers", "system:authenticated"}
	deleteNamespace := resourceReview("jane", jane, "delete", "", "namespaces", "", "x", "x")
	tests := []struct {
		name   string
		rules  []string
		review *authorizationv1.SubjectAccessReviewSpec
		want   string // the denying rule; "" for no opinion
	}{
		{"no rules: no opinion", nil, deleteNamespace, ""},
		{"the issue's rule", []string{"user=jane,verb=delete,resource=namespaces"}, deleteNamespace, "user=jane,verb=delete,resource=namespaces"},
		{"every pair must match", []string{"user=jane,verb=get,resource=namespaces"}, deleteNamespace, ""},
		{"another user", []string{"user=bob"}, deleteNamespace, ""},
		{"any one rule", []string{"user=bob", "verb=delete"}, deleteNamespace, "verb=delete"},
		{"the first matching rule names it", []string{"user=jane", "verb=delete"}, deleteNamespace, "user=jane"},
		{"star matches anything", []string{"user=*"}, deleteNamespace, "user=*"},
		{"star matches the empty value", []string{"resource=namespaces,subresource=*"}, deleteNamespace, "resource=namespaces,subresource=*"},
		{"prefix", []string{"user=ja*"}, deleteNamespace, "user=ja*"},
		{"prefix not matching", []string{"user=jo*"}, deleteNamespace, ""},
		{"a value is whole", []string{"user=jan"}, deleteNamespace, ""},
		{"case matters", []string{"user=Jane"}, deleteNamespace, ""},
		{"any group", []string{"group=developers"}, deleteNamespace, "group=developers"},
		{"group prefix", []string{"group=system:*"}, deleteNamespace, "group=system:*"},
		{"no such group", []string{"group=admins"}, deleteNamespace, ""},
		{"group of a user without groups", []string{"group=*"}, resourceReview("jane", nil, "get", "", "pods", "", "x", ""), ""},
		{"the core API group is empty", []string{"apiGroup=,resource=pods"}, resourceReview("jane", jane, "get", "", "pods", "", "x", ""), "apiGroup=,resource=pods"},
		{"apiGroup", []string{"apiGroup=apps"}, resourceReview("jane", jane, "get", "", "pods", "", "x", ""), ""},
		{"subresource", []string{"resource=pods,subresource=exec"}, resourceReview("jane", jane, "create", "", "pods", "exec", "x", "web"), "resource=pods,subresource=exec"},
		{"an empty subresource is the object itself", []string{"resource=pods,subresource="}, resourceReview("jane", jane, "create", "", "pods", "exec", "x", "web"), ""},
		{"namespace and name", []string{"namespace=kube-*,name=admin"}, resourceReview("jane", jane, "get", "", "secrets", "", "kube-system", "admin"), "namespace=kube-*,name=admin"},
		{"cluster scope has no namespace", []string{"namespace="}, resourceReview("jane", jane, "list", "", "nodes", "", "", ""), "namespace="},
		{"path", []string{"path=/healthz*"}, pathReview("jane", jane, "get", "/healthz/etcd"), "path=/healthz*"},
		{"path with verb", []string{"path=/version,verb=get"}, pathReview("jane", jane, "get", "/version"), "path=/version,verb=get"},
		{"a path rule never matches a resource", []string{"path=*"}, deleteNamespace, ""},
		{"a resource rule never matches a path", []string{"resource=*"}, pathReview("jane", jane, "get", "/version"), ""},
		{"user and verb match a path", []string{"user=jane,verb=get"}, pathReview("jane", jane, "get", "/version"), "user=jane,verb=get"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			for _, r := range tc.rules {
				args = append(args, "-deny", r)
			}
			p, _, err := parsePolicyFlags(args...)
			if err != nil {
				t.Fatal(err)
			}
			got := authorize(p)(context.Background(), tc.review)
			if got.Allowed {
				t.Fatalf("got allowed; the policy never allows")
			}
			switch {
			case tc.want == "" && (got.Denied || got.Reason != ""):
				t.Errorf("rules %q: got %+v, want no opinion", tc.rules, got)
			case tc.want != "" && (!got.Denied || got.Reason != "denied by rule "+tc.want):
				t.Errorf("rules %q: got %+v, want denied with reason %q", tc.rules, got, "denied by rule "+tc.want)
			}
		})
	}
}

// TestAuthorizeSubjectAccessReviews sends every SubjectAccessReview in
// testdata/authorization/ to /authorize as the binary runs it: with no
// flags, nothing is denied and nothing allowed; a rule denies just what it
// names.
func TestAuthorizeSubjectAccessReviews(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		wantDenied map[string]string // fixture name → reason
	}{
		{nil, nil},
		{[]string{"-deny", "user=alice,verb=delete,resource=namespaces"}, map[string]string{"v1-delete-namespace": "denied by rule user=alice,verb=delete,resource=namespaces"}},
		{[]string{"-deny", "user=alice,path=/version"}, map[string]string{"v1-get-version": "denied by rule user=alice,path=/version", "v1beta1-get-version": "denied by rule user=alice,path=/version"}},
	} {
		p, _, err := parsePolicyFlags(tc.args...)
		if err != nil {
			t.Fatal(err)
		}
		h := serveAuthorize(discardLogger, authorize(p))
		for name, body := range subjectAccessReviewFixtures(t) {
			out := checkSubjectAccessReview(t, name, body, post(h, "/authorize", body))
			s := out.Status
			want, deny := tc.wantDenied[name]
			if s.Allowed || s.Denied != deny || s.Reason != want {
				t.Errorf("%s with %q: got %+v, want denied=%v reason %q and never allowed", name, tc.args, s, deny, want)
			}
		}
	}
}

func TestBadDenyRules(t *testing.T) {
	tests := []struct {
		rule string
		want []string
	}{
		{"", []string{"-deny", "empty"}},
		{" ", []string{"-deny", "empty"}},
		{"user", []string{`"user" is not attribute=value`, "attributes are user, group, verb"}},
		{"user=jane,", []string{`"" is not attribute=value`}},
		{"color=red", []string{`unknown attribute "color"`, "user, group, verb, apiGroup, resource, subresource, namespace, name, path"}},
		{"apigroup=apps", []string{`unknown attribute "apigroup"`, "apiGroup"}},
		{"user=jane,user=bob", []string{"user is given twice"}},
		{"user=j*ne", []string{"user=j*ne", "* may only end a value"}},
		{"resource=deployments/scale", []string{"subresource=scale"}},
		{"path=/healthz,namespace=x", []string{"both path and a resource's attributes"}},
	}
	for _, tc := range tests {
		t.Run(tc.rule, func(t *testing.T) {
			checkFlagError(t, []string{"-deny", tc.rule}, tc.want)
		})
	}
	// The server refuses to start on a bad rule, naming the flag.
	err := run(context.Background(), []string{"-deny", "color=red"}, func(string) string { return "" }, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-deny") || !strings.Contains(err.Error(), "color") {
		t.Errorf("run with a bad -deny: got %v, want an error naming the flag and the attribute", err)
	}
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

// TestDefaultDenyRules checks that every rule in defaultDenyRules parses,
// and that a -deny flag replaces them.
func TestDefaultDenyRules(t *testing.T) {
	for _, d := range defaultDenyRules {
		if _, err := parseDenyRule(d); err != nil {
			t.Errorf("defaultDenyRules: %q: %v", d, err)
		}
	}
	var rules []denyRule
	f := newDenyRulesFlag(&rules, "user=a", "user=b")
	if got := f.String(); got != "user=a user=b" {
		t.Errorf("with defaults user=a and user=b: got %q, want both", got)
	}
	if err := f.Set("user=c"); err != nil {
		t.Fatal(err)
	}
	if err := f.Set("user=d"); err != nil {
		t.Fatal(err)
	}
	if got := f.String(); got != "user=c user=d" {
		t.Errorf("-deny user=c -deny user=d: got %q, want them in place of the defaults", got)
	}
}
