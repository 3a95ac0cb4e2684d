package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// forwarder is a webhook that keeps each AdmissionRequest the apiserver
// sends it, then has the webhook binary answer it: what the apiserver
// sent, and the policy's own answer.
type forwarder struct {
	to       *webhookServer
	mu       sync.Mutex
	requests []admissionv1.AdmissionRequest
}

func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err == nil && review.Request != nil {
		f.mu.Lock()
		f.requests = append(f.requests, *review.Request)
		f.mu.Unlock()
	}
	resp, err := f.to.client.Post(f.to.url(r.URL.Path)+"?"+r.URL.RawQuery, "application/json", bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// take returns and forgets the requests kept so far.
func (f *forwarder) take() []admissionv1.AdmissionRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.requests
	f.requests = nil
	return out
}

// startForwarder starts a forwarder to w, serving with w's development
// certificate, so that w's CA is its caBundle; it returns it and its URL.
func startForwarder(t *testing.T, w *webhookServer) (*forwarder, string) {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(w.dir, "tls", "tls.crt"), filepath.Join(w.dir, "tls", "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{to: w}
	srv := httptest.NewUnstartedServer(f)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return f, srv.URL
}

// sentByReview is what `webhook review -o json` says it sent a webhook.
type sentByReview struct {
	Webhook, Operation, SubResource, Namespace, Name string
	Kind, RequestKind                                metav1.GroupVersionKind
	Resource, RequestResource                        metav1.GroupVersionResource
	Object                                           json.RawMessage
}

// reviewedKind is what `webhook review -o json` says of an object, with the
// requests it sent.
type reviewedKind struct {
	Kind, Name, Verdict, Error, Unknown string
	Validate                            *struct{ Message, DeniedBy string }
	Requests                            []sentByReview
	Notes                               []string
}

// TestReviewMatchesTheAPIServerOnKinds holds `webhook review` to the
// apiserver where its matching once went wrong, each request reviewed
// offline and then sent through the apiserver to a webhook configuration
// that sends the demonstration's /validate, through a forwarder that keeps
// what the apiserver sent:
//   - a cluster-scoped custom resource, under a rule of scope Cluster,
//     its CustomResourceDefinition in review's input: sent, in no
//     namespace, and denied;
//   - under matchPolicy Equivalent, the default, an autoscaling/v1
//     HorizontalPodAutoscaler under a rule that names autoscaling/v2, and a
//     custom resource of v2 under a rule of v1: each sent as the rule's
//     version, and denied; under Exact, not sent;
//   - CONNECT: pods/exec, attach, portforward and proxy, each sent as the
//     apiserver's ConnectResource admits it, its options as the object.
//
// Each request review says it sends is the one the apiserver sent: kind,
// resource, subresource, requestKind, requestResource, namespace, name,
// operation, and a CONNECT's object; each verdict is the apiserver's.
func TestReviewMatchesTheAPIServerOnKinds(t *testing.T) {
	skipWithoutPart(t, "review", "webhook review to hold to the apiserver")
	ctx := context.Background()
	w := startWebhook(t, "")
	fwd, base := startForwarder(t, w)
	ns := createLabelledNamespaceIn(t, apiserver, "review-kinds", nil)
	crd := createGizmoCRD(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}
	if _, err := apiserver.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	suffix := ns + ".review.webhook.example.com"
	url := base + "/validate"
	none, fail, exact := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Fail, admissionregistrationv1.Exact
	cluster, namespaced := admissionregistrationv1.ClusterScope, admissionregistrationv1.NamespacedScope
	inNamespace := &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
	hook := func(name string, rule admissionregistrationv1.RuleWithOperations, selector *metav1.LabelSelector) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{Name: name + "." + suffix, ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: w.caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{rule}, NamespaceSelector: selector, SideEffects: &none, FailurePolicy: &fail, AdmissionReviewVersions: []string{"v1"}}
	}
	rule := func(op admissionregistrationv1.OperationType, group, version string, scope *admissionregistrationv1.ScopeType, resources ...string) admissionregistrationv1.RuleWithOperations {
		return admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{op},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{version}, Resources: resources, Scope: scope}}
	}
	exactHPA := hook("hpas-exact", rule(admissionregistrationv1.Create, "autoscaling", "v2", &namespaced, "horizontalpodautoscalers"), inNamespace)
	exactHPA.MatchPolicy = &exact
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: suffix},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			hook("gizmos", rule(admissionregistrationv1.Create, "review.example.com", "v1", &cluster, "gizmos"), nil),
			hook("hpas", rule(admissionregistrationv1.Create, "autoscaling", "v2", &namespaced, "horizontalpodautoscalers"), inNamespace),
			exactHPA,
			hook("connect", rule(admissionregistrationv1.Connect, "", "v1", nil, "pods/exec", "pods/attach", "pods/portforward", "pods/proxy"), inNamespace),
		},
	}
	if _, err := apiserver.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = apiserver.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), cfg.Name, metav1.DeleteOptions{})
	})
	dir := t.TempDir()
	configs := filepath.Join(dir, "configs.yaml")
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	writeText(t, configs, string(b))

	gizmo := func(version, name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "review.example.com/" + version, "kind": "Gizmo", "metadata": map[string]any{"name": name}}}
	}
	// Called, whatever the policy answers: no plumbing test knows it.
	waitUntil(t, "the apiserver calls the gizmos webhook", func() bool {
		_, _ = apiserver.dynamic.Resource(gizmoGVR).Create(ctx, gizmo("v1", "probe-"+ns), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return len(fwd.take()) > 0
	})

	hpa := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
		"metadata": map[string]any{"name": "frontend", "namespace": ns},
		"spec":     map[string]any{"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "frontend"}, "maxReplicas": int64(3)}}}
	create := func(gvr schema.GroupVersionResource, obj *unstructured.Unstructured) func() error {
		return func() error {
			_, err := apiserver.dynamic.Resource(gvr).Namespace(obj.GetNamespace()).Create(ctx, obj, metav1.CreateOptions{})
			return err
		}
	}
	connect := func(sub string, query map[string][]string, path string) func() error {
		return func() error {
			r := apiserver.client.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name("web").SubResource(sub)
			if path != "" {
				r = apiserver.client.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces", ns, "pods", "web", sub, path)
			}
			for k, vs := range query {
				for _, v := range vs {
					r = r.Param(k, v)
				}
			}
			_, err := r.DoRaw(ctx)
			return err
		}
	}
	podFile := writeObject(t, dir, "pod.json", toUnstructured(pod))
	for _, tc := range []struct {
		name string
		args []string // webhook review's, besides -o json and -config
		send func() error
		// webhooks are those the apiserver sends it to; whether they deny
		// it is the policy's, and review must say what the apiserver does.
		webhooks []string
	}{
		{"a cluster-scoped custom resource", []string{"-f", writeObject(t, dir, "gizmo.json", gizmo("v1", "gizmo-a")), "-f", crd},
			create(gizmoGVR, gizmo("v1", "gizmo-a")), []string{"gizmos"}},
		{"a custom resource of another served version", []string{"-f", writeObject(t, dir, "gizmo-v2.json", gizmo("v2", "gizmo-b")), "-f", crd},
			create(schema.GroupVersionResource{Group: "review.example.com", Version: "v2", Resource: "gizmos"}, gizmo("v2", "gizmo-b")), []string{"gizmos"}},
		{"an autoscaling/v1 HorizontalPodAutoscaler", []string{"-f", writeObject(t, dir, "hpa.json", hpa)},
			create(schema.GroupVersionResource{Group: "autoscaling", Version: "v1", Resource: "horizontalpodautoscalers"}, hpa), []string{"hpas"}},
		{"kubectl exec", []string{"-f", podFile, "-operation", "CONNECT", "-subresource", "exec", "-connect-query", "container=web&command=sh&command=-c&command=date&stdin=true&stdout=true&tty=true"},
			connect("exec", map[string][]string{"container": {"web"}, "command": {"sh", "-c", "date"}, "stdin": {"true"}, "stdout": {"true"}, "tty": {"true"}}, ""), []string{"connect"}},
		{"kubectl attach", []string{"-f", podFile, "-operation", "CONNECT", "-subresource", "attach", "-connect-query", "container=web&stdin=true&stdout=true"},
			connect("attach", map[string][]string{"container": {"web"}, "stdin": {"true"}, "stdout": {"true"}}, ""), []string{"connect"}},
		{"kubectl port-forward", []string{"-f", podFile, "-operation", "CONNECT", "-subresource", "portforward", "-connect-query", "ports=8080"},
			connect("portforward", map[string][]string{"ports": {"8080"}}, ""), []string{"connect"}},
		{"a proxy", []string{"-f", podFile, "-operation", "CONNECT", "-subresource", "proxy", "-connect-query", "path=/healthz"},
			connect("proxy", nil, "healthz"), []string{"connect"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			offline := reviewKinds(t, append([]string{"-config", configs}, tc.args...)...)
			err := tc.send()
			sent := fwd.take()
			t.Logf("review: %s %+v %q; the apiserver: %v", offline.Verdict, offline.Validate, offline.Notes, err)
			denied := err != nil && strings.Contains(err.Error(), "denied the request")
			if denied != (offline.Verdict == "denied") {
				t.Errorf("review says %s, the apiserver answered %v; want the same verdict from both", offline.Verdict, err)
			}
			if denied && offline.Validate != nil && !strings.Contains(err.Error(), fmt.Sprintf("admission webhook %q denied the request: %s", offline.Validate.DeniedBy, offline.Validate.Message)) {
				t.Errorf("review says denied by %s: %q; the apiserver: %v", offline.Validate.DeniedBy, offline.Validate.Message, err)
			}
			var want []string
			for _, h := range tc.webhooks {
				want = append(want, h+"."+suffix)
			}
			var got []string
			for _, r := range offline.Requests {
				got = append(got, r.Webhook)
			}
			if !reflect.DeepEqual(got, want) || len(sent) != len(want) {
				t.Fatalf("review sends it to %v, the apiserver sent %d requests; want %v", got, len(sent), want)
			}
			checkSentAsTheAPIServer(t, offline.Requests[0], sent[0])
		})
	}
}

// checkSentAsTheAPIServer compares what review says it sent with what the
// apiserver sent.
func checkSentAsTheAPIServer(t *testing.T, review sentByReview, apiserverSent admissionv1.AdmissionRequest) {
	t.Helper()
	got := map[string]any{"kind": review.Kind, "resource": review.Resource, "subResource": review.SubResource, "requestKind": review.RequestKind,
		"requestResource": review.RequestResource, "namespace": review.Namespace, "name": review.Name, "operation": review.Operation}
	want := map[string]any{"kind": apiserverSent.Kind, "resource": apiserverSent.Resource, "subResource": apiserverSent.SubResource, "requestKind": *apiserverSent.RequestKind,
		"requestResource": *apiserverSent.RequestResource, "namespace": apiserverSent.Namespace, "name": apiserverSent.Name, "operation": string(apiserverSent.Operation)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("review sends\n  %v\nthe apiserver sent\n  %v", got, want)
	}
	if apiserverSent.Operation == admissionv1.Connect && !sameJSONObject(review.Object, apiserverSent.Object.Raw) {
		t.Errorf("review sends the object %s, the apiserver sent %s", review.Object, apiserverSent.Object.Raw)
	}
}

func sameJSONObject(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// reviewKinds runs `webhook review -o json` with args as the admin the
// apiserver's client is, and returns what it says of its one object.
func reviewKinds(t *testing.T, args ...string) reviewedKind {
	t.Helper()
	out, code := runReviewJSON(t, nil, append([]string{"-user", "admin", "-group", "system:masters", "-group", "system:authenticated"}, args...)...)
	var results []reviewedKind
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("webhook review -o json printed %s: %v", out, err)
	}
	var objects []reviewedKind
	for _, r := range results {
		if r.Kind != "CustomResourceDefinition" {
			objects = append(objects, r)
		}
	}
	if len(objects) != 1 || code > 1 {
		t.Fatalf("webhook review %q: exit %d, %s; want one object, and exit 0 or 1", args, code, out)
	}
	return objects[0]
}

// writeObject writes obj to dir/name as JSON, and returns the path.
func writeObject(t *testing.T, dir, name string, obj *unstructured.Unstructured) string {
	t.Helper()
	b, err := obj.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// gizmoGVR is the cluster-scoped custom resource of createGizmoCRD.
var gizmoGVR = schema.GroupVersionResource{Group: "review.example.com", Version: "v1", Resource: "gizmos"}

// createGizmoCRD defines Gizmo, cluster-scoped, served in v1 and v2 (no
// conversion webhook: the apiserver changes the apiVersion alone), waits
// until it is served, and returns a file that holds the definition, for
// webhook review's -f.
func createGizmoCRD(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	version := func(name string, storage bool) map[string]any {
		return map[string]any{"name": name, "served": true, "storage": storage,
			"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
	}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "gizmos.review.example.com"},
		"spec": map[string]any{
			"group": "review.example.com", "scope": "Cluster",
			"names":    map[string]any{"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo", "listKind": "GizmoList"},
			"versions": []any{version("v1", true), version("v2", false)},
		},
	}}
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := apiserver.dynamic.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		t.Fatalf("creating the Gizmo CRD: %v", err)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		_, err1 := apiserver.dynamic.Resource(gizmoGVR).List(ctx, metav1.ListOptions{})
		_, err2 := apiserver.dynamic.Resource(schema.GroupVersionResource{Group: "review.example.com", Version: "v2", Resource: "gizmos"}).List(ctx, metav1.ListOptions{})
		if err1 == nil && err2 == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Gizmo CRD was not served in time")
		}
		time.Sleep(200 * time.Millisecond)
	}
	return writeObject(t, t.TempDir(), "crd.json", crd)
}

