package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// The groups that route a user to one of the test's extra authorizers, by
// their matchConditions; a user in none of them reaches the one
// authorize/deploy/authorization-config.yaml configures.
const (
	routeV1beta1   = "route:v1beta1"         // the policy webhook, asked in v1beta1
	routeDownOpen  = "route:down-noopinion"  // a webhook that stops; failurePolicy NoOpinion
	routeDownDeny  = "route:down-deny"       // the same webhook; failurePolicy Deny
	routeStranger  = "route:stranger"        // the policy webhook, with a client certificate it does not allow
	routeCaptureV1 = "route:capture-v1"      // a recorder of SubjectAccessReviews, v1
	routeCaptureB1 = "route:capture-v1beta1" // the same, v1beta1
	routePrefix    = "route:"                // what the main authorizer skips
	janeRule       = "user=jane,verb=delete,resource=namespaces"
)

// TestAuthorization proves /authorize against a real kube-apiserver started
// with --authorization-config: the AuthorizationConfiguration that
// deploy/render.sh renders, Webhook before RBAC, to which it adds a few
// authorizers of its own, each reached only by the users of one group.
// The webhook runs with -client-ca-file and -allowed-client-names, and the
// apiserver presents a client certificate, as the rendered kubeconfig says.
// Users are impersonated from the admin token: system:masters is allowed
// before any authorizer runs.
func TestAuthorization(t *testing.T) {
	if _, err := os.Stat(filepath.Join(repoRoot, "authorize", "deploy", "authorization-config.yaml")); err != nil {
		t.Skipf("no authorization webhook is configured (authorize/deploy/authorization-config.yaml: %v): the authorize part is deleted", err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	clientCA := newTestCA(t, "webhook client CA")
	caFile := filepath.Join(dir, "client-ca.crt")
	if err := os.WriteFile(caFile, clientCA.certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	clientCert, clientKey := writePair(t, dir, "apiserver", newTestClientCert(t, clientCA, "kube-apiserver"))
	strangerCert, strangerKey := writePair(t, dir, "stranger", newTestClientCert(t, clientCA, "someone-else"))

	// The policy webhook, served with the certificate render.sh made.
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	hostport := "127.0.0.1:" + itoa(port)
	out := renderEnv(t, []string{"CLIENT_CERT=" + clientCert, "CLIENT_KEY=" + clientKey}, "url", hostport)
	policyDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(policyDir, "tls"), 0o755); err != nil {
		t.Fatal(err)
	}
	servingCA, err := os.ReadFile(filepath.Join(out, "certs", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	writeText(t, filepath.Join(policyDir, "tls", "ca.crt"), string(servingCA))
	policy := startWebhookOn(t, policyDir, hostport,
		"-tls-cert-file", filepath.Join(out, "certs", "tls.crt"), "-tls-private-key-file", filepath.Join(out, "certs", "tls.key"),
		"-authorization", "-client-ca-file", caFile, "-allowed-client-names", "kube-apiserver",
		"-deny", janeRule,
		"-deny", "user=jane,path=/version",
		"-deny", "group="+routeV1beta1+",verb=list,resource=secrets",
		"-deny", "group="+routeStranger, // never applied: the stranger is refused first
	)
	// The webhook that stops, and the recorder, which serves with its
	// development certificate.
	down := startWebhook(t, "", "-authorization", "-client-ca-file", caFile, "-allowed-client-names", "kube-apiserver", "-deny", "group=route:down-*")
	rec := &recorder{answer: noOpinionOnAnything}
	pair, err := tls.LoadX509KeyPair(filepath.Join(down.dir, "tls", "tls.crt"), filepath.Join(down.dir, "tls", "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	recSrv := httptest.NewUnstartedServer(rec)
	recSrv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	recSrv.StartTLS()
	t.Cleanup(recSrv.Close)

	rendered := filepath.Join(out, "apiserver", "authorization-kubeconfig.yaml")
	strangerConfig := writeKubeconfig(t, dir, "stranger", policy.url("/authorize"), servingCA, strangerCert, strangerKey)
	downConfig := writeKubeconfig(t, dir, "down", down.url("/authorize"), down.caPEM, clientCert, clientKey)
	recConfig := writeKubeconfig(t, dir, "recorder", recSrv.URL+"/authorize", down.caPEM, "", "")
	authzConfig := extendAuthorizationConfig(t, filepath.Join(out, "apiserver", "authorization-config.yaml"), dir,
		routedWebhook("v1beta1", routeV1beta1, "v1beta1", "NoOpinion", rendered),
		routedWebhook("down-noopinion", routeDownOpen, "v1", "NoOpinion", downConfig),
		routedWebhook("down-deny", routeDownDeny, "v1", "Deny", downConfig),
		routedWebhook("stranger", routeStranger, "v1", "NoOpinion", strangerConfig),
		routedWebhook("capture-v1", routeCaptureV1, "v1", "NoOpinion", recConfig),
		routedWebhook("capture-v1beta1", routeCaptureB1, "v1beta1", "NoOpinion", recConfig),
	)

	authz, err := startOwnAPIServer(t, "apiserver-authz", []string{"--authorization-config", authzConfig})
	if err != nil {
		t.Fatal(err)
	}

	// RBAC would let jane do anything, and lets the other users read
	// ConfigMaps in ns but not Secrets, except the v1beta1 users.
	ns := newScopeIn(t, authz, "authz").namespace
	victim := newScopeIn(t, authz, "authz-x").namespace
	grant(t, authz, "", "jane-cluster-admin", "cluster-admin", rbacv1.Subject{Kind: rbacv1.UserKind, Name: "jane"})
	readers := []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "bob"}}
	for _, g := range []string{routeV1beta1, routeDownOpen, routeDownDeny, routeStranger} {
		readers = append(readers, rbacv1.Subject{Kind: rbacv1.GroupKind, Name: g})
	}
	grant(t, authz, ns, "configmap-reader", makeRole(t, authz, ns, "configmap-reader", "configmaps", "get", "list"), readers...)
	grant(t, authz, ns, "secret-reader", makeRole(t, authz, ns, "secret-reader", "secrets", "list"), rbacv1.Subject{Kind: rbacv1.GroupKind, Name: routeV1beta1})
	listConfigMaps := func(c kubernetes.Interface) error {
		_, err := c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		return err
	}
	listSecrets := func(c kubernetes.Interface) error {
		_, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		return err
	}
	// Error, not DoRaw: it reads the Status of a refusal into the error.
	getPath := func(c kubernetes.Interface, path string) error {
		return c.Discovery().RESTClient().Get().AbsPath(path).Do(ctx).Error()
	}
	// RBAC sees new bindings through an informer: wait until it does.
	waitUntil(t, "RBAC lets bob list ConfigMaps", func() bool { return listConfigMaps(as(authz, "bob")) == nil })

	t.Run("a deny rule refuses what RBAC allows, with the rule as the reason", func(t *testing.T) {
		jane := as(authz, "jane")
		err := jane.CoreV1().Namespaces().Delete(ctx, victim, metav1.DeleteOptions{})
		wantForbidden(t, "jane deletes namespace "+victim, err, "denied by rule "+janeRule)
		t.Logf("kubectl --as jane delete namespace %s prints: Error from server (Forbidden): %v", victim, err)
		if _, err := authz.client.CoreV1().Namespaces().Get(ctx, victim, metav1.GetOptions{}); err != nil {
			t.Errorf("namespace %s after jane's denied delete: %v", victim, err)
		}
		_, err = jane.CoreV1().Namespaces().Get(ctx, victim, metav1.GetOptions{})
		wantAllowed(t, "jane gets namespace "+victim+" (no rule: RBAC decides)", err)
		wantLogged(t, policy, `user=jane verb=delete resource=namespaces`, "verdict=denied")
	})
	t.Run("no opinion leaves the decision to RBAC, both ways", func(t *testing.T) {
		bob := as(authz, "bob")
		wantAllowed(t, "bob lists ConfigMaps (a RoleBinding grants it)", listConfigMaps(bob))
		wantForbidden(t, "bob lists Secrets (nothing grants it)", listSecrets(bob), "")
		wantLogged(t, policy, `user=bob verb=list resource=secrets namespace=`+ns, "verdict=no_opinion")
	})
	t.Run("a path rule matches a non-resource request", func(t *testing.T) {
		wantForbidden(t, "jane gets /version", getPath(as(authz, "jane"), "/version"), "denied by rule user=jane,path=/version")
		wantAllowed(t, "bob gets /version", getPath(as(authz, "bob"), "/version"))
		wantAllowed(t, "jane gets /healthz", getPath(as(authz, "jane"), "/healthz"))
		wantLogged(t, policy, `user=jane verb=get request_path=/version`, "verdict=denied")
	})
	t.Run("subjectAccessReviewVersion v1beta1", func(t *testing.T) {
		beta := as(authz, "betty", routeV1beta1)
		wantForbidden(t, "a v1beta1 user lists Secrets", listSecrets(beta), "denied by rule group="+routeV1beta1+",verb=list,resource=secrets")
		wantAllowed(t, "a v1beta1 user lists ConfigMaps", listConfigMaps(beta))
	})
	t.Run("a client certificate not allowed gets no decision", func(t *testing.T) {
		mark := policy.logMark()
		// The webhook would deny everything of this group; RBAC allows it,
		// because the webhook refused the apiserver's call.
		wantAllowed(t, "a user sent with the stranger's certificate lists ConfigMaps", listConfigMaps(as(authz, "sam", routeStranger)))
		if log := policy.logSince(mark); !strings.Contains(log, `"someone-else" is not in -allowed-client-names`) && !strings.Contains(log, "common_name=someone-else") {
			t.Errorf("the webhook logged no refusal of the certificate someone-else:\n%s", log)
		}
	})
	// A failed call is an error beside the decision. The apiserver serves
	// the request if an authorizer allows it, and otherwise answers 500
	// naming the error, not 403 (WithAuthorization, in
	// k8s.io/apiserver/pkg/endpoints/filters/authorization.go).
	t.Run("with the webhook stopped, failurePolicy decides", func(t *testing.T) {
		open, closed := as(authz, "dana", routeDownOpen), as(authz, "dora", routeDownDeny)
		// Both are sent to the running webhook first, which denies them.
		wantForbidden(t, "NoOpinion user, webhook up", listConfigMaps(open), "denied by rule group=route:down-*")
		wantForbidden(t, "Deny user, webhook up", listConfigMaps(closed), "denied by rule group=route:down-*")
		down.stop()
		waitOutAuthorizationCache(t, time.Second) // routedWebhook's unauthorizedTTL
		wantAllowed(t, "NoOpinion user, webhook down, RBAC grants", listConfigMaps(open))
		wantFailedCall(t, "NoOpinion user, webhook down, RBAC does not grant", listSecrets(open), down.addr)
		wantFailedCall(t, "Deny user, webhook down, RBAC grants", listConfigMaps(closed), down.addr)
	})
	t.Run("capture", func(t *testing.T) {
		captureSubjectAccessReviews(t, authz, rec, ns, victim)
	})
}

// captureSubjectAccessReviews records what the apiserver sends for each
// fixture of authorize/testdata/ (and review/testdata/authorization/) and, with -capture
// (make capture), writes it there. Without -capture it still checks that
// every action produced a review, so the tool cannot rot. alice has no
// RoleBinding: nothing she does changes anything.
func captureSubjectAccessReviews(t *testing.T, authz *apiServer, rec *recorder, ns, victim string) {
	ctx := context.Background()
	v1, v1beta1 := as(authz, "alice", "developers", routeCaptureV1), as(authz, "alice", "developers", routeCaptureB1)
	getConfigMap := func(c kubernetes.Interface) func() error {
		return func() error {
			_, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
			return err
		}
	}
	getVersion := func(c kubernetes.Interface) func() error {
		return func() error {
			_, err := c.Discovery().RESTClient().Get().AbsPath("/version").DoRaw(ctx)
			return err
		}
	}
	fixtures := []struct {
		name   string
		action func() error
	}{
		{"v1-get-configmap", getConfigMap(v1)},
		{"v1beta1-get-configmap", getConfigMap(v1beta1)},
		{"v1-list-pods-selectors", func() error {
			_, err := v1.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web", FieldSelector: "spec.nodeName=node-1"})
			return err
		}},
		{"v1-delete-namespace", func() error {
			return v1.CoreV1().Namespaces().Delete(ctx, victim, metav1.DeleteOptions{})
		}},
		{"v1-get-deployment-scale", func() error {
			_, err := v1.AppsV1().Deployments(ns).GetScale(ctx, "web", metav1.GetOptions{})
			return err
		}},
		{"v1-get-version", getVersion(v1)},
		{"v1beta1-get-version", getVersion(v1beta1)},
	}
	for _, f := range fixtures {
		rec.take()
		// RBAC forbids most of these; GET /version is open to everyone.
		if err := f.action(); err != nil && !apierrors.IsForbidden(err) {
			t.Fatalf("%s: got %v, want it allowed or Forbidden", f.name, err)
		}
		bodies := rec.take()
		if len(bodies) != 1 {
			t.Fatalf("%s: got %d SubjectAccessReviews, want 1", f.name, len(bodies))
		}
		if !*capture {
			continue
		}
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, bytes.TrimSpace(bodies[0]), "", "  "); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		pretty.WriteByte('\n')
		// authorize's tests, and review's replay, which must not need the
		// authorize folder (a copier may delete it).
		for _, dir := range []string{filepath.Join(repoRoot, "authorize", "testdata"), filepath.Join(repoRoot, "review", "testdata", "authorization")} {
			if _, err := os.Stat(filepath.Dir(dir)); err != nil {
				continue
			}
			path := filepath.Join(dir, f.name+".json")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote %s", path)
		}
	}
}

// routedWebhook is a Webhook authorizer that only the users of group
// reach. It never caches, so a test sees a change at once.
func routedWebhook(name, group, version, failurePolicy, kubeconfig string) map[string]any {
	return map[string]any{
		"type": "Webhook",
		"name": name,
		"webhook": map[string]any{
			"timeout":                    "3s",
			"subjectAccessReviewVersion": version,
			"matchConditionSubjectAccessReviewVersion": "v1",
			"failurePolicy":             failurePolicy,
			"authorizedTTL":             "1s",
			"unauthorizedTTL":           "1s",
			"cacheAuthorizedRequests":   false,
			"cacheUnauthorizedRequests": false,
			"connectionInfo":            map[string]any{"type": "KubeConfigFile", "kubeConfigFile": kubeconfig},
			"matchConditions": []any{
				map[string]any{"expression": "!request.user.startsWith('system:')"},
				map[string]any{"expression": fmt.Sprintf("'%s' in request.groups", group)},
			},
		},
	}
}

// extendAuthorizationConfig writes into dir the AuthorizationConfiguration
// of path, its first authorizer (the webhook) made to skip the users of
// the test's routes, with extra inserted after it, before RBAC.
func extendAuthorizationConfig(t *testing.T, path, dir string, extra ...map[string]any) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	authorizers, _ := cfg["authorizers"].([]any)
	if len(authorizers) != 2 {
		t.Fatalf("%s: got %d authorizers, want the webhook and RBAC", path, len(authorizers))
	}
	first, _ := authorizers[0].(map[string]any)
	webhook, _ := first["webhook"].(map[string]any)
	if first["type"] != "Webhook" || webhook == nil {
		t.Fatalf("%s: the first authorizer is %v, want the webhook", path, first["type"])
	}
	conditions, _ := webhook["matchConditions"].([]any)
	webhook["matchConditions"] = append(conditions, map[string]any{"expression": fmt.Sprintf("!request.groups.exists(g, g.startsWith('%s'))", routePrefix)})
	fitAuthorizers(t, extra...)
	all := []any{first}
	for _, e := range extra {
		all = append(all, e)
	}
	cfg["authorizers"] = append(all, authorizers[1])
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "authorization-config.yaml")
	writeText(t, file, string(out))
	return file
}

// writeKubeconfig writes the kubeconfig of an authorizer that calls server,
// trusting caPEM, presenting certFile and keyFile unless they are empty.
func writeKubeconfig(t *testing.T, dir, name, server string, caPEM []byte, certFile, keyFile string) string {
	t.Helper()
	user := map[string]any{}
	if certFile != "" {
		user = map[string]any{"client-certificate": certFile, "client-key": keyFile}
	}
	b, err := yaml.Marshal(map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"clusters":        []any{map[string]any{"name": "webhook", "cluster": map[string]any{"server": server, "certificate-authority-data": caPEM}}},
		"users":           []any{map[string]any{"name": "apiserver", "user": user}},
		"contexts":        []any{map[string]any{"name": "webhook", "context": map[string]any{"cluster": "webhook", "user": "apiserver"}}},
		"current-context": "webhook",
	})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, name+"-kubeconfig.yaml")
	writeText(t, file, string(b))
	return file
}

