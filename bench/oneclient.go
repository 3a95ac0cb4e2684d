package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The one-client rows (-one-client): one client sends the webhook, run with
// default flags, more reviews at once than it holds connections, as the
// apiserver does in a burst: Go's transport with client-go's settings (no
// cap on connections, 25 idle kept, a 10 s TLS handshake timeout), a
// connection dialed for each review that finds none idle. Every loop is
// bounded in count.

// oneClientOptions is one row.
type oneClientOptions struct {
	reviews  int // sent at once, each round
	maxConns int // the transport's MaxConnsPerHost; 0: none, as client-go
	rounds   int
}

// oneClientResult is what a row's rounds gave.
type oneClientResult struct {
	opts        oneClientOptions
	sent, ok    int
	codes       map[int]int    // answers other than 200
	failures    map[string]int // no answer, by kind
	dials       []int64        // connections the client opened, each round
	took        []time.Duration
	mostWaiting float64 // the webhook's webhook_connections_waiting, at its most
	closed      map[string]float64
	peakRSSMB   float64
	cpuSeconds  float64
}

// runOneClient starts the webhook with default flags and metrics, and runs
// each row's rounds against it, a second apart.
func runOneClient(webhookBin string, certArgs []string, caFile, reviewFile string, rows []oneClientOptions) ([]oneClientResult, error) {
	review, err := os.ReadFile(reviewFile)
	if err != nil {
		return nil, err
	}
	tlsConfig, err := clientTLS(caFile)
	if err != nil {
		return nil, err
	}
	var results []oneClientResult
	for _, o := range rows {
		metricsAddr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
		wh, err := start("webhook", webhookBin, certArgs, probe, "-metrics-listen", metricsAddr)
		if err != nil {
			return nil, err
		}
		r := oneClientResult{opts: o, codes: map[int]int{}, failures: map[string]int{}}
		cpuBefore, _ := cpuSeconds(wh.pid())
		for round := range o.rounds {
			var dials atomic.Int64
			dialer := &net.Dialer{Timeout: 30 * time.Second}
			tr := &http.Transport{TLSClientConfig: tlsConfig, MaxIdleConnsPerHost: 25, MaxConnsPerHost: o.maxConns,
				TLSHandshakeTimeout: 10 * time.Second, DisableCompression: true,
				DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					dials.Add(1)
					return dialer.DialContext(ctx, network, addr)
				}}
			client := &http.Client{Transport: tr}
			watching, stopWatching := context.WithCancel(context.Background())
			watched := make(chan float64)
			go func() {
				most := 0.0
				for watching.Err() == nil {
					most = max(most, scrapeGauge(metricsAddr, "webhook_connections_waiting"))
					time.Sleep(20 * time.Millisecond)
				}
				watched <- most
			}()
			var mu sync.Mutex
			var wg sync.WaitGroup
			began := time.Now()
			for range o.reviews {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, wh.url("/validate?timeout=10s"), bytes.NewReader(review))
					req.Header.Set("Content-Type", "application/json")
					resp, err := client.Do(req)
					if err == nil {
						_, err = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					mu.Lock()
					defer mu.Unlock()
					r.sent++
					switch {
					case err != nil:
						r.failures[errorKind(err)]++
					case resp.StatusCode == http.StatusOK:
						r.ok++
					default:
						r.codes[resp.StatusCode]++
					}
				})
			}
			wg.Wait()
			r.took = append(r.took, time.Since(began))
			stopWatching()
			r.mostWaiting = max(r.mostWaiting, <-watched)
			r.dials = append(r.dials, dials.Load())
			tr.CloseIdleConnections()
			fmt.Fprintf(os.Stderr, "bench: one client, %d at once (max %d connections), round %d: %d/%d answered 200, failures %v, other codes %v, %d dials, in %s\n",
				o.reviews, o.maxConns, round+1, r.ok, r.sent, r.failures, r.codes, dials.Load(), time.Since(began).Round(time.Millisecond))
			time.Sleep(time.Second)
		}
		cpuAfter, _ := cpuSeconds(wh.pid())
		r.cpuSeconds = cpuAfter - cpuBefore
		r.closed = scrapeClosed(metricsAddr)
		r.peakRSSMB, err = peakRSS(wh.pid())
		stop(wh)
		if err != nil {
			return nil, err
		}
		results = append(results, r)
	}
	return results, nil
}

// scrapeGauge reads one unlabelled sample from the webhook's metrics; 0
// when it cannot.
func scrapeGauge(addr, name string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return 0
}

func renderOneClient(results []oneClientResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s by `go run . -one-client`: the webhook with default flags; one client process, Go's transport as client-go sets it (25 idle connections kept, a 10 s TLS handshake timeout), sending that many 2 KB reviews to /validate?timeout=10s at once, each on the first connection free or a new one; rounds a second apart.\n\n", time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&b, "| reviews at once | the client's connection cap | rounds | answered 200 | no answer (by kind) | other answers | connections the client opened, each round | the most waiting for a place | closed by the webhook | webhook CPU s | peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		limit := "none"
		if r.opts.maxConns > 0 {
			limit = fmt.Sprint(r.opts.maxConns)
		}
		var failures, codes, closed []string
		for kind, n := range r.failures {
			failures = append(failures, fmt.Sprintf("%s %d", kind, n))
		}
		for code, n := range r.codes {
			codes = append(codes, fmt.Sprintf("%d: %d", code, n))
		}
		for reason, n := range r.closed {
			if n > 0 {
				closed = append(closed, fmt.Sprintf("%s %.0f", reason, n))
			}
		}
		slices.Sort(failures)
		slices.Sort(codes)
		slices.Sort(closed)
		fmt.Fprintf(&b, "| %d | %s | %d | %d/%d | %s | %s | %v | %.0f | %s | %.1f | %.1f |\n", r.opts.reviews, limit, r.opts.rounds, r.ok, r.sent,
			orNone(strings.Join(failures, ", ")), orNone(strings.Join(codes, ", ")), r.dials, r.mostWaiting, orNone(strings.Join(closed, ", ")), r.cpuSeconds, r.peakRSSMB)
	}
	return b.String()
}
