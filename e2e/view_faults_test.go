package e2e

// The view of the cluster under faults of a real kube-apiserver: what the
// policy answers while the view cannot hear the apiserver, and how long
// until it is fresh again (docs/cluster.md takes its figures from here).

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// tcpProxy forwards the connections it accepts on loopback to target, so
// that a test can cut a client off from a server that stays up (cut), and
// slow down what the server sends (throttle).
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	cutOff bool
	// pause is how long each 16 KiB from target waits before it is
	// passed on.
	pause time.Duration
}

func startTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.forward(c) })
		}
	})
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

// forward carries c to the target and back until either side ends.
func (p *tcpProxy) forward(c net.Conn) {
	p.mu.Lock()
	if p.cutOff {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.Close()
	}()
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, up)
		p.mu.Unlock()
		up.Close()
	}()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() {
		buf := make([]byte, 16<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 {
				p.mu.Lock()
				pause := p.pause
				p.mu.Unlock()
				time.Sleep(pause)
				if _, err := c.Write(buf[:n]); err != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	<-done
	c.Close()
	up.Close()
	<-done
}

// cut closes every connection and refuses new ones until restore.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutOff = true
	for c := range p.conns {
		c.Close()
	}
}

func (p *tcpProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutOff = false
}

func (p *tcpProxy) throttle(pause time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pause = pause
}

// faultyView is the webhook built with lookupPolicy, reading an apiserver
// of the test's own through a tcpProxy with a token it reads from a file,
// and a namespace whose reviews it looks up.
type faultyView struct {
	t   *testing.T
	api *apiServer
	// writer is a second apiserver on api's storage, through which the
	// test makes its change while api is down.
	writer    *apiServer
	proxy     *tcpProxy
	tokenFile string
	token     string // the reader's own
	// kubeconfig reads the apiserver through proxy, with tokenFile.
	kubeconfig string
	w          *webhookServer
	metrics    string
	namespace  string
	review     []byte // a ConfigMap CREATE in namespace, as the apiserver sends it
}

// viewFaultMaxStale is the MaxStale the test gives the webhook's view, so
// that a fault makes it too stale within seconds.
const viewFaultMaxStale = 5 * time.Second

// startFaultyView starts an apiserver of the test's own named name, with
// extraArgs, and the webhook reading it.
func startFaultyView(t *testing.T, name string, extraArgs []string) *faultyView {
	t.Helper()
	api, err := startOwnAPIServer(t, name, extraArgs)
	if err != nil {
		t.Fatal(err)
	}
	// Its etcd prefix is its name; the later flag wins.
	writer, err := startOwnAPIServer(t, name+"-writer", append(slices.Clone(extraArgs), "--etcd-prefix", "/"+name))
	if err != nil {
		t.Fatal(err)
	}
	bin := lookupPolicyBinary(t)
	r := api.reader(t, bin)
	v := &faultyView{t: t, api: api, writer: writer, token: r.token}
	v.proxy = startTCPProxy(t, strings.TrimPrefix(api.config.Host, "https://"))
	dir := t.TempDir()
	v.tokenFile = filepath.Join(dir, "token")
	v.setToken(r.token)
	v.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(v.kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: e2e
contexts: [{name: e2e, context: {cluster: e2e, user: reader}}]
clusters: [{name: e2e, cluster: {server: "https://%s", certificate-authority: %q}}]
users: [{name: reader, user: {tokenFile: %q}}]
`, v.proxy.addr(), filepath.Join(api.dir, "certs", "apiserver.crt"), v.tokenFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	v.namespace = createLabelledNamespaceIn(t, api, name, nil)
	captured, err := os.ReadFile(filepath.Join(repoRoot, "testdata", "v1-configmap-create-escaped-keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	var review map[string]any
	if err := json.Unmarshal(captured, &review); err != nil {
		t.Fatal(err)
	}
	review["request"].(map[string]any)["namespace"] = v.namespace
	if v.review, err = json.Marshal(review); err != nil {
		t.Fatal(err)
	}
	return v
}

// startWebhook starts the webhook anew, for t: its backoff remembers no
// earlier fault.
func (v *faultyView) startWebhook(t *testing.T) {
	t.Helper()
	v.t = t
	v.w = startWebhookBinary(t, lookupPolicyBinary(t), "", "127.0.0.1:0", nil, "-metrics-listen=127.0.0.1:0", "-kubeconfig", v.kubeconfig, "-max-stale="+viewFaultMaxStale.String())
	v.metrics = "http://" + v.w.metricsAddr(t) + "/metrics"
}

func (v *faultyView) setToken(token string) {
	if err := os.WriteFile(v.tokenFile, []byte(token), 0o600); err != nil {
		v.t.Fatal(err)
	}
}

// answer sends the review to /validate, straight to the webhook, and
// returns what the policy answered: "allowed", or "undecided: " and why.
func (v *faultyView) answer() string {
	resp, err := v.w.client.Post(v.w.url("/validate"), "application/json", bytes.NewReader(v.review))
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusServiceUnavailable {
		return "undecided: " + string(body)
	}
	var out struct {
		Response struct {
			Allowed bool `json:"allowed"`
		} `json:"response"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &out) != nil || !out.Response.Allowed {
		return fmt.Sprintf("unexpected: %d %s", resp.StatusCode, body)
	}
	return "allowed"
}

// series is the value of one of the webhook's series of the ConfigMaps'
// view.
func (v *faultyView) series(name string) float64 {
	return scrapedValue(v.t, v.metrics, name+`{resource="configmaps"}`)
}

// until polls cond every 10 ms for up to limit, and returns how long it
// took; the test fails if cond never holds.
func (v *faultyView) until(what string, limit time.Duration, cond func() bool) time.Duration {
	v.t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			v.t.Fatalf("waited %s for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// setUndecided creates or deletes, as the admin, through the writer, the
// ConfigMap that makes the policy undecided in the namespace.
func (v *faultyView) setUndecided(present bool) {
	v.t.Helper()
	ctx := context.Background()
	configMaps := v.writer.client.CoreV1().ConfigMaps(v.namespace)
	if present {
		if _, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "e2e-undecided"}}, metav1.CreateOptions{}); err != nil {
			v.t.Fatal(err)
		}
		return
	}
	if err := configMaps.Delete(ctx, "e2e-undecided", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		v.t.Fatal(err)
	}
}

