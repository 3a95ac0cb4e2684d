package e2e

// URL mode from the control plane: the webhook configurations as static
// manifests that kube-apiserver loads at start-up (`deploy/render.sh
// static`, docs/deploy.md). What the apiserver does with them is in
// k8s.io/apiserver v0.37.1 and k8s.io/kubernetes v1.37.1; each test names
// the code whose behaviour it pins.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

const (
	// staticSuffix is the suffix kube-apiserver reserves for configurations
	// loaded from files (manifest.StaticConfigSuffix).
	staticSuffix = ".static.k8s.io"

	// reloadTimeout bounds how long a change to a manifest directory may
	// take to be used. The apiserver watches the directory and also re-reads
	// it every minute (source.defaultReloadInterval); well under a minute
	// shows the watch at work, not the poll.
	reloadTimeout = 20 * time.Second
)

// renderStatic runs `deploy/render.sh static` for a free loopback port and
// returns the output directory and the webhook's host:port.
func renderStatic(t *testing.T) (out, hostport string) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	hostport = "127.0.0.1:" + itoa(port)
	return render(t, "static", hostport), hostport
}

// startStaticAPIServer starts a kube-apiserver of the test's own, named
// name (its etcd prefix too), with --admission-control-config-file set to
// admissionConfig. It is stopped when the test ends, and its log shown if
// the test failed. The error is startAPIServer's: the apiserver exited or
// was not ready in time.
func startStaticAPIServer(t *testing.T, name, admissionConfig string) (*apiServer, error) {
	t.Helper()
	args := append([]string{"--admission-control-config-file", admissionConfig}, gateArgs(t, staticManifests)...)
	return startOwnAPIServer(t, name, args)
}

