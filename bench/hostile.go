package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The slow-clients scenario: hostile clients of each kind the issues
// "Hostile clients" name, each against a fresh webhook with default flags
// and no GOMEMLIMIT, beside a steady client that calls as the apiserver
// does and a kubelet-like prober of /ping. Every loop here is bounded in
// count and in time, and talks to loopback only.

const (
	largestBody    = 7 << 20 // the largest review the webhook reads (body.MaxBytes)
	hostilePerKind = 16      // connections of each body kind
	hostileConns   = 2000    // connections of the header and idle kinds
	// attemptRate is how many connections a second the hostile clients
	// open at most, all kinds together: 2,000 clients reconnecting as fast
	// as the server closes them made about 4,850 a second on the 2-core
	// machine (the issue "the apiserver's next connection"). A run makes at
	// most attemptRate times its length.
	attemptRate      = 5000
	steadyInterval   = 100 * time.Millisecond
	steadyBurstEvery = 10 // ticks: once a second, a burst of steadyBurst more reviews at once
	steadyBurst      = 4
	steadyIdleConns  = 2 // Go's default MaxIdleConnsPerHost: each burst dials
	steadyDelay      = time.Second
	steadyTimeout    = "5s" // deploy/webhooks.yaml's timeoutSeconds
	slowReview       = 250 * time.Millisecond
	probeInterval    = 500 * time.Millisecond
	probeTimeout     = time.Second // the kubelet's default timeoutSeconds
	costConnections  = 200         // connections opened to measure the cost of one
	// webhookPlaces and addressPlaces are the most connections the
	// webhook holds (maxConnections) and one address of its clients may
	// hold (limits.Listener: three quarters).
	webhookPlaces     = 320
	addressPlaces     = webhookPlaces - webhookPlaces/4
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

// dialFar is dialFrom for a client delay away: each of its writes, its
// TLS handshake's included, arrives delay after it is made, as across
// regions (a URL-mode webhook) or from a busy apiserver.
func dialFar(from string, delay time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	dial := dialFrom(from)
	if delay == 0 {
		return dial
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &delayedConn{Conn: c, delay: delay}, nil
	}
}

type delayedConn struct {
	net.Conn
	delay time.Duration
}

func (c *delayedConn) Write(p []byte) (int, error) {
	time.Sleep(c.delay)
	return c.Conn.Write(p)
}

// hostileKind is one way a client can misbehave.
type hostileKind struct {
	name  string
	conns int
	plain bool // never starts TLS: run gets the TCP connection
	h2    bool // speaks HTTP/2, to a webhook run with -http2
	// run is one connection's life; it returns when the server is done
	// with it or ctx ends.
	run func(ctx context.Context, h *hostiles, conn net.Conn)
}

var hostileKinds = []hostileKind{
	{name: "declared 7 MiB, no body", conns: hostilePerKind, run: func(ctx context.Context, h *hostiles, c net.Conn) {
		fmt.Fprintf(c, "POST /validate?timeout=30s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", largestBody)
		h.waitClosed(ctx, c)
	}},
	{name: "declared 7 MiB, a byte every 100 ms", conns: hostilePerKind, run: func(ctx context.Context, h *hostiles, c net.Conn) {
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
	{name: "7 MiB sent but the last byte", conns: hostilePerKind, run: func(ctx context.Context, h *hostiles, c net.Conn) {
		fmt.Fprintf(c, "POST /validate?timeout=30s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", largestBody)
		closed := make(chan struct{})
		go func() { h.waitClosed(ctx, c); close(closed) }()
		_, _ = c.Write(h.almostAll)
		select {
		case <-ctx.Done():
		case <-closed:
		}
	}},
	{name: "half a header, held", conns: hostileConns, run: func(ctx context.Context, h *hostiles, c net.Conn) {
		_, _ = io.WriteString(c, "POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-")
		h.waitClosed(ctx, c)
	}},
	{name: "one review, then idle", conns: hostileConns, run: func(ctx context.Context, h *hostiles, c net.Conn) {
		fmt.Fprintf(c, "POST /validate?timeout=5s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(h.review))
		_, _ = c.Write(h.review)
		h.waitClosed(ctx, c)
	}},
	{name: "headers trickled, a byte every 100 ms", conns: hostileConns, run: func(ctx context.Context, h *hostiles, c net.Conn) {
		closed := make(chan struct{})
		go func() { h.waitClosed(ctx, c); close(closed) }()
		header := []byte("POST /validate HTTP/1.1\r\nHost: webhook\r\n")
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-closed:
				return
			case <-time.After(100 * time.Millisecond):
				b := byte('a') // then a header line that never ends
				if i < len(header) {
					b = header[i]
				}
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
			}
		}
	}},
	// Not even a ClientHello: the cheapest place a client can hold.
	{name: "TCP only, never starts TLS", conns: hostileConns, plain: true, run: func(ctx context.Context, h *hostiles, c net.Conn) {
		h.waitClosed(ctx, c)
	}},
}

// http2Kind opens as many streams as the webhook lets it, each declaring a
// small body (under body.MaxSmallBodyBytes) and sending all of it but
// the last byte: each stream holds its body's buffer until the body is
// cut. Run with -http2.
var http2Kind = hostileKind{name: "HTTP/2, 100 streams each sending 16 KB but the last byte", conns: hostileConns, h2: true,
	run: func(ctx context.Context, h *hostiles, c net.Conn) {
		const streams, bodyBytes = 100, 16000
		stream, err := openHTTP2(c)
		if err != nil {
			return
		}
		body := bytes.Repeat([]byte{' '}, bodyBytes-1)
		for i := range streams {
			id := uint32(2*i + 1)
			if stream.review(id, bodyBytes) != nil || stream.fr.WriteData(id, false, body) != nil {
				return
			}
		}
		h.waitClosed(ctx, c)
	}}

// http2LargeKind opens one stream declaring the largest body and sends
// as much of it as HTTP/2's windows let a client send before the server's
// settings, 65,535 bytes, the webhook's window for a stream too: each
// holds that much until its body is cut. Run with -http2.
var http2LargeKind = hostileKind{name: "HTTP/2, one stream sending 64 KB of a 7 MB body", conns: hostileConns, h2: true,
	run: func(ctx context.Context, h *hostiles, c net.Conn) {
		const declared, sent = 7 << 20, 65535
		stream, err := openHTTP2(c)
		if err != nil || stream.review(1, declared) != nil {
			return
		}
		for left := sent; left > 0; left -= 16 << 10 { // in frames the webhook reads (http2MaxReadFrameSize)
			if stream.fr.WriteData(1, false, bytes.Repeat([]byte{' '}, min(left, 16<<10))) != nil {
				return
			}
		}
		h.waitClosed(ctx, c)
	}}

// http2Client writes a hostile HTTP/2 client's frames, reading none.
type http2Client struct {
	fr    *http2.Framer
	block bytes.Buffer
	enc   *hpack.Encoder
}

// openHTTP2 sends c the client's preface and its settings.
func openHTTP2(c net.Conn) (*http2Client, error) {
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return nil, err
	}
	h := &http2Client{fr: http2.NewFramer(c, c)}
	h.enc = hpack.NewEncoder(&h.block)
	return h, h.fr.WriteSettings()
}

// review opens stream id with a review's headers, declaring a body of
// length bytes.
func (h *http2Client) review(id uint32, length int) error {
	h.block.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "webhook"}, {":path", "/validate?timeout=30s"},
		{"content-type", "application/json"}, {"content-length", strconv.Itoa(length)}} {
		_ = h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.block.Bytes(), EndHeaders: true})
}

