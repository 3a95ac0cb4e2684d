package e2e

// Requests and scopes: how the e2e tests drive the webhook whatever the
// policy decides. The policy's e2e file, demonstration_test.go, says which
// request reaches each deployed webhook and is admitted (admittedRequest),
// and which one /validate denies (deniedRequest): any operation, on any
// kind, namespaced or cluster-scoped, a subresource included, with what
// must be stored first. Every other test sends only those, through a
// testScope, and registers its webhooks scoped to it, so that the tests
// pass unchanged once that file agrees with policy.go.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// request is one call of the apiserver's API that admission sends to a
// webhook: an operation on an object, with what must be stored before it.
// Make one with createRequest, updateRequest, deleteRequest or
// subresourceRequest; as and after add a user and more to store first.
type request struct {
	// Operation is the admission operation: CREATE, UPDATE, DELETE or
	// CONNECT. A PATCH is admitted as an UPDATE.
	Operation admissionregistrationv1.OperationType
	// Object is what the request sends: the object created, the new
	// version of Stored, or, with Subresource, the subresource's body
	// (an autoscaling/v1 Scale, a policy/v1 Eviction, the whole object
	// for "status"). Nil for a DELETE.
	Object *unstructured.Unstructured
	// Stored is stored before the request, which acts on it: the object
	// an UPDATE changes, a DELETE deletes, or whose subresource is
	// written. Nil for a CREATE of a whole object.
	Stored *unstructured.Unstructured
	// Subresource is the subresource written, such as "scale", "status"
	// or "eviction", or connected to, such as "exec"; "" for the object
	// itself.
	Subresource string
	// Options are a CONNECT's query, such as command=ls: the webhook is
	// sent them as the subresource's options (a PodExecOptions).
	Options url.Values
	// Before are stored first, in order: what else the request needs,
	// such as a ConfigMap a Pod mounts, or a CRD and its custom
	// resources. An object of a namespaced kind that names a namespace is
	// stored there (the suite makes the namespace when it does not
	// exist, and keeps it for the run); one that names none goes in the
	// test's namespace. One that already exists is kept.
	Before []*unstructured.Unstructured
	// User, with Groups, sends the request as another user, impersonated
	// from the suite's admin and allowed everything by RBAC. "" is the
	// admin itself: user "admin" in group system:masters.
	User   string
	Groups []string
}

// createRequest creates obj: a typed object of k8s.io/api, such as
// *appsv1.Deployment, or an *unstructured.Unstructured with apiVersion
// and kind.
func createRequest(obj runtime.Object) request {
	return request{Operation: admissionregistrationv1.Create, Object: toUnstructured(obj)}
}

// updateRequest stores stored, then updates it to changed, which has the
// same kind and name.
func updateRequest(stored, changed runtime.Object) request {
	return request{Operation: admissionregistrationv1.Update, Stored: toUnstructured(stored), Object: toUnstructured(changed)}
}

// deleteRequest stores stored, then deletes it.
func deleteRequest(stored runtime.Object) request {
	return request{Operation: admissionregistrationv1.Delete, Stored: toUnstructured(stored)}
}

// subresourceRequest stores stored, then writes its subresource with body
// by operation: UPDATE for "scale" or "status", CREATE for "eviction".
func subresourceRequest(operation admissionregistrationv1.OperationType, stored runtime.Object, subresource string, body runtime.Object) request {
	return request{Operation: operation, Stored: toUnstructured(stored), Subresource: subresource, Object: toUnstructured(body)}
}

// connectRequest stores stored, a Pod, then connects to its subresource
// ("exec", "attach" or "portforward") with options, such as command=ls:
// a CONNECT, which admission reviews before the apiserver looks for the
// Pod's node (k8s.io/apiserver v0.37.2, handlers.ConnectResource). The
// suite runs no kubelet, so an admitted CONNECT then fails with "pod …
// does not have a host assigned", which send reports as admitted.
func connectRequest(stored runtime.Object, subresource string, options url.Values) request {
	return request{Operation: admissionregistrationv1.Connect, Stored: toUnstructured(stored), Subresource: subresource, Options: options}
}

// as is r sent by user in groups.
func (r request) as(user string, groups ...string) request {
	r.User, r.Groups = user, groups
	return r
}

// after is r with objs stored before it, after those it had.
func (r request) after(objs ...runtime.Object) request {
	r.Before = slices.Clone(r.Before)
	for _, o := range objs {
		r.Before = append(r.Before, toUnstructured(o))
	}
	return r
}

// none reports whether r is the zero request: deniedRequest's, for a
// policy that denies nothing.
func (r request) none() bool { return r.Operation == "" }