// waitForLog waits until p has logged substr after mark, for at most
// timeout.
func waitForLog(t *testing.T, p *process, mark int, substr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.logSince(mark), substr) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q within %s", p.name, substr, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestStaticManifests starts kube-apiserver with the AdmissionConfiguration
// that `deploy/render.sh static` writes, then the webhook from the
// certificates it made, reading that apiserver when its policy reads the
// cluster. The policy holds from the first write, the API
// can neither delete nor replace the configurations, and a change to the
// directory is used while the apiserver runs.
func TestStaticManifests(t *testing.T) {
	requireFeature(t, staticManifests)
	ctx := context.Background()
	out, hostport := renderStatic(t)
	api, err := startStaticAPIServer(t, "apiserver-static", filepath.Join(out, "admission-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The webhook starts once the apiserver is ready, as a policy that
	// reads the cluster reads this apiserver; it is up before the first
	// write.
	w := startRenderedWebhook(t, out, hostport, api.webhookCredentials(t, webhookBinary)...)
	mark := api.logMark()

	// No configuration is applied and nothing waits for one: the first
	// write after /readyz is already admitted through both webhooks.
	demonstrateEnforced(t, api, "static-first")
	for _, route := range deployedRoutes(t) {
		if !w.loggedLine(func(line string) bool { return strings.Contains(line, "path="+route+" ") }) {
			t.Errorf("the webhook answered no review on path=%s", route)
		}
	}

	t.Run("the API cannot see, delete or replace them", func(t *testing.T) {
		for _, route := range deployedRoutes(t) {
			dir := map[string]string{mutateRoute: "mutating", validateRoute: "validating"}[route]
			objs := objectsIn(t, filepath.Join(out, dir))
			if len(objs) != 1 {
				t.Fatalf("%s/%s holds %d objects, want 1", out, dir, len(objs))
			}
			obj := objs[0]
			name := obj.GetName()
			res := admissionregistrationv1.SchemeGroupVersion.WithResource(strings.ToLower(obj.GetKind()) + "s")
			client := api.dynamic.Resource(res)

			// They are not stored objects: the API does not list them
			// (they live only in the admission plugin's static source,
			// generic.Webhook.staticSource)...
			list, err := client.List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, item := range list.Items {
				if item.GetName() == name {
					t.Errorf("listing %s shows %s, want it absent", res.Resource, name)
				}
			}
			// ...so `kubectl delete` finds nothing to delete,
			if err := client.Delete(ctx, name, metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s %s: got %v, want NotFound", obj.GetKind(), name, err)
			}
			// and `kubectl replace` (an update) has nothing to update:
			// webhook configurations are not created on update
			// (AllowCreateOnUpdate is false in their registry strategy).
			changed := weakened(t, obj)
			if _, err := client.Update(ctx, changed, metav1.UpdateOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("updating %s %s: got %v, want NotFound", obj.GetKind(), name, err)
			}
			// `kubectl apply` finds none and creates one (client-side), or
			// asks the apiserver to (--server-side). Either create is
			// refused by the registry's Validate, which calls
			// ValidateStaticSuffix (pkg/apis/admissionregistration/validation
			// in k8s.io/kubernetes) while the feature gate is on.
			reserved := `names ending with ".static.k8s.io" are reserved for static manifest-based configurations and cannot be managed via the API`
			if _, err := client.Create(ctx, changed, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), reserved) {
				t.Errorf("creating %s %s: got %v, want Invalid: %s", obj.GetKind(), name, err, reserved)
			}
			body, err := json.Marshal(changed.Object)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.Patch(ctx, name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "kubectl"}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), reserved) {
				t.Errorf("server-side applying %s %s: got %v, want Invalid: %s", obj.GetKind(), name, err, reserved)
			}
		}
	})

	// After all that, nothing has changed.
	demonstrateEnforced(t, api, "static-after-api")

	t.Run("a change to the directory is used while running", func(t *testing.T) {
		// The validating webhooks' directory, or the mutating one's when
		// deploy/webhooks.yaml registers only /mutate.
		changedRoute, dir := validateRoute, "validating"
		if _, ok := deployed(t)[validateRoute]; !ok {
			changedRoute, dir = mutateRoute, "mutating"
		}
		validating := filepath.Join(out, dir)
		original, err := os.ReadFile(filepath.Join(validating, "webhooks.yaml"))
		if err != nil {
			t.Fatal(err)
		}

		// A broken file is reported and the last good set kept
		// (source.checkAndReload returns before storing anything).
		mark := api.logMark()
		writeText(t, filepath.Join(validating, "broken.yaml"), "kind: [\n")
		waitForLog(t, api.process, mark, "reloading admission manifest config", reloadTimeout)
		demonstrateEnforced(t, api, "static-broken-file")
		if err := os.Remove(filepath.Join(validating, "broken.yaml")); err != nil {
			t.Fatal(err)
		}

		// The rollout: write the new file beside the old and rename it
		// into place, so the apiserver never reads half a file. This one
		// leaves one more test's scope out of that route's webhooks.
		scope := newScopeIn(t, api, "static-reload")
		changed := excludeScope(t, original, scope)
		mark = api.logMark()
		tmp := filepath.Join(validating, ".webhooks.yaml.new") // not .yaml: the loader skips it
		writeText(t, tmp, string(changed))
		if err := os.Rename(tmp, filepath.Join(validating, "webhooks.yaml")); err != nil {
			t.Fatal(err)
		}
		waitForLog(t, api.process, mark, "reloaded admission manifest config", reloadTimeout)
		// The scope's next requests are reviewed by every other route
		// alone.
		if err := scope.sendThroughAll(ctx, "after-reload"); err != nil {
			t.Fatal(err)
		}
		// A review comes to the log a moment after its answer (loggedLine):
		// one that must not be there is looked for as long as one that
		// must.
		name := scope.name("after-reload")
		for _, route := range deployedRoutes(t) {
			got := w.loggedLine(func(line string) bool { return loggedName(line, name) && strings.Contains(line, "path="+route+" ") })
			if got != (route != changedRoute) {
				t.Errorf("after the reload, %s reviewed on path=%s: got %v, want %v; the webhook logged:\n%s", name, route, got, route != changedRoute, grepLines(w.log.String(), name))
			}
		}
	})

	if log := api.logSince(mark); strings.Contains(log, "ailed calling webhook") {
		t.Errorf("the apiserver failed to call a webhook:\n%s", grepLines(log, "ailed calling webhook"))
	}
}

