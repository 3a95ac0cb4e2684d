package e2e

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// render runs the documented command, deploy/render.sh, with the webhook
// binary built for this run.
func render(t *testing.T, args ...string) string {
	t.Helper()
	return renderEnv(t, nil, args...)
}

// renderEnv is render with env added to the environment.
func renderEnv(t *testing.T, env []string, args ...string) string {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(repoRoot, "deploy", "render.sh"), append(args, out)...)
	cmd.Env = append(append(os.Environ(), "WEBHOOK="+webhookBinary), env...)
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy/render.sh %v: %v\n%s", args, err, output)
	}
	return out
}

// startRenderedWebhook runs the webhook on hostport with the certificates
// render.sh made in out/certs, as its output tells the user to.
func startRenderedWebhook(t *testing.T, out, hostport string, args ...string) *webhookServer {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tls"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The test's own client checks /ping against the same CA.
	ca, err := os.ReadFile(filepath.Join(out, "certs", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls", "ca.crt"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	return startWebhookOn(t, dir, hostport, append([]string{"-tls-cert-file", filepath.Join(out, "certs", "tls.crt"), "-tls-private-key-file", filepath.Join(out, "certs", "tls.key")}, args...)...)
}

// objectsIn reads every YAML document of every .yaml file in dir, as
// `kubectl apply -f dir` does.
func objectsIn(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	var objs []*unstructured.Unstructured
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewYAMLOrJSONDecoder(r, 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(obj.Object) > 0 {
				objs = append(objs, obj)
			}
		}
		r.Close()
	}
	return objs
}

// apply server-side applies objs; with dryRun the apiserver validates,
// admits and defaults each one but stores nothing. Namespaces are always
// applied for real, since namespaced objects cannot even be dry-run into a
// namespace that does not exist, and kept for the run: with no
// controller-manager, a namespace deleted stays Terminating, and nothing
// can be made in it again. Everything else applied for real is removed
// when the test ends.
func apply(t *testing.T, a *apiServer, objs []*unstructured.Unstructured, dryRun bool) {
	t.Helper()
	ctx := context.Background()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(a.client.Discovery()))
	// Warnings are kept: PodSecurity admission warns about a Deployment
	// whose pods its namespace's level would refuse.
	warnings := &warningCollector{}
	cfg := rest.CopyConfig(a.config)
	cfg.WarningHandler = warnings
	dyn := dynamic.NewForConfigOrDie(cfg)
	// Namespaces first, as kubectl orders them.
	sort.SliceStable(objs, func(i, j int) bool { return objs[i].GetKind() == "Namespace" && objs[j].GetKind() != "Namespace" })
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk, obj.GetName(), err)
		}
		var res dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if obj.GetNamespace() != "" {
			res = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		}
		opts := metav1.PatchOptions{FieldManager: "e2e"}
		realApply := !dryRun || gvk.Kind == "Namespace"
		if !realApply {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		body, err := obj.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := res.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, opts); err != nil {
			t.Fatalf("applying %s %s: %v", gvk.Kind, obj.GetName(), err)
		}
		if realApply && gvk.Kind != "Namespace" {
			name := obj.GetName()
			t.Cleanup(func() { _ = res.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		}
	}
	for _, w := range warnings.all() {
		t.Errorf("the apiserver warned: %s", w)
	}
}

// warningCollector keeps the warnings the apiserver sends.
type warningCollector struct {
	mu       sync.Mutex
	warnings []string
}

func (c *warningCollector) HandleWarningHeader(_ int, _ string, text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.warnings = append(c.warnings, text)
}

func (c *warningCollector) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.warnings
}

