package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestBurstServed has the apiserver send the webhook, run as the
// Deployment runs it, bursts of 600 and 1,000 writes at once, each
// reviewed by every deployed webhook: more calls in flight than the
// webhook holds connections (320), as the apiserver opens a connection for
// each, with no cap of its own (CONTRACT.md). Every write succeeds, under
// failurePolicy Fail, while other clients use the port as in a cluster: a
// Pod keeping a few connections alive, and the kubelet probing /ping on a
// new connection every 100 ms. None of their connections is closed, and
// every probe is answered. The suite's admin is exempt from API Priority
// and Fairness, as a controller's requests at a high priority level are,
// so each burst reaches the webhook at once.
func TestBurstServed(t *testing.T) {
	takeLoadTurn(t)
	burstServed(t, "burst", burstOptions{timeout: 10, others: true})
}

// TestBurstServedOnBusyCores is the same bursts with a process spinning on
// each core, as on a node at its CPU limit or a control-plane host in a
// burst, and the apiserver the webhook's only client, as in URL mode: its
// handshakes and first bytes come late, and the webhook, judging no
// connection by its timing, closes none, and every write succeeds. Its
// webhooks wait 30 s, not 10: the apiserver and etcd, starved, take the
// bursts 12 to 25 s here, and a call that waits for them past 10 s fails
// whatever the webhook does.
func TestBurstServedOnBusyCores(t *testing.T) {
	takeLoadTurn(t)
	for range runtime.NumCPU() {
		spin := exec.Command("sh", "-c", "while :; do :; done")
		if err := spin.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { spin.Process.Kill(); spin.Wait() })
	}
	burstServed(t, "burst-busy", burstOptions{timeout: 30})
}

// takeLoadTurn waits for, and holds until t ends, the turn for a test that
// loads the machine to its limit: a burst, a flood, a budget held full.
// Each such test's deadlines assume no other such test beside it; two runs
// at once (two clones, or CI beside a developer, as one user) would
// otherwise load the machine together, each with half of it
// (docs/testing.md). The turn is a lock in the user's cache directory,
// which the runs share as buildOnce's locks do; the kernel drops it if the
// process dies.
func takeLoadTurn(t *testing.T) {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cache, "webhook-e2e", "load.lock")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		t.Logf("another run on this machine is in a load test; waiting for its turn to end")
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX)
	}
	if err != nil {
		lock.Close()
		t.Fatalf("locking %s: %v", path, err)
	}
	t.Cleanup(func() { lock.Close() }) // closing drops the lock
}

// burstOptions is how burstServed runs: its webhooks' timeoutSeconds, and
// whether other clients use the port beside the apiserver.
type burstOptions struct {
	timeout int32
	others  bool
}

