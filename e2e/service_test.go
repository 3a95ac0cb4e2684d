package e2e

// Service mode (clientConfig.service), as most clusters run the webhook:
// the manifests deploy/render.sh in-cluster renders, applied for real; the
// apiserver's own resolution of the Service, to its ClusterIP and port
// (kube-apiserver's buildServiceResolver picks k8s.io/apiserver v0.37.2
// pkg/util/proxy ResolveCluster without --enable-aggregator-routing, and
// pkg/util/webhook/client.go dials it with TLS ServerName
// NAME.NAMESPACE.svc, over HTTP/1.1 only); kube-proxy, played by
// kubeProxy on that ClusterIP; and replicas run with the Deployment's own
// container arguments and the rendered Secret's certificate, each on a
// loopback address of its own, as each Pod has an IP.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// unprivilegedServicePort is the Service's port when its own is below
// 1024 and this user may not listen there (not root): the ClusterIP is
// the Service's alone, so no other socket holds any port of it.
const unprivilegedServicePort = 10443

// inCluster is deploy/render.sh in-cluster's output applied to the suite's
// apiserver, with kube-proxy's stand-in on the Service's ClusterIP.
type inCluster struct {
	// configurations are both webhook configurations as rendered, not yet
	// applied: register applies them.
	configurations []*unstructured.Unstructured
	service        *corev1.Service // as stored, with its ClusterIP
	port           int32           // the Service port the configurations call
	targetPort     int32           // the container port it sends to
	metricsPort    int32           // the container's metrics port; 0 if none
	replicas       int             // the Deployment's
	// gracePeriod is the Deployment's terminationGracePeriodSeconds: how
	// long kubelet lets a replica drain before it kills it.
	gracePeriod time.Duration
	// shutdownDelay is the -shutdown-delay the Deployment gives the
	// webhook.
	shutdownDelay time.Duration
	serverName    string // what the apiserver checks: NAME.NAMESPACE.svc
	caPEM         []byte // the configurations' caBundle
	certDir       string // the Secret's keys as files, as its volume holds them
	// credentials are the flags giving a replica the ServiceAccount's
	// token the Deployment mounts (-kubeconfig); none when it mounts none.
	credentials []string
	proxy       *kubeProxy

	mu   sync.Mutex
	ips  map[string]bool // the replicas' addresses, never given twice
	runs []*replica      // every replica started
}

// serviceRef is a webhook configuration's clientConfig.service.
type serviceRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Path      string `json:"path"`
	Port      int32  `json:"port"`
}