// excludeScope returns the webhook configuration manifest with scope s
// left out of every webhook, whatever its selectors already say: its
// namespace by the namespaceSelector, and what its requests store and send
// by the objectSelector, for kinds of cluster scope. A matchExpressions
// term is ANDed with the others, and one with NotIn excludes what it names
// from any selector.
func excludeScope(t *testing.T, manifest []byte, s *testScope) []byte {
	t.Helper()
	var config map[string]any
	if err := yaml.Unmarshal(manifest, &config); err != nil {
		t.Fatalf("the rendered configuration does not parse: %v", err)
	}
	hooks, _ := config["webhooks"].([]any)
	if len(hooks) == 0 {
		t.Fatalf("the rendered %v has no webhooks", config["kind"])
	}
	for _, h := range hooks {
		hook, ok := h.(map[string]any)
		if !ok {
			t.Fatalf("a webhook of the rendered %v is a %T, want an object", config["kind"], h)
		}
		for field, term := range map[string]map[string]any{
			"namespaceSelector": {"key": namespaceNameLabel, "operator": "NotIn", "values": []any{s.namespace}},
			"objectSelector":    {"key": scopeLabel, "operator": "NotIn", "values": []any{s.id}},
		} {
			selector, _ := hook[field].(map[string]any)
			if selector == nil {
				selector = map[string]any{}
			}
			terms, _ := selector["matchExpressions"].([]any)
			selector["matchExpressions"] = append(terms, term)
			hook[field] = selector
		}
	}
	out, err := yaml.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// weakened returns a copy of a rendered configuration that a cluster-admin
// or a compromised controller might want in its place: failurePolicy
// Ignore on every webhook.
func weakened(t *testing.T, obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	changed := obj.DeepCopy()
	hooks, _, err := unstructured.NestedSlice(changed.Object, "webhooks")
	if err != nil || len(hooks) == 0 {
		t.Fatalf("%s %s has no webhooks: %v", obj.GetKind(), obj.GetName(), err)
	}
	for _, h := range hooks {
		hook, ok := h.(map[string]any)
		if !ok {
			t.Fatalf("%s %s: a webhook is a %T, want an object", obj.GetKind(), obj.GetName(), h)
		}
		hook["failurePolicy"] = string(admissionregistrationv1.Ignore)
	}
	if err := unstructured.SetNestedSlice(changed.Object, hooks, "webhooks"); err != nil {
		t.Fatal(err)
	}
	return changed
}

// TestStaticWebhookDownAtStart starts kube-apiserver with the static
// manifests while nothing listens at the webhook's address, then starts
// the webhook. Loading the manifests contacts no webhook
// (source.LoadInitial only reads and validates files), and the admission
// plugins are ready once the files are loaded (generic.Webhook's ready
// func), so the apiserver becomes ready; failurePolicy: Fail then refuses
// the writes the rules match until the webhook answers.
func TestStaticWebhookDownAtStart(t *testing.T) {
	requireFeature(t, staticManifests)
	ctx := context.Background()
	out, hostport := renderStatic(t)
	api, err := startStaticAPIServer(t, "apiserver-static-down", filepath.Join(out, "admission-config.yaml"))
	if err != nil {
		t.Fatalf("with the webhook down, the apiserver did not become ready: %v", err)
	}

	// The namespaces deploy/webhooks.yaml leaves out work as if there were
	// no webhook: of the webhook's own and kube-system, those its
	// namespaceSelectors do not select, as they are in a cluster, without
	// the labels the tests give their own namespaces. A request of a kind
	// of cluster scope is in no namespace to leave out.
	createLabelledNamespaceIn(t, api, "webhook-system", nil)
	ensureDefaultServiceAccount(t, api, "kube-system")
	for _, ns := range []string{"kube-system", "webhook-system"} {
		left := scopeOfNamespace(t, api, ns)
		if selectedByDeployed(t, ns, nil) {
			t.Logf("deploy/webhooks.yaml selects namespace %s: it is not one the rules leave out", ns)
			continue
		}
		for _, r := range left.admittedThroughAll("while-down") {
			if !r.namespaced {
				t.Logf("the %s is of a kind of cluster scope: no namespace leaves it out", r)
				continue
			}
			if err := r.send(ctx, false); err != nil {
				t.Errorf("the %s with the webhook down: got %v, want it admitted", r, err)
			}
		}
	}

	// A matched request is refused, naming the webhook: whichever
	// deployed webhook its rules send it to first.
	scope := newScopeIn(t, api, "static-down")
	err = scope.sendThroughAll(ctx, "while-down")
	var names []string
	for _, route := range deployedRoutes(t) {
		names = append(names, deployed(t)[route].names...)
	}
	named := slices.ContainsFunc(names, func(name string) bool {
		return err != nil && strings.Contains(err.Error(), fmt.Sprintf("failed calling webhook %q", name))
	})
	if !named || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("the admitted requests in %s with the webhook down: got %v, want an error naming one of the webhooks %q and connection refused", scope.namespace, err, names)
	}

	// Once the webhook answers, the next request goes through it.
	w := startRenderedWebhook(t, out, hostport, api.webhookCredentials(t, webhookBinary)...)
	if err := scope.sendThroughAll(ctx, "after-start"); err != nil {
		t.Fatalf("the admitted requests in %s once the webhook runs: %v", scope.namespace, err)
	}
	reviewedOnEach(t, w, scope, "after-start")
}

