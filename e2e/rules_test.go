package e2e

// What deploy/webhooks.yaml asks of the objects the tests create, so that
// the apiserver sends them to the webhook whatever the policy's rules say:
// the namespaces the tests make carry labels that satisfy every deployed
// webhook's namespaceSelector, the objects labels that satisfy their
// route's objectSelector (testScope.prepare). It is all derived from the file,
// so a copier's rules need nothing here; a selector no labels can satisfy
// fails the test at once, saying why and what to do.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

// namespaceNameLabel is the label the apiserver gives every namespace, its
// name: a test cannot set it, only choose the name.
const namespaceNameLabel = "kubernetes.io/metadata.name"

// selectorLabels are the labels the tests give what they create.
type selectorLabels struct {
	namespace map[string]string            // every namespace a test makes for the webhooks
	object    map[string]map[string]string // by route, every object created for it
}

// readSelectorLabels derives them from deploy/webhooks.yaml once.
var readSelectorLabels = sync.OnceValues(func() (selectorLabels, error) {
	d, err := readDeployed()
	if err != nil {
		return selectorLabels{}, err
	}
	out := selectorLabels{namespace: map[string]string{}, object: map[string]map[string]string{}}
	for _, route := range []string{mutateRoute, validateRoute} {
		for _, h := range d[route].hooks {
			if err := satisfy(out.namespace, h.namespaceSelector, true); err != nil {
				return selectorLabels{}, unsatisfiable(h, "namespaceSelector", h.namespaceSelector, err)
			}
			if out.object[route] == nil {
				out.object[route] = map[string]string{}
			}
			if err := satisfy(out.object[route], h.objectSelector, false); err != nil {
				return selectorLabels{}, unsatisfiable(h, "objectSelector", h.objectSelector, err)
			}
		}
	}
	// Every webhook's selectors, together: one may want what another
	// refuses.
	for _, route := range []string{mutateRoute, validateRoute} {
		for _, h := range d[route].hooks {
			if !selects(h.namespaceSelector, withName(out.namespace, "e2e-test-namespace")) {
				return selectorLabels{}, unsatisfiable(h, "namespaceSelector", h.namespaceSelector, fmt.Errorf("the labels the other webhooks need (%v) leave it out", out.namespace))
			}
			if !selects(h.objectSelector, out.object[route]) {
				return selectorLabels{}, unsatisfiable(h, "objectSelector", h.objectSelector, fmt.Errorf("the labels the other webhooks of %s need (%v) leave it out", route, out.object[route]))
			}
		}
	}
	return out, nil
})