// toUnstructured converts a typed object of client-go's scheme, with its
// apiVersion and kind; an *unstructured.Unstructured is copied.
func toUnstructured(obj runtime.Object) *unstructured.Unstructured {
	if obj == nil {
		return nil
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.DeepCopy()
	}
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		panic(fmt.Sprintf("e2e: a %T is not a kind of client-go's scheme: %v; give an *unstructured.Unstructured with apiVersion and kind", obj, err))
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		panic(fmt.Sprintf("e2e: converting a %T: %v", obj, err)) // a typed object always converts
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvks[0])
	return u
}

// scopeLabel marks what a testScope stores and sends; its value is the
// scope's id. The webhooks a test registers select it (hookOptions).
const scopeLabel = "e2e.webhook.example.com/scope"

// scopeIDs numbers the scopes of a run, so that names are unique in it.
var scopeIDs atomic.Int64

// testScope is where one test sends its requests: a namespace of its own,
// for namespaced kinds, and a label, scopeLabel, with a value of its own,
// on that namespace and on everything its requests store or send. A
// webhook registered for the scope (hookOptions.scope) selects that
// label, so that, of all the tests sharing an apiserver, it is sent only
// this one's requests, of whatever kind and scope. The names it gives end
// in the id, so that cluster-scoped ones are unique too.
type testScope struct {
	t         *testing.T
	api       *apiServer
	namespace string // where namespaced objects go
	id        string // scopeLabel's value

	mu      sync.Mutex
	created []stored // cluster-scoped objects it stored, deleted when the test ends
}

// stored names an object a scope stored.
type stored struct {
	resource        schema.GroupVersionResource
	namespace, name string
}

// newScope makes a scope on the suite's apiserver, its namespace named
// after name; see newScopeIn.
func newScope(t *testing.T, name string) *testScope {
	t.Helper()
	return newScopeIn(t, apiserver, name)
}

// newScopeIn makes a scope on api: its namespace, named name, labelled as
// every deployed webhook's namespaceSelector asks and with scopeLabel,
// with the "default" ServiceAccount Pods need. When the test ends, the
// cluster-scoped objects the scope stored are deleted, after the webhooks
// the test registered later are gone, and the namespace with them.
func newScopeIn(t *testing.T, api *apiServer, name string) *testScope {
	t.Helper()
	for _, route := range deployedRoutes(t) {
		admittedShape(t, route) // a route the tests cannot drive fails here, at once
	}
	s := &testScope{t: t, api: api, id: fmt.Sprintf("t%d", scopeIDs.Add(1))}
	// Registered before any webhook of the test's, so it runs after them.
	t.Cleanup(s.deleteCreated)
	set := maps.Clone(testLabels(t).namespace)
	if set == nil {
		set = map[string]string{}
	}
	set[scopeLabel] = s.id
	s.namespace = createLabelledNamespaceIn(t, api, name, set)
	return s
}

// scopeOfNamespace is a scope whose namespace is ns, which exists and is
// left as it is: kube-system, say.
func scopeOfNamespace(t *testing.T, api *apiServer, ns string) *testScope {
	t.Helper()
	s := &testScope{t: t, api: api, namespace: ns, id: fmt.Sprintf("t%d", scopeIDs.Add(1))}
	t.Cleanup(s.deleteCreated)
	return s
}

// name is base made unique in the run: base-<id>.
func (s *testScope) name(base string) string { return base + "-" + s.id }

// admitted is the policy's admitted request for route (admittedRequest)
// named after base, with padding, as the scope sends it (prepare).
func (s *testScope) admitted(route, base string, padding int) *preparedRequest {
	s.t.Helper()
	return s.prepare(admittedRequest(route, s.name(base), padding), route)
}

// denied is the policy's denied request (deniedRequest) named after base,
// as the scope sends it, and the part of its denial's message the policy
// promises; nil when the policy denies nothing.
func (s *testScope) denied(base string) (*preparedRequest, string) {
	s.t.Helper()
	r, message := deniedRequest(s.namespace, s.name(base))
	if r.none() {
		return nil, ""
	}
	return s.prepare(r, validateRoute), message
}

// preparedRequest is a request as a scope sends it: copied, each object in
// the scope's namespace when its kind is namespaced, and labelled.
type preparedRequest struct {
	request
	resource   schema.GroupVersionResource // of Stored, or else Object
	namespaced bool
	scope      *testScope
	// warnings, when set, is sent the warnings the apiserver answers the
	// request itself with, as kubectl prints them.
	warnings rest.WarningHandler
	// firstStored is set once Before and Stored are (storeFirst), and
	// settled is when what it stored is in every view (viewSettle).
	firstStored bool
	settled     time.Time
}

