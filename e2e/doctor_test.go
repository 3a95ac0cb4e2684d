package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// doctorFinding is one line of `webhook doctor -o json`.
type doctorFinding struct {
	Webhook string `json:"webhook"`
	Check   string `json:"check"`
	Level   string `json:"level"`
	Found   string `json:"found"`
	Fix     string `json:"fix"`
}

// runDoctor pipes config into `webhook doctor -f -`, as docs/troubleshooting.md's
// `kubectl get ... -o yaml | webhook doctor -f -` does, and returns what
// it printed and its exit status.
func runDoctor(t *testing.T, config []byte, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(webhookBinary, append([]string{"doctor", "-f", "-"}, args...)...)
	cmd.Stdin = bytes.NewReader(config)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return string(out) + stderr.String(), exit.ExitCode()
	case err != nil:
		t.Fatalf("webhook doctor: %v", err)
	}
	return string(out) + stderr.String(), 0
}

// diagnose runs doctor on config in text, logged for the reader, and in
// JSON, returned for assertions.
func diagnose(t *testing.T, config []byte, args ...string) ([]doctorFinding, int) {
	t.Helper()
	text, status := runDoctor(t, config, args...)
	t.Logf("$ webhook doctor -f - %s\n%s(exit status %d)", strings.Join(args, " "), text, status)
	out, jsonStatus := runDoctor(t, config, append(args, "-o", "json")...)
	var rep struct{ Findings []doctorFinding }
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("webhook doctor -o json printed %q: %v", out, err)
	}
	if jsonStatus != status {
		t.Errorf("exit status %d with -o json, %d without", jsonStatus, status)
	}
	return rep.Findings, status
}

// failedChecks lists the checks that failed, as "check: found".
func failedChecks(findings []doctorFinding) map[string]string {
	failed := map[string]string{}
	for _, f := range findings {
		if f.Level == "fail" {
			failed[f.Check] = f.Found
		}
	}
	return failed
}

// fetchYAML gets a webhook configuration back from the apiserver and writes
// it as `kubectl get validatingwebhookconfiguration NAME -o yaml` does:
// the stored object, defaults and managedFields included.
func fetchYAML(t *testing.T, mutating bool, name string) []byte {
	t.Helper()
	return kubectlYAML(t, fetchConfig(t, mutating, name))
}

// kubectlYAML writes objects as kubectl get -o yaml does: one object as it
// is, several as a v1 List.
func kubectlYAML(t *testing.T, objs ...runtime.Object) []byte {
	t.Helper()
	var doc any = objs[0]
	if len(objs) > 1 {
		list := &metav1.List{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}}
		for _, o := range objs {
			list.Items = append(list.Items, runtime.RawExtension{Object: o})
		}
		doc = list
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fetchConfig gets a webhook configuration, with the apiVersion and kind
// the typed client leaves out.
func fetchConfig(t *testing.T, mutating bool, name string) runtime.Object {
	t.Helper()
	ctx := context.Background()
	var obj runtime.Object
	if mutating {
		c, err := apiserver.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.TypeMeta = metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"}
		obj = c
	} else {
		c, err := apiserver.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.TypeMeta = metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"}
		obj = c
	}
	return obj
}

// startWebhookServing runs the webhook binary on addr (a free port when
// empty) with the given serving pair. Its readiness probe does not verify
// the certificate: that is what the tests using this break on purpose.
func startWebhookServing(t *testing.T, addr, certFile, keyFile string) string {
	t.Helper()
	if addr == "" {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		addr = fmt.Sprintf("127.0.0.1:%d", port)
	}
	args := append([]string{"-listen", addr, "-tls-cert-file", certFile, "-tls-private-key-file", keyFile}, apiserver.webhookCredentials(t, webhookBinary)...)
	p, err := startProcess("webhook "+addr, t.TempDir(), webhookBinary, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			p.dumpLog(os.Stderr)
		}
	})
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if err := waitFor(p, startTimeout, func() bool {
		resp, err := probe.Get("https://" + addr + "/ping")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		t.Fatal(err)
	}
	return addr
}

// longLivedCA is newTestCA valid for a year, so that doctor does not warn
// that caBundle is about to expire.
func longLivedCA(t *testing.T, name string) *cert {
	t.Helper()
	return signCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:  x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		NotBefore: time.Now().Add(-72 * time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
	}, nil)
}

