package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// webhookServer is the webhook binary running on a loopback port.
type webhookServer struct {
	*process
	dir    string // its working directory, holding tls/
	addr   string // host:port
	caPEM  []byte // the CA that signed its serving certificate
	client *http.Client
}

// startWebhook runs the webhook binary with args in a directory of its own.
// Unless args configure a certificate, it makes its development one there,
// whose CA becomes the caBundle.
func startWebhook(t *testing.T, dir string, args ...string) *webhookServer {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return startWebhookOn(t, dir, fmt.Sprintf("127.0.0.1:%d", port), args...)
}

// startWebhookOn is startWebhook on a given address.
func startWebhookOn(t *testing.T, dir, addr string, args ...string) *webhookServer {
	t.Helper()
	return startWebhookEnv(t, dir, addr, nil, args...)
}

// startWebhookEnv is startWebhookOn with env added to the environment.
func startWebhookEnv(t *testing.T, dir, addr string, env []string, args ...string) *webhookServer {
	t.Helper()
	return startWebhookBinary(t, webhookBinary, dir, addr, env, args...)
}

// startWebhookBinary is startWebhookEnv for a webhook binary built another
// way, such as with a policy.go of a test's own.
func startWebhookBinary(t *testing.T, bin, dir, addr string, env []string, args ...string) *webhookServer {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	p, err := startProcessEnv("webhook "+addr, dir, env, bin, append([]string{"-listen", addr}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	w := &webhookServer{process: p, dir: dir, addr: addr}
	t.Cleanup(func() {
		w.stop()
		if t.Failed() {
			w.dumpLog(os.Stderr)
		}
	})
	err = waitFor(p, startTimeout, func() bool {
		if w.client == nil {
			ca, err := os.ReadFile(filepath.Join(dir, "tls", "ca.crt"))
			if err != nil {
				return false
			}
			w.caPEM = ca
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(ca)
			w.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		}
		resp, err := w.client.Get("https://" + addr + "/ping")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// url is the webhook's URL-mode address for path.
func (w *webhookServer) url(path string) string { return "https://" + w.addr + path }

// hookOptions shape a webhook configuration for a test.
type hookOptions struct {
	name          string
	url           string
	caBundle      []byte
	versions      []string // admissionReviewVersions; default v1
	failurePolicy admissionregistrationv1.FailurePolicyType
	timeout       int32
	namespace     string // the only namespace the webhook acts in
	rules         []admissionregistrationv1.RuleWithOperations
	// seen reports whether the webhook is in use, given a probe object's
	// name and what its dry-run create returned; registration probes until
	// it is. Nil waits a fixed 2 s instead.
	seen func(probe string, err error) bool
	// api is the apiserver to register with; nil is the suite's.
	api *apiServer
}

func (o hookOptions) apiServer() *apiServer {
	if o.api != nil {
		return o.api
	}
	return apiserver
}

// deployedRules returns the rules deploy/webhooks.yaml gives the mutating
// and the validating webhook: the tests register what users deploy, so a
// policy's change of rules reaches them from that one file.
func deployedRules(t *testing.T) (mutating, validating []admissionregistrationv1.RuleWithOperations) {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "deploy", "webhooks.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		// Only kind and rules: caBundle is still a placeholder here.
		var cfg struct {
			Kind     string `json:"kind"`
			Webhooks []struct {
				Rules []admissionregistrationv1.RuleWithOperations `json:"rules"`
			} `json:"webhooks"`
		}
		if err := dec.Decode(&cfg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("deploy/webhooks.yaml: %v", err)
		}
		for _, w := range cfg.Webhooks {
			switch cfg.Kind {
			case "MutatingWebhookConfiguration":
				mutating = append(mutating, w.Rules...)
			case "ValidatingWebhookConfiguration":
				validating = append(validating, w.Rules...)
			}
		}
	}
	if len(mutating) == 0 || len(validating) == 0 {
		t.Fatal("deploy/webhooks.yaml has no rules for a mutating and a validating webhook")
	}
	return mutating, validating
}

func (o hookOptions) clientConfig() admissionregistrationv1.WebhookClientConfig {
	url := o.url
	return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: o.caBundle}
}

// common returns what both kinds of configuration share; rules are o.rules
// or, when none are given, deployed (from deploy/webhooks.yaml).
func (o hookOptions) common(deployed []admissionregistrationv1.RuleWithOperations) (sideEffects admissionregistrationv1.SideEffectClass, versions []string, policy *admissionregistrationv1.FailurePolicyType, timeout *int32, selector *metav1.LabelSelector, rules []admissionregistrationv1.RuleWithOperations) {
	versions = o.versions
	if versions == nil {
		versions = []string{"v1"}
	}
	fp := o.failurePolicy
	if fp == "" {
		fp = admissionregistrationv1.Fail
	}
	to := o.timeout
	if to == 0 {
		to = 5
	}
	rules = o.rules
	if rules == nil {
		rules = deployed
	}
	selector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": o.namespace}}
	return admissionregistrationv1.SideEffectClassNone, versions, &fp, &to, selector, rules
}

// registerMutating creates a MutatingWebhookConfiguration, removed when the
// test ends, and waits until the apiserver uses it.
func registerMutating(t *testing.T, o hookOptions) {
	t.Helper()
	deployed, _ := deployedRules(t)
	se, versions, fp, to, sel, rules := o.common(deployed)
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: o.name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: o.name, ClientConfig: o.clientConfig(), Rules: rules, FailurePolicy: fp,
			NamespaceSelector: sel, SideEffects: &se, TimeoutSeconds: to, AdmissionReviewVersions: versions,
		}},
	}
	ctx := context.Background()
	api := o.apiServer().client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := api.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("registering mutating webhook %s: %v", o.name, err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), o.name, metav1.DeleteOptions{}) })
	waitForHookActive(t, o)
}

