package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// largestReview is the largest review the webhook reads (body.MaxBytes).
const largestReview = 7 << 20

// hostile is one way a client that reaches the review port can misbehave
// (the issue "Hostile clients"; bench's slow-clients scenario runs the same
// kinds for longer).
type hostile struct {
	name  string
	conns int
	// run is one connection's life, once its TLS handshake is done.
	run func(ctx context.Context, c *tls.Conn)
}

// hostileHeaders writes the headers of a review of length bytes with
// ?timeout=timeout.
func hostileHeaders(c io.Writer, length int, timeout string) {
	fmt.Fprintf(c, "POST /validate?timeout=%s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", timeout, length)
}

// untilClosed reads c until the server closes it or ctx ends.
func untilClosed(ctx context.Context, c *tls.Conn) {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	_, _ = io.Copy(io.Discard, c)
}

func hostileKinds(review []byte) []hostile {
	almostAll := bytes.Repeat([]byte{' '}, largestReview-1)
	return []hostile{
		// A body that holds no room is bounded by its deadline alone: 5 s,
		// so that each is refused within the test.
		{"declared, no body", 16, func(ctx context.Context, c *tls.Conn) {
			hostileHeaders(c, largestReview, "5s")
			untilClosed(ctx, c)
		}},
		{"a byte every 100 ms", 16, func(ctx context.Context, c *tls.Conn) {
			hostileHeaders(c, largestReview, "5s")
			go func() {
				for ctx.Err() == nil {
					if _, err := c.Write([]byte{' '}); err != nil {
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}()
			untilClosed(ctx, c)
		}},
		// Holding room, it is cut when it stalls.
		{"all but the last byte", 16, func(ctx context.Context, c *tls.Conn) {
			hostileHeaders(c, largestReview, "30s")
			go func() { _, _ = c.Write(almostAll) }()
			untilClosed(ctx, c)
		}},
		// More than an address may hold (3/4 of maxConnections, 240), each.
		{"half a header", 300, func(ctx context.Context, c *tls.Conn) {
			_, _ = io.WriteString(c, "POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-")
			untilClosed(ctx, c)
		}},
		{"one review, then idle", 300, func(ctx context.Context, c *tls.Conn) {
			hostileHeaders(c, len(review), "30s")
			_, _ = c.Write(review)
			untilClosed(ctx, c)
		}},
	}
}

// runHostiles keeps kinds' connections open against addr until ctx ends,
// opening another when the webhook closes one, at most ten times each
// kind's connections. It returns a func that waits for them all and says
// how many connections were opened.
func runHostiles(ctx context.Context, addr string, caPEM []byte, kinds []hostile) func() int64 {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	host, _, _ := net.SplitHostPort(addr)
	config := &tls.Config{RootCAs: pool, ServerName: host}
	var opened atomic.Int64
	var wg sync.WaitGroup
	for _, k := range kinds {
		var attempts atomic.Int64
		for range k.conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil && attempts.Add(1) <= int64(10*k.conns) {
					opened.Add(1)
					// From an address of their own, as a hostile Pod's
					// is not the apiserver's (bench -one-address measures
					// the case of one address for all).
					d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}, Config: config}
					c, err := d.DialContext(ctx, "tcp", addr)
					if err != nil {
						time.Sleep(50 * time.Millisecond)
						continue
					}
					k.run(ctx, c.(*tls.Conn))
					c.Close()
				}
			}()
		}
	}
	return func() int64 { wg.Wait(); return opened.Load() }
}

