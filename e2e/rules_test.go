package e2e

// What deploy/webhooks.yaml asks of the objects the tests create, so that
// the apiserver sends them to the webhook whatever the policy's rules say:
// the namespaces the tests make carry labels that satisfy every deployed
// webhook's namespaceSelector, the objects labels that satisfy their
// route's objectSelector, and an object is created, or created then
// updated, as the rules' operations say. It is all derived from the file,
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
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

// labelFor gives obj the labels route's objectSelectors ask for.
func labelFor(t *testing.T, obj *unstructured.Unstructured, route string) *unstructured.Unstructured {
	t.Helper()
	want := testLabels(t).object[route]
	if len(want) == 0 {
		return obj
	}
	set := obj.GetLabels()
	if set == nil {
		set = map[string]string{}
	}
	maps.Copy(set, want)
	obj.SetLabels(set)
	return obj
}

// admittedFor is admittedObject, labelled for route's objectSelector.
func admittedFor(t *testing.T, route, name string, padding int) (*unstructured.Unstructured, schema.GroupVersionResource) {
	t.Helper()
	obj, resource := admittedObject(route, name, padding)
	return labelFor(t, obj, route), resource
}

// admitOperation is the operation by which the tests send route's admitted
// object to the webhook: CREATE when the route's rules name it, else
// UPDATE. A route whose rules name neither cannot be driven by them.
func admitOperation(t *testing.T, route string) admissionregistrationv1.OperationType {
	t.Helper()
	var named []string
	for _, r := range deployed(t)[route].rules {
		for _, op := range r.Operations {
			named = append(named, string(op))
		}
	}
	switch {
	case slices.Contains(named, "*") || slices.Contains(named, string(admissionregistrationv1.Create)):
		return admissionregistrationv1.Create
	case slices.Contains(named, string(admissionregistrationv1.Update)):
		return admissionregistrationv1.Update
	}
	t.Fatalf("deploy/webhooks.yaml: the rules of %s name operations %v: the e2e tests send the webhook objects they create or update, so its rules must name CREATE or UPDATE", route, named)
	return ""
}

// createOrUpdate sends obj through the webhook at route as its rules ask:
// a create, or for a route that acts only on UPDATE, a create (which the
// webhook is not sent) then an update of a label. With dryRun the
// apiserver admits the create, or the update, and stores nothing of it.
func createOrUpdate(ctx context.Context, t *testing.T, api *apiServer, ns, route string, obj *unstructured.Unstructured, resource schema.GroupVersionResource, dryRun bool) error {
	t.Helper()
	opts := metav1.CreateOptions{}
	objects := api.dynamic.Resource(resource).Namespace(ns)
	if admitOperation(t, route) == admissionregistrationv1.Create {
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err := objects.Create(ctx, obj, opts)
		return err
	}
	stored, err := objects.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		if stored, err = objects.Create(ctx, obj, opts); err != nil {
			return fmt.Errorf("creating %s before updating it: %w", obj.GetName(), err)
		}
	}
	set := stored.GetLabels()
	if set == nil {
		set = map[string]string{}
	}
	set["e2e.webhook.example.com/updated"] = fmt.Sprint(time.Now().UnixNano())
	stored.SetLabels(set)
	update := metav1.UpdateOptions{}
	if dryRun {
		update.DryRun = []string{metav1.DryRunAll}
	}
	_, err = objects.Update(ctx, stored, update)
	return err
}

// whyNotCalled says why the apiserver may not have sent probe, created in
// ns with labels nsLabels, to the webhook registered as hook for route:
// what its rules, as the tests register them, and its selectors ask.
func whyNotCalled(t *testing.T, api *apiServer, hook, route, ns string, probe *unstructured.Unstructured, resource schema.GroupVersionResource, rules []admissionregistrationv1.RuleWithOperations) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "the apiserver answered every probe but never sent one to webhook %s. What it was sent: %s %s/%s (resource %s), by %s, labelled %v, in namespace %s",
		hook, probe.GetKind(), ns, probe.GetName(), resource, admitOperation(t, route), probe.GetLabels(), ns)
	if n, err := api.client.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{}); err == nil {
		fmt.Fprintf(&b, " labelled %v", n.Labels)
	}
	fmt.Fprintf(&b, ". What the webhook's rules send it: ")
	for i, r := range rules {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%v of %v/%v %v (scope %v)", r.Operations, r.APIGroups, r.APIVersions, r.Resources, scopeOf(r.Scope))
	}
	for _, h := range deployed(t)[route].hooks {
		fmt.Fprintf(&b, ". Deployed %s: namespaceSelector %s, objectSelector %s", h.name, describeSelector(h.namespaceSelector), describeSelector(h.objectSelector))
	}
	b.WriteString(". Check that admittedObject (e2e/demonstration_test.go) returns, for this route, an object of a resource and version its rules name")
	return b.String()
}

func scopeOf(s *admissionregistrationv1.ScopeType) string {
	if s == nil {
		return "*"
	}
	return string(*s)
}