// prepare copies r for route's webhooks: each object of a namespaced kind
// goes in the scope's namespace, and each object the request stores or
// sends whole carries scopeLabel, the labels route's deployed
// objectSelectors ask for and, for a Namespace, those the deployed
// namespaceSelectors ask for.
func (s *testScope) prepare(r request, route string) *preparedRequest {
	s.t.Helper()
	if r.none() {
		s.t.Fatal("e2e/demonstration_test.go gave no request: admittedRequest must give one for each route deploy/webhooks.yaml registers")
	}
	if !slices.Contains([]admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete, admissionregistrationv1.Connect}, r.Operation) {
		s.t.Fatalf("e2e/demonstration_test.go: a request's operation is %q: the e2e tests send CREATE, UPDATE, DELETE or CONNECT", r.Operation)
	}
	if r.Operation == admissionregistrationv1.Connect && (r.Stored == nil || r.Subresource == "") {
		s.t.Fatal("e2e/demonstration_test.go: a CONNECT needs the object it connects to, stored, and a subresource: use connectRequest")
	}
	p := &preparedRequest{request: r, scope: s}
	p.Before = make([]*unstructured.Unstructured, len(r.Before))
	for i, b := range r.Before {
		p.Before[i] = s.placeFirst(b.DeepCopy(), route, r.Before)
	}
	target := r.Stored
	if target == nil {
		target = r.Object
	}
	if target == nil {
		s.t.Fatalf("e2e/demonstration_test.go: a %s request has neither Object nor Stored", r.Operation)
	}
	mapping := s.mappingOf(target.GroupVersionKind(), r.Before)
	p.resource, p.namespaced = mapping.Resource, mapping.Scope.Name() == meta.RESTScopeNameNamespace
	if r.Stored != nil {
		p.Stored = s.place(r.Stored.DeepCopy(), route, true, r.Before...)
	}
	if r.Object != nil {
		// A subresource's body of another kind (a Scale) carries no
		// labels the apiserver reads; "status" is the object itself.
		p.Object = r.Object.DeepCopy()
		switch {
		case r.Subresource == "" || r.Object.GroupVersionKind() == target.GroupVersionKind():
			p.Object = s.place(p.Object, route, true, r.Before...)
		case p.namespaced: // a body of its own kind, in its object's namespace
			p.Object.SetNamespace(s.namespace)
		}
	}
	return p
}

// placeFirst places obj, stored before a request, as place does, but that
// an object of a namespaced kind that names its namespace stays there.
func (s *testScope) placeFirst(obj *unstructured.Unstructured, route string, before []*unstructured.Unstructured) *unstructured.Unstructured {
	s.t.Helper()
	ns := obj.GetNamespace()
	obj = s.place(obj, route, true, before...)
	if ns != "" && obj.GetNamespace() != "" {
		obj.SetNamespace(ns)
	}
	return obj
}

// place puts obj in the scope's namespace when its kind is namespaced and,
// when label, labels it for route. A kind a CRD among before defines is
// known by that CRD, as the request stores it first.
func (s *testScope) place(obj *unstructured.Unstructured, route string, label bool, before ...*unstructured.Unstructured) *unstructured.Unstructured {
	s.t.Helper()
	mapping := s.mappingOf(obj.GroupVersionKind(), before)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		obj.SetNamespace(s.namespace)
	}
	if !label {
		return obj
	}
	set := obj.GetLabels()
	if set == nil {
		set = map[string]string{}
	}
	maps.Copy(set, testLabels(s.t).object[route])
	if mapping.Resource.GroupResource() == (schema.GroupResource{Resource: "namespaces"}) {
		maps.Copy(set, testLabels(s.t).namespace)
	}
	set[scopeLabel] = s.id
	obj.SetLabels(set)
	return obj
}