// registerValidating is registerMutating for a ValidatingWebhookConfiguration.
func registerValidating(t *testing.T, o hookOptions) {
	t.Helper()
	_, deployed := deployedRules(t)
	se, versions, fp, to, sel, rules := o.common(deployed)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: o.name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: o.name, ClientConfig: o.clientConfig(), Rules: rules, FailurePolicy: fp,
			NamespaceSelector: sel, SideEffects: &se, TimeoutSeconds: to, AdmissionReviewVersions: versions,
		}},
	}
	ctx := context.Background()
	api := o.apiServer().client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := api.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("registering validating webhook %s: %v", o.name, err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), o.name, metav1.DeleteOptions{}) })
	waitForHookActive(t, o)
}

// waitForHookActive waits until the apiserver calls the new webhook: a new
// configuration takes about a second to be used. It sends dry-run creates of
// a probe object (createAdmitted) until o.seen reports the webhook received
// one.
func waitForHookActive(t *testing.T, o hookOptions) {
	t.Helper()
	if o.seen == nil {
		time.Sleep(2 * time.Second)
		return
	}
	deadline := time.Now().Add(startTimeout)
	for i := 0; time.Now().Before(deadline); i++ {
		name := fmt.Sprintf("probe-%d-%d", time.Now().UnixNano()%100000, i)
		err := createAdmitted(context.Background(), o.apiServer(), o.namespace, name, true)
		if o.seen(name, err) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the apiserver did not call webhook %s within %s", o.name, startTimeout)
}

// saw reports whether the webhook logged a review of an object named name,
// in its text log format (name=ns/NAME) or in JSON ("name":"ns/NAME").
func (w *webhookServer) saw(name string, _ error) bool {
	log := w.log.String()
	return strings.Contains(log, "/"+name+" ") || strings.Contains(log, "/"+name+`"`)
}

// refused is a seen for a webhook that is expected to fail every call.
func refused(_ string, err error) bool { return err != nil }

// createAdmitted creates admittedObject(name) in namespace ns of api. With
// dryRun the apiserver admits it (calling the webhooks) but stores nothing.
func createAdmitted(ctx context.Context, api *apiServer, ns, name string, dryRun bool) error {
	obj, resource := admittedObject(name, 0)
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err := api.dynamic.Resource(resource).Namespace(ns).Create(ctx, obj, opts)
	return err
}

// paddingEnv is about size bytes of environment variables, to make a large
// object of one that has containers, as large ConfigMaps and Helm's
// release Secrets are.
func paddingEnv(size int) []corev1.EnvVar {
	var env []corev1.EnvVar
	for i := 0; i*80 < size; i++ {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("SETTING_%05d", i), Value: fmt.Sprintf("value-%05d-of-a-moderately-long-configuration-entry", i)})
	}
	return env
}

// createNamespace makes a namespace for one test, deleted when it ends,
// with the "default" ServiceAccount that Pods need: no controller-manager
// runs to make it.
func createNamespace(t *testing.T, name string) string {
	t.Helper()
	return createNamespaceIn(t, apiserver, name)
}

func createNamespaceIn(t *testing.T, a *apiServer, name string) string {
	t.Helper()
	name = strings.ToLower(name)
	api := a.client.CoreV1().Namespaces()
	if _, err := api.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	ensureDefaultServiceAccount(t, a, name)
	return name
}

// ensureDefaultServiceAccount creates the ServiceAccount "default" in ns
// unless it exists. With no controller-manager nothing else does, and the
// apiserver refuses a Pod in a namespace without it: admittedObject may be
// a Pod in a copier's policy.
func ensureDefaultServiceAccount(t *testing.T, a *apiServer, ns string) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := a.client.CoreV1().ServiceAccounts(ns).Create(context.Background(), sa, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		t.Fatalf("creating the default ServiceAccount of %s: %v", ns, err)
	}
}

func itoa(i int) string { return fmt.Sprint(i) }