// staticName is the metadata.name line of a rendered configuration (the
// only key indented by two spaces), ending in the reserved suffix.
var staticName = regexp.MustCompile(`(?m)^(  name: .+)` + regexp.QuoteMeta(staticSuffix) + `$`)

// renameStatic gives the configuration in yaml the suffix suffix in place
// of .static.k8s.io. Only the name changes: the suffix may also be in a
// comment.
func renameStatic(yaml, suffix string) string {
	return staticName.ReplaceAllString(yaml, "${1}"+suffix)
}

// TestStaticMalformedManifest starts kube-apiserver with a bad file in a
// manifest directory. The admission plugin's ValidateInitialization
// (generic.Webhook) returns the loader's error, and the apiserver exits
// before it serves, naming the directory, the file and what is wrong.
func TestStaticMalformedManifest(t *testing.T) {
	requireFeature(t, staticManifests)
	out, _ := renderStatic(t)
	// A policy that registers one route renders one directory's file; the
	// other is made from it, so each directory holds a good configuration.
	validatingYAML, errV := os.ReadFile(filepath.Join(out, "validating", "webhooks.yaml"))
	mutatingYAML, errM := os.ReadFile(filepath.Join(out, "mutating", "webhooks.yaml"))
	switch {
	case errV != nil && errM != nil:
		t.Fatalf("render.sh static wrote neither configuration: %v; %v", errV, errM)
	case errV != nil:
		validatingYAML = otherKind(t, mutatingYAML, "ValidatingWebhookConfiguration")
	case errM != nil:
		mutatingYAML = otherKind(t, validatingYAML, "MutatingWebhookConfiguration")
	}
	admissionConfig, err := os.ReadFile(filepath.Join(out, "admission-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		file string // written to validating/bad.yaml
		want string // in the apiserver's log
	}{
		{"not YAML", "kind: [\n", `did not find expected node content`},
		{"both kinds in one directory", string(mutatingYAML), `unsupported resource type *v1.MutatingWebhookConfiguration`},
		{"a name without the suffix", renameStatic(string(validatingYAML), ".example.org"),
			`must have a name ending with ".static.k8s.io"`},
		{"service mode", strings.Replace(renameStatic(string(validatingYAML), "-service"+staticSuffix), "url: https://", "service: {name: webhook, namespace: webhook-system}\n    #", 1),
			`clientConfig.service is not supported for static manifests; use clientConfig.url instead`},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A copy of the rendered directories, with the bad file added.
			dir := t.TempDir()
			for _, sub := range []string{"mutating", "validating"} {
				if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			writeText(t, filepath.Join(dir, "mutating", "webhooks.yaml"), string(mutatingYAML))
			writeText(t, filepath.Join(dir, "validating", "webhooks.yaml"), string(validatingYAML))
			bad := filepath.Join(dir, "validating", "bad.yaml")
			writeText(t, bad, tc.file)
			config := filepath.Join(dir, "admission-config.yaml")
			writeText(t, config, strings.ReplaceAll(string(admissionConfig), out, dir))

			api, err := startStaticAPIServer(t, "apiserver-static-bad-"+itoa(i), config)
			if api == nil {
				t.Fatal(err)
			}
			if err == nil {
				t.Fatal("the apiserver started with a bad manifest, want it to exit")
			}
			if !api.exited() {
				t.Fatalf("got %v, want the apiserver to exit", err)
			}
			got := exitError(api.log.String())
			for _, want := range []string{
				`failed to initialize admission plugin "ValidatingAdmissionWebhook": failed to load static webhook manifests from "` + filepath.Join(dir, "validating") + `": error loading ` + bad + `: `,
				tc.want,
			} {
				if !strings.Contains(got, want) {
					t.Errorf("the apiserver exited with %q, want it to contain %q; its log ends:\n%s", got, want, lastLines(api.log.String(), 5))
				}
			}
		})
	}
}

