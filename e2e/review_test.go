package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// reviewResult is what `webhook review -o json` says of an object.
type reviewResult struct {
	Kind, Name, Verdict, Error string
	Mutate                     *struct {
		Patch []struct {
			Op, Path string
			Value    any
		}
	}
	Validate *struct{ Message string }
	Notes    []string
}

// TestReviewMatchesTheAPIServer reviews a set of objects offline with
// `webhook review`, given the webhook configurations the test registers,
// then creates them through the real apiserver: each verdict is the
// apiserver's, each stored object carries what the reviewed patch set, and
// an object review says no webhook is sent is not sent one. Then the
// stored objects, listed as `kubectl get -o json` prints them, are
// reviewed as an audit: each is admitted unchanged. It knows no policy: the
// objects are admittedObject's and deniedObject's, a ConfigMap, and a
// custom resource, whatever the policy decides of them.
func TestReviewMatchesTheAPIServer(t *testing.T) {
	ctx := context.Background()
	createWidgetCRD(t)
	ns := createNamespace(t, "review")
	w := startWebhook(t, "")
	// The deployed rules, and Widgets too: a custom resource the webhooks
	// are sent.
	widgets := admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}},
	}
	var names []string
	for _, route := range deployedRoutes(t) {
		name := strings.TrimPrefix(route, "/") + "-" + ns + ".webhook.example.com"
		names = append(names, name)
		registerRoute(t, route, hookOptions{name: name, url: w.url(route), caBundle: w.caPEM, namespace: ns, seen: w.saw,
			rules: append(append([]admissionregistrationv1.RuleWithOperations{}, deployed(t)[route].rules...), widgets)})
	}
	dir := t.TempDir()
	configs := writeRegistered(t, dir, names)

	// The objects, each in ns, labelled as the deployed objectSelectors ask.
	var objects []*unstructured.Unstructured
	var resources []schema.GroupVersionResource
	add := func(obj *unstructured.Unstructured, resource schema.GroupVersionResource) {
		obj.SetNamespace(ns)
		objects, resources = append(objects, obj), append(resources, resource)
	}
	for _, route := range deployedRoutes(t) {
		add(admittedFor(t, route, "admitted"+strings.ReplaceAll(route, "/", "-"), 0))
	}
	if obj, resource, _ := deniedObject(ns, "denied"); obj != nil {
		add(labelFor(t, obj, validateRoute), resource)
	}
	allLabels := map[string]string{}
	for _, route := range deployedRoutes(t) {
		maps.Copy(allLabels, testLabels(t).object[route])
	}
	add(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "settings", "labels": toAny(allLabels)}, "data": map[string]any{"a": "b"}}},
		schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	add(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "gizmo", "labels": toAny(allLabels)}, "spec": map[string]any{"size": "large"}}}, widgetGVR)

	compareReview(t, w, ns, dir, configs, objects, resources)

	// /validate alone, as the rollout tests register it: what it denies
	// without /mutate's help, denied alike offline and through the
	// apiserver.
	if _, ok := deployed(t)[validateRoute]; ok {
		if obj, resource, _ := deniedObject("check", "check"); obj != nil {
			ns2 := createNamespace(t, "review-validate")
			name := "validate-" + ns2 + ".webhook.example.com"
			registerRoute(t, validateRoute, hookOptions{name: name, url: w.url(validateRoute), caBundle: w.caPEM, namespace: ns2, seen: w.saw})
			obj, _, _ := deniedObject(ns2, "denied-alone")
			obj = labelFor(t, obj, validateRoute)
			obj.SetNamespace(ns2)
			compareReview(t, w, ns2, t.TempDir(), writeRegistered(t, t.TempDir(), []string{name}), []*unstructured.Unstructured{obj}, []schema.GroupVersionResource{resource})
		}
	}

	// The audit: what the cluster stores, as kubectl get -o json lists it.
	list := map[string]any{"apiVersion": "v1", "kind": "List", "items": []any{}}
	seen := map[schema.GroupVersionResource]bool{}
	for _, resource := range resources {
		if seen[resource] {
			continue
		}
		seen[resource] = true
		stored, err := api(resource, ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range stored.Items {
			list["items"] = append(list["items"].([]any), item.Object)
		}
	}
	listed, _ := json.Marshal(list)
	audit := runReview(t, listed, "-f", "-", "-config", configs)
	for _, item := range list["items"].([]any) {
		name := item.(map[string]any)["metadata"].(map[string]any)["name"].(string)
		got := audit[name]
		if got.Verdict != "admitted" || (got.Mutate != nil && len(got.Mutate.Patch) > 0) {
			t.Errorf("the audit of stored %s: got %s %+v, want it admitted with no patch: the webhook admitted it as it is stored", name, got.Verdict, got.Mutate)
		}
	}
}