// hostiles runs hostile connections against one webhook.
type hostiles struct {
	addr        string
	tls         *tls.Config
	maxAttempts int64
	review      []byte // a valid 2 KB review
	almostAll   []byte // largestBody-1 bytes of body
	attempts    atomic.Int64
	pace        <-chan time.Time // one token per connection attempt after the first of each
}

// waitClosed reads from c until the server closes it or answers, or ctx
// ends. An answer is read and dropped: the hostile client does not care.
func (h *hostiles) waitClosed(ctx context.Context, c net.Conn) {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	_ = c.SetReadDeadline(time.Now().Add(hostileReadWindow))
	_, _ = io.Copy(io.Discard, c)
}

// loop keeps one hostile connection of kind open until ctx ends: when the
// server closes it, another is opened, paced so that the run makes at
// most h.maxAttempts in all.
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
		if h.attempts.Add(1) > h.maxAttempts {
			return
		}
		raw, err := dialFrom(hostileAddr)(ctx, "tcp", h.addr)
		if err != nil {
			continue
		}
		if kind.plain {
			kind.run(ctx, h, raw)
			raw.Close()
			continue
		}
		config := h.tls
		if kind.h2 {
			config = config.Clone()
			config.NextProtos = []string{"h2"}
		}
		c := tls.Client(raw, config)
		hsCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = c.HandshakeContext(hsCtx)
		cancel()
		if err == nil {
			kind.run(ctx, h, c)
		}
		c.Close()
	}
}

