package e2e

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
// whose CA becomes the caBundle. It listens on a port the kernel chooses,
// which no other socket can have taken first.
func startWebhook(t *testing.T, dir string, args ...string) *webhookServer {
	t.Helper()
	return startWebhookOn(t, dir, "127.0.0.1:0", args...)
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
// way, such as with a policy.go of a test's own. On port 0 it learns the
// port the kernel chose from the webhook's log. A webhook whose policy
// reads the cluster reads the suite's apiserver (webhookCredentials)
// unless args give it -kubeconfig, as a test whose requests go through an
// apiserver of its own does; it is up once /ping is ready, its views
// synced.
func startWebhookBinary(t *testing.T, bin, dir, addr string, env []string, args ...string) *webhookServer {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	if !slices.Contains(args, "-kubeconfig") {
		args = append(args, apiserver.webhookCredentials(t, bin)...)
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
		if strings.HasSuffix(w.addr, ":0") {
			m := servingAddr.FindStringSubmatch(p.log.String())
			if m == nil {
				return false
			}
			w.addr = m[1]
			p.name = "webhook " + w.addr
		}
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
		resp, err := w.client.Get("https://" + w.addr + "/ping")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if err != nil {
		if _, port, _ := net.SplitHostPort(addr); strings.Contains(p.log.String(), "address already in use") {
			n, _ := strconv.Atoi(port)
			err = fmt.Errorf("%w: port %s was taken after it was chosen, by %s", err, port, cmp.Or(portHolder(n), "a process that has since closed it"))
		}
		t.Fatal(err)
	}
	return w
}

// servingAddr finds the address in the webhook's "serving" log line, in its
// text or its JSON format.
var servingAddr = regexp.MustCompile(`(?:msg=serving addr=|"msg":"serving","addr":")([0-9.:\[\]a-f]+)`)

// metricsAddr returns the address the webhook serves metrics on, from its
// log: with -metrics-listen 127.0.0.1:0, the port the kernel chose.
func (w *webhookServer) metricsAddr(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?:msg="serving metrics" addr=|"msg":"serving metrics","addr":")([0-9.:]+)`).FindStringSubmatch(w.log.String())
	if m == nil {
		t.Fatalf("the webhook logged no metrics address:\n%s", w.log.String())
	}
	return m[1]
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
	// scope is the test's scope (newScope): the webhook is sent only what
	// its requests store and send, on the scope's apiserver.
	scope *testScope
	rules []admissionregistrationv1.RuleWithOperations
	// selectObjects selects by the objects' labels too, which a webhook
	// for cluster-scoped kinds other than Namespace needs: the apiserver
	// never leaves those out by namespaceSelector. It is set for a
	// webhook with the deployed rules whose admitted request is of such
	// a kind.
	selectObjects bool
	// seen reports whether the webhook is in use, given a probe object's
	// name and what its dry run returned; registration probes until it
	// is. Nil waits a fixed 2 s instead.
	seen func(probe string, err error) bool
	// probe is the request registration sends, dry-run, until seen: the
	// route's admitted request unless it is set.
	probe func(name string) request
	// route is the deployed webhook ("/mutate" or "/validate") whose rules
	// (unless rules are given) and admitted request this configuration
	// uses, whatever its own kind. Empty: the route of its own kind, or
	// the other one when deploy/webhooks.yaml registers none of that kind.
	route string
}

// The admission routes, each called by one kind of webhook configuration.
const (
	mutateRoute   = "/mutate"   // by MutatingWebhookConfigurations
	validateRoute = "/validate" // by ValidatingWebhookConfigurations
)

// configurationKind is the kind of webhook configuration that calls each
// route.
var configurationKind = map[string]string{mutateRoute: "MutatingWebhookConfiguration", validateRoute: "ValidatingWebhookConfiguration"}

// deployedWebhooks are the webhooks deploy/webhooks.yaml registers for one
// route: their names and rules, all of them together, and each webhook.
type deployedWebhooks struct {
	names []string
	rules []admissionregistrationv1.RuleWithOperations
	hooks []deployedWebhook
}

// deployedWebhook is one webhook of deploy/webhooks.yaml: what decides
// which objects the apiserver sends it.
type deployedWebhook struct {
	name                              string
	rules                             []admissionregistrationv1.RuleWithOperations
	namespaceSelector, objectSelector *metav1.LabelSelector
}

// readDeployed reads deploy/webhooks.yaml once: the tests register what
// users deploy, so a policy's change of rules reaches them from that one
// file. A policy may register both routes or only one, with rules for
// different kinds.
var readDeployed = sync.OnceValues(func() (map[string]deployedWebhooks, error) {
	f, err := os.Open(filepath.Join(repoRoot, "deploy", "webhooks.yaml"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	deployed := map[string]deployedWebhooks{}
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		// Only kind, names, rules and selectors: caBundle is still a
		// placeholder here.
		var cfg struct {
			Kind     string `json:"kind"`
			Webhooks []struct {
				Name              string                                       `json:"name"`
				Rules             []admissionregistrationv1.RuleWithOperations `json:"rules"`
				NamespaceSelector *metav1.LabelSelector                        `json:"namespaceSelector"`
				ObjectSelector    *metav1.LabelSelector                        `json:"objectSelector"`
			} `json:"webhooks"`
		}
		if err := dec.Decode(&cfg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("deploy/webhooks.yaml: %w", err)
		}
		var route string
		for r, kind := range configurationKind {
			if kind == cfg.Kind {
				route = r
			}
		}
		for _, w := range cfg.Webhooks {
			if route == "" || len(w.Rules) == 0 {
				continue
			}
			d := deployed[route]
			d.names = append(d.names, w.Name)
			d.rules = append(d.rules, w.Rules...)
			d.hooks = append(d.hooks, deployedWebhook{w.Name, w.Rules, w.NamespaceSelector, w.ObjectSelector})
			deployed[route] = d
		}
	}
	if len(deployed) == 0 {
		return nil, errors.New("deploy/webhooks.yaml registers no mutating or validating webhook with rules")
	}
	return deployed, nil
})

// deployed returns what deploy/webhooks.yaml registers, by route.
func deployed(t *testing.T) map[string]deployedWebhooks {
	t.Helper()
	d, err := readDeployed()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// deployedRoutes returns the routes deploy/webhooks.yaml registers, /mutate
// first, as the apiserver calls them.
func deployedRoutes(t *testing.T) []string {
	t.Helper()
	d := deployed(t)
	var routes []string
	for _, r := range []string{mutateRoute, validateRoute} {
		if _, ok := d[r]; ok {
			routes = append(routes, r)
		}
	}
	return routes
}

// oneRoute is the route for a test that needs one webhook of either kind:
// /validate when it is deployed, since validating webhooks change nothing.
func oneRoute(t *testing.T) string {
	t.Helper()
	routes := deployedRoutes(t)
	return routes[len(routes)-1]
}

// routeFor resolves o.route for a configuration of the kind that calls own.
func (o hookOptions) routeFor(t *testing.T, own string) string {
	t.Helper()
	if o.route != "" {
		return o.route
	}
	if _, ok := deployed(t)[own]; ok {
		return own
	}
	return deployedRoutes(t)[0]
}

func (o hookOptions) clientConfig() admissionregistrationv1.WebhookClientConfig {
	url := o.url
	return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: o.caBundle}
}

// webhookSpec is what both kinds of webhook share, as a test registers
// them.
type webhookSpec struct {
	sideEffects                       admissionregistrationv1.SideEffectClass
	versions                          []string
	failurePolicy                     *admissionregistrationv1.FailurePolicyType
	timeout                           *int32
	namespaceSelector, objectSelector *metav1.LabelSelector
	rules                             []admissionregistrationv1.RuleWithOperations
}

// spec returns what both kinds of configuration share for route. The
// rules are o.rules or, when none are given, route's deployed ones. The
// selectors are the scope's: tests share one apiserver, and each must call
// only its own webhook, whatever the kind of its requests. A namespaced
// request is in the scope's namespace, and a Namespace carries the scope's
// label, which the namespaceSelector selects; objectSelector selects the
// same label on the object, for kinds the namespaceSelector cannot leave
// out (o.selectObjects). The deployed selectors are the rendered
// configuration's, which the tests that register it use (render and
// startRenderedWebhook: TestURLMode, TestDeployManifests, TestStatic*).
func (o hookOptions) spec(t *testing.T, route string) webhookSpec {
	t.Helper()
	s := webhookSpec{sideEffects: admissionregistrationv1.SideEffectClassNone, versions: o.versions, rules: o.rules}
	if s.versions == nil {
		s.versions = []string{"v1"}
	}
	fp := cmp.Or(o.failurePolicy, admissionregistrationv1.Fail)
	to := cmp.Or(o.timeout, 5)
	s.failurePolicy, s.timeout = &fp, &to
	if s.rules == nil {
		s.rules = deployed(t)[route].rules
		o.selectObjects = o.selectObjects || o.scope.admitted(route, "scoping", 0).clusterWide()
	}
	scoped := &metav1.LabelSelector{MatchLabels: map[string]string{scopeLabel: o.scope.id}}
	s.namespaceSelector = scoped
	if o.selectObjects {
		s.objectSelector = scoped
	}
	return s
}

// clusterWide reports whether p is of a cluster-scoped kind other than
// Namespace: one no namespaceSelector leaves out.
func (p *preparedRequest) clusterWide() bool {
	return !p.namespaced && p.resource.GroupResource() != (schema.GroupResource{Resource: "namespaces"})
}

// registerMutating creates a MutatingWebhookConfiguration, removed when the
// test ends, and waits until the apiserver uses it. It returns the route
// whose rules and admitted request the configuration uses (o.route).
func registerMutating(t *testing.T, o hookOptions) (route string) {
	t.Helper()
	o.route = o.routeFor(t, mutateRoute)
	s := o.spec(t, o.route)
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: o.name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: o.name, ClientConfig: o.clientConfig(), Rules: s.rules, FailurePolicy: s.failurePolicy,
			NamespaceSelector: s.namespaceSelector, ObjectSelector: s.objectSelector,
			SideEffects: &s.sideEffects, TimeoutSeconds: s.timeout, AdmissionReviewVersions: s.versions,
		}},
	}
	ctx := context.Background()
	api := o.scope.api.client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := api.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("registering mutating webhook %s: %v", o.name, err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), o.name, metav1.DeleteOptions{}) })
	waitForHookActive(t, o, o.route)
	return o.route
}