// deployInCluster renders the in-cluster manifests and applies all but the
// webhook configurations for real (the Deployment too, though no Pods
// run), as `kubectl apply -f out/` would, and starts kubeProxy on the
// Service's ClusterIP and port, with no endpoints yet, learning changes
// propagation after they are made. What it applies is removed when the
// test ends, but the namespaces (apply).
func deployInCluster(t *testing.T, propagation time.Duration) *inCluster {
	t.Helper()
	ctx := context.Background()
	out := render(t, "in-cluster")
	ic := &inCluster{ips: map[string]bool{}}
	var others []*unstructured.Unstructured
	var deployment *appsv1.Deployment
	var serviceObj *unstructured.Unstructured
	for _, obj := range objectsIn(t, out) {
		switch obj.GetKind() {
		case configurationKind[mutateRoute], configurationKind[validateRoute]:
			ic.configurations = append(ic.configurations, obj)
			continue
		case "Deployment":
			deployment = &appsv1.Deployment{}
			fromUnstructured(t, obj, deployment)
		}
		others = append(others, obj)
	}
	ref := ic.readConfigurations(t)
	ic.serverName = ref.Name + "." + ref.Namespace + ".svc"
	for _, obj := range others {
		if obj.GetKind() == "Service" && obj.GetName() == ref.Name && obj.GetNamespace() == ref.Namespace {
			serviceObj = obj
		}
	}
	if serviceObj == nil {
		t.Fatalf("the rendered manifests have no Service %s/%s, which the webhook configurations call", ref.Namespace, ref.Name)
	}
	if deployment == nil {
		t.Fatal("the rendered manifests have no Deployment")
	}
	apply(t, apiserver, others, false)

	var service corev1.Service
	fromUnstructured(t, serviceObj, &service)
	if !labels.SelectorFromSet(service.Spec.Selector).Matches(labels.Set(deployment.Spec.Template.Labels)) || len(service.Spec.Selector) == 0 {
		t.Fatalf("Service %s selects %v, which the Deployment's Pods, labelled %v, do not match: it would have no endpoints", ref.Name, service.Spec.Selector, deployment.Spec.Template.Labels)
	}
	ic.readDeployment(t, deployment, &service, ref.Port)
	ic.mountSecret(t, deployment, ref.Namespace)
	// A policy that reads the cluster reads it as the Deployment's
	// ServiceAccount, bound by the rendered RBAC, whose token render.sh
	// then has the Deployment mount: each replica is given that token.
	if mount := deployment.Spec.Template.Spec.AutomountServiceAccountToken; mount != nil && *mount {
		ic.credentials = renderedCredentials(t, out, readsOf(t, webhookBinary))
	}

	// The proxy on the ClusterIP and port the apiserver resolves the
	// Service to.
	ic.port = ref.Port
	for attempt := 1; ; attempt++ {
		stored, err := apiserver.client.CoreV1().Services(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ic.service = stored
		ic.proxy, err = startKubeProxy(net.JoinHostPort(stored.Spec.ClusterIP, itoa(int(ic.port))), propagation, nil)
		switch {
		case err == nil:
			t.Cleanup(ic.proxy.Close)
			t.Logf("Service %s/%s: ClusterIP %s, port %d, to container port %d", ref.Namespace, ref.Name, stored.Spec.ClusterIP, ic.port, ic.targetPort)
			return ic
		case errors.Is(err, syscall.EADDRINUSE) && attempt < portAttempts:
			// Another run's apiserver, on the same range, gave a Service
			// this ClusterIP: a new Service is given another.
			t.Logf("ClusterIP %s:%d is taken on this machine (%s); making the Service again", stored.Spec.ClusterIP, ic.port, portHolder(int(ic.port)))
			if err := apiserver.client.CoreV1().Services(ref.Namespace).Delete(ctx, ref.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			apply(t, apiserver, []*unstructured.Unstructured{serviceObj}, false)
		case errors.Is(err, syscall.EACCES) && ic.port != unprivilegedServicePort:
			t.Logf("this user may not listen on port %d: the Service and the configurations use %d instead", ic.port, unprivilegedServicePort)
			movePort(t, serviceObj, ic.configurations, ic.port, unprivilegedServicePort)
			ic.port = unprivilegedServicePort
			apply(t, apiserver, []*unstructured.Unstructured{serviceObj}, false)
		default:
			t.Fatalf("listening on the Service's ClusterIP: %v", err)
		}
	}
}

// readConfigurations returns the Service every rendered configuration
// calls, which must be one, and keeps their caBundle.
func (ic *inCluster) readConfigurations(t *testing.T) serviceRef {
	t.Helper()
	var ref serviceRef
	for _, c := range ic.configurations {
		hooks, _, _ := unstructured.NestedSlice(c.Object, "webhooks")
		for _, h := range hooks {
			raw, _, _ := unstructured.NestedMap(h.(map[string]any), "clientConfig", "service")
			var r serviceRef
			if b, err := json.Marshal(raw); err != nil || json.Unmarshal(b, &r) != nil || raw == nil {
				t.Fatalf("%s %s: a webhook without a clientConfig.service: in-cluster, each calls the Service", c.GetKind(), c.GetName())
			}
			if r.Port == 0 {
				r.Port = 443 // the API's default
			}
			r.Path = ""
			if ref.Name != "" && r != ref {
				t.Fatalf("the rendered configurations call two Services, %+v and %+v", ref, r)
			}
			ref = r
		}
		if len(hooks) == 0 {
			t.Fatalf("%s %s has no webhooks", c.GetKind(), c.GetName())
		}
		bundle, _, _ := unstructured.NestedString(hooks[0].(map[string]any), "clientConfig", "caBundle")
		ca, err := base64.StdEncoding.DecodeString(bundle)
		if err != nil || len(ca) == 0 {
			t.Fatalf("%s %s: caBundle %q is not a base64 PEM bundle: %v", c.GetKind(), c.GetName(), bundle, err)
		}
		ic.caPEM = ca
	}
	if ref.Name == "" {
		t.Fatal("the rendered manifests have no webhook configuration")
	}
	return ref
}

// readDeployment finds the container port the Service's port sends to, as
// the EndpointSlice controller does, and the Deployment's replicas and
// grace period.
func (ic *inCluster) readDeployment(t *testing.T, d *appsv1.Deployment, s *corev1.Service, port int32) {
	t.Helper()
	container := d.Spec.Template.Spec.Containers[0]
	named := map[string]int32{}
	for _, p := range container.Ports {
		named[p.Name] = p.ContainerPort
	}
	ic.metricsPort = named["metrics"]
	i := slices.IndexFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == port })
	if i < 0 {
		t.Fatalf("Service %s has no port %d, which the webhook configurations call", s.Name, port)
	}
	target := s.Spec.Ports[i].TargetPort
	switch {
	case target.StrVal != "":
		if ic.targetPort = named[target.StrVal]; ic.targetPort == 0 {
			t.Fatalf("Service %s's port %d sends to the container port named %q, which the Deployment's container does not have", s.Name, port, target.StrVal)
		}
	case target.IntVal != 0:
		ic.targetPort = target.IntVal
	default:
		ic.targetPort = port
	}
	ic.replicas = 1
	if d.Spec.Replicas != nil {
		ic.replicas = int(*d.Spec.Replicas)
	}
	ic.gracePeriod = 30 * time.Second // the API's default
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		ic.gracePeriod = time.Duration(*g) * time.Second
	}
	for _, a := range container.Args {
		if v, ok := strings.CutPrefix(a, "-shutdown-delay="); ok {
			var err error
			if ic.shutdownDelay, err = time.ParseDuration(v); err != nil {
				t.Fatalf("the Deployment's %s: %v", a, err)
			}
		}
	}
}