// TestDeployManifests applies every in-cluster manifest, rendered by the
// documented command, with server-side dry-run: the apiserver's own
// validation of the Deployment, Service, PDB, Secret, both webhook
// configurations and, for a policy that reads the cluster, its RBAC. The
// Deployment mounts its ServiceAccount's token exactly when the policy
// reads the cluster, and only then is RBAC rendered.
func TestDeployManifests(t *testing.T) {
	out := render(t, "in-cluster")
	objs := objectsIn(t, out)
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
		if o.GetKind() == "Deployment" {
			mounted, _, _ := unstructured.NestedBool(o.Object, "spec", "template", "spec", "automountServiceAccountToken")
			if reads := readsOf(t, webhookBinary); mounted != (len(reads) > 0) {
				t.Errorf("the Deployment has automountServiceAccountToken: %v, for a policy that reads %v: want the token exactly when it reads something", mounted, reads)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(out, "02-rbac.yaml")); (err == nil) != (len(readsOf(t, webhookBinary)) > 0) {
		t.Errorf("rbac.yaml rendered: %v; the policy reads %v: want RBAC exactly when it reads something", err == nil, readsOf(t, webhookBinary))
	}
	want := []string{"Namespace", "ServiceAccount", "Deployment", "Service", "PodDisruptionBudget", "Secret"}
	for _, route := range deployedRoutes(t) {
		want = append(want, configurationKind[route])
	}
	for _, want := range want {
		if !kinds[want] {
			t.Errorf("the rendered manifests have no %s", want)
		}
	}
	// Every source manifest is among those rendered, numbered in the
	// order kubectl applies them, the Namespace first.
	sources, _ := filepath.Glob(filepath.Join(repoRoot, "deploy", "in-cluster", "*.yaml"))
	sources = append(sources, filepath.Join(repoRoot, "deploy", "webhooks.yaml"))
	for _, s := range sources {
		if m, _ := filepath.Glob(filepath.Join(out, "[0-9][0-9]-"+filepath.Base(s))); len(m) != 1 {
			t.Errorf("%s was not rendered as NN-%s", s, filepath.Base(s))
		}
	}
	if names, _ := filepath.Glob(filepath.Join(out, "*.yaml")); len(names) == 0 || filepath.Base(names[0]) != "00-namespace.yaml" {
		t.Errorf("the first file kubectl applies is %v, want 00-namespace.yaml", names)
	}
	rendered, _ := os.ReadFile(filepath.Join(out, "08-webhooks.yaml"))
	if strings.Contains(string(rendered), "__") {
		t.Errorf("a placeholder is left in the rendered webhooks.yaml:\n%s", rendered)
	}
	apply(t, apiserver, objs, true)
}

// TestURLMode registers the URL-mode configurations the documented command
// renders, pointing at a webhook started from the certificates it made, and
// creates an object through them. A policy that reads the cluster reads it
// with exactly the RBAC rendered, as the ServiceAccount it binds: the
// webhook syncs its views with it, and the account may get, list and watch
// what the policy reads and nothing else.
func TestURLMode(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	hostport := "127.0.0.1:" + itoa(port)
	out := render(t, "url", hostport)

	var credentials []string
	if reads := readsOf(t, webhookBinary); len(reads) > 0 {
		credentials = renderedCredentials(t, out, reads)
	}
	w := startRenderedWebhook(t, out, hostport, credentials...)
	// These configurations act on every namespace but webhook-system and
	// kube-system, as a user's would; the suite runs tests one at a time.
	apply(t, apiserver, objectsIn(t, out), false)
	scope := newScope(t, "url-mode")
	for _, route := range deployedRoutes(t) {
		waitForHookActive(t, hookOptions{name: "url-mode " + route, scope: scope, seen: w.saw}, route)
	}

	if err := scope.sendThroughAll(context.Background(), "web"); err != nil {
		t.Fatal(err)
	}
	reviewedOnEach(t, w, scope, "web")
}

// TestRenderWithoutAuthorization renders URL mode from a copy of deploy/
// in a repository without authorize/, as a copier who deleted that part
// has it: the admission webhooks' configurations are rendered, and no
// apiserver directory.
func TestRenderWithoutAuthorization(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(filepath.Join(root, "deploy"), os.DirFS(filepath.Join(repoRoot, "deploy"))); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "deploy", "render.sh"), "url", "127.0.0.1:8443", out)
	cmd.Env = append(os.Environ(), "WEBHOOK="+webhookBinary)
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy/render.sh url without the authorization files: %v\n%s", err, output)
	}
	if _, err := os.Stat(filepath.Join(out, "08-webhooks.yaml")); err != nil {
		t.Errorf("no webhooks.yaml rendered: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "apiserver")); !os.IsNotExist(err) {
		t.Errorf("an apiserver directory was rendered for an authorization webhook that is not configured (%v)", err)
	}
}