// mappingOf returns the resource of gvk: from a CRD among before, which
// defines it and is stored first (discovery serves the kind only once it
// is stored), or else from the apiserver's discovery.
func (s *testScope) mappingOf(gvk schema.GroupVersionKind, before []*unstructured.Unstructured) *meta.RESTMapping {
	s.t.Helper()
	for _, b := range before {
		if b.GetKind() != "CustomResourceDefinition" {
			continue
		}
		group, _, _ := unstructured.NestedString(b.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(b.Object, "spec", "names", "kind")
		plural, _, _ := unstructured.NestedString(b.Object, "spec", "names", "plural")
		scope, _, _ := unstructured.NestedString(b.Object, "spec", "scope")
		if group == gvk.Group && kind == gvk.Kind {
			m := &meta.RESTMapping{Resource: gvk.GroupVersion().WithResource(plural), GroupVersionKind: gvk, Scope: meta.RESTScopeRoot}
			if scope == "Namespaced" {
				m.Scope = meta.RESTScopeNamespace
			}
			return m
		}
	}
	return s.api.mapping(s.t, gvk)
}

// name is the name of the object the request acts on, as the webhook logs
// it after the namespace; namespace is its namespace, "" when
// cluster-scoped.
func (p *preparedRequest) name() string {
	if p.Stored != nil {
		return p.Stored.GetName()
	}
	return p.Object.GetName()
}

func (p *preparedRequest) namespace() string {
	if p.namespaced {
		return p.scope.namespace
	}
	return ""
}

// kind is the kind of the object the webhook is sent: the subresource's
// body, or the resource's object.
func (p *preparedRequest) kind() string {
	if p.Object != nil {
		return p.Object.GetKind()
	}
	return p.Stored.GetKind()
}

// String describes the request for a message: "DELETE of Namespace
// guarded-t3", "UPDATE of deployments/scale of Deployment ns/web-t4".
func (p *preparedRequest) String() string {
	target := p.Stored
	if target == nil {
		target = p.Object
	}
	what := target.GetKind() + " " + qualified(p.namespace(), p.name())
	if p.Subresource != "" {
		what = p.resource.Resource + "/" + p.Subresource + " of " + what
	}
	if p.User != "" {
		what += fmt.Sprintf(" as %s %v", p.User, p.Groups)
	}
	return fmt.Sprintf("%s of %s", p.Operation, what)
}

func qualified(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// send sends p: it stores Before and Stored, then makes the request. With
// dryRun the request itself is a server-side dry run, which admission
// calls the webhooks for and which stores nothing; what it needs is
// stored for real. It returns the request's error; one storing what comes
// first says so.
func (p *preparedRequest) send(ctx context.Context, dryRun bool) error {
	s := p.scope
	if err := p.storeFirst(ctx); err != nil {
		return err
	}
	time.Sleep(time.Until(p.settled))
	client := p.clientAs(s.api.dynamicAs(s.t, p.User, p.Groups, p.warnings))
	var dry []string
	if dryRun {
		dry = []string{metav1.DryRunAll}
	}
	var sub []string
	if p.Subresource != "" {
		sub = []string{p.Subresource}
	}
	switch p.Operation {
	case admissionregistrationv1.Connect:
		return p.connect(ctx)
	case admissionregistrationv1.Create:
		if p.Subresource != "" {
			_, err := client.Create(ctx, p.Object, metav1.CreateOptions{DryRun: dry}, append([]string{p.name()}, sub...)...)
			return err
		}
		_, err := client.Create(ctx, p.Object, metav1.CreateOptions{DryRun: dry})
		if err == nil && !dryRun {
			s.remember(p.resource, p.namespace(), p.Object.GetName())
		}
		return err
	case admissionregistrationv1.Update:
		obj := p.Object.DeepCopy()
		if obj.GetResourceVersion() == "" && obj.GroupVersionKind() == p.Stored.GroupVersionKind() {
			// An update of what is stored now, as kubectl edit sends it.
			current, err := client.Get(ctx, p.name(), metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("reading %s before updating it: %w", p.name(), err)
			}
			obj.SetResourceVersion(current.GetResourceVersion())
		}
		_, err := client.Update(ctx, obj, metav1.UpdateOptions{DryRun: dry}, sub...)
		return err
	default: // DELETE, prepare has checked
		return client.Delete(ctx, p.name(), metav1.DeleteOptions{DryRun: dry}, sub...)
	}
}

// connect sends p, a CONNECT, as a POST of its subresource with its
// options, as kubectl exec begins, without the upgrade to a stream: a
// stream would need the kubelet. The apiserver reviews it, then looks for
// the Pod's node; "does not have a host assigned" is the apiserver's
// answer to an admitted CONNECT here.
func (p *preparedRequest) connect(ctx context.Context) error {
	cfg := rest.CopyConfig(p.scope.api.config)
	if p.User != "" {
		p.scope.api.dynamicAs(p.scope.t, p.User, p.Groups, nil) // binds the user, as for any request
		cfg.Impersonate = rest.ImpersonationConfig{UserName: p.User, Groups: p.Groups}
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	path := "/api/" + p.resource.Version
	if p.resource.Group != "" {
		path = "/apis/" + p.resource.Group + "/" + p.resource.Version
	}
	if p.namespaced {
		path += "/namespaces/" + p.scope.namespace
	}
	target := cfg.Host + path + "/" + p.resource.Resource + "/" + p.name() + "/" + p.Subresource + "?" + p.Options.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode < 300 {
		return nil
	}
	var status metav1.Status
	if json.Unmarshal(body, &status) != nil || status.Kind != "Status" {
		return fmt.Errorf("the %s: HTTP %d: %s", p, resp.StatusCode, body)
	}
	if strings.Contains(status.Message, "does not have a host assigned") {
		return nil // admitted; no kubelet to connect to
	}
	return apierrors.FromObject(&status)
}

// client is the admin's client of the resource p acts on, in the scope's
// namespace when it is namespaced.
func (p *preparedRequest) client() dynamic.ResourceInterface {
	return p.clientAs(p.scope.api.dynamic)
}

func (p *preparedRequest) clientAs(c dynamic.Interface) dynamic.ResourceInterface {
	if p.namespaced {
		return c.Resource(p.resource).Namespace(p.scope.namespace)
	}
	return c.Resource(p.resource)
}

// storeFirst stores what p acts on, Before and Stored, unless it has: a
// test that times the request itself stores them first.
func (p *preparedRequest) storeFirst(ctx context.Context) error {
	if p.firstStored {
		return nil
	}
	for _, b := range p.Before {
		if err := p.scope.store(ctx, b, true); err != nil {
			return fmt.Errorf("storing %s %s before the %s: %w", b.GetKind(), b.GetName(), p, err)
		}
	}
	if len(p.Before) > 0 {
		p.settled = time.Now().Add(viewSettle)
	}
	if p.Stored != nil {
		if err := p.scope.store(ctx, p.Stored, false); err != nil {
			return fmt.Errorf("storing %s %s before the %s: %w", p.Stored.GetKind(), p.Stored.GetName(), p, err)
		}
	}
	p.firstStored = true
	return nil
}

// viewSettle is how long a request waits after what it needs is stored. A
// policy's view of the cluster sees a stored object milliseconds later
// (bench/README.md: 0.74 ms median, 2.9 ms at most, loaded), and list and
// indexed do not ask the apiserver on a miss: a request is sent a moment
// after what it needs, as in a cluster, not a microsecond.
const viewSettle = 200 * time.Millisecond

// store creates obj as the admin, in a namespace of another test's or
// none it first makes. An object of before that already exists is kept,
// as it may serve every request of a test (a CRD).
func (s *testScope) store(ctx context.Context, obj *unstructured.Unstructured, before bool) error {
	mapping := s.api.mapping(s.t, obj.GroupVersionKind())
	namespaced := mapping.Scope.Name() == meta.RESTScopeNameNamespace
	var client dynamic.ResourceInterface = s.api.dynamic.Resource(mapping.Resource)
	if namespaced {
		client = s.api.dynamic.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		if obj.GetNamespace() != s.namespace {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: obj.GetNamespace()}}
			if _, err := s.api.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("making namespace %s: %w", ns.Name, err)
			}
		}
	}
	_, err := client.Create(ctx, obj, metav1.CreateOptions{})
	existed := before && apierrors.IsAlreadyExists(err)
	if err != nil && !existed {
		return err
	}
	if obj.GetKind() == "CustomResourceDefinition" { // it stays for the run, as createWidgetCRD's does
		// What comes next may be of its kind: wait until it is served.
		group, _, _ := unstructured.NestedString(obj.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(obj.Object, "spec", "names", "kind")
		versions, _, _ := unstructured.NestedSlice(obj.Object, "spec", "versions")
		for _, v := range versions {
			if name, _, _ := unstructured.NestedString(v.(map[string]any), "name"); name != "" {
				s.api.mapping(s.t, schema.GroupVersionKind{Group: group, Version: name, Kind: kind})
				break
			}
		}
		return nil
	}
	if !existed {
		s.remember(mapping.Resource, obj.GetNamespace(), obj.GetName())
	}
	return nil
}

// remember keeps an object the scope stored, to delete it when the test
// ends: of a kind of cluster scope, or in a namespace not the scope's; one
// in the scope's namespace goes with it.
func (s *testScope) remember(resource schema.GroupVersionResource, namespace, name string) {
	if namespace != "" && namespace == s.namespace {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.created = append(s.created, stored{resource, namespace, name})
}

// deleteCreated deletes the objects the scope remembered.
func (s *testScope) deleteCreated() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.created {
		_ = s.api.dynamic.Resource(c.resource).Namespace(c.namespace).Delete(context.Background(), c.name, metav1.DeleteOptions{})
	}
}

// requestShape is what decides whether two routes' admitted requests are
// one: the operation, kind and subresource.
type requestShape struct {
	operation   admissionregistrationv1.OperationType
	gvk         schema.GroupVersionKind
	subresource string
}

// admittedShape is the shape of route's admitted request. It fails the
// test at once, saying why, for a route that has none.
func admittedShape(t *testing.T, route string) requestShape {
	t.Helper()
	r := admittedRequest(route, "shape", 0)
	target := r.Stored
	if target == nil {
		target = r.Object
	}
	if r.none() || target == nil {
		t.Fatalf("e2e/demonstration_test.go: admittedRequest(%q, …) gives no request, but deploy/webhooks.yaml registers %s: give the request that reaches it and that the policy admits", route, route)
	}
	return requestShape{r.Operation, target.GroupVersionKind(), r.Subresource}
}

// mapping returns the resource of gvk on a, from its discovery, which is
// read again (for a CRD just made) until it is served.
func (a *apiServer) mapping(t *testing.T, gvk schema.GroupVersionKind) *meta.RESTMapping {
	t.Helper()
	a.mapperOnce.Do(func() {
		a.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(a.client.Discovery()))
	})
	deadline := time.Now().Add(startTimeout)
	for {
		m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			return m
		}
		if !meta.IsNoMatchError(err) || time.Now().After(deadline) {
			t.Fatalf("the apiserver serves no %s: %v", gvk, err)
		}
		a.mapper.Reset()
		time.Sleep(200 * time.Millisecond)
	}
}

