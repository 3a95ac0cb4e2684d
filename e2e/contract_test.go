package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	admissionrequest "k8s.io/apiserver/pkg/admission/plugin/webhook/request"
)

// The contract scenarios: what the apiserver does with the webhook's
// answers, its protocols, its failures, certificate rotation and shutdown.
// They register the webhooks of deploy/webhooks.yaml with its rules, and
// send each webhook only its admitted request (admittedRequest, in
// demonstration_test.go), so they do not depend on what the policy decides,
// on which kinds and operations each route acts, or on whether it
// registers both routes.

// noFailedCalls fails the test if the apiserver logged a failed webhook
// call since mark.
func noFailedCalls(t *testing.T, mark int) {
	t.Helper()
	if log := apiserver.logSince(mark); strings.Contains(log, "failed calling webhook") || strings.Contains(log, "Failed calling webhook") {
		t.Errorf("the apiserver failed to call a webhook:\n%s", grepLines(log, "ailed calling webhook"))
	}
}

func grepLines(log, substr string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Scenario 4: every answer the webhook gives to the captured fixtures
// passes the apiserver's own check.
func TestContractVerifyAdmissionResponse(t *testing.T) {
	w := startWebhook(t, "")
	scheme := runtime.NewScheme()
	_ = admissionv1.AddToScheme(scheme)
	_ = admissionv1beta1.AddToScheme(scheme)
	decoder := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	paths, err := filepath.Glob(filepath.Join(repoRoot, "testdata", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, path := range paths {
		body, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var in struct {
			APIVersion string `json:"apiVersion"`
			Request    struct {
				UID types.UID `json:"uid"`
			} `json:"request"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			t.Fatal(err)
		}
		for _, route := range []string{"/mutate", "/validate"} {
			t.Run(filepath.Base(path)+route, func(t *testing.T) {
				resp, err := w.client.Post(w.url(route+"?timeout=10s"), "application/json", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				out, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("got HTTP %d %s", resp.StatusCode, out)
				}
				obj, gvk, err := decoder.Decode(out, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				if gvk.GroupVersion().String() != in.APIVersion {
					t.Errorf("asked in %s, answered in %s", in.APIVersion, gvk.GroupVersion())
				}
				if _, err := admissionrequest.VerifyAdmissionResponse(in.Request.UID, route == "/mutate", obj); err != nil {
					t.Errorf("the apiserver would reject this answer: %v\n%s", err, out)
				}
			})
		}
	}
}

// The apiserver calls a loopback URL with HTTP/2 when the webhook offers
// it (-http2), and with HTTP/1.1 by default.
func TestHTTP2(t *testing.T) {
	for _, tc := range []struct {
		name      string
		flags     []string
		wantProto string
	}{
		{"default", nil, "proto=HTTP/1.1"},
		{"-http2", []string{"-http2"}, "proto=HTTP/2.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scope := newScope(t, "http2-"+strings.TrimPrefix(tc.name, "-"))
			w := startWebhook(t, "", tc.flags...)
			mark := apiserver.logMark()
			registerDeployed(t, w, scope, hookOptions{})
			if err := scope.sendThroughAll(context.Background(), "web"); err != nil {
				t.Fatal(err)
			}
			if !w.loggedLine(func(line string) bool {
				return strings.Contains(line, "msg=review") && strings.Contains(line, tc.wantProto)
			}) {
				t.Errorf("the webhook logged no review with %s:\n%s", tc.wantProto, grepLines(w.log.String(), "msg=review"))
			}
			noFailedCalls(t, mark)
		})
	}
}

// Scenario 6a: a webhook that is down is treated per failurePolicy.
func TestWebhookDown(t *testing.T) {
	ctx := context.Background()
	w := startWebhook(t, "")
	failing, ignoring := newScope(t, "down-fail"), newScope(t, "down-ignore")
	route := oneRoute(t)
	registerRoute(t, route, hookOptions{name: "fail.webhook.example.com", url: w.url(route), caBundle: w.caPEM, scope: failing, failurePolicy: admissionregistrationv1.Fail, seen: w.saw})
	registerRoute(t, route, hookOptions{name: "ignore.webhook.example.com", url: w.url(route), caBundle: w.caPEM, scope: ignoring, failurePolicy: admissionregistrationv1.Ignore, seen: w.saw})
	w.stop()

	err := failing.sendAdmitted(ctx, route, "web")
	if err == nil || !strings.Contains(err.Error(), `failed calling webhook "fail.webhook.example.com"`) {
		t.Errorf("failurePolicy Fail with the webhook down: got %v, want a clear failed-call error", err)
	}
	if err := ignoring.sendAdmitted(ctx, route, "web"); err != nil {
		t.Errorf("failurePolicy Ignore with the webhook down: %v", err)
	}
}

// Scenario 6b: a webhook slower than timeoutSeconds is treated per policy.
// The slow webhook is a stand-in served here, since ours answers in
// microseconds.
func TestWebhookTooSlow(t *testing.T) {
	ctx := context.Background()
	w := startWebhook(t, "") // only for its certificate
	pair, err := tls.LoadX509KeyPair(filepath.Join(w.dir, "tls", "tls.crt"), filepath.Join(w.dir, "tls", "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []byte
	slow := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, body...)
		mu.Unlock()
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
		http.Error(rw, "too late", http.StatusServiceUnavailable)
	}))
	slow.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	slow.StartTLS()
	defer slow.Close()
	sawSlow := func(name string, _ error) bool {
		mu.Lock()
		defer mu.Unlock()
		return bytes.Contains(seen, []byte(`"name":"`+name+`"`)) // request.name, or the object's
	}

	failing, ignoring := newScope(t, "slow-fail"), newScope(t, "slow-ignore")
	route := oneRoute(t)
	registerRoute(t, route, hookOptions{name: "slow-fail.webhook.example.com", url: slow.URL + route, caBundle: w.caPEM, scope: failing, timeout: 1, failurePolicy: admissionregistrationv1.Fail, seen: sawSlow})
	registerRoute(t, route, hookOptions{name: "slow-ignore.webhook.example.com", url: slow.URL + route, caBundle: w.caPEM, scope: ignoring, timeout: 1, failurePolicy: admissionregistrationv1.Ignore, seen: sawSlow})

	// The stand-in answers after 3 s, "too late": an apiserver that waited
	// for it would pass that on. One that kept to timeoutSeconds gave up
	// first, with its client's deadline (a check of the error, not of a
	// clock, which a busy machine would make lie).
	start := time.Now()
	err = failing.sendAdmitted(ctx, route, "web")
	if err == nil || !strings.Contains(err.Error(), `failed calling webhook "slow-fail.webhook.example.com"`) {
		t.Errorf("failurePolicy Fail with a slow webhook: got %v, want a failed-call error", err)
	} else if !strings.Contains(err.Error(), "context deadline exceeded") {
		t.Errorf("failurePolicy Fail with a slow webhook: got %v, want the apiserver's deadline of timeoutSeconds 1 (context deadline exceeded), not the slow answer", err)
	}
	t.Logf("refused after %s", time.Since(start).Round(time.Millisecond))
	if err := ignoring.sendAdmitted(ctx, route, "web"); err != nil {
		t.Errorf("failurePolicy Ignore with a slow webhook: %v", err)
	}
}

// failedCreate is a create that failed: which object, when, and why.
type failedCreate struct {
	name string
	at   time.Time
	err  error
}

// createLoop sends admitted requests (sendThroughAll) in scope s until
// stop is closed or limit is reached, on two goroutines as a busy cluster
// would, and returns every failure and how many succeeded. progress, when
// not nil, counts successes as they happen.
func createLoop(s *testScope, stop <-chan struct{}, limit int, progress *atomic.Int64) (failed []failedCreate, ok int) {
	var mu sync.Mutex
	var n atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := n.Add(1)
				if i > int64(limit) {
					return
				}
				select {
				case <-stop:
					return
				default:
				}
				base := fmt.Sprintf("load-%d", i)
				err := s.sendThroughAll(context.Background(), base)
				mu.Lock()
				if err != nil {
					failed = append(failed, failedCreate{s.name(base), time.Now(), err})
				} else {
					ok++
					if progress != nil {
						progress.Add(1)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return failed, ok
}

// createResults is what a create loop did.
type createResults struct {
	failed []failedCreate
	ok     int
}

// startCreates runs createLoop in the background; the function it returns
// stops the loop and gives its results.
func startCreates(s *testScope, limit int, progress *atomic.Int64) (stop func() createResults) {
	quit := make(chan struct{})
	done := make(chan createResults, 1)
	go func() {
		failed, ok := createLoop(s, quit, limit, progress)
		done <- createResults{failed, ok}
	}()
	return func() createResults {
		close(quit)
		return <-done
	}
}

// Scenario 6c: the serving certificate is renewed on disk, by docs/deploy.md's
// own procedure (`webhook certs` run again), while creates run; not one
// fails.
func TestRotationUnderLoad(t *testing.T) {
	scope := newScope(t, "rotation")
	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "tls")
	certFile, keyFile := filepath.Join(tlsDir, "tls.crt"), filepath.Join(tlsDir, "tls.key")
	webhookCerts(t, tlsDir)
	w := startWebhook(t, dir, "-tls-cert-file", certFile, "-tls-private-key-file", keyFile)
	mark := apiserver.logMark()
	registerDeployed(t, w, scope, hookOptions{})

	var progress atomic.Int64
	stopCreates := startCreates(scope, 5000, &progress)
	time.Sleep(2 * time.Second)
	beforeSwap := progress.Load()
	// The renewal writes the key, then the certificate, each renamed into
	// place: for a moment the pair does not match, and the webhook must keep
	// serving the old one through that.
	webhookCerts(t, tlsDir)
	renewed := readCertFile(t, certFile)
	time.Sleep(6 * time.Second)
	r := stopCreates()
	for _, f := range r.failed {
		t.Errorf("create of %s failed during rotation: %v", f.name, f.err)
	}
	if after := int64(r.ok) - beforeSwap; beforeSwap < 10 || after < 10 {
		t.Errorf("%d creates before the swap and %d after; the loop must run across it", beforeSwap, after)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.caPEM)
	conn, err := tls.Dial("tcp", w.addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := conn.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(renewed.SerialNumber) != 0 {
		t.Errorf("after rotation the webhook serves serial %x, want the new %x", got, renewed.SerialNumber)
	}
	t.Logf("%d creates before the swap and %d after, none failed", beforeSwap, int64(r.ok)-beforeSwap)
	noFailedCalls(t, mark)
}

// Scenario 6d: SIGTERM to the webhook while creates run. Every review it
// accepted is answered. The failures allowed are calls it never accepted:
// "connection refused" once the listener is closed, and connections that
// had reached only the kernel's accept queue at the instant it closed,
// which the kernel resets. (In a cluster the shutdown delay lets endpoints
// drain so that no new connections arrive by then; this URL-mode test dials
// the same address to the last millisecond, so it sees that instant.)
func TestSIGTERMUnderLoad(t *testing.T) {
	scope := newScope(t, "sigterm")
	w := startWebhook(t, "", "-shutdown-delay", "2s")
	registerDeployed(t, w, scope, hookOptions{})

	stopCreates := startCreates(scope, 5000, nil)
	time.Sleep(1500 * time.Millisecond)
	// The test's own client lets go of the connection it probed /ping
	// over, as the apiserver does after 90 s: the webhook waits for that.
	w.client.CloseIdleConnections()
	w.signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(40 * time.Second):
		t.Fatal("the webhook did not exit within 40s of SIGTERM")
	}
	time.Sleep(time.Second) // creates after exit fail with connection refused
	r := stopCreates()
	if w.err != nil {
		t.Errorf("the webhook exited with %v, want status 0", w.err)
	}
	log := w.log.String()
	listenerClosed := logTime(t, log, "closing the listener")
	refused, queued := 0, 0
	for _, f := range r.failed {
		if answered(log, f) {
			t.Errorf("create of %s failed although the webhook answered the review that failed: %v", f.name, f.err)
			continue
		}
		switch {
		case strings.Contains(f.err.Error(), "connection refused"):
			refused++
		case !f.at.Before(listenerClosed) && f.at.Sub(listenerClosed) < 100*time.Millisecond:
			queued++
		default:
			t.Errorf("create of %s failed %s after the listener closed: %v", f.name, f.at.Sub(listenerClosed), f.err)
		}
	}
	if refused == 0 {
		t.Error("no create met the closed listener; the test did not cover the shutdown")
	}
	for _, bad := range []string{"TLS handshake error", "http: "} {
		if strings.Contains(log, bad) {
			t.Errorf("the webhook logged a connection error %q:\n%s", bad, grepLines(log, bad))
		}
	}
	t.Logf("%d creates succeeded; %d refused after the listener closed; %d reset in the kernel's accept queue as it closed", r.ok, refused, queued)
	if !strings.Contains(log, "msg=stopped") {
		t.Errorf("the webhook did not log a clean stop:\n%s", log)
	}
}

// TestSecondSignal: a second SIGINT during -shutdown-delay ends the webhook
// at once, as a person's second Ctrl-C means: the first only asked it to
// drain.
func TestSecondSignal(t *testing.T) {
	w := startWebhook(t, "", "-shutdown-delay", "60s")
	w.signal(syscall.SIGINT)
	waitUntil(t, "the webhook draining", func() bool { return strings.Contains(w.log.String(), "shutting down") })
	w.signal(syscall.SIGINT)
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the webhook still runs 30 s after a second SIGINT in its 60 s shutdown delay, want it ended at once")
	}
}

// TestKeptAliveConnectionsAfterTheDelay: reviews the apiserver writes into
// the connections it keeps idle to a webhook, just as the webhook's
// shutdown delay ends, are answered, not cut by the webhook closing those
// connections idle. The webhook is stopped (SIGSTOP, as a starved node's
// scheduler stops it) while the apiserver writes a burst into every
// connection it keeps, and resumed once the delay has ended.
func TestKeptAliveConnectionsAfterTheDelay(t *testing.T) {
	const (
		delay = 3 * time.Second
		// burst is as many connections as client-go keeps idle to a
		// host (k8s.io/client-go v0.37.2 transport/cache.go,
		// idleConnsPerHost): one burst leaves that many idle, and the
		// next takes them all, so that none of its reviews needs a new
		// connection, which the closed listener would refuse.
		burst = 25
	)
	scope := newScope(t, "keptalive")
	w := startWebhook(t, "", "-shutdown-delay", delay.String())
	// One webhook, so that each review's create calls the webhook once:
	// /mutate's, which the policy's admitted request passes alone.
	route := deployedRoutes(t)[0]
	registerRoute(t, route, hookOptions{scope: scope, caBundle: w.caPEM, seen: w.saw,
		name: "keptalive-" + scope.namespace + ".webhook.example.com", url: w.url(route)})

	_, port, err := net.SplitHostPort(w.addr)
	if err != nil {
		t.Fatal(err)
	}
	// sendStalled sends a burst with the webhook stopped until the kernel
	// holds all of it, each review's connection holding bytes the webhook
	// has not read (a new one's TLS hello, or the review on one kept
	// alive), and then until resumeAt.
	sendStalled := func(prefix string, resumeAt time.Time) []error {
		requests := make([]*preparedRequest, burst)
		for i := range requests {
			requests[i] = scope.admitted(route, fmt.Sprintf("%s-%d", prefix, i), 0)
			if err := requests[i].storeFirst(context.Background()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Until(requests[i].settled))
		}
		errs := make([]error, burst)
		var wg sync.WaitGroup
		w.signal(syscall.SIGSTOP)
		for i, r := range requests {
			wg.Go(func() { errs[i] = r.send(context.Background(), false) })
		}
		holding := 0
		for deadline := time.Now().Add(30 * time.Second); holding < burst; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				w.signal(syscall.SIGCONT)
				t.Fatalf("the %s burst: %d of its %d connections ever held what it sent, by /proc/net/tcp", prefix, holding, burst)
			}
			holding = 0
			for _, unread := range apiserverConnections(t, port) {
				if unread > 0 {
					holding++
				}
			}
		}
		time.Sleep(time.Until(resumeAt))
		w.signal(syscall.SIGCONT)
		wg.Wait()
		return errs
	}
	// The first: the apiserver dials a connection for each review.
	for _, err := range sendStalled("first", time.Time{}) {
		if err != nil {
			t.Fatalf("a review of the first burst failed: %v", err)
		}
	}

	// The test's own client lets go of the connection it probed /ping
	// over, as the apiserver does after 90 s.
	w.client.CloseIdleConnections()
	w.signal(syscall.SIGTERM)
	waitUntil(t, "the webhook draining", func() bool { return strings.Contains(w.log.String(), "shutting down") })
	draining := time.Now()
	time.Sleep(delay - 500*time.Millisecond)
	// The second, into the connections the first left idle, each review
	// waiting in its connection when the webhook resumes, its delay over.
	failed := 0
	for _, err := range sendStalled("late", draining.Add(delay+500*time.Millisecond)) {
		if err != nil {
			failed++
			t.Logf("a review written as the delay ended failed: %v", err)
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d reviews written into the apiserver's kept-alive connections as the shutdown delay ended failed, want none", failed, burst)
	}
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the webhook did not exit within 30 s of its last review:\n%s", w.log.String())
	}
	if log := w.log.String(); !strings.Contains(log, "closing the listener") || !strings.Contains(log, "msg=stopped") {
		t.Errorf("the webhook did not close its listener and stop cleanly:\n%s", log)
	}
}

// answered reports whether the webhook logged an answer to the very call
// that failed: the route named in the apiserver's error, for that object.
func answered(log string, f failedCreate) bool {
	path := "/validate"
	if strings.Contains(f.err.Error(), "/mutate?") {
		path = "/mutate"
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "path="+path+" ") && loggedName(line, f.name) {
			return true
		}
	}
	return false
}

// webhookCerts runs `webhook certs` for 127.0.0.1 into dir: a new CA the
// first time, a new serving certificate under the same CA after that.
func webhookCerts(t *testing.T, dir string) {
	t.Helper()
	if out, err := exec.Command(webhookBinary, "certs", "-dir", dir, "-hosts", "127.0.0.1").CombinedOutput(); err != nil {
		t.Fatalf("webhook certs: %v\n%s", err, out)
	}
}

func readCertFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s holds no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// logTime returns the time of the first log line containing msg.
func logTime(t *testing.T, log, msg string) time.Time {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, msg) && strings.HasPrefix(line, "time=") {
			at, err := time.Parse(time.RFC3339Nano, strings.Fields(line)[0][len("time="):])
			if err != nil {
				t.Fatal(err)
			}
			return at
		}
	}
	t.Fatalf("no log line %q", msg)
	return time.Time{}
}