// registerRoute registers a webhook for route, in a configuration of the
// kind that calls it, with that route's deployed rules unless o gives
// rules.
func registerRoute(t *testing.T, route string, o hookOptions) {
	t.Helper()
	o.route = route
	if route == mutateRoute {
		registerMutating(t, o)
	} else {
		registerValidating(t, o)
	}
}

// registerDeployed registers each route of w that deploy/webhooks.yaml
// registers, acting in scope s, with its rules unless o says otherwise,
// named as a user would name them.
func registerDeployed(t *testing.T, w *webhookServer, s *testScope, o hookOptions) {
	t.Helper()
	o.scope, o.caBundle, o.seen = s, w.caPEM, w.saw
	for _, route := range deployedRoutes(t) {
		o.name, o.url = strings.TrimPrefix(route, "/")+"-"+s.namespace+".webhook.example.com", w.url(route)
		registerRoute(t, route, o)
	}
}

// registerValidating is registerMutating for a ValidatingWebhookConfiguration.
func registerValidating(t *testing.T, o hookOptions) (route string) {
	t.Helper()
	o.route = o.routeFor(t, validateRoute)
	s := o.spec(t, o.route)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: o.name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: o.name, ClientConfig: o.clientConfig(), Rules: s.rules, FailurePolicy: s.failurePolicy,
			NamespaceSelector: s.namespaceSelector, ObjectSelector: s.objectSelector,
			SideEffects: &s.sideEffects, TimeoutSeconds: s.timeout, AdmissionReviewVersions: s.versions,
		}},
	}
	ctx := context.Background()
	api := o.scope.api.client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := api.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("registering validating webhook %s: %v", o.name, err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), o.name, metav1.DeleteOptions{}) })
	waitForHookActive(t, o, o.route)
	return o.route
}