// TestRenderAgainAndNamespaces: rendering again into an OUT an earlier
// render.sh wrote leaves only what this one wrote, since kubectl applies
// every file there (a deployment.yaml of before the files were numbered
// was applied after 06-deployment.yaml, undoing it: a Pod without
// fsGroup, in CrashLoopBackOff); and a namespace that is not the
// webhook's alone is refused, as 00-namespace.yaml would enforce Pod
// Security restricted on it and kubectl delete -f OUT delete it
// (helper-28, on e2e's node).
func TestRenderAgainAndNamespaces(t *testing.T) {
	out := t.TempDir()
	stale := []string{"deployment.yaml", "secret.yaml", "02-rbac.yaml"}
	for _, name := range stale {
		if err := os.WriteFile(filepath.Join(out, name), []byte("kind: Stale\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join(repoRoot, "deploy", "render.sh"), "in-cluster", out)
	cmd.Env = append(os.Environ(), "WEBHOOK="+webhookBinary)
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy/render.sh in-cluster: %v\n%s", err, output)
	}
	for _, name := range stale {
		if _, err := os.Stat(filepath.Join(out, name)); !os.IsNotExist(err) {
			t.Errorf("%s, of an earlier render, is still in OUT (%v): kubectl apply -f OUT would apply it", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "06-deployment.yaml")); err != nil {
		t.Errorf("no 06-deployment.yaml rendered: %v", err)
	}

	for _, namespace := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		cmd := exec.Command(filepath.Join(repoRoot, "deploy", "render.sh"), "in-cluster", t.TempDir())
		cmd.Env = append(os.Environ(), "WEBHOOK="+webhookBinary, "NAMESPACE="+namespace)
		output, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(output), "want a namespace of the webhook's own") {
			t.Errorf("NAMESPACE=%s: got %v:\n%s\nwant exit 2 and why", namespace, err, output)
		}
	}
}

// renderedCredentials applies what render.sh rendered for a policy that
// reads the cluster (the Namespace, the ServiceAccount webhook-system/
// webhook and rbac.yaml), checks that RBAC lets that account get, list and
// watch each kind read and nothing more, and returns -kubeconfig of a
// token of it, as an operator gives the webhook outside the cluster.
func renderedCredentials(t *testing.T, out string, reads []readKind) []string {
	t.Helper()
	ctx := context.Background()
	var objs []*unstructured.Unstructured
	for _, o := range objectsIn(t, out) {
		if !strings.HasSuffix(o.GetKind(), "WebhookConfiguration") {
			objs = append(objs, o)
		}
	}
	apply(t, apiserver, objs, false)
	const user = "system:serviceaccount:webhook-system:webhook"
	can := func(verb string, k readKind, namespace string) bool {
		r := k.resource()
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: r.Group, Resource: r.Resource, Namespace: namespace}}}
		got, err := apiserver.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		return err == nil && got.Status.Allowed
	}
	for _, k := range reads {
		for deadline := time.Now().Add(startTimeout); !can("watch", k, k.Namespace); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("RBAC did not let %s watch %s within %s of rbac.yaml's apply", user, k.Resource, startTimeout)
			}
		}
		for _, verb := range []string{"get", "list"} {
			if !can(verb, k, k.Namespace) {
				t.Errorf("rbac.yaml does not let %s %s %s", user, verb, k.Resource)
			}
		}
		for _, verb := range []string{"create", "update", "delete"} {
			if can(verb, k, k.Namespace) {
				t.Errorf("rbac.yaml lets %s %s %s: it should only read", user, verb, k.Resource)
			}
		}
		if k.Namespace != "" && can("list", k, "") {
			t.Errorf("rbac.yaml lets %s list %s in every namespace; the policy reads only %s", user, k.Resource, k.Namespace)
		}
	}
	unread := readKind{APIVersion: "v1", Kind: "Secret", Resource: "secrets"}
	if !slices.ContainsFunc(reads, func(k readKind) bool { return k.Resource == "secrets" }) && can("list", unread, "") {
		t.Errorf("rbac.yaml lets %s list Secrets, which the policy does not read", user)
	}
	day := int64(24 * 60 * 60)
	token, err := apiserver.client.CoreV1().ServiceAccounts("webhook-system").CreateToken(ctx, "webhook",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &day}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := writeReaderKubeconfig(path, apiserver, token.Status.Token); err != nil {
		t.Fatal(err)
	}
	return []string{"-kubeconfig", path}
}

// TestURLModeRecipe runs the install lines of deploy/url-mode/webhook.service
// as its header gives them, in a directory of the test's own for
// /etc/webhook and with group 65532 for the service user's: the service
// reads the serving key, and the CA's key, which signs any certificate the
// apiserver would trust, stays root's alone.
func TestURLModeRecipe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root; CI runs as root")
	}
	unit, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "url-mode", "webhook.service"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "etc-webhook")
	ran := 0
	for line := range strings.Lines(string(unit)) {
		cmd, ok := strings.CutPrefix(strings.TrimSpace(line), "#   ")
		if !ok {
			continue
		}
		cmd, _, _ = strings.Cut(cmd, "#") // a comment after the command
		if f := strings.Fields(cmd); len(f) == 0 || slices.Contains([]string{"useradd", "install", "systemctl"}, f[0]) {
			continue // the machine's, not the files'
		}
		cmd = strings.NewReplacer("/etc/webhook", dir, "webhook certs", webhookBinary+" certs", "root:webhook", "root:65532", "HOST", "localhost").Replace(cmd)
		if out, err := exec.Command("sh", "-ec", cmd).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		ran++
	}
	if ran < 2 {
		t.Fatalf("ran %d of the recipe's lines, want its certs, chown and chmod", ran)
	}
	for _, tc := range []struct {
		file      string
		groupRead bool
	}{{"tls.key", true}, {"ca.key", false}} {
		fi, err := os.Stat(filepath.Join(dir, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		serviceReads := st.Gid == 65532 && fi.Mode().Perm()&0o040 != 0 || fi.Mode().Perm()&0o004 != 0
		if serviceReads != tc.groupRead {
			t.Errorf("%s: mode %v, owner %d:%d; the service user reads it: %v, want %v", tc.file, fi.Mode().Perm(), st.Uid, st.Gid, serviceReads, tc.groupRead)
		}
	}
}