// mountSecret writes the keys of the Secret the Deployment mounts, as
// stored, into files, as kubelet's Secret volume does.
func (ic *inCluster) mountSecret(t *testing.T, d *appsv1.Deployment, namespace string) {
	t.Helper()
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret == nil {
			continue
		}
		secret, err := apiserver.client.CoreV1().Secrets(namespace).Get(context.Background(), v.Secret.SecretName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the Deployment mounts Secret %s: %v", v.Secret.SecretName, err)
		}
		ic.certDir = t.TempDir()
		for key, value := range secret.Data {
			if err := os.WriteFile(filepath.Join(ic.certDir, key), value, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	t.Fatal("the Deployment mounts no Secret: where is its serving certificate?")
}

// movePort changes a Service's port, and the configurations' calls of it,
// from one port to another.
func movePort(t *testing.T, service *unstructured.Unstructured, configurations []*unstructured.Unstructured, from, to int32) {
	t.Helper()
	ports, _, _ := unstructured.NestedSlice(service.Object, "spec", "ports")
	for _, p := range ports {
		// A port as YAML decodes it, a float64, or as typed code sets it.
		if port := fmt.Sprint(p.(map[string]any)["port"]); port == fmt.Sprint(from) {
			p.(map[string]any)["port"] = int64(to)
		}
	}
	if err := unstructured.SetNestedSlice(service.Object, ports, "spec", "ports"); err != nil {
		t.Fatal(err)
	}
	for _, c := range configurations {
		hooks, _, _ := unstructured.NestedSlice(c.Object, "webhooks")
		for _, h := range hooks {
			if err := unstructured.SetNestedField(h.(map[string]any), int64(to), "clientConfig", "service", "port"); err != nil {
				t.Fatal(err)
			}
		}
		if err := unstructured.SetNestedSlice(c.Object, hooks, "webhooks"); err != nil {
			t.Fatal(err)
		}
	}
}

// fromUnstructured converts a manifest to its type.
func fromUnstructured(t *testing.T, obj *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, into); err != nil {
		t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
}

// replica is one Pod of the Deployment: the webhook run with its
// container's arguments, on a loopback address of its own.
type replica struct {
	*webhookServer
	metricsAddr string // "" without a metrics port
}

// startReplica starts a replica as kubelet starts a Pod's container: the
// Deployment's arguments (deploymentRun), with flags replacing those of
// the same name, the Secret's files, the container's ports on an address
// of its own. It returns once /ping answers, as the readiness probe asks,
// over TLS with the name the apiserver checks.
func (ic *inCluster) startReplica(t *testing.T, flags ...string) *replica {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ic.caPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: ic.serverName},
		DisableKeepAlives: true, // a probe's connection does not linger beside the apiserver's
	}}
	for attempt := 1; ; attempt++ {
		ip := ic.newIP()
		endpoint := net.JoinHostPort(ip, itoa(int(ic.targetPort)))
		var metricsAddr string
		if ic.metricsPort != 0 {
			metricsAddr = net.JoinHostPort(ip, itoa(int(ic.metricsPort)))
		}
		args, env, _ := deploymentRun(t, ic.certDir, metricsAddr)
		args = append(replaceFlags(args, flags), ic.credentials...)
		p, err := startProcessEnv("replica "+endpoint, t.TempDir(), env, webhookBinary, append([]string{"-listen", endpoint}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		r := &replica{webhookServer: &webhookServer{process: p, addr: endpoint, caPEM: ic.caPEM, client: client}, metricsAddr: metricsAddr}
		err = waitFor(p, startTimeout, func() bool { return r.ready() == nil })
		if err == nil {
			ic.mu.Lock()
			ic.runs = append(ic.runs, r)
			ic.mu.Unlock()
			t.Cleanup(func() {
				// The test is over: no drain (-shutdown-delay) to wait for.
				_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
				r.stop()
				if t.Failed() {
					r.dumpLogButReviews()
				}
			})
			return r
		}
		p.stop()
		if strings.Contains(p.log.String(), "address already in use") && attempt < portAttempts {
			continue // another run's replica has this address
		}
		t.Fatalf("replica %s: %v\n%s", endpoint, err, p.log.String())
	}
}

// newIP returns a loopback address no replica of this test has had, in
// 127.0.0.0/24 apart from 127.0.0.1 and the addresses other tests' clients
// dial from.
func (ic *inCluster) newIP() string {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	for {
		ip := fmt.Sprintf("127.0.0.%d", 10+rand.IntN(240))
		if !ic.ips[ip] {
			ic.ips[ip] = true
			return ip
		}
	}
}

// replaceFlags returns args with each of flags ("-name=value") in place
// of the argument of the same name, or added.
func replaceFlags(args, flags []string) []string {
	args = slices.Clone(args)
	for _, f := range flags {
		name, _, _ := strings.Cut(f, "=")
		if i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, name+"=") || a == name }); i >= 0 {
			args[i] = f
		} else {
			args = append(args, f)
		}
	}
	return args
}

