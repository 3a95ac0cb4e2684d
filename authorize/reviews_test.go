package authorize

// The tests' SubjectAccessReviews: those the apiserver sent, captured in
// testdata/, and newSubjectAccessReview, which makes one as the apiserver
// sends it, for the plumbing's own and for a case no capture has.

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	authorizationv1beta1 "k8s.io/api/authorization/v1beta1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// subjectAccessReviewFixtures returns every SubjectAccessReview in
// testdata/, recorded from a real kube-apiserver (make capture), by name.
func subjectAccessReviewFixtures(t testing.TB) map[string][]byte {
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
		t.Fatal("no reviews in testdata/")
	}
	return out
}

// plumbingUser is the user of every plumbingSubjectAccessReviews review.
const plumbingUser = "plumbing-user"

// plumbingSubjectAccessReviews returns the plumbing tests'
// SubjectAccessReviews, by name, made by newSubjectAccessReview for
// plumbingUser.
func plumbingSubjectAccessReviews(t testing.TB) map[string][]byte {
	t.Helper()
	const (
		user          = "user: " + plumbingUser + "\ngroups: [plumbing-testers, system:authenticated]\n"
		getConfigMap  = user + "resourceAttributes: {namespace: plumbing, verb: get, version: v1, resource: configmaps, name: settings}"
		getVersion    = user + "nonResourceAttributes: {path: /version, verb: get}"
		getScale      = user + "resourceAttributes: {namespace: plumbing, verb: get, group: apps, version: v1, resource: deployments, subresource: scale, name: web}"
		deleteNs      = user + "resourceAttributes: {verb: delete, version: v1, resource: namespaces, name: plumbing}"
		listSelectors = user + "resourceAttributes: {namespace: plumbing, verb: list, version: v1, resource: pods, " +
			"fieldSelector: {requirements: [{key: spec.nodeName, operator: In, values: [node-1]}]}, labelSelector: {requirements: [{key: app, operator: In, values: [web]}]}}"
	)
	return map[string][]byte{
		"v1-get-configmap":        newSubjectAccessReview(t, "v1", getConfigMap),
		"v1beta1-get-configmap":   newSubjectAccessReview(t, "v1beta1", getConfigMap),
		"v1-get-version":          newSubjectAccessReview(t, "v1", getVersion),
		"v1beta1-get-version":     newSubjectAccessReview(t, "v1beta1", getVersion),
		"v1-get-deployment-scale": newSubjectAccessReview(t, "v1", getScale),
		"v1-delete-namespace":     newSubjectAccessReview(t, "v1", deleteNs),
		"v1-list-pods-selectors":  newSubjectAccessReview(t, "v1", listSelectors),
	}
}

// newSubjectAccessReview returns a SubjectAccessReview as the apiserver
// sends it to an authorization webhook, in version "v1" or "v1beta1" of
// authorization.k8s.io, for a request no review in testdata/
// has captured. spec is the review's spec as authorization.k8s.io/v1
// spells it, in YAML or JSON, such as
//
//	user: jane
//	groups: [developers, system:authenticated]
//	resourceAttributes: {namespace: prod-web, verb: create, version: v1, resource: pods, subresource: exec, name: web}
//
// (v1beta1 spells groups "group"; give "groups" for both). An unknown
// field fails the test, so a typo cannot make a review about nothing.
func newSubjectAccessReview(t testing.TB, version, spec string) []byte {
	t.Helper()
	var raw json.RawMessage
	if err := yaml.NewYAMLToJSONDecoder(strings.NewReader(spec)).Decode(&raw); err != nil {
		t.Fatalf("newSubjectAccessReview: the spec is neither YAML nor JSON: %v", err)
	}
	var v1 authorizationv1.SubjectAccessReviewSpec
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.DisallowUnknownFields()
	if err := d.Decode(&v1); err != nil {
		t.Fatalf("newSubjectAccessReview: the spec is not a SubjectAccessReviewSpec of authorization.k8s.io/v1: %v", err)
	}
	// The apiserver sends empty metadata and status.allowed false.
	review := map[string]any{"kind": "SubjectAccessReview", "metadata": map[string]any{}, "status": map[string]any{"allowed": false}}
	switch version {
	case "v1":
		review["apiVersion"], review["spec"] = authorizationv1.SchemeGroupVersion.String(), v1
	case "v1beta1":
		// The two versions' specs differ only in how groups is spelled.
		var beta authorizationv1beta1.SubjectAccessReviewSpec
		if err := json.Unmarshal(renameField(t, raw, "groups", "group"), &beta); err != nil {
			t.Fatal(err)
		}
		review["apiVersion"], review["spec"] = authorizationv1beta1.SchemeGroupVersion.String(), beta
	default:
		t.Fatalf("newSubjectAccessReview: version %q: want v1 or v1beta1", version)
	}
	body, err := json.MarshalIndent(review, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(body, '\n')
}

// renameField returns the JSON object b with its field from named to.
func renameField(t testing.TB, b []byte, from, to string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if v, ok := m[from]; ok {
		m[to] = v
		delete(m, from)
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	newAuthorizationFixture = flag.String("new-authorization-fixture", "", "with TestNewAuthorizationFixture: write a review made by newSubjectAccessReview to testdata/`NAME`.json")
	newAuthorizationSpec    = flag.String("spec", "", "with -new-authorization-fixture: the spec's YAML or JSON `file`, as authorization.k8s.io/v1 spells it")
	newAuthorizationVersion = flag.String("version", "v1", "with -new-authorization-fixture: the `version` of authorization.k8s.io, v1 or v1beta1")
)

// TestNewAuthorizationFixture writes a SubjectAccessReview fixture made by
// hand, when asked (-v shows what it wrote):
//
//	go test -v -run TestNewAuthorizationFixture ./authorize -args -new-authorization-fixture v1-exec-pod -spec exec.yaml
func TestNewAuthorizationFixture(t *testing.T) {
	if *newAuthorizationFixture == "" {
		t.Skip("only with -new-authorization-fixture NAME")
	}
	spec, err := os.ReadFile(*newAuthorizationSpec)
	if err != nil {
		t.Fatal(err)
	}
	body := newSubjectAccessReview(t, *newAuthorizationVersion, string(spec))
	path := filepath.Join("testdata", *newAuthorizationFixture+".json")
	if err := os.WriteFile(path, body, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s; say what it gets in TestAuthorizeSubjectAccessReviews in rules_test.go", path)
}

// TestNewSubjectAccessReviewIsWhatTheAPIServerSends makes each review in
// testdata/ again from its spec: what newSubjectAccessReview
// makes is what the apiserver sent.
func TestNewSubjectAccessReviewIsWhatTheAPIServerSends(t *testing.T) {
	for name, body := range subjectAccessReviewFixtures(t) {
		var captured struct {
			APIVersion string          `json:"apiVersion"`
			Spec       json.RawMessage `json:"spec"`
		}
		if err := json.Unmarshal(body, &captured); err != nil {
			t.Fatal(err)
		}
		gv, err := schema.ParseGroupVersion(captured.APIVersion)
		if err != nil {
			t.Fatal(err)
		}
		spec := string(renameField(t, captured.Spec, "group", "groups"))
		var got, want any
		if err := json.Unmarshal(newSubjectAccessReview(t, gv.Version, spec), &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: made from its spec, got\n%s\nwant\n%s", name, newSubjectAccessReview(t, gv.Version, spec), body)
		}
	}
}
