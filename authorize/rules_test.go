package authorize

// The tests of what rules.go decides: the demonstration's authorization
// policy. Replace them with your policy's; authorize_test.go's never read
// it.

import (
	"context"
	"errors"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
)

// parseRules is the policy as the server's flags make it.
func parseRules(args ...string) (policy, error) {
	flags := flag.NewFlagSet("webhook", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	var p policy
	p.addFlags(flags)
	err := flags.Parse(args)
	return p, errors.Join(p.err, err)
}

// resourceReview is the spec of a SubjectAccessReview for a resource, as
// the apiserver sends it.
func resourceReview(user string, groups []string, verb, apiGroup, resource, subresource, namespace, name string) *authorizationv1.SubjectAccessReviewSpec {
	return &authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &authorizationv1.ResourceAttributes{
		Verb: verb, Group: apiGroup, Version: "v1", Resource: resource, Subresource: subresource, Namespace: namespace, Name: name,
	}}
}

// pathReview is the spec of a SubjectAccessReview for a non-resource path.
func pathReview(user string, groups []string, verb, path string) *authorizationv1.SubjectAccessReviewSpec {
	return &authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, NonResourceAttributes: &authorizationv1.NonResourceAttributes{
		Path: path, Verb: verb,
	}}
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
			p, err := parseRules(args...)
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
// testdata/ to the policy as /authorize runs it: with no flags, nothing is
// denied and nothing allowed; a rule denies just what it names.
func TestAuthorizeSubjectAccessReviews(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		wantDenied map[string]string // fixture name → reason
	}{
		{nil, nil},
		{[]string{"-deny", "user=alice,verb=delete,resource=namespaces"}, map[string]string{"v1-delete-namespace": "denied by rule user=alice,verb=delete,resource=namespaces"}},
		{[]string{"-deny", "user=alice,path=/version"}, map[string]string{"v1-get-version": "denied by rule user=alice,path=/version", "v1beta1-get-version": "denied by rule user=alice,path=/version"}},
	} {
		p, err := parseRules(tc.args...)
		if err != nil {
			t.Fatal(err)
		}
		for name, body := range subjectAccessReviewFixtures(t) {
			out, _ := decided(t, name, authorize(p), body)
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
		// Never matched: the apiserver writes these in lowercase.
		{"verb=DELETE", []string{"verb=DELETE", "would never match", "verb=delete"}},
		{"resource=Pods,namespace=prod", []string{"resource=Pods", "resource=pods"}},
	}
	for _, tc := range tests {
		t.Run(tc.rule, func(t *testing.T) {
			_, err := parseRules("-deny", tc.rule)
			if err == nil {
				t.Fatalf("-deny %q: got no error", tc.rule)
			}
			for _, w := range append(tc.want, "-deny") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("-deny %q: got %q, want it to mention %q", tc.rule, err, w)
				}
			}
		})
	}
}

// TestDefaultDenyRules checks that the policy runs with defaultDenyRules,
// and that -deny flags replace them.
func TestDefaultDenyRules(t *testing.T) {
	p, err := parseRules()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.deny) != len(defaultDenyRules) {
		t.Errorf("with no flags: got %d rules, want defaultDenyRules' %d", len(p.deny), len(defaultDenyRules))
	}
	p, err = parseRules("-deny", "user=c", "-deny", "user=d")
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
