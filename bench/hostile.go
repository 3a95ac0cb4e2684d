package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The slow-clients scenario: hostile clients of each kind the issue "Hostile
// clients" names, each against a fresh webhook with default flags and no
// GOMEMLIMIT, beside a steady client of 2 KB reviews and a kubelet-like
// prober of /ping. Every loop here is bounded in count and in time, and
// talks to loopback only.

const (
	largestBody       = 7 << 20 // the webhook's maxBodyBytes
	hostilePerKind    = 16      // connections of each body kind
	hostileConns      = 2000    // connections of the header and idle kinds
	maxAttempts       = 10000   // connection attempts in one run, all kinds together
	steadyInterval    = 100 * time.Millisecond
	steadyTimeout     = "5s" // deploy/webhooks.yaml's timeoutSeconds
	probeInterval     = 500 * time.Millisecond
	probeTimeout      = time.Second // the kubelet's default timeoutSeconds
	costConnections   = 200         // connections opened to measure the cost of one
	hostileReadWindow = 30 * time.Second
)

// The clients' addresses. In a cluster the apiserver, the kubelet and a
// hostile Pod each connect from an address of their own; on loopback any
// of 127.0.0.0/8 is one. With -one-address, all use hostileAddr, as
// behind a proxy.
const (
	hostileAddr = "127.0.0.1"
	steadyAddr  = "127.0.0.2"
	probeAddr   = "127.0.0.3"
)

// dialFrom dials from the loopback address from.
func dialFrom(from string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	return d.DialContext
}

// hostileKind is one way a client can misbehave.
type hostileKind struct {
	name  string
	conns int
	// run is one connection's life; it returns when the server is done
	// with it or ctx ends.
	run func(ctx context.Context, h *hostiles, conn *tls.Conn)
}

var hostileKinds = []hostileKind{
	{"declared 7 MiB, no body", hostilePerKind, func(ctx context.Context, h *hostiles, c *tls.Conn) {
		fmt.Fprintf(c, "POST /validate?timeout=30s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", largestBody)
		h.waitClosed(ctx, c)
	}},
	{"declared 7 MiB, a byte every 100 ms", hostilePerKind, func(ctx context.Context, h *hostiles, c *tls.Conn) {
		fmt.Fprintf(c, "POST /validate?timeout=30s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", largestBody)
		closed := make(chan struct{})
		go func() { h.waitClosed(ctx, c); close(closed) }()
		for {
			select {
			case <-ctx.Done():
				return
			case <-closed:
				return
			case <-time.After(100 * time.Millisecond):
				if _, err := c.Write([]byte{' '}); err != nil {
					return
				}
			}
		}
	}},
	{"7 MiB sent but the last byte", hostilePerKind, func(ctx context.Context, h *hostiles, c *tls.Conn) {
		fmt.Fprintf(c, "POST /validate?timeout=30s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", largestBody)
		closed := make(chan struct{})
		go func() { h.waitClosed(ctx, c); close(closed) }()
		_, _ = c.Write(h.almostAll)
		select {
		case <-ctx.Done():
		case <-closed:
		}
	}},
	{"half a header, held", hostileConns, func(ctx context.Context, h *hostiles, c *tls.Conn) {
		_, _ = io.WriteString(c, "POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-")
		h.waitClosed(ctx, c)
	}},
	{"one review, then idle", hostileConns, func(ctx context.Context, h *hostiles, c *tls.Conn) {
		fmt.Fprintf(c, "POST /validate?timeout=5s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(h.review))
		_, _ = c.Write(h.review)
		h.waitClosed(ctx, c)
	}},
}

// hostiles runs hostile connections against one webhook.
type hostiles struct {
	addr      string
	tls       *tls.Config
	review    []byte // a valid 2 KB review
	almostAll []byte // largestBody-1 bytes of body
	attempts  atomic.Int64
	pace      <-chan time.Time // one token per connection attempt after the first of each
}

// waitClosed reads from c until the server closes it or answers, or ctx
// ends. An answer is read and dropped: the hostile client does not care.
func (h *hostiles) waitClosed(ctx context.Context, c *tls.Conn) {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	_ = c.SetReadDeadline(time.Now().Add(hostileReadWindow))
	_, _ = io.Copy(io.Discard, c)
}

// loop keeps one hostile connection of kind open until ctx ends: when the
// server closes it, another is opened, paced so that the run makes at
// most maxAttempts in all.
func (h *hostiles) loop(ctx context.Context, kind hostileKind, first bool) {
	for ctx.Err() == nil {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-h.pace:
			}
		}
		first = false
		if h.attempts.Add(1) > maxAttempts {
			return
		}
		raw, err := dialFrom(hostileAddr)(ctx, "tcp", h.addr)
		if err != nil {
			continue
		}
		c := tls.Client(raw, h.tls)
		hsCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = c.HandshakeContext(hsCtx)
		cancel()
		if err == nil {
			kind.run(ctx, h, c)
		}
		c.Close()
	}
}