// ready is kubelet's readiness probe: nil once /ping answers 200.
func (r *replica) ready() error {
	resp, err := r.client.Get("https://" + r.addr + "/ping")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/ping answered %s", resp.Status)
	}
	return nil
}

// dumpLogButReviews shows what the replica logged but its reviews, which
// it counts.
func (r *replica) dumpLogButReviews() {
	var b strings.Builder
	reviews := 0
	for line := range strings.Lines(r.log.String()) {
		if strings.Contains(line, `"msg":"review"`) {
			reviews++
			continue
		}
		b.WriteString(line)
	}
	fmt.Fprintf(os.Stderr, "\n===== log of %s, but its %d reviews =====\n%s===== end of %s =====\n", r.name, reviews, b.String(), r.name)
}

// endpoints are the replicas' addresses, as an EndpointSlice lists them.
func endpoints(replicas []*replica) []string {
	var addrs []string
	for _, r := range replicas {
		addrs = append(addrs, r.addr)
	}
	return addrs
}

// saw reports whether any replica started so far logged a review of an
// object named name (webhookServer.saw).
func (ic *inCluster) saw(name string, err error) bool {
	ic.mu.Lock()
	runs := slices.Clone(ic.runs)
	ic.mu.Unlock()
	return slices.ContainsFunc(runs, func(r *replica) bool { return r.saw(name, err) })
}

// registerRendered applies configurations, rendered webhook
// configurations, for real, and waits until the apiserver calls each, as
// seen tells from the probes it sends in scope s. They act on every
// namespace but those they leave out, as a user's do; the suite runs its
// tests one at a time.
func registerRendered(t *testing.T, configurations []*unstructured.Unstructured, s *testScope, seen func(string, error) bool) {
	t.Helper()
	apply(t, apiserver, configurations, false)
	for _, c := range configurations {
		for route, kind := range configurationKind {
			if kind == c.GetKind() {
				waitForHookActive(t, hookOptions{name: c.GetName(), scope: s, seen: seen}, route)
			}
		}
	}
}

// ofKind returns the objects of kind.
func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			found = append(found, o)
		}
	}
	return found
}

