package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// TestReviewMatchesTheAPIServer reviews a set of requests offline with
// `webhook review`, given the webhook configurations the test registers
// and, for a policy that reads the cluster, what the apiserver stores of
// what it reads (-cluster, once each request has stored what it needs
// first), then sends them through the real apiserver: each verdict is the
// apiserver's, each object stored carries what the reviewed patch set
// (list indices and appends followed as the apiserver applies them, the
// built-in admission plugins' additions allowed), and a request review
// says no webhook is sent is not sent one. Then the objects the creates
// stored, listed as `kubectl get -o json` prints them, are reviewed as an
// audit: each is admitted unchanged. It knows no policy: the requests are
// admittedRequest's and deniedRequest's, a ConfigMap's create, and a
// custom resource's, whatever the policy decides of them.
func TestReviewMatchesTheAPIServer(t *testing.T) {
	skipWithoutPart(t, "review", "webhook review to hold to the apiserver")
	ctx := context.Background()
	createWidgetCRD(t)
	scope := newScope(t, "review")
	w := startWebhook(t, "")
	// The deployed rules, and Widgets too: a custom resource the webhooks
	// are sent.
	widgets := admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}},
	}
	var names []string
	for _, route := range deployedRoutes(t) {
		name := strings.TrimPrefix(route, "/") + "-" + scope.namespace + ".webhook.example.com"
		names = append(names, name)
		registerRoute(t, route, hookOptions{name: name, url: w.url(route), caBundle: w.caPEM, scope: scope, seen: w.saw,
			rules:         append(slices.Clone(deployed(t)[route].rules), widgets),
			selectObjects: scope.admitted(route, "scoping", 0).clusterWide()})
	}
	configs := writeRegistered(t, t.TempDir(), names)

	var requests []*preparedRequest
	for _, route := range deployedRoutes(t) {
		requests = append(requests, scope.admitted(route, "admitted"+strings.ReplaceAll(route, "/", "-"), 0))
	}
	if denied, _ := scope.denied("denied"); denied != nil {
		requests = append(requests, denied)
	}
	for _, obj := range []*unstructured.Unstructured{
		{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": scope.name("settings")}, "data": map[string]any{"a": "b"}}},
		{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": scope.name("gizmo")}, "spec": map[string]any{"size": "large"}}},
	} {
		r := scope.prepare(createRequest(obj), deployedRoutes(t)[0])
		for _, route := range deployedRoutes(t) { // labelled for every route, as they share the object
			r.Object = scope.place(r.Object, route, true)
		}
		requests = append(requests, r)
	}
	compareReview(t, w, configs, requests)

	// /validate alone, as the rollout tests register it: what it denies
	// without /mutate's help, denied alike offline and through the
	// apiserver.
	if _, ok := deployed(t)[validateRoute]; ok {
		alone := newScope(t, "review-validate")
		if denied, _ := alone.denied("denied-alone"); denied != nil {
			name := "validate-" + alone.namespace + ".webhook.example.com"
			registerRoute(t, validateRoute, hookOptions{name: name, url: w.url(validateRoute), caBundle: w.caPEM, scope: alone, seen: w.saw})
			compareReview(t, w, writeRegistered(t, t.TempDir(), []string{name}), []*preparedRequest{denied})
		}
	}

	// The audit: what the creates stored, as kubectl get -o json lists it.
	list := map[string]any{"apiVersion": "v1", "kind": "List", "items": []any{}}
	var audited []string
	for _, r := range requests {
		if r.Operation != admissionregistrationv1.Create || r.Subresource != "" {
			continue // an audit reviews what is stored as a CREATE
		}
		stored, err := r.client().Get(ctx, r.name(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // denied
		}
		if err != nil {
			t.Fatal(err)
		}
		list["items"] = append(list["items"].([]any), stored.Object)
		audited = append(audited, r.name())
	}
	listed, _ := json.Marshal(list)
	args := append([]string{"-f", "-", "-config", configs}, clusterContext(t, scope)...)
	if cluster := clusterDump(t, apiserver, webhookBinary, t.TempDir()); cluster != "" {
		args = append(args, "-cluster", cluster)
	}
	audit := runReview(t, listed, args...)
	for _, name := range audited {
		got := audit[name]
		if got.Verdict != "admitted" || (got.Mutate != nil && len(got.Mutate.Patch) > 0) {
			t.Errorf("the audit of stored %s: got %s %+v, want it admitted with no patch: the webhook admitted it as it is stored", name, got.Verdict, got.Mutate)
		}
	}
}

// compareReview reviews each request offline against configs, with the
// operation, the user and the objects it sends, and what the cluster holds
// of what the policy reads once the request has stored what it needs
// first, then sends it through the apiserver, and checks that review said
// what the apiserver did.
func compareReview(t *testing.T, w *webhookServer, configs string, requests []*preparedRequest) {
	t.Helper()
	ctx := context.Background()
	for _, r := range requests {
		if r.Subresource != "" {
			t.Logf("the %s is not compared: webhook review reviews whole objects", r)
			continue
		}
		if err := r.storeFirst(ctx); err != nil {
			t.Fatal(err)
		}
		offline := reviewOffline(t, r, configs, clusterDump(t, r.scope.api, webhookBinary, t.TempDir()))
		err := r.send(ctx, false)
		// A review comes to the log a moment after its answer: one that
		// was not sent is looked for as long as one that was (loggedLine).
		sent := w.loggedLine(func(line string) bool { return loggedOperation(line, r.name(), r.Operation) })
		t.Logf("the %s: review %s %v %v; the apiserver: %v; the webhook was sent it: %v", r, offline.Verdict, offline.Mutate, offline.Notes, err, sent)
		switch offline.Verdict {
		case "denied":
			if err == nil || !strings.Contains(err.Error(), "denied the request") || (offline.Validate != nil && !strings.Contains(err.Error(), offline.Validate.Message)) {
				t.Errorf("the %s: review says denied (%+v), the apiserver answered %v", r, offline.Validate, err)
			}
		case "admitted":
			if err != nil {
				t.Errorf("the %s: review says admitted, the apiserver refused it: %v", r, err)
				continue
			}
			if offline.Mutate == nil || len(offline.Mutate.Patch) == 0 || r.Operation == admissionregistrationv1.Delete {
				break
			}
			stored, err := r.client().Get(ctx, r.name(), metav1.GetOptions{})
			if err != nil {
				t.Errorf("the %s: reading what it stored: %v", r, err)
				continue
			}
			for _, op := range offline.Mutate.Patch {
				if op.Op != "add" && op.Op != "replace" {
					continue
				}
				if !holdsAt(stored.Object, strings.Split(op.Path, "/")[1:], op.Value) {
					t.Errorf("the %s: the reviewed patch sets %s to %v; the stored object has no such value there:\n%v", r, op.Path, op.Value, stored.Object)
				}
			}
		default:
			t.Errorf("the %s: review says %s (%s), want admitted or denied as the apiserver had it (%v)", r, offline.Verdict, offline.Error, err)
		}
		notSent := slicesContainsPrefix(offline.Notes, "no webhook of -config matches it")
		if notSent == sent {
			t.Errorf("the %s: review says the webhook is sent it: %v; the webhook was sent it: %v", r, !notSent, sent)
		}
	}
}

// reviewOffline runs `webhook review` on r as the apiserver would send it:
// its operation, its user, and its objects (an UPDATE's stored one as
// -old, a DELETE's as the object deleted), with cluster, when not "", as
// what the cluster holds of what the policy reads.
func reviewOffline(t *testing.T, r *preparedRequest, configs, cluster string) reviewResult {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, obj *unstructured.Unstructured) string { return writeObject(t, dir, name, obj) }
	args := append([]string{"-operation", string(r.Operation), "-config", configs}, clusterContext(t, r.scope)...)
	if cluster != "" {
		args = append(args, "-cluster", cluster)
	}
	switch r.Operation {
	case admissionregistrationv1.Delete:
		args = append(args, "-f", write("object.json", r.Stored))
	case admissionregistrationv1.Update:
		args = append(args, "-f", write("object.json", r.Object), "-old", write("old.json", r.Stored))
	default:
		args = append(args, "-f", write("object.json", r.Object))
	}
	user := []string{"-user", "admin", "-group", "system:masters", "-group", "system:authenticated"}
	if r.User != "" {
		// Impersonation adds system:authenticated to the groups it is given.
		user = []string{"-user", r.User, "-group", "system:authenticated"}
		for _, g := range r.Groups {
			user = append(user, "-group", g)
		}
	}
	results := runReviewAs(t, nil, user, args...)
	got, ok := results[r.name()]
	if !ok {
		t.Fatalf("webhook review said nothing of %s: %v", r.name(), results)
	}
	return got
}

// clusterContext are webhook review's flags that tell it what the cluster
// holds, as a user tells it: the scope's Namespace, whose labels its
// webhooks' namespaceSelectors read (kubectl get namespace -o yaml), and
// the kinds the apiserver serves, custom resources among them (kubectl
// api-resources -o wide).
func clusterContext(t *testing.T, s *testScope) []string {
	t.Helper()
	dir := t.TempDir()
	ns, err := s.api.client.CoreV1().Namespaces().Get(context.Background(), s.namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.APIVersion, ns.Kind = "v1", "Namespace"
	b, err := json.Marshal(ns)
	if err != nil {
		t.Fatal(err)
	}
	nsFile := filepath.Join(dir, "namespace.json")
	writeText(t, nsFile, string(b))
	return []string{"-f", nsFile, "-api-resources", apiResourcesFile(t, s.api, dir)}
}

// apiResourcesFile writes what `kubectl api-resources -o wide` prints of
// a's discovery into dir, and returns its path.
func apiResourcesFile(t *testing.T, a *apiServer, dir string) string {
	t.Helper()
	lists, err := a.client.Discovery().ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 8, 3, ' ', 0)
	fmt.Fprintln(w, "NAME\tSHORTNAMES\tAPIVERSION\tNAMESPACED\tKIND\tVERBS\tCATEGORIES")
	for _, list := range lists {
		for _, r := range list.APIResources {
			fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%s\t%s\t%s\n", r.Name, strings.Join(r.ShortNames, ","), list.GroupVersion, r.Namespaced, r.Kind, strings.Join(r.Verbs, ","), strings.Join(r.Categories, ","))
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "api-resources.txt")
	writeText(t, path, b.String())
	return path
}

// runReview runs `webhook review -o json args` with the webhook binary
// the suite built, as the admin the apiserver's client is, and returns its
// results by name.
func runReview(t *testing.T, stdin []byte, args ...string) map[string]reviewResult {
	t.Helper()
	return runReviewAs(t, stdin, []string{"-user", "admin", "-group", "system:masters", "-group", "system:authenticated"}, args...)
}

// runReviewAs is runReview as the user and groups that user, flags of
// webhook review, say.
func runReviewAs(t *testing.T, stdin []byte, user []string, args ...string) map[string]reviewResult {
	t.Helper()
	cmd := exec.Command(webhookBinary, append(append([]string{"review", "-o", "json"}, user...), args...)...)
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

// holdsAt reports whether doc, a stored object, holds want at the path of
// RFC 6901 reference tokens a reviewed patch operation named. The patch was
// made offline, on the object before the apiserver's built-in admission
// plugins added to its lists (ServiceAccount's token volume and mounts,
// DefaultTolerationSeconds' tolerations): an element of a list is looked
// for at its index first, then anywhere in the list, and "-", an append,
// anywhere.
func holdsAt(doc any, tokens []string, want any) bool {
	if len(tokens) == 0 {
		return holds(doc, want)
	}
	token := strings.NewReplacer("~1", "/", "~0", "~").Replace(tokens[0])
	switch node := doc.(type) {
	case map[string]any:
		child, ok := node[token]
		return ok && holdsAt(child, tokens[1:], want)
	case []any:
		if i, err := strconv.Atoi(token); err == nil && i >= 0 && i < len(node) && holdsAt(node[i], tokens[1:], want) {
			return true
		}
		if token != "-" {
			if _, err := strconv.Atoi(token); err != nil {
				return false
			}
		}
		return slices.ContainsFunc(node, func(element any) bool { return holdsAt(element, tokens[1:], want) })
	}
	return false
}

// holds reports whether got, a value of a stored object, holds want, the
// value a patch set: the same, but for what the apiserver added to a map
// or a list (each element of want is held by one of got's, in order),
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
	if w, ok := want.([]any); ok {
		g, ok := got.([]any)
		if !ok {
			return false
		}
		for _, element := range w {
			i := slices.IndexFunc(g, func(have any) bool { return holds(have, element) })
			if i < 0 {
				return false
			}
			g = g[i+1:]
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