// dynamicAs returns a's dynamic client for user in groups, impersonated
// from the admin and bound to cluster-admin, or the admin's for "", whose
// warnings go to warnings unless it is nil.
func (a *apiServer) dynamicAs(t *testing.T, user string, groups []string, warnings rest.WarningHandler) dynamic.Interface {
	t.Helper()
	if user == "" && warnings == nil {
		return a.dynamic
	}
	key := user + "\x00" + strings.Join(groups, "\x00")
	a.usersMu.Lock()
	defer a.usersMu.Unlock()
	if c, ok := a.users[key]; ok && warnings == nil {
		return c
	}
	cfg := rest.CopyConfig(a.config)
	cfg.WarningHandler = warnings
	if user == "" {
		return dynamic.NewForConfigOrDie(cfg)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-impersonated-" + strings.ToLower(strings.NewReplacer(":", "-", "@", "-").Replace(user))},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := a.client.RbacV1().ClusterRoleBindings().Create(context.Background(), binding, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		t.Fatalf("allowing %s everything, to send requests as them: %v", user, err)
	}
	// API Priority and Fairness puts a user outside system:masters in a
	// priority level with a few seats: a burst of their requests would
	// queue in the apiserver, never reaching the webhook at once. The
	// suite's admin is exempt, and so is a user it sends requests as.
	exempt := &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: binding.Name},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: flowcontrolv1.PriorityLevelConfigurationNameExempt},
			MatchingPrecedence:         2, // before every default but exempt's own (1)
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects:         []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: user}}},
				ResourceRules:    []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, ClusterScope: true, Namespaces: []string{"*"}}},
				NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
			}},
		},
	}
	if _, err := a.client.FlowcontrolV1().FlowSchemas().Create(context.Background(), exempt, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		t.Fatalf("exempting %s from API Priority and Fairness, as the admin is: %v", user, err)
	}
	// RBAC sees a new binding through an informer, a moment later: until
	// then the user's request would be refused before admission.
	everything := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups, ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "*", Group: "*", Resource: "*"}}}
	for deadline := time.Now().Add(startTimeout); ; time.Sleep(100 * time.Millisecond) {
		review, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), everything, metav1.CreateOptions{})
		if err == nil && review.Status.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("RBAC did not let %s do everything within %s of binding them to cluster-admin: %v", user, startTimeout, err)
		}
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if warnings == nil {
		if a.users == nil {
			a.users = map[string]dynamic.Interface{}
		}
		a.users[key] = c
	}
	return c
}