// slowClientsResult is one run: a hostile load (or none) beside the steady
// client.
type slowClientsResult struct {
	load                 string
	steadySent, steadyOK int
	steadyP50, steadyP99 time.Duration
	steadyFailures       []string // the first few
	probes, probesOK     int
	probeMax             time.Duration
	probeFailedAt        []time.Duration // when each failed probe was sent, from the start of the load
	attempts             int64
	peakRSSMB            float64
}

// runSlowClients runs the steady client alone, then beside each hostile
// kind, then beside all of them at once, each against a fresh webhook.
func runSlowClients(webhookBin string, certArgs []string, certs, bodies string, d time.Duration, only, steadyFrom, probeFrom string) ([]slowClientsResult, []connCost, error) {
	review, err := os.ReadFile(filepath.Join(bodies, "deployment-2k.json"))
	if err != nil {
		return nil, nil, err
	}
	caPEM, err := os.ReadFile(filepath.Join(certs, "ca.crt"))
	if err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tlsConfig := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	probeClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}

	costs, err := measureConnCosts(webhookBin, certArgs, tlsConfig, probeClient, review)
	if err != nil {
		return nil, nil, err
	}
	loads := [][]hostileKind{nil}
	for _, k := range hostileKinds {
		loads = append(loads, []hostileKind{k})
	}
	loads = append(loads, hostileKinds)
	var results []slowClientsResult
	for _, kinds := range loads {
		if only != "" && !strings.Contains(loadName(kinds), only) {
			continue
		}
		wh, err := start("webhook", webhookBin, certArgs, probeClient)
		if err != nil {
			return nil, nil, err
		}
		r := slowClientsRun(wh, kinds, tlsConfig, review, d, steadyFrom, probeFrom)
		r.peakRSSMB, err = peakRSS(wh.pid())
		stop(wh)
		if err != nil {
			return nil, nil, err
		}
		fmt.Fprintf(os.Stderr, "bench: slow clients, %s: %d/%d steady reviews answered 200, p99 %s, /ping %d/%d, at most %s, failed at %v; %d attempts; peak RSS %.1f MiB\n",
			r.load, r.steadyOK, r.steadySent, r.steadyP99.Round(time.Millisecond), r.probesOK, r.probes, r.probeMax.Round(time.Millisecond), r.probeFailedAt, r.attempts, r.peakRSSMB)
		results = append(results, r)
	}
	return results, costs, nil
}

