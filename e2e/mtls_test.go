package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Scenario 7: only the apiserver gets in. A second apiserver is started
// with an AdmissionConfiguration whose kubeConfigFile presents a client
// certificate to every webhook; the suite's apiserver presents none.
func TestMutualTLS(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clientCA := newTestCA(t, "webhook client CA") // never the cluster's CA
	clientCert, clientKey := writePair(t, dir, "apiserver-client", newTestClientCert(t, clientCA, "kube-apiserver"))
	caFile := filepath.Join(dir, "client-ca.crt")
	if err := os.WriteFile(caFile, clientCA.certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "webhook-kubeconfig.yaml")
	writeText(t, kubeconfig, fmt.Sprintf(`apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate: %s
    client-key: %s
`, clientCert, clientKey))
	admissionConfig := filepath.Join(dir, "admission-config.yaml")
	writeText(t, admissionConfig, fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %[1]s
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %[1]s
`, kubeconfig))
	withCert, err := startOwnAPIServer(t, "apiserver-mtls", []string{"--admission-control-config-file", admissionConfig})
	if err != nil {
		t.Fatal(err)
	}

	// Each reads what its policy reads of the apiserver that calls it.
	allowed := startWebhook(t, "", append(withCert.webhookCredentials(t, webhookBinary), "-client-ca-file", caFile, "-allowed-client-names", "kube-apiserver")...)
	notAllowed := startWebhook(t, "", append(withCert.webhookCredentials(t, webhookBinary), "-client-ca-file", caFile, "-allowed-client-names", "someone-else")...)

	t.Run("apiserver with a client certificate is admitted", func(t *testing.T) {
		scope := newScopeIn(t, withCert, "mtls-admitted")
		registerDeployed(t, allowed, scope, hookOptions{})
		if err := scope.sendThroughAll(ctx, "web"); err != nil {
			t.Fatal(err)
		}
		reviewedOnEach(t, allowed, scope, "web")
	})
	t.Run("apiserver without a client certificate is refused", func(t *testing.T) {
		scope := newScope(t, "mtls-no-cert")
		route := oneRoute(t)
		registerRoute(t, route, hookOptions{name: "nocert.webhook.example.com", url: allowed.url(route), caBundle: allowed.caPEM, scope: scope, seen: refused})
		err := scope.sendAdmitted(ctx, route, "web")
		if err == nil || !strings.Contains(err.Error(), `failed calling webhook "nocert.webhook.example.com"`) {
			t.Errorf("got %v, want the call refused and failurePolicy Fail to reject", err)
		}
		if !allowed.loggedLine(func(line string) bool { return strings.Contains(line, "without a client certificate") }) {
			t.Error("the webhook did not log the refusal")
		}
	})
	t.Run("a name not in -allowed-client-names is refused", func(t *testing.T) {
		scope := newScopeIn(t, withCert, "mtls-wrong-name")
		route := oneRoute(t)
		registerRoute(t, route, hookOptions{name: "wrongname.webhook.example.com", url: notAllowed.url(route), caBundle: notAllowed.caPEM, scope: scope, seen: refused})
		err := scope.sendAdmitted(ctx, route, "web")
		if err == nil || !strings.Contains(err.Error(), `"kube-apiserver" is not in -allowed-client-names`) {
			t.Errorf("got %v, want the webhook's 403 message passed through", err)
		}
	})
}

func writeText(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}