// TestHostileClients creates objects through the real apiserver while
// clients of every hostile kind hold the webhook's port: every create
// succeeds, the webhook run as the Deployment runs it refuses or cuts the
// hostile bodies and holds the floods to their share of its places, and
// its peak RSS stays under the Deployment's
// memory limit. The creates come in bursts, each larger than the last, so
// that the apiserver's transport, finding its pooled connections busy,
// dials new ones during the flood, as it does in a cluster; the last, of
// 128, needs more connections than the apiserver keeps (25) and the
// places the flood's address leaves to others (80 of 320), so that its
// newcomers wait for the apiserver's own to come free.
func TestHostileClients(t *testing.T) {
	takeLoadTurn(t)
	bursts := []int{4, 8, 16, 32, 64, 128}
	const pause = 500 * time.Millisecond
	scope := newScope(t, "hostile")
	w, metricsAddr, memoryLimit := startAsDeployed(t)
	registerDeployed(t, w, scope, hookOptions{timeout: 5, failurePolicy: "Fail"})
	mark := apiserver.logMark()
	_, port, err := net.SplitHostPort(w.addr)
	if err != nil {
		t.Fatal(err)
	}
	before := apiserverConnections(t, port)

	review, err := os.ReadFile(filepath.Join(repoRoot, "testdata", "v1-deployment-create.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The kinds that send bodies first, so that each is cut at least once
	// before the floods of connections begin: under a flood, a new
	// connection of theirs may be refused before it sends.
	ctx, cancel := context.WithCancel(context.Background())
	kinds := hostileKinds(review)
	waitBodies := runHostiles(ctx, w.addr, w.caPEM, kinds[:3])
	time.Sleep(3 * time.Second)
	waitFloods := runHostiles(ctx, w.addr, w.caPEM, kinds[3:])
	time.Sleep(time.Second)

	sampled := sampleAPIServerConnections(t, port)

	var failed []string
	var failedMu sync.Mutex
	start := time.Now()
	creates := 0
	for b, n := range bursts {
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := scope.sendThroughAll(context.Background(), fmt.Sprintf("under-attack-%d-%d", b, i)); err != nil {
					failedMu.Lock()
					failed = append(failed, err.Error())
					failedMu.Unlock()
				}
			}()
		}
		wg.Wait()
		creates += n
		time.Sleep(pause)
	}
	took := time.Since(start)
	seen, _ := sampled()
	after := scrape(t, "http://"+metricsAddr+"/metrics")
	cancel()
	opened := waitBodies() + waitFloods()
	dialed := 0
	for c := range seen {
		if _, old := before[c]; !old {
			dialed++
		}
	}

	peak := peakRSS(t, w.cmd.Process.Pid)
	t.Logf("%d admitted requests in bursts of %v in %s beside %d hostile connections; the apiserver opened %d connections to the webhook during the flood; webhook peak RSS %.1f MiB (limit %d MiB); metrics: %v bodies cut as stalled, %v refused at their deadline; connections %v open, %v waiting, closed %v shed, %v in their handshake; load %s",
		creates, bursts, took.Round(time.Millisecond), opened, dialed, float64(peak)/(1<<20), memoryLimit>>20,
		after[`webhook_request_bodies_cut_total{reason="stalled"}`], after[`webhook_overload_refusals_total{reason="slow_read"}`],
		after["webhook_connections_open"], after["webhook_connections_waiting"],
		after[`webhook_connections_closed_total{reason="shed"}`], after[`webhook_connections_closed_total{reason="handshake"}`], loadAverage())
	for _, f := range failed {
		t.Errorf("an admitted request failed under attack: %s", f)
	}
	if dialed == 0 {
		t.Error("the apiserver opened no connection to the webhook during the flood, want it to dial as its bursts outgrow its pool")
	}
	if peak >= memoryLimit {
		t.Errorf("the webhook's peak RSS was %.1f MiB, want under the Deployment's limit of %d MiB", float64(peak)/(1<<20), memoryLimit>>20)
	}
	// The attack happened: each kind met the limit meant for it. The
	// bodies that send nothing or trickle are refused at their deadline,
	// and the one that holds room and stalls is cut; the floods of
	// connections, half a header or one review each and then nothing, hold
	// their address's share of the places, and the rest of them wait.
	for _, series := range []string{
		`webhook_request_bodies_cut_total{reason="stalled"}`,
		`webhook_overload_refusals_total{reason="slow_read"}`,
		`webhook_connections_waiting`,
	} {
		if after[series] == 0 {
			t.Errorf("%s is 0: that kind of hostile client never met its limit", series)
		}
	}
	noFailedCalls(t, mark)
}

// sampleAPIServerConnections samples the apiserver's connections to the
// webhook's port (apiserverConnections) every 20 ms until the func it
// returns is called, which returns every connection seen and the most
// seen at once.
func sampleAPIServerConnections(t *testing.T, port string) func() (seen map[string]bool, most int) {
	seen := map[string]bool{}
	most := 0
	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			now := apiserverConnections(t, port)
			most = max(most, len(now))
			for c := range now {
				seen[c] = true
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() (map[string]bool, int) {
		close(stop)
		<-stopped
		return seen, most
	}
}

// apiserverConnections returns the connections established to the
// webhook's port from 127.0.0.1, the apiserver's address (the hostile
// clients dial from 127.0.0.2), by the client's port, from /proc/net/tcp:
// of each, the bytes received that the webhook has not read. A connection
// the webhook has not accepted yet is one too.
func apiserverConnections(t *testing.T, port string) map[string]int64 {
	t.Helper()
	raw, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	// /proc/net/tcp writes an IPv4 address as 8 hex digits in host (little
	// endian) order, and a port as 4 hex digits.
	local := fmt.Sprintf("0100007F:%04X", p)
	const established = "01"
	conns := map[string]int64{}
	for line := range strings.Lines(string(raw)) {
		f := strings.Fields(line)
		if len(f) > 4 && f[1] == local && strings.HasPrefix(f[2], "0100007F:") && f[3] == established {
			_, rx, _ := strings.Cut(f[4], ":") // tx_queue:rx_queue, in hex
			conns[f[2]], _ = strconv.ParseInt(rx, 16, 64)
		}
	}
	return conns
}