// burstServed is the bursts of TestBurstServed, in a scope of name.
func burstServed(t *testing.T, name string, o burstOptions) {
	scope := newScope(t, name)
	w, metricsAddr, _ := startAsDeployed(t)
	registerDeployed(t, w, scope, hookOptions{timeout: o.timeout, failurePolicy: "Fail"})
	mark := apiserver.logMark()
	_, port, err := net.SplitHostPort(w.addr)
	if err != nil {
		t.Fatal(err)
	}

	var pod []*tls.Conn
	probes, stopProbing := func() probeResults { return probeResults{} }, func() {}
	if o.others {
		pod = keepAlive(t, w, "127.0.0.2", 8)
		probes, stopProbing = probe(t, w, "127.0.0.3", 100*time.Millisecond)
	}
	defer stopProbing()

	for _, n := range []int{600, 1000} {
		// What each request acts on is stored first, so that the burst is
		// of the requests themselves.
		var requests []*preparedRequest
		for i := range n {
			for _, r := range scope.admittedThroughAll(fmt.Sprintf("burst-%d-%d", n, i)) {
				if err := r.storeFirst(context.Background()); err != nil {
					t.Fatal(err)
				}
				requests = append(requests, r)
			}
		}
		sampled := sampleAPIServerConnections(t, port)
		errs := make([]error, len(requests))
		var wg sync.WaitGroup
		began := time.Now()
		for i, r := range requests {
			wg.Go(func() { errs[i] = r.send(context.Background(), false) })
		}
		wg.Wait()
		took := time.Since(began)
		_, most := sampled()
		failed := 0
		for i, err := range errs {
			if err != nil {
				if failed++; failed <= 5 {
					t.Errorf("the %s failed in the burst of %d: %v", requests[i], n, err)
				}
			}
		}
		m := scrape(t, "http://"+metricsAddr+"/metrics")
		t.Logf("a burst of %d writes: %d failed, in %s; the apiserver held up to %d connections to the webhook; the webhook: %v waiting for a place at the end, connections closed %v shed, %v in their handshake; load %s",
			len(requests), failed, took.Round(time.Millisecond), most, m["webhook_connections_waiting"],
			m[`webhook_connections_closed_total{reason="shed"}`], m[`webhook_connections_closed_total{reason="handshake"}`], loadAverage())
		if failed > 0 {
			t.Errorf("%d of %d writes failed in the burst, want none", failed, len(requests))
		}
		if n == 1000 && most <= 320 {
			t.Errorf("the apiserver held at most %d connections to the webhook, want more than its 320 places: the burst did not press on them", most)
		}
	}
	for i, c := range pod {
		if _, err := get(c, "/ping"); err != nil {
			t.Errorf("the Pod's kept-alive connection %d after the bursts: %v, want it open and answered", i, err)
		}
	}
	stopProbing()
	p := probes()
	if o.others {
		t.Logf("the kubelet's probes: %d answered, slowest %s; %d failed", p.answered, p.slowest.Round(time.Millisecond), len(p.failed))
	}
	for _, err := range p.failed {
		t.Errorf("a probe of /ping during the bursts: %v", err)
	}
	noFailedCalls(t, mark)
}

// keepAlive opens n connections to w from the loopback address from, each
// kept alive after one GET /ping, as a Pod's client keeps them.
func keepAlive(t *testing.T, w *webhookServer, from string, n int) []*tls.Conn {
	t.Helper()
	var conns []*tls.Conn
	for range n {
		c := dialTLSFrom(t, w, from)
		if _, err := get(c, "/ping"); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	return conns
}

// dialTLSFrom opens a TLS connection to w from the loopback address from,
// closed when the test ends.
func dialTLSFrom(t *testing.T, w *webhookServer, from string) *tls.Conn {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.caPEM)
	host, _, _ := net.SplitHostPort(w.addr)
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}, Config: &tls.Config{RootCAs: pool, ServerName: host}}
	c, err := d.Dial("tcp", w.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*tls.Conn)
}

// get sends GET path on c and returns the answer's body, or an error for
// an answer other than 200.
func get(c net.Conn, path string) (string, error) {
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: webhook\r\n\r\n", path)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return string(b), err
}

// probeResults is what a prober saw.
type probeResults struct {
	answered int
	slowest  time.Duration
	failed   []error
}

// probe gets /ping from w every interval, from the loopback address from,
// on a new connection each time, as the kubelet probes, until stop is
// called; results then says what it saw. Its timeout is 5 s, not the
// kubelet's default 1 s: the apiserver, etcd and the webhook share two
// cores here, and a probe's place is what this checks, not the machine's
// speed; results gives the slowest.
func probe(t *testing.T, w *webhookServer, from string, interval time.Duration) (results func() probeResults, stop func()) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.caPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext}}
	var r probeResults
	var mu sync.Mutex
	var stopped atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stopped.Load() {
			start := time.Now()
			resp, err := client.Get("https://" + w.addr + "/ping")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("HTTP %d", resp.StatusCode)
				}
			}
			mu.Lock()
			if err != nil {
				r.failed = append(r.failed, err)
			} else {
				r.answered++
				r.slowest = max(r.slowest, time.Since(start))
			}
			mu.Unlock()
			time.Sleep(interval)
		}
	}()
	stop = func() { stopped.Store(true); <-done }
	return func() probeResults { mu.Lock(); defer mu.Unlock(); return r }, stop
}