// as is a client of a that impersonates user in groups.
func as(a *apiServer, user string, groups ...string) kubernetes.Interface {
	cfg := rest.CopyConfig(a.config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return kubernetes.NewForConfigOrDie(cfg)
}

// makeRole creates a Role in ns that grants verbs on a core resource, and
// returns its name.
func makeRole(t *testing.T, a *apiServer, ns, name, resource string, verbs ...string) string {
	t.Helper()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{resource}, Verbs: verbs}},
	}
	if _, err := a.client.RbacV1().Roles(ns).Create(context.Background(), role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Role %s: %v", name, err)
	}
	return name
}

// grant binds role to subjects: a Role in ns, or with ns empty a
// ClusterRole cluster-wide.
func grant(t *testing.T, a *apiServer, ns, name, role string, subjects ...rbacv1.Subject) {
	t.Helper()
	ctx := context.Background()
	meta := metav1.ObjectMeta{Name: name}
	if ns == "" {
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: meta, Subjects: subjects, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}
		if _, err := a.client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating ClusterRoleBinding %s: %v", name, err)
		}
		t.Cleanup(func() {
			_ = a.client.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
		return
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: meta, Subjects: subjects, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role}}
	if _, err := a.client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating RoleBinding %s: %v", name, err)
	}
}

func wantAllowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: got %v, want it allowed", what, err)
	}
}

// wantForbidden checks that err is a Forbidden whose message has reason,
// or, with reason empty, no reason of the webhook's rules.
func wantForbidden(t *testing.T, what string, err error, reason string) {
	t.Helper()
	switch {
	case !apierrors.IsForbidden(err):
		t.Errorf("%s: got %v, want Forbidden", what, err)
	case reason != "" && !strings.Contains(err.Error(), reason):
		t.Errorf("%s: got %q, want it to contain %q", what, err, reason)
	case reason == "" && strings.Contains(err.Error(), "denied by rule"):
		t.Errorf("%s: got %q, want a refusal of RBAC's or failurePolicy's, not a rule's", what, err)
	}
}

// wantFailedCall checks that err is the apiserver's 500 for an authorizer's
// failed call to addr, which refused the request.
func wantFailedCall(t *testing.T, what string, err error, addr string) {
	t.Helper()
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), addr) {
		t.Errorf("%s: got %v, want an InternalError naming the failed call to %s", what, err, addr)
	}
}

// wantLogged checks that a line of w's log comes to have every part.
func wantLogged(t *testing.T, w *webhookServer, parts ...string) {
	t.Helper()
	if !w.loggedLine(func(line string) bool {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				return false
			}
		}
		return true
	}) {
		t.Errorf("no line of the webhook's log has all of %q within %s:\n%s", parts, logTimeout, w.log.String())
	}
}
