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
//     oldObject); newSubresourceReview does the same for a subresource
//     (deployments/scale, pods/exec, …); reviewAs(t, body, user,
//     groups...) sends one as another user.
//     post(admissionHandler(discardLogger, validate(p)), "/validate",
//     body) answers it, checkReview reads the answer as the apiserver
//     does and returns it as a reviewIn, whose Response has the JSON's
//     names (Status, where an AdmissionResponse from calling validate(p)
//     directly has Result), policyWithDefaults(t) is the policy run with
//     no flags, and
//     policyReading(t, objects...) one whose views of the cluster hold
//     objects (cluster/).
//   - parsePolicyFlags and checkFlagError read the policy's flags.

import (
	"context"
	"io"
	"reflect"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
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