// otherKind returns the rendered configuration manifest as one of kind
// instead, its webhooks the same but for the field only a mutating webhook
// has, reinvocationPolicy, whatever its value.
func otherKind(t *testing.T, manifest []byte, kind string) []byte {
	t.Helper()
	var config map[string]any
	if err := yaml.Unmarshal(manifest, &config); err != nil {
		t.Fatalf("the rendered configuration does not parse: %v", err)
	}
	config["kind"] = kind
	hooks, _ := config["webhooks"].([]any)
	for _, h := range hooks {
		if hook, ok := h.(map[string]any); ok {
			delete(hook, "reinvocationPolicy")
		}
	}
	out, err := yaml.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// exitError returns the error kube-apiserver logged as it exited: klog's
// `"command failed" err="…"`, unquoted; or "" if there is none.
func exitError(log string) string {
	const prefix = `"command failed" err=`
	for _, line := range strings.Split(log, "\n") {
		if i := strings.Index(line, prefix); i >= 0 {
			if msg, err := strconv.Unquote(line[i+len(prefix):]); err == nil {
				return msg
			}
		}
	}
	return ""
}

// lastLines returns the last n lines of log.
func lastLines(log string, n int) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestRenderedModesAgree renders every mode of deploy/render.sh and checks
// that each webhook differs only in where the apiserver calls it: rules,
// namespaceSelector, sideEffects, timeoutSeconds, failurePolicy and every
// other field come from deploy/webhooks.yaml alike, so the modes cannot
// drift apart.
func TestRenderedModesAgree(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	hostport := "127.0.0.1:" + itoa(port)
	inCluster := renderedWebhooks(t, render(t, "in-cluster"))
	url := renderedWebhooks(t, render(t, "url", hostport))
	staticOut := render(t, "static", hostport)
	static := renderedWebhooks(t, filepath.Join(staticOut, "mutating"))
	for k, v := range renderedWebhooks(t, filepath.Join(staticOut, "validating")) {
		static[k] = v
	}
	if len(inCluster) == 0 {
		t.Fatal("the in-cluster mode rendered no webhooks")
	}
	for mode, got := range map[string]map[string]renderedWebhook{"url": url, "static": static} {
		if len(got) != len(inCluster) {
			t.Errorf("%s mode rendered %d webhooks, in-cluster %d", mode, len(got), len(inCluster))
		}
		for name, want := range inCluster {
			hook, ok := got[name]
			if !ok {
				t.Errorf("%s mode has no webhook %s", mode, name)
				continue
			}
			if !reflect.DeepEqual(hook.spec, want.spec) {
				t.Errorf("%s mode's webhook %s:\ngot  %s\nwant %s (as in-cluster)", mode, name, hook.spec, want.spec)
			}
			wantConfig := want.config
			if mode == "static" {
				wantConfig += staticSuffix
			}
			if hook.config != wantConfig {
				t.Errorf("%s mode's webhook %s is in configuration %q, want %q", mode, name, hook.config, wantConfig)
			}
			if hook.url != url[name].url || hook.url == "" {
				t.Errorf("%s mode's webhook %s calls %q, want %q as URL mode does", mode, name, hook.url, url[name].url)
			}
		}
	}
}

// renderedWebhook is one webhook of a rendered configuration: the
// configuration's name, its clientConfig.url, and everything else but its
// clientConfig as JSON.
type renderedWebhook struct {
	config, url, spec string
}

// renderedWebhooks returns the webhooks of the configurations in dir by
// kind/webhook name.
func renderedWebhooks(t *testing.T, dir string) map[string]renderedWebhook {
	t.Helper()
	hooks := map[string]renderedWebhook{}
	add := func(kind, config, name string, cc admissionregistrationv1.WebhookClientConfig, rest any) {
		spec, err := json.Marshal(rest)
		if err != nil {
			t.Fatal(err)
		}
		var url string
		if cc.URL != nil {
			url = *cc.URL
		}
		hooks[kind+"/"+name] = renderedWebhook{config: config, url: url, spec: string(spec)}
	}
	for _, obj := range objectsIn(t, dir) {
		switch obj.GetKind() {
		case "MutatingWebhookConfiguration":
			var c admissionregistrationv1.MutatingWebhookConfiguration
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &c); err != nil {
				t.Fatal(err)
			}
			for _, h := range c.Webhooks {
				cc := h.ClientConfig
				h.ClientConfig = admissionregistrationv1.WebhookClientConfig{}
				add(obj.GetKind(), c.Name, h.Name, cc, h)
			}
		case "ValidatingWebhookConfiguration":
			var c admissionregistrationv1.ValidatingWebhookConfiguration
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &c); err != nil {
				t.Fatal(err)
			}
			for _, h := range c.Webhooks {
				cc := h.ClientConfig
				h.ClientConfig = admissionregistrationv1.WebhookClientConfig{}
				add(obj.GetKind(), c.Name, h.Name, cc, h)
			}
		}
	}
	return hooks
}