// startHostileProcess runs the hostile clients of kinds against addr for
// opts.d in a process of their own, as an attacker is not the apiserver's
// process: 8,000 clients' goroutines in the bench's own would starve its
// steady client of CPU where the webhook does not. wait returns the
// connections they attempted.
func startHostileProcess(addr string, opts slowClientsOptions, kinds []hostileKind) (wait func() (int64, error), err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, k := range kinds {
		names = append(names, k.name)
	}
	cmd := exec.Command(self, "hostile-clients", "-addr", addr, "-ca", opts.caFile, "-review", opts.reviewFile, "-for", opts.d.String(), "-kinds", strings.Join(names, ";"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() (int64, error) {
		if err := cmd.Wait(); err != nil {
			return 0, fmt.Errorf("%w: %s", err, out.Bytes())
		}
		var attempts int64
		_, err := fmt.Sscanf(out.String(), "attempts %d", &attempts)
		return attempts, err
	}, nil
}

// hostileClients is the body of `bench hostile-clients`, the process
// startHostileProcess starts: each named kind's connections against -addr
// for -for, all started at once, then paced; it prints the connections
// attempted.
func hostileClients(args []string) error {
	flags := flag.NewFlagSet("hostile-clients", flag.ContinueOnError)
	addr := flags.String("addr", "", "the webhook's `address`")
	caFile := flags.String("ca", "", "its CA `file`")
	reviewFile := flags.String("review", "", "a 2 KB review `file`")
	d := flags.Duration("for", time.Minute, "how `long`")
	kindNames := flags.String("kinds", "", "the kinds' names, separated by ;")
	if err := flags.Parse(args); err != nil {
		return err
	}
	review, err := os.ReadFile(*reviewFile)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(*caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	var kinds []hostileKind
	all := append(slices.Clone(hostileKinds), http2Kind, http2LargeKind)
	for _, name := range strings.Split(*kindNames, ";") {
		i := slices.IndexFunc(all, func(k hostileKind) bool { return k.name == name })
		if i < 0 {
			return fmt.Errorf("no hostile kind %q", name)
		}
		kinds = append(kinds, all[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), *d)
	defer cancel()
	pace := time.NewTicker(time.Second / attemptRate)
	defer pace.Stop()
	h := &hostiles{addr: *addr, tls: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}, maxAttempts: int64(d.Seconds() * attemptRate),
		review: review, almostAll: bytes.Repeat([]byte{' '}, largestBody-1), pace: pace.C}
	var wg sync.WaitGroup
	for _, k := range kinds {
		for range k.conns {
			wg.Add(1)
			go func() { defer wg.Done(); h.loop(ctx, k, true) }()
		}
	}
	wg.Wait()
	fmt.Printf("attempts %d\n", min(h.attempts.Load(), h.maxAttempts))
	return nil
}

// slowClientsResult is one run: a hostile load (or none) beside the steady
// client.
type slowClientsResult struct {
	load                 string
	steadySent, steadyOK int
	steadyDials          int64 // new connections the steady client opened
	steadyP50, steadyP99 time.Duration
	steadyFailures       []string // the first few
	steadySlow           []string // the first few slower than slowReview, and where their time went
	probes, probesOK     int
	probeMax             time.Duration
	probeFailedAt        []time.Duration // when each failed probe was sent, from the start of the load
	attempts             int64
	shed                 float64 // the webhook's webhook_connections_closed_total{reason="shed"}
	cpuSeconds           float64 // the webhook's, over the load
	peakRSSMB            float64
}

// slowClientsLoad is one run's hostile kinds, and how the steady client
// calls.
type slowClientsLoad struct {
	kinds []hostileKind
	// warm is the steady client of the first rounds: its connection open
	// before the load, one review at a time, never a burst. The apiserver
	// is not so kind; the row is kept to compare.
	warm bool
}

func (l slowClientsLoad) name() string {
	name := "none"
	switch len(l.kinds) {
	case 0:
	case 1:
		name = l.kinds[0].name
	default:
		name = "all of them at once"
	}
	if l.warm {
		name += ", steady client warm and one review at a time"
	}
	return name
}

// slowClientsOptions are the flags of -slow-clients.
type slowClientsOptions struct {
	caFile, reviewFile    string // the webhook's CA, the 2 KB review
	d                     time.Duration
	only                  string
	steadyFrom, probeFrom string
	busyNeighbour         int           // cores kept busy beside the webhook
	steadyDelay           time.Duration // of each of the steady client's writes
	http2                 bool          // the webhook runs with -http2, against http2Kind
}

// runSlowClients runs the steady client alone, then beside each hostile
// kind, then beside all of them at once, each against a fresh webhook.
func runSlowClients(webhookBin string, certArgs []string, certs, bodies string, opts slowClientsOptions) ([]slowClientsResult, []connCost, error) {
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
	loads := []slowClientsLoad{{}}
	for _, k := range hostileKinds {
		loads = append(loads, slowClientsLoad{kinds: []hostileKind{k}})
	}
	loads = append(loads, slowClientsLoad{kinds: hostileKinds}, slowClientsLoad{kinds: hostileKinds, warm: true})
	if opts.http2 {
		loads = []slowClientsLoad{{}, {kinds: []hostileKind{http2Kind}}, {kinds: []hostileKind{http2LargeKind}}}
	}
	var results []slowClientsResult
	for _, l := range loads {
		if opts.only != "" && !strings.Contains(l.name(), opts.only) {
			continue
		}
		metricsAddr, err := freeAddr()
		if err != nil {
			return nil, nil, err
		}
		args := []string{"-metrics-listen", metricsAddr}
		if opts.http2 {
			args = append(args, "-http2")
		}
		wh, err := start("webhook", webhookBin, certArgs, probeClient, args...)
		if err != nil {
			return nil, nil, err
		}
		var neighbours []*exec.Cmd
		for range opts.busyNeighbour {
			neighbour, err := spinOneCore()
			if err != nil {
				stop(wh)
				return nil, nil, err
			}
			neighbours = append(neighbours, neighbour)
		}
		cpuBefore, _ := cpuSeconds(wh.pid())
		r := slowClientsRun(wh, l, tlsConfig, review, opts)
		cpuAfter, _ := cpuSeconds(wh.pid())
		r.cpuSeconds = cpuAfter - cpuBefore
		closed := scrapeClosed(metricsAddr)
		r.shed = closed["shed"]
		r.peakRSSMB, err = peakRSS(wh.pid())
		for _, neighbour := range neighbours {
			_ = syscall.Kill(-neighbour.Process.Pid, syscall.SIGKILL)
			_ = neighbour.Wait()
		}
		stop(wh)
		if err != nil {
			return nil, nil, err
		}
		fmt.Fprintf(os.Stderr, "bench: slow clients, %s: %d/%d steady reviews answered 200 (%d new connections), p99 %s, failures %q; slow %q; /ping %d/%d, at most %s, failed at %v; %d attempts, %.0f shed; webhook CPU %.1f s; peak RSS %.1f MiB\n",
			r.load, r.steadyOK, r.steadySent, r.steadyDials, r.steadyP99.Round(time.Millisecond), r.steadyFailures, r.steadySlow, r.probesOK, r.probes, r.probeMax.Round(time.Millisecond), r.probeFailedAt, r.attempts, r.shed, r.cpuSeconds, r.peakRSSMB)
		results = append(results, r)
	}
	return results, costs, nil
}

// spinOneCore starts a process that keeps one core busy, as a node's other
// Pods do, in a process group of its own.
func spinOneCore() (*exec.Cmd, error) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, cmd.Start()
}

// scrapeClosed reads webhook_connections_closed_total by reason from the
// webhook's metrics.
func scrapeClosed(addr string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), `webhook_connections_closed_total{reason="`)
		if !ok {
			continue
		}
		reason, value, _ := strings.Cut(rest, `"} `)
		out[reason], _ = strconv.ParseFloat(value, 64)
	}
	return out
}