func slowClientsRun(wh *server, kinds []hostileKind, tlsConfig *tls.Config, review []byte, d time.Duration, steadyFrom, probeFrom string) slowClientsResult {
	r := slowClientsResult{load: loadName(kinds)}
	// The steady client, like an apiserver, has its connection open when
	// the hostile clients come: one review first.
	steady := &http.Client{Timeout: 6 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig, MaxIdleConnsPerHost: 4, DialContext: dialFrom(steadyFrom)}}
	if resp, err := steady.Post(wh.url("/validate?timeout="+steadyTimeout), "application/json", bytes.NewReader(review)); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()

	// The hostile clients, all started at once, then paced.
	pace := time.NewTicker(d / maxAttempts)
	defer pace.Stop()
	h := &hostiles{addr: wh.addr, tls: tlsConfig, review: review, almostAll: bytes.Repeat([]byte{' '}, largestBody-1), pace: pace.C}
	var wg sync.WaitGroup
	for _, k := range kinds {
		for range k.conns {
			wg.Add(1)
			go func() { defer wg.Done(); h.loop(ctx, k, true) }()
		}
	}

	// The kubelet's readiness probe: a new connection each time.
	var probeMu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		client := &http.Client{Timeout: probeTimeout, Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true, DialContext: dialFrom(probeFrom)}}
		loadStart := time.Now()
		for tick := time.NewTicker(probeInterval); ; {
			select {
			case <-ctx.Done():
				tick.Stop()
				return
			case <-tick.C:
			}
			begin := time.Now()
			resp, err := client.Get(wh.url("/ping"))
			took := time.Since(begin)
			ok := err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				resp.Body.Close()
			}
			probeMu.Lock()
			r.probes++
			if ok {
				r.probesOK++
			} else {
				r.probeFailedAt = append(r.probeFailedAt, begin.Sub(loadStart).Round(10*time.Millisecond))
			}
			r.probeMax = max(r.probeMax, took)
			probeMu.Unlock()
		}
	}()

	// The steady client: a 2 KB review every 100 ms over kept-alive
	// connections, as the apiserver sends them.
	var latencies []time.Duration
	var mu sync.Mutex
	var sent sync.WaitGroup
	loadStart := time.Now()
	for tick := time.NewTicker(steadyInterval); ; {
		select {
		case <-ctx.Done():
			tick.Stop()
		case <-tick.C:
			r.steadySent++
			sent.Add(1)
			go func() {
				defer sent.Done()
				begin := time.Now()
				// Whether the review went on a new connection or a kept-alive
				// one says which limit a failure met.
				var reused bool
				trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused }}
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, wh.url("/validate?timeout="+steadyTimeout), bytes.NewReader(review))
				req.Header.Set("Content-Type", "application/json")
				resp, err := steady.Do(req)
				var failure string
				if err != nil {
					conn := "a new connection"
					if reused {
						conn = "a kept-alive connection"
					}
					failure = fmt.Sprintf("%s, sent %s after the load began on %s", err, begin.Sub(loadStart).Round(10*time.Millisecond), conn)
				} else {
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"response"`)) {
						failure = fmt.Sprintf("HTTP %d: %.200s", resp.StatusCode, body)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if failure == "" {
					r.steadyOK++
					latencies = append(latencies, time.Since(begin))
				} else if len(r.steadyFailures) < 5 {
					r.steadyFailures = append(r.steadyFailures, failure)
				}
			}()
			continue
		}
		break
	}
	sent.Wait()
	cancel()
	wg.Wait()
	slices.Sort(latencies)
	if n := len(latencies); n > 0 {
		r.steadyP50 = latencies[n/2]
		r.steadyP99 = latencies[min(n-1, n*99/100)]
	}
	r.attempts = min(h.attempts.Load(), maxAttempts)
	return r
}

// loadName names a load of these kinds.
func loadName(kinds []hostileKind) string {
	switch len(kinds) {
	case 0:
		return "none"
	case 1:
		return kinds[0].name
	}
	return "all of them at once"
}

// connCost is what one connection costs the webhook in a given state.
type connCost struct {
	state   string
	kib     float64 // resident memory per connection
	baseMiB float64
}

// measureConnCosts opens costConnections connections in each state
// against a fresh webhook and divides the growth of its resident memory
// by their number. It measures within the webhook's 1 s header timeout.
func measureConnCosts(webhookBin string, certArgs []string, tlsConfig *tls.Config, client *http.Client, review []byte) ([]connCost, error) {
	states := []struct {
		name string
		open func(addr string) (net.Conn, error)
	}{
		{"before the handshake (TCP only)", func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }},
		{"mid-handshake (ClientHello sent)", func(addr string) (net.Conn, error) {
			raw, err := net.Dial("tcp", addr)
			if err != nil {
				return nil, err
			}
			// A client that sends its ClientHello and never reads the
			// server's answer: the server waits for the rest.
			c := tls.Client(&writeOnlyConn{Conn: raw}, tlsConfig)
			go func() { _ = c.Handshake() }()
			return raw, nil
		}},
		{"mid-header (handshake done, half a header)", func(addr string) (net.Conn, error) {
			c, err := tls.Dial("tcp", addr, tlsConfig)
			if err != nil {
				return nil, err
			}
			_, err = io.WriteString(c, "POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-")
			return c, err
		}},
		{"idle after one 2 KB review", func(addr string) (net.Conn, error) {
			c, err := tls.Dial("tcp", addr, tlsConfig)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(c, "POST /validate?timeout=5s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(review))
			if _, err := c.Write(review); err != nil {
				return nil, err
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return nil, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return c, nil
		}},
	}
	var costs []connCost
	for _, st := range states {
		wh, err := start("webhook", webhookBin, certArgs, client)
		if err != nil {
			return nil, err
		}
		time.Sleep(200 * time.Millisecond)
		base, err := currentRSS(wh.pid())
		if err != nil {
			stop(wh)
			return nil, err
		}
		conns := make([]net.Conn, costConnections)
		var wg sync.WaitGroup
		var failed atomic.Int64
		for i := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := st.open(wh.addr)
				if err != nil {
					failed.Add(1)
					return
				}
				conns[i] = c
			}()
		}
		wg.Wait()
		time.Sleep(100 * time.Millisecond)
		after, err := currentRSS(wh.pid())
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		stop(wh)
		if err != nil {
			return nil, err
		}
		if n := failed.Load(); n > 0 {
			return nil, fmt.Errorf("%s: %d of %d connections failed to open", st.name, n, costConnections)
		}
		costs = append(costs, connCost{state: st.name, kib: (after - base) * 1024 / costConnections, baseMiB: base})
		fmt.Fprintf(os.Stderr, "bench: a connection %s: %.1f KiB\n", st.name, costs[len(costs)-1].kib)
	}
	return costs, nil
}

// writeOnlyConn never delivers what the server sends.
type writeOnlyConn struct{ net.Conn }

func (c *writeOnlyConn) Read([]byte) (int, error) {
	time.Sleep(2 * time.Second)
	return 0, errors.New("this client does not read")
}

// currentRSS is VmRSS, the resident set size now, in MiB.
func currentRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

func renderSlowClients(results []slowClientsResult, costs []connCost, d time.Duration, steadyFrom, probeFrom string) string {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "Measured %s on %s by `go run . -slow-clients`: each load for %s against a fresh webhook with default flags and no GOMEMLIMIT; the steady client sends a 2 KB review every %s with ?timeout=%s; /ping is probed every %s on a new connection with a %s timeout. The hostile clients connect from %s, the steady client from %s and the prober from %s.\n\n",
		time.Now().UTC().Format("2006-01-02"), host, d, steadyInterval, steadyTimeout, probeInterval, probeTimeout, hostileAddr, steadyFrom, probeFrom)
	fmt.Fprintf(&b, "| hostile load | steady 200s | success | p50 ms | p99 ms | /ping answered | /ping slowest ms | connection attempts | peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		conns := ""
		for _, k := range hostileKinds {
			if r.load == k.name {
				conns = fmt.Sprintf(" (%d connections)", k.conns)
			}
		}
		fmt.Fprintf(&b, "| %s%s | %d/%d | %.2f %% | %.1f | %.1f | %d/%d | %.0f | %d | %.1f |\n", r.load, conns, r.steadyOK, r.steadySent,
			100*float64(r.steadyOK)/float64(max(r.steadySent, 1)), ms(r.steadyP50), ms(r.steadyP99), r.probesOK, r.probes, ms(r.probeMax), r.attempts, r.peakRSSMB)
	}
	for _, r := range results {
		for _, f := range r.steadyFailures {
			fmt.Fprintf(&b, "\n- %s: a steady review failed: %s", r.load, f)
		}
		if len(r.probeFailedAt) > 0 {
			fmt.Fprintf(&b, "\n- %s: /ping failed when probed %v after the load began", r.load, r.probeFailedAt)
		}
	}
	fmt.Fprintf(&b, "\nWhat one connection costs (resident memory, %d connections opened at once, above the idle webhook's):\n\n| state | KiB per connection |\n|---|---|\n", costConnections)
	for _, c := range costs {
		fmt.Fprintf(&b, "| %s | %.1f |\n", c.state, c.kib)
	}
	return b.String()
}