// runReviewJSON runs `webhook review -o json args` with the webhook binary
// the suite built and stdin, and returns what it printed and its exit
// status.
func runReviewJSON(t *testing.T, stdin []byte, args ...string) ([]byte, int) {
	t.Helper()
	cmd := exec.Command(webhookBinary, append([]string{"review", "-o", "json"}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("webhook review %q: %v\n%s", args, err, &stderr)
	}
	code := cmd.ProcessState.ExitCode()
	if code == 2 {
		t.Logf("webhook review %q: exit 2: %s", args, &stderr)
	}
	return out, code
}

// TestReviewCorpusMatchesTheAPIServer holds `webhook review`'s verdict on
// each document of review/testdata/manifests, manifests of real projects,
// to the apiserver's. The demonstration's /validate is registered for
// every kind, every version and every scope, but only for the objects the
// test labels, so that nothing else the suite does meets it; the corpus's
// CustomResourceDefinitions are created; then each object, labelled and
// put in the test's namespace when namespaced, is reviewed offline, then
// created as a server-side dry run: each verdict, and whether the webhook
// is sent the object at all, is the apiserver's. A document review cannot
// read (a template) is not one the apiserver could be sent either.
func TestReviewCorpusMatchesTheAPIServer(t *testing.T) {
	skipWithoutPart(t, "review", "webhook review to hold to the apiserver")
	ctx := context.Background()
	w := startWebhook(t, "")
	ns := createLabelledNamespaceIn(t, apiserver, "review-corpus", nil)
	label := map[string]string{"review-corpus.example.com": ns}
	files, err := filepath.Glob(filepath.Join(repoRoot, "review", "testdata", "manifests", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in review/testdata/manifests: %v", err)
	}
	var objects, crds []*unstructured.Unstructured
	unreadable := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---") {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
				unreadable++
				continue
			}
			if m == nil {
				continue
			}
			obj := &unstructured.Unstructured{Object: m}
			if obj.GetKind() == "CustomResourceDefinition" {
				crds = append(crds, obj)
			}
			objects = append(objects, obj)
		}
	}
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, crd := range crds {
		if _, err := apiserver.dynamic.Resource(crdGVR).Create(ctx, crd.DeepCopy(), metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
			t.Fatalf("creating %s: %v", crd.GetName(), err)
		}
	}
	var mapper meta.RESTMapper
	waitUntil(t, "the corpus's CustomResourceDefinitions are served", func() bool {
		groups, err := restmapper.GetAPIGroupResources(apiserver.client.Discovery())
		if err != nil {
			return false
		}
		mapper = restmapper.NewDiscoveryRESTMapper(groups)
		for _, crd := range crds {
			group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
			if _, err := mapper.RESTMapping(schema.GroupKind{Group: group, Kind: kind}); err != nil {
				return false
			}
		}
		return true
	})

	// Each object as it is sent: labelled, in the test's namespace.
	type sent struct {
		obj     *unstructured.Unstructured
		mapping *meta.RESTMapping // nil: the apiserver serves no such kind
	}
	var all []sent
	var docs []string
	for _, o := range objects {
		o = o.DeepCopy()
		labels := o.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		maps.Copy(labels, label)
		o.SetLabels(labels)
		m, err := mapper.RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
		if err != nil {
			m = nil
		} else if m.Scope.Name() == meta.RESTScopeNameNamespace {
			o.SetNamespace(ns)
		}
		all = append(all, sent{o, m})
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	dir := t.TempDir()
	input := filepath.Join(dir, "corpus.yaml")
	writeText(t, input, strings.Join(docs, "---\n"))

	none, fail, everything := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Fail, admissionregistrationv1.AllScopes
	fwd, base := startForwarder(t, w)
	url := base + "/validate"
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: ns + ".corpus.webhook.example.com"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: ns + ".corpus.webhook.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: w.caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}, Scope: &everything}}},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: label}, SideEffects: &none, FailurePolicy: &fail, AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := apiserver.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = apiserver.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), cfg.Name, metav1.DeleteOptions{})
	})
	configs := filepath.Join(dir, "configs.yaml")
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	writeText(t, configs, string(b))
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Labels: label}}
	// Called, whatever the policy answers: no plumbing test knows it.
	waitUntil(t, "the apiserver calls the corpus webhook", func() bool {
		_, _ = apiserver.client.CoreV1().ConfigMaps(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return len(fwd.take()) > 0
	})

	out, code := runReviewJSON(t, nil, "-user", "admin", "-group", "system:masters", "-group", "system:authenticated", "-config", configs, "-f", input)
	var results []reviewedKind
	if err := json.Unmarshal(out, &results); err != nil || len(results) != len(all) {
		t.Fatalf("webhook review -o json (exit %d) printed %d results, want %d: %v\n%s", code, len(results), len(all), err, out)
	}
	counts := map[string]int{}
	for i, s := range all {
		got := results[i]
		what := fmt.Sprintf("%s %s/%s", s.obj.GetKind(), s.obj.GetNamespace(), s.obj.GetName())
		if s.mapping == nil {
			counts["not served"]++
			if got.Verdict != "error" || !strings.Contains(got.Error, "does not serve") {
				t.Errorf("%s: the apiserver serves no %s; review says %s %q", what, s.obj.GetAPIVersion(), got.Verdict, got.Error)
			}
			continue
		}
		_, err := apiserver.dynamic.Resource(s.mapping.Resource).Namespace(s.obj.GetNamespace()).Create(ctx, s.obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		denied := err != nil && strings.Contains(err.Error(), "denied the request")
		switch {
		case got.Verdict == "denied" && denied:
			counts["denied"]++
			if !strings.Contains(err.Error(), got.Validate.Message) {
				t.Errorf("%s: review denies it with %q, the apiserver: %v", what, got.Validate.Message, err)
			}
		case got.Verdict == "admitted" && (err == nil || apierrors.IsAlreadyExists(err)):
			// Already stored (a CustomResourceDefinition another test
			// made): the webhooks admitted it, and storage refused it.
			counts["admitted"]++
		case apierrors.IsInvalid(err):
			// The apiserver's validation refused it before validating
			// webhooks run: here, privileged containers, which this
			// apiserver does not allow (--allow-privileged). Review does
			// not validate objects: not compared.
			counts["invalid"]++
			t.Logf("%s: not compared: %v", what, err)
		default:
			t.Errorf("%s: review says %s %s%s, the apiserver answered %v", what, got.Verdict, got.Error, got.Unknown, err)
		}
	}
	t.Logf("%d documents: %v; %d review cannot read, nor could the apiserver", len(all), counts, unreadable)
	// Whether the policy denies them is the policy's; that review and the
	// apiserver agree on most is the test's.
	if counts["denied"]+counts["admitted"] < 40 || counts["not served"] == 0 {
		t.Errorf("got %v: want most compared, and one not served", counts)
	}
}

// subresourceAuditPolicy records the writes of Deployments and Pods and of
// the subresources the test writes at RequestResponse: the object sent
// and as stored, for the replay of a later write (a Scale's old version
// is made of the Deployment stored; an ephemeral containers' patch applies
// to the Pod stored). An audit policy's resources name subresources
// apart (deployments does not match deployments/scale).
const subresourceAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: RequestResponse
  verbs: ["create", "update", "patch", "delete", "get"]
  resources:
  - group: "apps"
    resources: ["deployments", "deployments/scale"]
  - group: ""
    resources: ["pods", "pods/ephemeralcontainers"]
- level: Metadata
`

// TestReviewSubresourcesMatchTheAPIServer: a copier's replica cap through
// deployments/scale and image rule through pods/ephemeralcontainers
// (testdata/subresource-policy.go), reviewed offline as `webhook review
// -operation UPDATE -subresource scale|ephemeralcontainers` with -f the
// object as it will be and -old as the apiserver stores it, then written
// through a kube-apiserver as kubectl scale (a merge patch of the Scale)
// and kubectl debug (a strategic merge patch of the Pod's ephemeral
// containers) write them, to a validating webhook behind a forwarder that
// keeps what the apiserver sent:
//   - each verdict offline is the apiserver's, and the request review
//     says it sends is the one the apiserver sent: kind (autoscaling/v1
//     Scale; v1 Pod), resource, subresource, requestKind, requestResource,
//     namespace, name, operation; a Scale whole, as the apiserver makes it
//     of the Deployment; the ephemeral containers' names and images;
//   - the apiserver's audit log of those writes, replayed with the same
//     flags, gives each the apiserver's verdict, every patch applied to
//     the version the log stored; with a stricter cap, the scale the
//     apiserver admitted would now be refused.
func TestReviewSubresourcesMatchTheAPIServer(t *testing.T) {
	skipWithoutPart(t, "review", "webhook review to hold to the apiserver")
	ctx := context.Background()
	bin := buildWithPolicy(t, "testdata/subresource-policy.go")
	w := startWebhookBinary(t, bin, "", "127.0.0.1:0", nil)
	fwd, base := startForwarder(t, w)
	dir := t.TempDir()
	api, auditLog := startAuthorizedAuditedAPIServer(t, dir, "apiserver-subresources", subresourceAuditPolicy)
	ns := createLabelledNamespaceIn(t, api, "review-subresources", nil)

	url := base + "/validate"
	none, fail := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Fail
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: "subresources.review.webhook.example.com"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "subresources.review.webhook.example.com",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: w.caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{
				{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments/scale"}}},
				{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/ephemeralcontainers"}}},
			},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			SideEffects:       &none, FailurePolicy: &fail, AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := api.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	configs := filepath.Join(dir, "configs.yaml")
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	writeText(t, configs, string(b))

	replicas := int32(1)
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}},
	}
	if _, err := api.client.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}}}}
	if _, err := api.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// In use once a dry-run scale is sent to the webhook.
	scaleTo := func(n int, opts metav1.PatchOptions) error {
		// kubectl scale: a merge patch of the Scale (k8s.io/kubectl
		// pkg/scale, ScaleSimple).
		_, err := api.client.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n), opts, "scale")
		return err
	}
	waitUntil(t, "the apiserver calls the webhook", func() bool {
		_ = scaleTo(1, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return len(fwd.take()) > 0
	})

	start := auditMarker(t, api, auditLog, ns, "subresources-start")
	stored := func(get func() (runtime.Object, error)) runtime.Object {
		t.Helper()
		o, err := get()
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	getDeploy := func() (runtime.Object, error) {
		return api.client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	}
	getPod := func() (runtime.Object, error) {
		return api.client.CoreV1().Pods(ns).Get(ctx, "app", metav1.GetOptions{})
	}
	withReplicas := func(n int32) func(runtime.Object) runtime.Object {
		return func(o runtime.Object) runtime.Object {
			d := o.(*appsv1.Deployment).DeepCopy()
			d.Spec.Replicas = &n
			return d
		}
	}
	withDebug := func(image string) func(runtime.Object) runtime.Object {
		return func(o runtime.Object) runtime.Object {
			p := o.(*corev1.Pod).DeepCopy()
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger-" + strings.NewReplacer("/", "-", ".", "-", ":", "-").Replace(image), Image: image, Stdin: true, TTY: true}})
			return p
		}
	}
	// kubectl debug: a strategic merge patch, from the Pod as stored to
	// the Pod with the debug container (k8s.io/kubectl pkg/cmd/debug,
	// debugByEphemeralContainer).
	debug := func(change func(runtime.Object) runtime.Object) func() error {
		return func() error {
			p := stored(getPod)
			before, _ := json.Marshal(p)
			after, _ := json.Marshal(change(p))
			patch, err := strategicpatch.CreateTwoWayMergePatch(before, after, &corev1.Pod{})
			if err != nil {
				return err
			}
			_, err = api.client.CoreV1().Pods(ns).Patch(ctx, "app", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "ephemeralcontainers")
			return err
		}
	}
	for _, tc := range []struct {
		name   string
		sub    string
		get    func() (runtime.Object, error)
		change func(runtime.Object) runtime.Object
		send   func() error
		denied bool
	}{
		{"kubectl scale within the cap", "scale", getDeploy, withReplicas(3), func() error { return scaleTo(3, metav1.PatchOptions{}) }, false},
		{"kubectl scale above the cap", "scale", getDeploy, withReplicas(9), func() error { return scaleTo(9, metav1.PatchOptions{}) }, true},
		{"kubectl debug, an allowed image", "ephemeralcontainers", getPod, withDebug("registry.example.com/debug:1"), debug(withDebug("registry.example.com/debug:1")), false},
		{"kubectl debug, another image", "ephemeralcontainers", getPod, withDebug("busybox"), debug(withDebug("busybox")), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := stored(tc.get)
			oldFile := writeObject(t, t.TempDir(), "old.json", toUnstructured(old))
			newFile := writeObject(t, t.TempDir(), "new.json", toUnstructured(tc.change(old)))
			out, code := runReviewJSONWith(t, bin, nil, "-o", "json", "-config", configs, "-operation", "UPDATE", "-subresource", tc.sub, "-f", newFile, "-old", oldFile)
			var results []reviewedKind
			if err := json.Unmarshal(out, &results); err != nil || len(results) != 1 || code > 1 {
				t.Fatalf("webhook review: exit %d, %s: %v", code, out, err)
			}
			offline := results[0]
			err := tc.send()
			sent := fwd.take()
			t.Logf("review: %s %+v; the apiserver: %v", offline.Verdict, offline.Validate, err)
			denied := err != nil && strings.Contains(err.Error(), "denied the request")
			if denied != tc.denied || (offline.Verdict == "denied") != tc.denied || (err != nil && !denied) {
				t.Errorf("review says %s, the apiserver answered %v; want both denied: %v", offline.Verdict, err, tc.denied)
			}
			if denied && offline.Validate != nil && !strings.Contains(err.Error(), fmt.Sprintf("admission webhook %q denied the request: %s", offline.Validate.DeniedBy, offline.Validate.Message)) {
				t.Errorf("review says denied by %s: %q; the apiserver: %v", offline.Validate.DeniedBy, offline.Validate.Message, err)
			}
			if len(offline.Requests) != 1 || len(sent) != 1 {
				t.Fatalf("review sends %d requests, the apiserver sent %d; want one each", len(offline.Requests), len(sent))
			}
			checkSentAsTheAPIServer(t, offline.Requests[0], sent[0])
			switch tc.sub {
			case "scale":
				// The Scale whole: the apiserver's validating webhooks
				// are sent the one it makes of the Deployment.
				if !sameJSONObject(offline.Requests[0].Object, sent[0].Object.Raw) {
					t.Errorf("review sends the Scale\n  %s\nthe apiserver sent\n  %s", offline.Requests[0].Object, sent[0].Object.Raw)
				}
			case "ephemeralcontainers":
				if got, want := ephemeralImages(t, offline.Requests[0].Object), ephemeralImages(t, sent[0].Object.Raw); got != want {
					t.Errorf("review sends the ephemeral containers %s, the apiserver sent %s", got, want)
				}
			}
		})
	}
	end := auditMarker(t, api, auditLog, ns, "subresources-end")
	replayLog := filepath.Join(dir, "replayed.log")
	sliceLog(t, auditLog, start, end, replayLog)

	t.Run("replayed with the same flags: the apiserver's verdicts", func(t *testing.T) {
		results, code, text := runReplay(t, bin, "-audit-log", replayLog, "-config", configs)
		t.Logf("webhook review -audit-log:\n%s", text)
		var writes int
		for _, r := range results {
			if r.Verb != "patch" || r.Namespace != ns {
				continue
			}
			writes++
			if r.Admission == nil {
				t.Errorf("%s: %s of %s not reviewed: %s", r.Source, r.Verb, r.Resource, r.NotReviewed)
				continue
			}
			then := r.Then.Admission
			if (then == "denied") != (r.Admission.Verdict == "denied") || (then != "denied" && then != "admitted") || len(r.Changes) > 0 || strings.HasPrefix(r.OldObject, "unknown") {
				t.Errorf("%s: then %s, now %s, changes %v, oldObject %q; want the apiserver's verdict, from the version the log stored", r.Source, then, r.Admission.Verdict, r.Changes, r.OldObject)
			}
		}
		if writes != 4 || code != 0 {
			t.Errorf("replayed %d patches of subresources, exit %d; want 4, exit 0", writes, code)
		}
	})
	t.Run("replayed with a stricter cap: the scale admitted would now be refused", func(t *testing.T) {
		results, code, _ := runReplay(t, bin, "-audit-log", replayLog, "-config", configs, "-max-replicas", "2")
		var refused []string
		for _, r := range results {
			if slices.Contains(r.Changes, "would-now-be-refused") {
				refused = append(refused, r.Source)
			}
		}
		if code != 1 || len(refused) != 1 {
			t.Errorf("got exit %d, would now be refused: %v; want 1, the scale to 3", code, refused)
		}
	})
}

// ephemeralImages are a Pod's ephemeral containers, name=image.
func ephemeralImages(t *testing.T, raw []byte) string {
	t.Helper()
	var p corev1.Pod
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	var out []string
	for _, c := range p.Spec.EphemeralContainers {
		out = append(out, c.Name+"="+c.Image)
	}
	return strings.Join(out, ",")
}

// runReviewJSONWith is runReviewJSON with another webhook binary, and
// whatever output flag args give.
func runReviewJSONWith(t *testing.T, bin string, stdin []byte, args ...string) ([]byte, int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"review"}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("webhook review %q: %v\n%s", args, err, &stderr)
	}
	code := cmd.ProcessState.ExitCode()
	if code == 2 {
		t.Logf("webhook review %q: exit 2: %s", args, &stderr)
	}
	return out, code
}