func slowClientsRun(wh *server, l slowClientsLoad, tlsConfig *tls.Config, review []byte, opts slowClientsOptions) slowClientsResult {
	r := slowClientsResult{load: l.name()}
	// The steady client is the apiserver's transport: keep-alive, a pool
	// of idle connections, and a new connection whenever none is free.
	idleConns := steadyIdleConns
	if l.warm {
		idleConns = 4
	}
	steady := &http.Client{Timeout: 6 * time.Second, Transport: &http.Transport{
		TLSClientConfig: tlsConfig, MaxIdleConnsPerHost: idleConns, IdleConnTimeout: 90 * time.Second, DialContext: dialFar(opts.steadyFrom, opts.steadyDelay)}}
	if l.warm {
		if resp, err := steady.Post(wh.url("/validate?timeout="+steadyTimeout), "application/json", bytes.NewReader(review)); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), opts.d)
	defer cancel()

	var waitHostiles func() (int64, error)
	if len(l.kinds) > 0 {
		var err error
		if waitHostiles, err = startHostileProcess(wh.addr, opts, l.kinds); err != nil {
			r.steadyFailures = append(r.steadyFailures, "the hostile clients did not start: "+err.Error())
			return r
		}
	}
	loadStart := time.Now()
	var wg sync.WaitGroup

	// The kubelet's readiness probe: a new connection each time.
	var probeMu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		client := &http.Client{Timeout: probeTimeout, Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true, DialContext: dialFrom(opts.probeFrom)}}
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

	// The steady client, as the apiserver calls: it comes once the flood
	// holds the port, with no connection open, and sends a 2 KB review
	// every 100 ms and, once a second, a burst of more at once (writes
	// come together, and validating webhooks are called in parallel), each
	// from its own goroutine. Its pool keeps fewer idle connections than a
	// burst needs, so it dials during the flood, every second, as the
	// apiserver does whenever its pooled connections are busy.
	var latencies []time.Duration
	var mu sync.Mutex
	var sent sync.WaitGroup
	var dials atomic.Int64
	send := func() {
		defer sent.Done()
		begin := time.Now()
		// Whether the review went on a new connection or a kept-alive
		// one says which limit a failure met.
		var reused bool
		var connectStart, connectDone, tlsDone, wrote, firstByte time.Time
		trace := &httptrace.ClientTrace{
			GotConn:              func(info httptrace.GotConnInfo) { reused = info.Reused },
			ConnectStart:         func(_, _ string) { connectStart = time.Now() },
			ConnectDone:          func(_, _ string, err error) { dials.Add(1); connectDone = time.Now() },
			TLSHandshakeDone:     func(tls.ConnectionState, error) { tlsDone = time.Now() },
			WroteRequest:         func(httptrace.WroteRequestInfo) { wrote = time.Now() },
			GotFirstResponseByte: func() { firstByte = time.Now() },
		}
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
		took := time.Since(begin)
		mu.Lock()
		defer mu.Unlock()
		if took > slowReview && len(r.steadySlow) < 10 {
			phase := func(a, b time.Time) string {
				if a.IsZero() || b.IsZero() {
					return "-"
				}
				return b.Sub(a).Round(time.Millisecond).String()
			}
			r.steadySlow = append(r.steadySlow, fmt.Sprintf("sent %s after the load began, took %s: connect %s, TLS %s, write %s, answer %s",
				begin.Sub(loadStart).Round(10*time.Millisecond), took.Round(time.Millisecond), phase(connectStart, connectDone), phase(connectDone, tlsDone), phase(latest(tlsDone, begin), wrote), phase(wrote, firstByte)))
		}
		if failure == "" {
			r.steadyOK++
			latencies = append(latencies, took)
		} else if len(r.steadyFailures) < 5 {
			r.steadyFailures = append(r.steadyFailures, failure)
		}
	}
	if !l.warm {
		select {
		case <-ctx.Done():
		case <-time.After(steadyDelay):
		}
	}
	for tick, n := time.NewTicker(steadyInterval), 1; ; n++ {
		select {
		case <-ctx.Done():
			tick.Stop()
		case <-tick.C:
			reviews := 1
			if !l.warm && n%steadyBurstEvery == 0 {
				reviews += steadyBurst
			}
			for range reviews {
				r.steadySent++
				sent.Add(1)
				go send()
			}
			continue
		}
		break
	}
	sent.Wait()
	cancel()
	wg.Wait()
	if waitHostiles != nil {
		attempts, err := waitHostiles()
		if err != nil {
			r.steadyFailures = append(r.steadyFailures, "the hostile clients failed: "+err.Error())
		}
		r.attempts = attempts
	}
	slices.Sort(latencies)
	if n := len(latencies); n > 0 {
		r.steadyP50 = latencies[n/2]
		r.steadyP99 = latencies[min(n-1, n*99/100)]
	}
	r.steadyDials = dials.Load()
	return r
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
		// fill, when set, takes every place first with connections that
		// behave: 10 clients each keeping 32 alive after a /ping.
		fill bool
	}{
		{name: "before the handshake (TCP only)", open: func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }},
		{name: "mid-handshake (ClientHello sent)", open: func(addr string) (net.Conn, error) {
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
		{name: "mid-header (handshake done, half a header)", open: func(addr string) (net.Conn, error) {
			c, err := tls.Dial("tcp", addr, tlsConfig)
			if err != nil {
				return nil, err
			}
			_, err = io.WriteString(c, "POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-")
			return c, err
		}},
		{name: "waiting for a place (ClientHello sent)", fill: true, open: func(addr string) (net.Conn, error) {
			raw, err := dialFrom("127.0.0.20")(context.Background(), "tcp", addr)
			if err != nil {
				return nil, err
			}
			go func() { _ = tls.Client(raw, tlsConfig).Handshake() }()
			return raw, nil
		}},
		{name: "idle after one 2 KB review", open: func(addr string) (net.Conn, error) {
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
		var filled []net.Conn
		for i := range webhookPlaces {
			if !st.fill {
				break
			}
			raw, err := dialFrom(fmt.Sprintf("127.0.0.%d", 10+i/32))(context.Background(), "tcp", wh.addr)
			if err != nil {
				stop(wh)
				return nil, err
			}
			c := tls.Client(raw, tlsConfig)
			if _, err := get(c, "/ping"); err != nil {
				stop(wh)
				return nil, fmt.Errorf("filling the places: %w", err)
			}
			filled = append(filled, c)
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
		for _, c := range append(conns, filled...) {
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

// get sends GET path on c and reads the answer, an error unless 200.
func get(c net.Conn, path string) (string, error) {
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: webhook\r\n\r\n", path)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return string(b), err
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

func renderSlowClients(results []slowClientsResult, costs []connCost, opts slowClientsOptions) string {
	var b strings.Builder
	host, _ := os.Hostname()
	neighbour := "on a quiet machine"
	if opts.busyNeighbour > 0 {
		neighbour = fmt.Sprintf("beside processes spinning %d of its cores (-busy-neighbour %d)", opts.busyNeighbour, opts.busyNeighbour)
	}
	fmt.Fprintf(&b, "Measured %s on %s by `go run . -slow-clients`, %s: each load for %s against a fresh webhook with default flags and no GOMEMLIMIT. The steady client comes %s after the hostile clients, with no connection open, and sends a 2 KB review with ?timeout=%s every %s and a burst of %d more once a second, each from its own goroutine, keeping at most %d idle connections: it dials during the load. /ping is probed every %s on a new connection with a %s timeout. The hostile clients connect from %s, the steady client from %s and the prober from %s.\n\n",
		time.Now().UTC().Format("2006-01-02"), host, neighbour, opts.d, steadyDelay, steadyTimeout, steadyInterval, steadyBurst, steadyIdleConns, probeInterval, probeTimeout, hostileAddr, opts.steadyFrom, opts.probeFrom)
	if opts.steadyDelay > 0 {
		fmt.Fprintf(&b, "Each of the steady client's writes, its handshake's included, arrives %s after it is made (-steady-delay), as from an apiserver far away or busy.\n\n", opts.steadyDelay)
	}
	fmt.Fprintf(&b, "| hostile load | steady 200s | success | p50 ms | p99 ms | steady's new connections | /ping answered | /ping slowest ms | connection attempts | shed while waiting | webhook CPU s | peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		conns := ""
		for _, k := range hostileKinds {
			if r.load == k.name {
				conns = fmt.Sprintf(" (%d connections)", k.conns)
			}
		}
		fmt.Fprintf(&b, "| %s%s | %d/%d | %.2f %% | %.1f | %.1f | %d | %d/%d | %.0f | %d | %.0f | %.1f | %.1f |\n", r.load, conns, r.steadyOK, r.steadySent,
			100*float64(r.steadyOK)/float64(max(r.steadySent, 1)), ms(r.steadyP50), ms(r.steadyP99), r.steadyDials, r.probesOK, r.probes, ms(r.probeMax), r.attempts, r.shed, r.cpuSeconds, r.peakRSSMB)
	}
	for _, r := range results {
		for _, f := range r.steadyFailures {
			fmt.Fprintf(&b, "\n- %s: a steady review failed: %s", r.load, f)
		}
		for _, f := range r.steadySlow {
			fmt.Fprintf(&b, "\n- %s: a slow steady review: %s", r.load, f)
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

// latest is the later of two times.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