// TestRequests drives the request machinery with requests of every shape
// a policy may decide, to a recorder of reviews that admits everything, so
// that no policy decides the outcome: a namespaced CREATE, an UPDATE, a
// DELETE of a Namespace and of a ClusterRole (cluster-scoped), a
// subresource's UPDATE, a CONNECT of pods/exec, a request as another user,
// a create with what it needs stored before it, and a create of a custom
// resource after its CRD (which this apiserver never served before) and a
// ConfigMap in a namespace of its own. Each reaches the webhook registered
// for its scope as the apiserver sends it, and none reaches the same
// webhook registered for another scope: scoping holds for every kind.
func TestRequests(t *testing.T) {
	ctx := context.Background()
	mine, other := newScope(t, "requests"), newScope(t, "requests-other")
	rec, srv, caPEM := startRecorder(t)
	otherRec, otherSrv, otherCA := startRecorder(t)
	all := []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
	inNamespaces := []admissionregistrationv1.RuleWithOperations{
		{Operations: all, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps", "namespaces", "pods", "pods/exec"}}},
		{Operations: all, Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments/scale"}}},
		{Operations: all, Rule: admissionregistrationv1.Rule{APIGroups: []string{gadgetGroup}, APIVersions: []string{"v1"}, Resources: []string{"gadgets"}}},
	}
	clusterWide := []admissionregistrationv1.RuleWithOperations{
		{Operations: all, Rule: admissionregistrationv1.Rule{APIGroups: []string{"rbac.authorization.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"clusterroles"}}},
	}
	// recorded returns the reviews r was sent of an object named name.
	recorded := func(r *recorder, name string) []admissionv1.AdmissionRequest {
		var out []admissionv1.AdmissionRequest
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, body := range r.bodies {
			var review admissionv1.AdmissionReview
			if err := json.Unmarshal(body, &review); err == nil && review.Request != nil && review.Request.Name == name {
				out = append(out, *review.Request)
			}
		}
		return out
	}
	configMap := func(name string, data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
	}
	for _, w := range []struct {
		scope  *testScope
		rec    *recorder
		url    string
		caPEM  []byte
		suffix string
	}{{mine, rec, srv.URL, caPEM, "mine"}, {other, otherRec, otherSrv.URL, otherCA, "other"}} {
		seen := func(name string, _ error) bool { return len(recorded(w.rec, name)) > 0 }
		registerValidating(t, hookOptions{name: "requests-" + w.suffix + ".example.com", url: w.url + "/validate", caBundle: w.caPEM, scope: w.scope, rules: inNamespaces, seen: seen,
			probe: func(name string) request { return createRequest(configMap(name, nil)) }})
		registerValidating(t, hookOptions{name: "requests-cluster-" + w.suffix + ".example.com", url: w.url + "/validate", caBundle: w.caPEM, scope: w.scope, rules: clusterWide, selectObjects: true, seen: seen,
			probe: func(name string) request {
				return createRequest(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}})
			}})
	}

	replicas := int32(1)
	deployment := nginxDeployment("", nil)
	deployment.Spec.Replicas = &replicas
	tests := []struct {
		name string
		make func(name string) request
		// want checks the one review the webhook was sent of the
		// request, beside what every review must say.
		want func(t *testing.T, req admissionv1.AdmissionRequest)
	}{
		{"namespaced CREATE", func(name string) request { return createRequest(configMap(name, map[string]string{"a": "1"})) },
			func(t *testing.T, req admissionv1.AdmissionRequest) {
				if req.Namespace != mine.namespace || len(req.OldObject.Raw) > 0 && string(req.OldObject.Raw) != "null" {
					t.Errorf("got namespace %q and oldObject %s, want %s and none", req.Namespace, req.OldObject.Raw, mine.namespace)
				}
			}},
		{"UPDATE", func(name string) request {
			return updateRequest(configMap(name, map[string]string{"a": "1"}), configMap(name, map[string]string{"a": "2"}))
		}, func(t *testing.T, req admissionv1.AdmissionRequest) {
			if !strings.Contains(string(req.Object.Raw), `"a":"2"`) || !strings.Contains(string(req.OldObject.Raw), `"a":"1"`) {
				t.Errorf("got object %s and oldObject %s, want a=2 and a=1", req.Object.Raw, req.OldObject.Raw)
			}
		}},
		{"DELETE of a Namespace", func(name string) request {
			return deleteRequest(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}, func(t *testing.T, req admissionv1.AdmissionRequest) {
			if req.Kind.Kind != "Namespace" || req.Namespace != req.Name || len(req.OldObject.Raw) == 0 {
				t.Errorf("got kind %s, namespace %q, oldObject %s: want a Namespace, named in request.namespace too, with its oldObject", req.Kind.Kind, req.Namespace, req.OldObject.Raw)
			}
		}},
		{"DELETE of a ClusterRole", func(name string) request {
			return deleteRequest(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}, func(t *testing.T, req admissionv1.AdmissionRequest) {
			if req.Kind.Kind != "ClusterRole" || req.Namespace != "" {
				t.Errorf("got kind %s, namespace %q: want a ClusterRole in none", req.Kind.Kind, req.Namespace)
			}
		}},
		{"UPDATE of deployments/scale", func(name string) request {
			d := deployment.DeepCopy()
			d.Name = name
			return subresourceRequest(admissionregistrationv1.Update, d, "scale", &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: autoscalingv1.ScaleSpec{Replicas: 3}})
		}, func(t *testing.T, req admissionv1.AdmissionRequest) {
			if req.SubResource != "scale" || req.Kind.Kind != "Scale" || req.Namespace != mine.namespace {
				t.Errorf("got subresource %q, kind %s, namespace %q: want scale, Scale, %s", req.SubResource, req.Kind.Kind, req.Namespace, mine.namespace)
			}
		}},
		{"CONNECT of pods/exec", func(name string) request {
			return connectRequest(webPod(name), "exec", url.Values{"container": {"web"}, "command": {"ls"}, "stdout": {"true"}})
		}, func(t *testing.T, req admissionv1.AdmissionRequest) {
			if req.Kind.Kind != "PodExecOptions" || !strings.Contains(string(req.Object.Raw), `"command":["ls"]`) {
				t.Errorf("got kind %s, object %s: want PodExecOptions with command [ls]", req.Kind.Kind, req.Object.Raw)
			}
		}},
		{"as another user", func(name string) request {
			return createRequest(configMap(name, nil)).as("jane", "developers")
		}, func(t *testing.T, req admissionv1.AdmissionRequest) {
			if req.UserInfo.Username != "jane" || !slices.Contains(req.UserInfo.Groups, "developers") {
				t.Errorf("got user %q in %v, want jane in developers", req.UserInfo.Username, req.UserInfo.Groups)
			}
		}},
		{"with what it needs stored first", func(name string) request {
			pod := webPod(name)
			pod.Spec.Volumes = []corev1.Volume{{Name: "settings", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name + "-settings"}}}}}
			return createRequest(pod).after(configMap(name+"-settings", nil))
		}, func(t *testing.T, req admissionv1.AdmissionRequest) {
			if req.Kind.Kind != "Pod" {
				t.Errorf("got kind %s, want Pod", req.Kind.Kind)
			}
		}},
		{"after its CRD, and a ConfigMap elsewhere", func(name string) request {
			elsewhere := configMap(name+"-allowed", map[string]string{"teams": "a"})
			elsewhere.Namespace = "e2e-elsewhere"
			gadget := &unstructured.Unstructured{Object: map[string]any{"apiVersion": gadgetGroup + "/v1", "kind": "Gadget", "metadata": map[string]any{"name": name}}}
			return createRequest(gadget).after(gadgetCRD(), elsewhere)
		}, func(t *testing.T, req admissionv1.AdmissionRequest) {
			if req.Kind.Kind != "Gadget" || req.Namespace != mine.namespace {
				t.Errorf("got kind %s in %q, want a Gadget in %s", req.Kind.Kind, req.Namespace, mine.namespace)
			}
			if _, err := mine.api.client.CoreV1().ConfigMaps("e2e-elsewhere").Get(ctx, req.Name+"-allowed", metav1.GetOptions{}); err != nil {
				t.Errorf("the ConfigMap stored before it in e2e-elsewhere: %v", err)
			}
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := fmt.Sprintf("shape-%d", i)
			r := mine.prepare(tc.make(mine.name(base)), validateRoute)
			if err := r.send(ctx, false); err != nil {
				t.Fatalf("the %s: %v", r, err)
			}
			var reviews []admissionv1.AdmissionRequest
			for _, req := range recorded(rec, r.name()) {
				if req.Operation == admissionv1.Operation(r.Operation) && req.SubResource == r.Subresource {
					reviews = append(reviews, req)
				}
			}
			if len(reviews) != 1 {
				t.Fatalf("the %s reached the webhook %d times, want once", r, len(reviews))
			}
			if got := reviews[0]; got.Name != r.name() || got.Resource.Resource != r.resource.Resource {
				t.Errorf("the %s was reviewed as %s of %s %q", r, got.Operation, got.Resource.Resource, got.Name)
			}
			tc.want(t, reviews[0])
			if got := recorded(otherRec, r.name()); len(got) > 0 {
				t.Errorf("the %s reached the webhook of another test's scope, %d times", r, len(got))
			}
		})
	}
}

// gadgetGroup is the group of TestRequests' CRD, which no other test
// makes: the apiserver serves it only once the request that needs it has
// stored it.
const gadgetGroup = "requests.e2e.example.com"

func gadgetCRD() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "gadgets." + gadgetGroup},
		"spec": map[string]any{
			"group": gadgetGroup, "scope": "Namespaced",
			"names": map[string]any{"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
			}},
		},
	}}
}
