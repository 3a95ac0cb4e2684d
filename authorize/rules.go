package authorize

// The authorization policy: /authorize denies what a -deny rule matches,
// naming the rule, and has no opinion on everything else. It never allows,
// so RBAC stays the only way in, and a mistake here can refuse too much
// but never grant anything. Replace it as policy.go's admission policy is
// replaced: this file and rules_test.go.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
)

// defaultDenyRules are the -deny rules /authorize applies unless given
// others: none, so it has no opinion on anything. A rule here, such as
// "group=developers,verb=create,resource=pods,subresource=exec,namespace=prod-*",
// is on in every deployment.
var defaultDenyRules []string

// policy is the authorization policy's configuration.
type policy struct {
	deny []denyRule // the rules by which /authorize denies; else no opinion
	err  error      // a default of defaultDenyRules that does not parse
}

// authorize returns the policy's Func: it denies a request that matches
// any of p.deny, naming the rule, and has no opinion on everything else.
func authorize(p policy) Func {
	return func(_ context.Context, spec *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		for _, r := range p.deny {
			if r.matches(spec) {
				return Denied("denied by rule " + r.String())
			}
		}
		return NoOpinion()
	}
}

// addFlags registers -deny, repeatable: its defaults are defaultDenyRules,
// parsed now, so that one that does not parse stops the server (p.err);
// the first -deny given replaces them all.
func (p *policy) addFlags(flags *flag.FlagSet) {
	p.deny = nil
	for _, d := range defaultDenyRules {
		r, err := parseDenyRule(d)
		if err != nil {
			p.err = errors.Join(p.err, fmt.Errorf("authorize/rules.go: the default %q of -deny does not parse: %w", d, err))
		}
		p.deny = append(p.deny, r)
	}
	given := false
	flags.Func("deny", "`rule` by which /authorize denies, such as user=jane,verb=delete,resource=namespaces; attributes: "+strings.Join(ruleAttributes, ", ")+"; a value ending in * is a prefix (repeatable)", func(s string) error {
		if !given {
			p.deny, given = nil, true
		}
		r, err := parseDenyRule(s)
		if err == nil {
			p.deny = append(p.deny, r)
		}
		return err
	})
}

// The -deny rule language.

// ruleAttributes are the attributes a -deny rule can name: user, group and
// verb are in every review; apiGroup through name only in a request for a
// resource; path only in a request for another path, such as /healthz.
var ruleAttributes = []string{"user", "group", "verb", "apiGroup", "resource", "subresource", "namespace", "name", "path"}

// lowercaseAttributes are those whose values the apiserver only writes in
// lowercase.
var lowercaseAttributes = []string{"verb", "apiGroup", "resource", "subresource", "namespace"}

// resourceAttributes are the ruleAttributes of a request for a resource.
var resourceAttributes = []string{"apiGroup", "resource", "subresource", "namespace", "name"}

// denyRule is one -deny rule: a request matching every pair is denied.
type denyRule []rulePair

// rulePair is attribute=value of a rule. value matches exactly, or, ending
// in "*", as a prefix; "*" alone matches anything, the empty value included.
type rulePair struct {
	attribute, value string
}

// MarshalText writes the rule as -deny takes it, for the JSON log.
func (r denyRule) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

func (r denyRule) String() string {
	s := make([]string, len(r))
	for i, p := range r {
		s[i] = p.attribute + "=" + p.value
	}
	return strings.Join(s, ",")
}

// matches reports whether the review matches every pair of r: a rule
// naming a resource's attributes never matches a request for a path, nor
// one naming a path a request for a resource.
func (r denyRule) matches(spec *authorizationv1.SubjectAccessReviewSpec) bool {
	ra, nra := spec.ResourceAttributes, spec.NonResourceAttributes
	for _, p := range r {
		var ok bool
		switch p.attribute {
		case "user":
			ok = p.match(spec.User)
		case "group":
			ok = slices.ContainsFunc(spec.Groups, p.match)
		case "verb":
			ok = (ra != nil && p.match(ra.Verb)) || (nra != nil && p.match(nra.Verb))
		case "apiGroup":
			ok = ra != nil && p.match(ra.Group)
		case "resource":
			ok = ra != nil && p.match(ra.Resource)
		case "subresource":
			ok = ra != nil && p.match(ra.Subresource)
		case "namespace":
			ok = ra != nil && p.match(ra.Namespace)
		case "name":
			ok = ra != nil && p.match(ra.Name)
		case "path":
			ok = nra != nil && p.match(nra.Path)
		}
		if !ok {
			return false
		}
	}
	return true
}

func (p rulePair) match(s string) bool {
	if prefix, ok := strings.CutSuffix(p.value, "*"); ok {
		return strings.HasPrefix(s, prefix)
	}
	return s == p.value
}

// parseDenyRule parses attribute=value,…, so that a typo stops the server
// at start-up instead of silently denying nothing.
func parseDenyRule(s string) (denyRule, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("the rule is empty: want attribute=value,…, such as user=jane,verb=delete,resource=namespaces")
	}
	var r denyRule
	var resource, path bool
	for _, pair := range strings.Split(s, ",") {
		attribute, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return nil, fmt.Errorf("%q is not attribute=value; attributes are %s", pair, strings.Join(ruleAttributes, ", "))
		}
		if !slices.Contains(ruleAttributes, attribute) {
			return nil, fmt.Errorf("unknown attribute %q; attributes are %s", attribute, strings.Join(ruleAttributes, ", "))
		}
		if slices.ContainsFunc(r, func(p rulePair) bool { return p.attribute == attribute }) {
			return nil, fmt.Errorf("attribute %s is given twice", attribute)
		}
		if i := strings.Index(value, "*"); i >= 0 && i != len(value)-1 {
			return nil, fmt.Errorf("%s=%s: * may only end a value, as a prefix", attribute, value)
		}
		if slices.Contains(lowercaseAttributes, attribute) && value != strings.ToLower(value) {
			return nil, fmt.Errorf("%s=%s: the apiserver's verbs, API groups, resources and namespaces are lowercase, so this would never match; write %s=%s", attribute, value, attribute, strings.ToLower(value))
		}
		if attribute == "resource" && strings.Contains(value, "/") {
			return nil, fmt.Errorf("resource=%s: name a subresource with subresource=, such as resource=deployments,subresource=scale", value)
		}
		resource = resource || slices.Contains(resourceAttributes, attribute)
		path = path || attribute == "path"
		r = append(r, rulePair{attribute: attribute, value: value})
	}
	if resource && path {
		return nil, fmt.Errorf("the rule names both path and a resource's attributes (%s), which no request has together", strings.Join(resourceAttributes, ", "))
	}
	return r, nil
}