// viewAnswers records what the policy answers, a review every 50 ms, until
// stop.
type viewAnswers struct {
	mu   sync.Mutex
	log  []viewAnswer
	stop func()
}

type viewAnswer struct {
	at     time.Time
	answer string
}

func (v *faultyView) record() *viewAnswers {
	a := &viewAnswers{}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			got := viewAnswer{time.Now(), v.answer()}
			a.mu.Lock()
			a.log = append(a.log, got)
			a.mu.Unlock()
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	a.stop = func() { close(done); <-stopped }
	return a
}

// viewFault is a way the apiserver fails the webhook's view: begin starts
// it, after which the view can hear nothing of the change the test makes;
// end ends it.
type viewFault struct {
	name       string
	begin, end func(t *testing.T, v *faultyView)
}

// TestViewUnderFaults runs the webhook built with lookupPolicy (a view of
// every ConfigMap, looked up on every review; MaxStale 5 s) against an
// apiserver of the test's own, through a proxy, with a second apiserver on
// the same storage to write through, and for each fault: the apiserver
// stopped as a rolling update stops it and started again (its watch cache
// new); the same with no watch cache, etcd compacted meanwhile; the
// reader's RBAC removed then restored; its token made invalid then valid.
// During each, the ConfigMap that makes the policy undecided is created
// where the view cannot see it; the test records a review every 50 ms, and
// checks that once the view has been too stale, no review is allowed
// until the view holds the ConfigMap: the view never answers from old
// content as if fresh (the code before allowed reviews while it relisted
// after the compacted watch was answered 200, then 410). It logs, for
// docs/cluster.md, what the policy answered and how long until the view
// was fresh again after each fault ended.
func TestViewUnderFaults(t *testing.T) {
	// A list the relist after the 410 must read slowly through the proxy.
	withFiller := func(t *testing.T, v *faultyView) {
		ns := createLabelledNamespaceIn(t, v.api, "filler", nil)
		var wg sync.WaitGroup
		for writer := range 16 {
			wg.Go(func() {
				for i := writer; i < 2000; i += 16 {
					cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("filler-%04d", i)}, Data: map[string]string{"key": strings.Repeat("v", 200)}}
					if _, err := v.api.client.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	// The apiserver stopped as a rolling update stops it (SIGTERM: its
	// watches end as at their timeout), the change made meanwhile, and
	// the apiserver started again, its watch cache new: the view's next
	// watch is answered 200, then 410.
	var startAgain func()
	restart := viewFault{"the apiserver restarted",
		func(t *testing.T, v *faultyView) { startAgain = stopAPIServer(t, v.api) },
		func(t *testing.T, v *faultyView) { startAgain() }}
	// The same with no watch cache of ConfigMaps: the watch goes to etcd,
	// compacted meanwhile, which answers with 410.
	compacted := viewFault{"the watch's resourceVersion compacted away in etcd",
		func(t *testing.T, v *faultyView) { startAgain = stopAPIServer(t, v.api) },
		func(t *testing.T, v *faultyView) { compactEtcd(t); startAgain() }}
	var bindings []rbacv1.ClusterRoleBinding
	rbac := viewFault{"the reader's RBAC removed, then restored",
		func(t *testing.T, v *faultyView) {
			ctx := context.Background()
			got, err := v.api.client.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			bindings = nil
			for _, b := range got.Items {
				// makeReader's, which bind its accounts of readerNamespace.
				if len(b.Subjects) == 1 && b.Subjects[0].Kind == "ServiceAccount" && b.Subjects[0].Namespace == readerNamespace {
					bindings = append(bindings, b)
					if err := v.api.client.RbacV1().ClusterRoleBindings().Delete(ctx, b.Name, metav1.DeleteOptions{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if len(bindings) == 0 {
				t.Fatalf("no ClusterRoleBinding binds a reader of namespace %s", readerNamespace)
			}
			// A watch is authorized as it starts: end the open one.
			time.Sleep(time.Second) // RBAC learns of the change through an informer
			v.proxy.cut()
			v.proxy.restore()
		},
		func(t *testing.T, v *faultyView) {
			for _, b := range bindings {
				b.ResourceVersion, b.UID = "", ""
				if _, err := v.api.client.RbacV1().ClusterRoleBindings().Create(context.Background(), &b, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}}
	token := viewFault{"the reader's token made invalid, then valid",
		func(t *testing.T, v *faultyView) {
			v.setToken("not-a-token")
			v.proxy.cut()
			v.proxy.restore()
		},
		func(t *testing.T, v *faultyView) { v.setToken(v.token) }}

	for _, group := range []struct {
		name      string
		extraArgs []string
		faults    []viewFault
	}{
		// The watch cache on, as kube-apiserver runs by default; on
		// SIGTERM, it ends its watches as at their timeout, rather than
		// with the connection's GOAWAY.
		{"view-faults", []string{"--shutdown-watch-termination-grace-period=2s"}, []viewFault{restart, rbac, token}},
		// No watch cache of ConfigMaps: a watch goes to etcd, which
		// answers a compacted resourceVersion with 410.
		{"view-faults-etcd", []string{"--shutdown-watch-termination-grace-period=2s", "--watch-cache-sizes=configmaps#0"}, []viewFault{compacted}},
	} {
		t.Run(group.name, func(t *testing.T) {
			v := startFaultyView(t, group.name, group.extraArgs)
			withFiller(t, v)
			for _, fault := range group.faults {
				t.Run(fault.name, func(t *testing.T) { v.startWebhook(t); runViewFault(t, v, fault) })
			}
		})
	}
}

// runViewFault runs one fault: see TestViewUnderFaults.
func runViewFault(t *testing.T, v *faultyView, fault viewFault) {
	v.setUndecided(false)
	v.until("the view to be current and the policy to allow", 2*time.Minute, func() bool {
		return v.series("webhook_view_current") == 1 && v.answer() == "allowed"
	})
	recorded := v.record()
	mark := v.w.logMark()
	began := time.Now()
	fault.begin(t, v)
	v.setUndecided(true)
	v.until("the view to be too stale", time.Minute, func() bool { return strings.Contains(v.answer(), "too stale") })
	staleAfter := time.Since(began)
	// The list after it is read slowly: the code before answered from the
	// old content, as if fresh, all the while.
	v.proxy.throttle(20 * time.Millisecond)
	ended := time.Now()
	fault.end(t, v)
	var toFresh, toRight time.Duration
	v.until("the view to be current again, and the policy to see the change", 2*time.Minute, func() bool {
		if toRight == 0 && strings.Contains(v.answer(), "holds the ConfigMap e2e-undecided") {
			toRight = time.Since(ended)
		}
		if toFresh == 0 && v.series("webhook_view_current") == 1 {
			toFresh = time.Since(ended)
		}
		return toFresh > 0 && toRight > 0
	})
	v.proxy.throttle(0)
	recorded.stop()
	var said []string
	for line := range strings.Lines(v.w.logSince(mark)) {
		if strings.Contains(line, "resource=configmaps") {
			said = append(said, strings.TrimSpace(line))
		}
	}

	// From the first "too stale" on, nothing may be allowed.
	var allowedBefore, staleAnswers, allowedAfter, other int
	var firstStale time.Time
	for _, a := range recorded.log {
		switch {
		case strings.Contains(a.answer, "too stale") || strings.Contains(a.answer, "not synced"):
			staleAnswers++
			if firstStale.IsZero() {
				firstStale = a.at
			}
		case a.answer == "allowed" && firstStale.IsZero():
			allowedBefore++
		case a.answer == "allowed":
			if allowedAfter++; allowedAfter <= 3 {
				t.Errorf("%s after the view was too stale, a review was allowed: the view answered from old content as if fresh", a.at.Sub(firstStale).Round(time.Millisecond))
			}
		case strings.Contains(a.answer, "holds the ConfigMap"):
		default:
			if other++; other <= 3 {
				t.Logf("another answer: %.300s", a.answer)
			}
		}
	}
	if allowedAfter > 0 {
		t.Errorf("%d reviews allowed once the view was too stale, want none", allowedAfter)
	}
	t.Logf("%s: too stale %s after the fault began (MaxStale %s), having allowed %d reviews from what it last heard; then %d undecided as too stale, %d other answers. Once the fault ended: current again after %s, the change seen after %s. The view has sent %v lists and %v watches, %v of them failed; it logged:\n%s",
		fault.name, staleAfter.Round(100*time.Millisecond), viewFaultMaxStale, allowedBefore, staleAnswers, other,
		toFresh.Round(10*time.Millisecond), toRight.Round(10*time.Millisecond),
		v.series("webhook_view_list_requests_total"), v.series("webhook_view_watch_requests_total"), v.series("webhook_view_failures_total"), strings.Join(said, "\n"))
}

// stopAPIServer stops a's kube-apiserver as a rolling update does
// (SIGTERM, then SIGKILL after stopGrace), and returns what starts it
// again with the same arguments and files, on the same port, once it is
// ready: a restart, its watch cache lost.
func stopAPIServer(t *testing.T, a *apiServer) (startAgain func()) {
	t.Helper()
	bin, args, dir, name := a.cmd.Path, a.cmd.Args[1:], a.cmd.Dir, a.name
	a.stop()
	return func() {
		t.Helper()
		p, err := startProcess(name, dir, bin, args...)
		if err != nil {
			t.Fatal(err)
		}
		a.process = p
		if err := waitFor(p, startTimeout, func() bool {
			body, err := a.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
			return err == nil && string(body) == "ok"
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// compactEtcd compacts the suite's etcd at its latest revision: every
// resourceVersion before it is gone (etcd's v3 JSON gateway).
func compactEtcd(t *testing.T) {
	t.Helper()
	post := func(path, body string) map[string]any {
		resp, err := http.Post(etcdURL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("etcd %s: %d %v %v", path, resp.StatusCode, out, err)
		}
		return out
	}
	got := post("/v3/kv/range", fmt.Sprintf(`{"key":%q}`, base64.StdEncoding.EncodeToString([]byte("/"))))
	revision := got["header"].(map[string]any)["revision"].(string)
	post("/v3/kv/compaction", fmt.Sprintf(`{"revision":%q,"physical":true}`, revision))
}