// compareReview reviews objects offline against configs, then creates
// each in ns through the apiserver, and checks that review said what the
// apiserver did.
func compareReview(t *testing.T, w *webhookServer, ns, dir, configs string, objects []*unstructured.Unstructured, resources []schema.GroupVersionResource) {
	t.Helper()
	ctx := context.Background()
	var input bytes.Buffer
	for _, obj := range objects {
		b, _ := json.Marshal(obj.Object)
		input.Write(append(b, '\n'))
	}
	objectsFile := filepath.Join(dir, "objects.json")
	if err := os.WriteFile(objectsFile, input.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	offline := runReview(t, nil, "-f", objectsFile, "-config", configs)

	for i, obj := range objects {
		got, ok := offline[obj.GetName()]
		if !ok {
			t.Errorf("webhook review said nothing of %s", obj.GetName())
			continue
		}
		stored, err := api(resources[i], ns).Create(ctx, obj, metav1.CreateOptions{})
		// The webhook logs a review just after it answers it.
		sent := false
		for deadline := time.Now().Add(time.Second); !sent && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			sent = w.saw(obj.GetName(), nil)
		}
		t.Logf("%s %s: review %s %v %v; the apiserver: %v; the webhook was sent it: %v", obj.GetKind(), obj.GetName(), got.Verdict, got.Mutate, got.Notes, err, sent)
		switch got.Verdict {
		case "denied":
			if err == nil || !strings.Contains(err.Error(), "denied the request") || (got.Validate != nil && !strings.Contains(err.Error(), got.Validate.Message)) {
				t.Errorf("%s: review says denied (%+v), the apiserver answered %v", obj.GetName(), got.Validate, err)
			}
		case "admitted":
			if err != nil {
				t.Errorf("%s: review says admitted, the apiserver refused it: %v", obj.GetName(), err)
				continue
			}
			if got.Mutate != nil {
				for _, op := range got.Mutate.Patch {
					if op.Op != "add" && op.Op != "replace" {
						continue
					}
					if v, found := atPointer(stored.Object, op.Path); !found || !holds(v, op.Value) {
						t.Errorf("%s: the reviewed patch sets %s to %v, the stored object has %v", obj.GetName(), op.Path, op.Value, v)
					}
				}
			}
		default:
			t.Errorf("%s: review says %s (%s), want admitted or denied as the apiserver had it (%v)", obj.GetName(), got.Verdict, got.Error, err)
		}
		notSent := slicesContainsPrefix(got.Notes, "no webhook of -config matches it")
		if notSent == sent {
			t.Errorf("%s: review says the webhook is sent it: %v; the webhook was sent it: %v", obj.GetName(), !notSent, sent)
		}
	}

}

// runReview runs `webhook review -o json args` with the webhook binary
// the suite built, as the admin the apiserver's client is, and returns its
// results by name.
func runReview(t *testing.T, stdin []byte, args ...string) map[string]reviewResult {
	t.Helper()
	cmd := exec.Command(webhookBinary, append([]string{"review", "-o", "json", "-user", "admin", "-group", "system:masters", "-group", "system:authenticated"}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if exit, ok := err.(*exec.ExitError); err != nil && (!ok || exit.ExitCode() != 1) {
		t.Fatalf("webhook review %q: %v\n%s%s", args, err, out, &stderr)
	}
	var results []reviewResult
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("webhook review -o json printed %s: %v", out, err)
	}
	byName := map[string]reviewResult{}
	for _, r := range results {
		byName[r.Name] = r
	}
	return byName
}

// writeRegistered writes the webhook configurations named names, as the
// apiserver holds them, for webhook review's -config.
func writeRegistered(t *testing.T, dir string, names []string) string {
	t.Helper()
	ctx := context.Background()
	var docs [][]byte
	for _, name := range names {
		if m, err := apiserver.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{}); err == nil {
			m.Kind = "MutatingWebhookConfiguration"
			b, _ := json.Marshal(m)
			docs = append(docs, b)
		}
		if v, err := apiserver.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{}); err == nil {
			v.Kind = "ValidatingWebhookConfiguration"
			b, _ := json.Marshal(v)
			docs = append(docs, b)
		}
	}
	path := filepath.Join(dir, "configs.json")
	if err := os.WriteFile(path, bytes.Join(docs, []byte("\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func api(resource schema.GroupVersionResource, ns string) interface {
	Create(context.Context, *unstructured.Unstructured, metav1.CreateOptions, ...string) (*unstructured.Unstructured, error)
	List(context.Context, metav1.ListOptions) (*unstructured.UnstructuredList, error)
} {
	return apiserver.dynamic.Resource(resource).Namespace(ns)
}

// atPointer returns the value at an RFC 6901 pointer in a decoded JSON
// document.
func atPointer(doc any, pointer string) (any, bool) {
	for _, token := range strings.Split(pointer, "/")[1:] {
		token = strings.NewReplacer("~1", "/", "~0", "~").Replace(token)
		m, ok := doc.(map[string]any)
		if !ok {
			return nil, false
		}
		if doc, ok = m[token]; !ok {
			return nil, false
		}
	}
	return doc, true
}

// holds reports whether got, a value of a stored object, holds want, the
// value a patch set: the same, but for what the apiserver added to a map,
// numbers compared as JSON has them.
func holds(got, want any) bool {
	normal := func(v any) any {
		b, _ := json.Marshal(v)
		var out any
		_ = json.Unmarshal(b, &out)
		return out
	}
	got, want = normal(got), normal(want)
	if w, ok := want.(map[string]any); ok {
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range w {
			if !holds(g[k], v) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(got, want)
}

func toAny(m map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func slicesContainsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}