// testLabels returns the labels the tests give what they create.
func testLabels(t *testing.T) selectorLabels {
	t.Helper()
	l, err := readSelectorLabels()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func unsatisfiable(h deployedWebhook, field string, sel *metav1.LabelSelector, err error) error {
	return fmt.Errorf("deploy/webhooks.yaml: no namespace or object the e2e tests can create is sent to webhook %s: its %s %s cannot be met: %v. The tests make namespaces of their own, with generated names, and label them and their objects as the selectors ask: select by labels (matchLabels, or matchExpressions In, NotIn, Exists, DoesNotExist on a label of yours), not by a namespace's name", h.name, field, describeSelector(sel), err)
}

// satisfy adds to set labels that satisfy sel, or says why none can. For a
// namespace selector, namespaceNameLabel is the namespace's name, which
// the tests choose afresh: a requirement of a particular name cannot be
// met, and one that leaves names out is met by any name the tests choose.
func satisfy(set map[string]string, sel *metav1.LabelSelector, namespace bool) error {
	if sel == nil {
		return nil
	}
	for k, v := range sel.MatchLabels {
		if namespace && k == namespaceNameLabel {
			return fmt.Errorf("it selects the namespace named %q", v)
		}
		if old, ok := set[k]; ok && old != v {
			return fmt.Errorf("label %s must be both %q and %q", k, old, v)
		}
		set[k] = v
	}
	for _, r := range sel.MatchExpressions {
		if namespace && r.Key == namespaceNameLabel {
			switch r.Operator {
			case metav1.LabelSelectorOpIn:
				return fmt.Errorf("it selects namespaces by name (%s In %v)", r.Key, r.Values)
			case metav1.LabelSelectorOpDoesNotExist:
				return fmt.Errorf("every namespace has %s", r.Key)
			}
			continue // NotIn, Exists: any name the tests choose
		}
		old, has := set[r.Key]
		switch r.Operator {
		case metav1.LabelSelectorOpIn:
			if has && !slices.Contains(r.Values, old) {
				return fmt.Errorf("label %s must be %q and one of %v", r.Key, old, r.Values)
			}
			if !has && len(r.Values) > 0 {
				set[r.Key] = r.Values[0]
			}
		case metav1.LabelSelectorOpNotIn:
			if has && slices.Contains(r.Values, old) {
				return fmt.Errorf("label %s must be %q and none of %v", r.Key, old, r.Values)
			}
		case metav1.LabelSelectorOpExists:
			if !has {
				set[r.Key] = "e2e"
			}
		case metav1.LabelSelectorOpDoesNotExist:
			if has {
				return fmt.Errorf("label %s must be %q and absent", r.Key, old)
			}
		}
	}
	return nil
}

// selects reports whether sel, a webhook's selector, selects what carries
// set; nil selects everything, as the apiserver has it.
func selects(sel *metav1.LabelSelector, set map[string]string) bool {
	if sel == nil {
		return true
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(set))
}

// withName is a namespace's labels as the apiserver has them: set and its
// name.
func withName(set map[string]string, name string) map[string]string {
	out := maps.Clone(set)
	if out == nil {
		out = map[string]string{}
	}
	out[namespaceNameLabel] = name
	return out
}

func describeSelector(sel *metav1.LabelSelector) string {
	if sel == nil {
		return "{} (everything)"
	}
	return metav1.FormatLabelSelector(sel)
}

// selectedByDeployed reports whether any deployed webhook's
// namespaceSelector selects a namespace named name with labels set.
func selectedByDeployed(t *testing.T, name string, set map[string]string) bool {
	t.Helper()
	for _, route := range deployedRoutes(t) {
		for _, h := range deployed(t)[route].hooks {
			if selects(h.namespaceSelector, withName(set, name)) {
				return true
			}
		}
	}
	return false
}

// whyNotCalled says why the apiserver may not have sent probe, a request
// of o's scope, to the webhook o registers for route: what its rules, as
// the tests register them, and its selectors ask.
func whyNotCalled(t *testing.T, o hookOptions, route string, probe *preparedRequest) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "the apiserver answered every probe but never sent one to webhook %s. What it was sent: the %s (resource %s)", o.name, probe, probe.resource)
	for _, obj := range []*unstructured.Unstructured{probe.Stored, probe.Object} {
		if obj != nil {
			fmt.Fprintf(&b, ", %s labelled %v", obj.GetKind(), obj.GetLabels())
		}
	}
	if probe.namespaced {
		if n, err := o.scope.api.client.CoreV1().Namespaces().Get(context.Background(), o.scope.namespace, metav1.GetOptions{}); err == nil {
			fmt.Fprintf(&b, ", in namespace %s labelled %v", n.Name, n.Labels)
		}
	}
	spec := o.spec(t, route)
	fmt.Fprintf(&b, ". What the webhook's rules send it: ")
	for i, r := range spec.rules {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%v of %v/%v %v (scope %v)", r.Operations, r.APIGroups, r.APIVersions, r.Resources, scopeOf(r.Scope))
	}
	fmt.Fprintf(&b, "; its namespaceSelector %s, objectSelector %s", describeSelector(spec.namespaceSelector), describeSelector(spec.objectSelector))
	for _, h := range deployed(t)[route].hooks {
		fmt.Fprintf(&b, ". Deployed %s: namespaceSelector %s, objectSelector %s", h.name, describeSelector(h.namespaceSelector), describeSelector(h.objectSelector))
	}
	b.WriteString(". Check that admittedRequest (e2e/demonstration_test.go) gives, for this route, a request of an operation, a resource and a version its rules name")
	return b.String()
}

func scopeOf(s *admissionregistrationv1.ScopeType) string {
	if s == nil {
		return "*"
	}
	return string(*s)
}
