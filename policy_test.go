package main

// The tests of what policy.go decides: the demonstration's, and nothing
// else. Replace them with your policy's; the plumbing's tests
// (handler_test.go and the rest) never read the policy, so they pass
// whatever it says.
//
// What every policy's tests use is in fixtures_test.go and fuzz_test.go,
// and runs against your policy unchanged:
//   - TestFixtures sends every review in testdata/ through mutate and
//     validate, as the binary runs them, and checks the answers against
//     fixtureExpectations (below) and the goldens in testdata/golden/;
//     FuzzPolicy feeds them arbitrary bodies.
//   - newReview(t, operation, object, oldObject) makes a review for a case
//     no fixture has, from YAML or JSON, as the apiserver sends it to its
//     admin (user admin in system:masters): give "" for the object the
//     operation lacks (CREATE sends object, UPDATE both, DELETE only
//     oldObject); reviewAs(t, body, user, groups...) sends it as another. post(admissionHandler(discardLogger, validate(p)), "/validate",
//     body) answers it, checkReview reads the answer as the apiserver
//     does, and policyWithDefaults(t) is the policy run with no flags.
//   - parsePolicyFlags and checkFlagError read the policy's flags;
//     resourceReview and pathReview make SubjectAccessReviews.

import (
	"context"
	"io"
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
	"v1-namespace-create":                    {mutateOps: 1, validateAllowed: false, allowedAfterMutate: true},
	"v1-namespace-update":                    {mutateOps: 1, validateAllowed: false, allowedAfterMutate: true},
	"v1-namespace-delete":                    {mutateOps: 0, validateAllowed: true, allowedAfterMutate: true},
	"v1-clusterrole-create":                  {mutateOps: 1, validateAllowed: false, allowedAfterMutate: true},
	"v1-pod-exec-connect":                    {mutateOps: 0, validateAllowed: true, allowedAfterMutate: true},
}

// TestAnnotationOnEveryFixture checks what the demonstration does to each
// fixture: /mutate sets the annotation and keeps every other one, and a
// denial of /validate names the annotation it wants.
func TestAnnotationOnEveryFixture(t *testing.T) {
	p := policyWithDefaults(t)
	for name, body := range fixtures(t) {
		in := decodeReviewIn(t, body)
		out := checkReview(t, name+" /mutate", in, post(admissionHandler(discardLogger, mutate(p)), "/mutate", body))
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
		out = checkReview(t, name+" /validate", in, post(admissionHandler(discardLogger, validate(p)), "/validate", body))
		if !out.Response.Allowed {
			for _, part := range []string{allow.String(), "metadata.annotations"} {
				if !strings.Contains(out.Response.Status.Message, part) {
					t.Errorf("%s: denial %q does not name %q", name, out.Response.Status.Message, part)
				}
			}
		}
	}
}

// TestObjectWithoutMetadataIsAnnotated covers a hand-made object with no
// metadata at all: /mutate makes the whole path, /validate denies.
func TestObjectWithoutMetadataIsAnnotated(t *testing.T) {
	p := policyWithDefaults(t)
	body := newReview(t, admissionv1.Create, `{"apiVersion": "example.com/v1", "kind": "Widget"}`, "")
	in := decodeReviewIn(t, body)
	out := checkReview(t, "/mutate", in, post(admissionHandler(discardLogger, mutate(p)), "/mutate", body))
	patched := applyPatch(t, in.Request.Object, decodePatch(t, out.Response.Patch))
	if got := metadataMap(t, patched, "annotations"); got[allow.Key] != allow.Value {
		t.Errorf("patched object has annotations %v, want %s", got, allow)
	}
	out = checkReview(t, "/validate", in, post(admissionHandler(discardLogger, validate(p)), "/validate", body))
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
		h := authorizationHandler(discardLogger, authorize(p))
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

// TestDefaultDenyRules checks that the policy runs with defaultDenyRules,
// and that -deny flags replace them.
func TestDefaultDenyRules(t *testing.T) {
	p, _, err := parsePolicyFlags()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.deny) != len(defaultDenyRules) {
		t.Errorf("with no flags: got %d rules, want defaultDenyRules' %d", len(p.deny), len(defaultDenyRules))
	}
	p, _, err = parsePolicyFlags("-deny", "user=c", "-deny", "user=d")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range p.deny {
		got = append(got, r.String())
	}
	if !reflect.DeepEqual(got, []string{"user=c", "user=d"}) {
		t.Errorf("-deny user=c -deny user=d: got %q, want them in place of the defaults", got)
	}
}