// TestServiceMode: the apiserver calls the webhook through its Service, as
// the in-cluster manifests register it, at the ClusterIP and port its own
// resolution gives, checking the certificate from the rendered Secret
// against the rendered caBundle under the name NAME.NAMESPACE.svc; and the
// policy's verdicts through the Service are URL mode's. Each mode is sent
// the policy's denied request with its validating configuration alone
// (deniedRequest: /mutate has not run), then its admitted requests through
// every configuration; the answers, and what is stored, must be the same.
func TestServiceMode(t *testing.T) {
	ic := deployInCluster(t, 0)
	var serving []*replica
	for range ic.replicas {
		serving = append(serving, ic.startReplica(t))
	}
	ic.proxy.setNow(endpoints(serving)...)

	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	urlOut := render(t, "url", "127.0.0.1:"+itoa(port))
	urlWebhook := startRenderedWebhook(t, urlOut, "127.0.0.1:"+itoa(port))

	mark := apiserver.logMark()
	modes := []*verdictMode{
		{name: "url", configurations: objectsIn(t, urlOut), seen: urlWebhook.saw, scope: newScope(t, "verdicts-url")},
		{name: "service", configurations: ic.configurations, seen: ic.saw, scope: newScope(t, "verdicts-service")},
	}
	validating := configurationKind[validateRoute]
	for _, m := range modes {
		if len(ofKind(m.configurations, validating)) == 0 {
			break
		}
		registerRendered(t, ofKind(m.configurations, validating), m.scope, m.seen)
		m.sendDenied(t)
	}
	for _, m := range modes {
		registerRendered(t, m.configurations, m.scope, m.seen)
		m.sendAdmitted(t)
	}
	if !slices.Equal(modes[0].verdicts, modes[1].verdicts) {
		t.Errorf("the verdicts through the Service differ from URL mode's:\nURL mode:\n  %s\nservice mode:\n  %s",
			strings.Join(modes[0].verdicts, "\n  "), strings.Join(modes[1].verdicts, "\n  "))
	}
	t.Logf("through the Service and in URL mode alike:\n  %s", strings.Join(modes[1].verdicts, "\n  "))
	opened, reset := ic.proxy.counts()
	t.Logf("kube-proxy opened %v connections to the replicas, and reset %d", opened, reset)
	noFailedCalls(t, mark)
}

// verdictMode is one way of calling the webhook, and what the policy's
// requests got through it.
type verdictMode struct {
	name           string
	configurations []*unstructured.Unstructured // rendered
	seen           func(name string, err error) bool
	scope          *testScope
	verdicts       []string // the scope's names made generic
}

// sendDenied sends the policy's denied request, which must be denied
// with its message.
func (m *verdictMode) sendDenied(t *testing.T) {
	t.Helper()
	r, message := m.scope.denied("denied")
	if r == nil {
		return // a policy that denies nothing
	}
	err := r.send(context.Background(), false)
	if err == nil || !strings.Contains(err.Error(), message) {
		t.Errorf("%s mode: the %s with /validate alone: got %v, want a denial containing %q", m.name, r, err, message)
	}
	m.record("%s: %v", r, err)
}

// sendAdmitted sends the policy's admitted requests through every deployed
// webhook, which must be admitted, and records what is stored.
func (m *verdictMode) sendAdmitted(t *testing.T) {
	t.Helper()
	for _, r := range m.scope.admittedThroughAll("admitted") {
		err := r.send(context.Background(), false)
		if err != nil {
			t.Errorf("%s mode: the %s: %v", m.name, r, err)
		}
		m.record("%s: %v", r, err)
		if err != nil || r.Operation == "DELETE" {
			continue
		}
		obj, err := r.client().Get(context.Background(), r.name(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// What the webhooks decide: the labels, annotations and the rest
		// of the object, not what the apiserver gives each object.
		stored := map[string]any{"labels": obj.GetLabels(), "annotations": obj.GetAnnotations()}
		for k, v := range obj.Object {
			if k != "metadata" && k != "status" {
				stored[k] = v
			}
		}
		b, _ := json.Marshal(stored)
		m.record("stored: %s", b)
	}
}

// tokenVolumeName is the volume the apiserver's ServiceAccount admission
// adds to a Pod, its name made at random (generateName of
// "kube-api-access-": k8s.io/kubernetes v1.37.2
// plugin/pkg/admission/serviceaccount/admission.go).
var tokenVolumeName = regexp.MustCompile(`kube-api-access-[a-z0-9]+`)

// record adds a verdict, with the scope's namespace, its names' ending,
// its label's value and a Pod's token volume made generic.
func (m *verdictMode) record(format string, args ...any) {
	v := fmt.Sprintf(format, args...)
	v = tokenVolumeName.ReplaceAllString(v, "kube-api-access-RANDOM")
	v = strings.ReplaceAll(v, m.scope.namespace, "NAMESPACE")
	v = strings.ReplaceAll(v, "-"+m.scope.id, "-ID")
	v = strings.ReplaceAll(v, `:"`+m.scope.id+`"`, `:"ID"`)
	m.verdicts = append(m.verdicts, v)
}