// servingCert signs a serving certificate for tmpl's names with ca, valid
// for 90 days unless tmpl is dated.
func servingCert(t *testing.T, ca *cert, tmpl x509.Certificate) *cert {
	t.Helper()
	if tmpl.NotAfter.IsZero() {
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Minute), time.Now().Add(90*24*time.Hour)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	return signCert(t, &tmpl, ca)
}

// misbehaving is a small webhook in the test that answers in the ways the
// apiserver rejects, one path each.
func misbehaving(t *testing.T, serving *cert) *httptest.Server {
	t.Helper()
	pair, err := tls.X509KeyPair(serving.certPEM, serving.keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	answer := func(w http.ResponseWriter, review string) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, review)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/no-uid", func(w http.ResponseWriter, r *http.Request) {
		answer(w, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"allowed":true}}`)
	})
	mux.HandleFunc("/wrong-version", func(w http.ResponseWriter, r *http.Request) {
		answer(w, fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","response":{"uid":%q,"allowed":true}}`, requestUID(r)))
	})
	mux.HandleFunc("/bad-patch", func(w http.ResponseWriter, r *http.Request) {
		// An annotation added under a map the object may not have.
		patch := []byte(`[{"op":"add","path":"/metadata/annotations/webhook.example.com~1allow","value":"true"}]`)
		review, _ := json.Marshal(map[string]any{
			"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
			"response": map[string]any{"uid": requestUID(r), "allowed": true, "patchType": "JSONPatch", "patch": patch},
		})
		answer(w, string(review))
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		uid := requestUID(r)
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
			return
		}
		answer(w, fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":%q,"allowed":true}}`, uid))
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func requestUID(r *http.Request) string {
	var in struct {
		Request struct {
			UID string `json:"uid"`
		} `json:"request"`
	}
	_ = json.NewDecoder(r.Body).Decode(&in)
	return in.Request.UID
}

// TestDoctor builds every broken case of `webhook doctor`'s issue for real
// and registers it. For each, the apiserver's own error for a create is
// shown beside doctor's diagnosis of the same configuration, fetched back
// from the apiserver as kubectl prints it, and doctor must exit 1 naming
// the cause. Then the configurations deploy/render.sh renders pass.
func TestDoctor(t *testing.T) {
	skipWithoutPart(t, "doctor", "webhook doctor to test")
	now := time.Now()
	ca := longLivedCA(t, "doctor e2e CA")
	otherCA := longLivedCA(t, "another CA")
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	bad := misbehaving(t, servingCert(t, ca, x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"}, IPAddresses: loopback}))

	tests := []struct {
		name string
		hook string // the webhook's name, one per case
		// setup starts what the case needs and returns the webhook's URL
		// and caBundle.
		setup    func(t *testing.T) (url string, caBundle []byte)
		mutating bool
		timeout  int32
		// rules and request, when set, are the webhook's rules and the
		// request sent through it; else the route's deployed rules and
		// admitted request.
		rules     []admissionregistrationv1.RuleWithOperations
		request   func(name string) request
		apiserver string // in the apiserver's error for a create
		check     string // the check doctor fails
		doctor    string // in what doctor says
	}{
		{
			name: "caBundle from another CA", hook: "ca.doctor.example.com",
			setup: func(t *testing.T) (string, []byte) {
				w := startWebhook(t, "")
				return w.url("/validate"), otherCA.certPEM
			},
			apiserver: "x509: certificate signed by unknown authority",
			check:     "tls.trust", doctor: `but the apiserver trusts only caBundle's "CN=another CA"`,
		},
		{
			name: "certificate without the host's name", hook: "name.doctor.example.com",
			setup: func(t *testing.T) (string, []byte) {
				c := servingCert(t, ca, x509.Certificate{Subject: pkix.Name{CommonName: "webhook.example.com"}, DNSNames: []string{"webhook.example.com"}})
				_, port, _ := net.SplitHostPort(startWebhookWith(t, c))
				return "https://localhost:" + port + "/validate", ca.certPEM
			},
			apiserver: "x509: certificate is valid for webhook.example.com, not localhost",
			check:     "tls.name", doctor: "the certificate is valid for DNS:webhook.example.com, not localhost, the name the apiserver checks",
		},
		{
			name: "expired certificate", hook: "expired.doctor.example.com",
			setup: func(t *testing.T) (string, []byte) {
				c := servingCert(t, ca, x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"}, IPAddresses: loopback,
					NotBefore: now.Add(-72 * time.Hour), NotAfter: now.Add(-24 * time.Hour)})
				return "https://" + startWebhookWith(t, c) + "/validate", ca.certPEM
			},
			apiserver: "x509: certificate has expired or is not yet valid",
			check:     "tls.validity", doctor: `"CN=127.0.0.1" expired on`,
		},
		{
			name: "webhook stopped", hook: "stopped.doctor.example.com",
			setup: func(t *testing.T) (string, []byte) {
				w := startWebhook(t, "")
				w.stop()
				return w.url("/validate"), w.caPEM
			},
			apiserver: "connect: connection refused",
			check:     "tls", doctor: "connection refused: nothing listens on 127.0.0.1:",
		},
		{
			name: "answer without the uid", hook: "uid.doctor.example.com",
			setup:     func(t *testing.T) (string, []byte) { return bad.URL + "/no-uid", ca.certPEM },
			apiserver: `expected response.uid=`,
			check:     "review.v1", doctor: `the apiserver rejects the answer: expected response.uid=`,
		},
		{
			name: "answer in the wrong version", hook: "version.doctor.example.com",
			setup:     func(t *testing.T) (string, []byte) { return bad.URL + "/wrong-version", ca.certPEM },
			apiserver: "converting (v1beta1.AdmissionReview) to (v1.AdmissionReview): unknown conversion",
			check:     "review.v1", doctor: "(it is admission.k8s.io/v1beta1 AdmissionReview)",
		},
		{
			// Its own request: a patch of a DELETE is refused before it
			// is applied, and an object with annotations takes it.
			name: "patch that does not apply", hook: "patch.doctor.example.com",
			setup:    func(t *testing.T) (string, []byte) { return bad.URL + "/bad-patch", ca.certPEM },
			mutating: true,
			rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			request: func(name string) request {
				return createRequest(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"a": "b"}})
			},
			apiserver: "doc is missing path",
			check:     "patch.v1", doctor: `add operation does not apply: doc is missing path: "/metadata/annotations/webhook.example.com~1allow"`,
		},
		{
			name: "slower than timeoutSeconds", hook: "slow.doctor.example.com",
			setup:     func(t *testing.T) (string, []byte) { return bad.URL + "/slow", ca.certPEM },
			timeout:   1,
			apiserver: "context deadline exceeded",
			check:     "review.v1", doctor: "no answer from 127.0.0.1:",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			scope := newScope(t, "doctor-"+strings.NewReplacer(" ", "-", "'", "").Replace(tc.name))
			url, caBundle := tc.setup(t)
			o := hookOptions{name: tc.hook, url: url, caBundle: caBundle, scope: scope, timeout: tc.timeout, seen: refused, rules: tc.rules, probe: tc.request}
			var route string
			if tc.mutating {
				route = registerMutating(t, o)
			} else {
				route = registerValidating(t, o)
			}
			sent := scope.admitted(route, "web", 0)
			if tc.request != nil {
				sent = scope.prepare(tc.request(scope.name("web")), route)
			}
			err := sent.send(context.Background(), false)
			if err == nil || !strings.Contains(err.Error(), tc.apiserver) {
				t.Fatalf("the apiserver's create: got %v, want an error with %q", err, tc.apiserver)
			}
			t.Logf("$ kubectl create deployment ...\nError from server: %v", err)

			findings, status := diagnose(t, fetchYAML(t, tc.mutating, o.name))
			if status != 1 {
				t.Errorf("doctor exited %d, want 1", status)
			}
			failed := failedChecks(findings)
			if found, ok := failed[tc.check]; !ok || !strings.Contains(found, tc.doctor) {
				t.Errorf("doctor's %s: got %q, want a failure saying %q", tc.check, found, tc.doctor)
			}
			if len(failed) != 1 {
				t.Errorf("doctor failed %v, want only %s", failed, tc.check)
			}
		})
	}

	t.Run("failurePolicy Fail with no exclusion", func(t *testing.T) {
		// A webhook that is down, matching every namespace, kube-system
		// included. Its rules match only PodTemplates, which nothing else
		// in the suite creates, and it is deleted when the case ends.
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		name := "no-exclusion.webhook.example.com"
		url := fmt.Sprintf("https://127.0.0.1:%d/validate", port)
		fail, none, timeout := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone, int32(5)
		configs := apiserver.client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
		ctx := context.Background()
		if _, err := configs.Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name: name, ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca.certPEM},
				Rules: []admissionregistrationv1.RuleWithOperations{{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"podtemplates"}},
				}},
				FailurePolicy: &fail, SideEffects: &none, TimeoutSeconds: &timeout, AdmissionReviewVersions: []string{"v1"},
			}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = configs.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		config := fetchYAML(t, false, name)

		// The lock-out: nothing of that kind can be created in kube-system.
		templates := apiserver.client.CoreV1().PodTemplates(metav1.NamespaceSystem)
		var createErr error
		deadline := time.Now().Add(startTimeout)
		for time.Now().Before(deadline) {
			_, createErr = templates.Create(ctx, &corev1.PodTemplate{
				ObjectMeta: metav1.ObjectMeta{Name: "probe"},
				Template:   corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx:1.14.2"}}}},
			}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if createErr != nil {
				break
			}
			time.Sleep(200 * time.Millisecond) // the configuration takes a moment to be used
		}
		want := fmt.Sprintf("failed calling webhook %q", name)
		if createErr == nil || !strings.Contains(createErr.Error(), want) {
			t.Fatalf("creating a PodTemplate in kube-system: got %v, want %q", createErr, want)
		}
		t.Logf("$ kubectl create -n kube-system -f podtemplate.yaml\nError from server: %v", createErr)
		if err := configs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}

		findings, status := diagnose(t, config)
		if status != 1 {
			t.Errorf("doctor exited %d, want 1", status)
		}
		failed := failedChecks(findings)
		if found := failed["failurePolicy"]; !strings.Contains(found, "neither namespaceSelector nor objectSelector excludes kube-system") {
			t.Errorf("doctor's failurePolicy: got %q, want kube-system named", found)
		}
		if found := failed["tls"]; !strings.Contains(found, "connection refused") {
			t.Errorf("doctor's tls: got %q, want connection refused", found)
		}
	})

	t.Run("rendered URL mode passes", func(t *testing.T) {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		hostport := "127.0.0.1:" + itoa(port)
		out := render(t, "url", hostport)
		startWebhookServing(t, hostport, filepath.Join(out, "certs", "tls.crt"), filepath.Join(out, "certs", "tls.key"))
		rendered, err := os.ReadFile(filepath.Join(out, "08-webhooks.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		findings, status := diagnose(t, rendered)
		if status != 0 {
			t.Errorf("doctor on %s exited %d, want 0; failed: %v", filepath.Join(out, "08-webhooks.yaml"), status, failedChecks(findings))
		}
		// Registered, and fetched back as kubectl prints it, with the
		// apiserver's defaults filled in: docs/troubleshooting.md's command, for one
		// configuration and for all that deploy/webhooks.yaml has as a List.
		apply(t, apiserver, objectsIn(t, out), false)
		var all []runtime.Object
		for _, route := range deployedRoutes(t) {
			all = append(all, fetchConfig(t, route == mutateRoute, "webhook.example.com"))
		}
		configs := [][]byte{kubectlYAML(t, all[0])}
		if len(all) > 1 {
			configs = append(configs, kubectlYAML(t, all...))
		}
		for _, config := range configs {
			findings, status := diagnose(t, config, "-address", hostport)
			if status != 0 {
				t.Errorf("kubectl get ... -o yaml | webhook doctor -f - -address %s exited %d, want 0; failed: %v", hostport, status, failedChecks(findings))
			}
			if len(findings) == 0 {
				t.Error("doctor found nothing to check")
			}
		}
	})

	t.Run("rendered service mode passes through -address", func(t *testing.T) {
		out := render(t, "in-cluster")
		// As kubectl port-forward would: the webhook on a local port,
		// serving the certificate for webhook.webhook-system.svc.
		addr := startWebhookServing(t, "", filepath.Join(out, "certs", "tls.crt"), filepath.Join(out, "certs", "tls.key"))
		rendered, err := os.ReadFile(filepath.Join(out, "08-webhooks.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		findings, status := diagnose(t, rendered, "-address", addr)
		if status != 0 {
			t.Errorf("doctor exited %d, want 0; failed: %v", status, failedChecks(findings))
		}
		if _, status := runDoctor(t, rendered); status != 1 {
			t.Errorf("without -address, doctor exited %d, want 1: there is nothing to dial", status)
		}
	})
}

// startWebhookWith runs the webhook binary serving c.
func startWebhookWith(t *testing.T, c *cert) (addr string) {
	t.Helper()
	certFile, keyFile := writePair(t, t.TempDir(), "tls", c)
	return startWebhookServing(t, "", certFile, keyFile)
}