// waitForHookActive waits until the apiserver calls the new webhook: a new
// configuration takes about a second to be used. It sends dry runs of
// route's admitted request in o's scope until o.seen reports the webhook
// received one. Probes the apiserver answers without calling the webhook
// for hookActivation end the wait early, saying why the webhook may not be
// sent them.
func waitForHookActive(t *testing.T, o hookOptions, route string) {
	t.Helper()
	if o.seen == nil {
		time.Sleep(2 * time.Second)
		return
	}
	deadline := time.Now().Add(startTimeout)
	var answered time.Time // since when every probe has been answered unseen
	for i := 0; time.Now().Before(deadline); i++ {
		// The name carries the route (probeRoute), so that a webhook
		// server that logs every route tells this one's call apart.
		base := fmt.Sprintf("probe%s-%d-%d", strings.ReplaceAll(route, "/", "-"), time.Now().UnixNano()%100000, i)
		probe := o.scope.admitted(route, base, 0)
		if o.probe != nil {
			probe = o.scope.prepare(o.probe(o.scope.name(base)), route)
		}
		err := probe.send(context.Background(), true)
		if o.seen(probe.name(), err) {
			return
		}
		switch {
		case err != nil:
			answered = time.Time{}
		case answered.IsZero():
			answered = time.Now()
		case time.Since(answered) > hookActivation:
			t.Fatalf("webhook %s is not called, after %s: %s", o.name, hookActivation, whyNotCalled(t, o, route, probe))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the apiserver did not call webhook %s within %s, and refused the last probe", o.name, startTimeout)
}

// hookActivation is how long a new webhook may go unused while the
// apiserver answers the probes: it takes about a second.
const hookActivation = 20 * time.Second

// patcher is a mutating webhook of a test's own that answers every review
// with one JSON Patch, for the tests of what happens after the policy's
// webhooks have run.
type patcher struct {
	url   string // where it serves, any path
	caPEM []byte // its caBundle
	mu    sync.Mutex
	seen  []string // the names of the objects it was sent
}

// startPatcher serves a patcher answering with patch (JSON) until the test
// ends.
func startPatcher(t *testing.T, api *apiServer, patch string) *patcher {
	t.Helper()
	ca := newTestCA(t, "patcher CA")
	host := api.testsAddress()
	serving := servingCert(t, ca, x509.Certificate{Subject: pkix.Name{CommonName: host}, IPAddresses: []net.IP{net.ParseIP(host)}})
	pair, err := tls.X509KeyPair(serving.certPEM, serving.keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	p := &patcher{caPEM: ca.certPEM}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			APIVersion string `json:"apiVersion"`
			Request    struct {
				UID  string `json:"uid"`
				Name string `json:"name"`
			} `json:"request"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		p.mu.Lock()
		p.seen = append(p.seen, in.Request.Name)
		p.mu.Unlock()
		out, _ := json.Marshal(map[string]any{
			"apiVersion": in.APIVersion, "kind": "AdmissionReview",
			"response": map[string]any{"uid": in.Request.UID, "allowed": true, "patchType": "JSONPatch", "patch": []byte(patch)},
		})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener.Close()
	srv.Listener = ln
	srv.StartTLS()
	t.Cleanup(srv.Close)
	p.url = srv.URL + "/patch"
	return p
}

// saw reports whether p was sent an object named name.
func (p *patcher) saw(name string, _ error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.seen, name)
}

// saw reports whether the webhook logged a review of an object named name,
// namespaced or not, in its text log format (name=ns/NAME, name=NAME) or in
// JSON ("name":"ns/NAME").
func (w *webhookServer) saw(name string, _ error) bool {
	route, probe := probeRoute(name)
	for line := range strings.Lines(w.log.String()) {
		if !loggedName(line, name) {
			continue
		}
		// A probe of /mutate logged by /validate, already registered, is
		// not the new webhook's call (TestDemonstration once went on so).
		if probe && !strings.Contains(line, "path="+route+" ") && !strings.Contains(line, `"path":"`+route+`"`) {
			continue
		}
		return true
	}
	return false
}

// loggedLine waits until a line of the webhook's log satisfies has, for
// at most logTimeout, and reports whether one did. The webhook logs a
// review just after it answers it, and its log comes through a pipe: the
// line may reach the test a moment after the apiserver's answer does, the
// longer on a busy machine.
func (w *webhookServer) loggedLine(has func(line string) bool) bool {
	for deadline := time.Now().Add(logTimeout); ; time.Sleep(20 * time.Millisecond) {
		for line := range strings.Lines(w.log.String()) {
			if has(line) {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// logTimeout bounds how long a review's log line may take to reach the
// test once the review is answered: milliseconds, but the machine may be
// running another suite beside this one.
const logTimeout = 5 * time.Second

// loggedOperation reports whether a line of the webhook's log is of a
// review of operation of an object named name.
func loggedOperation(line, name string, operation admissionregistrationv1.OperationType) bool {
	return loggedName(line, name) && (strings.Contains(line, " operation="+string(operation)+" ") || strings.Contains(line, `"operation":"`+string(operation)+`"`))
}

// loggedName reports whether a line of the webhook's log is of a review of
// an object named name, in any namespace or none.
func loggedName(line, name string) bool {
	for _, form := range []struct{ prefix, end string }{{" name=", " "}, {`"name":"`, `"`}} {
		for rest := line; ; {
			i := strings.Index(rest, form.prefix)
			if i < 0 {
				break
			}
			rest = rest[i+len(form.prefix):]
			value, _, _ := strings.Cut(strings.TrimRight(rest, "\n"), form.end)
			if value == name || strings.HasSuffix(value, "/"+name) {
				return true
			}
		}
	}
	return false
}

// probeRoute is the route a probe of waitForHookActive is named for.
func probeRoute(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "probe-")
	if !ok {
		return "", false
	}
	route, _, ok := strings.Cut(rest, "-")
	return "/" + route, ok
}

// refused is a seen for a webhook that is expected to fail every call.
func refused(_ string, err error) bool { return err != nil }

// sendAdmitted sends route's admitted request named after base (s.admitted)
// and returns its error.
func (s *testScope) sendAdmitted(ctx context.Context, route, base string) error {
	s.t.Helper()
	return s.admitted(route, base, 0).send(ctx, false)
}

// sendThroughAll sends the admitted requests named after base
// (admittedThroughAll), /mutate's first, and returns the first error.
func (s *testScope) sendThroughAll(ctx context.Context, base string) error {
	s.t.Helper()
	for _, r := range s.admittedThroughAll(base) {
		if err := r.send(ctx, false); err != nil {
			return err
		}
	}
	return nil
}

// admittedThroughAll is the admitted request named after base of each
// route deploy/webhooks.yaml registers, /mutate's first, so that every
// deployed webhook is sent one; routes whose requests have one shape (the
// same operation on one kind) share a single request.
func (s *testScope) admittedThroughAll(base string) []*preparedRequest {
	s.t.Helper()
	var requests []*preparedRequest
	sent := map[requestShape]bool{}
	for _, route := range deployedRoutes(s.t) {
		shape := admittedShape(s.t, route)
		if !sent[shape] {
			sent[shape] = true
			requests = append(requests, s.admitted(route, base, 0))
		}
	}
	return requests
}

// reviewedOnEach checks that w logged a review of the admitted request
// named after base in scope s on each route deploy/webhooks.yaml
// registers.
func reviewedOnEach(t *testing.T, w *webhookServer, s *testScope, base string) {
	t.Helper()
	name := s.name(base)
	for _, route := range deployedRoutes(t) {
		if !w.loggedLine(func(line string) bool { return loggedName(line, name) && strings.Contains(line, "path="+route+" ") }) {
			t.Errorf("the webhook answered no review of %s on path=%s", name, route)
		}
	}
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

// createLabelledNamespaceIn makes a namespace labelled set alone, deleted
// when the test ends, with the "default" ServiceAccount that Pods need: no
// controller-manager runs to make it. newScopeIn makes a test's, labelled
// as the deployed namespaceSelectors ask.
func createLabelledNamespaceIn(t *testing.T, a *apiServer, name string, set map[string]string) string {
	t.Helper()
	name = strings.ToLower(name)
	api := a.client.CoreV1().Namespaces()
	if _, err := api.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: set}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	ensureDefaultServiceAccount(t, a, name)
	return name
}

// ensureDefaultServiceAccount creates the ServiceAccount "default" in ns
// unless it exists. With no controller-manager nothing else does, and the
// apiserver refuses a Pod in a namespace without it: a copier's request
// may be of a Pod.
func ensureDefaultServiceAccount(t *testing.T, a *apiServer, ns string) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := a.client.CoreV1().ServiceAccounts(ns).Create(context.Background(), sa, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		t.Fatalf("creating the default ServiceAccount of %s: %v", ns, err)
	}
}

func itoa(i int) string { return fmt.Sprint(i) }
