package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestOverloadAnswer proves the answer the webhook gives a review that
// cannot be read before its deadline (body.OverloadStatus, the webhook's
// body package): the apiserver does not send the review again, the write
// is refused under failurePolicy Fail with the webhook's own message, and
// the next write after the overload is admitted.
//
// Large reviews (over 16 KiB) are read one at a time (body.Reader.Read).
// The turn is held by a client that sends the largest review at 1.6 MiB/s,
// above the slowest rate the webhook accepts, so it is not cut
// (holdTheTurn): a real client on a slow link looks the same.
func TestOverloadAnswer(t *testing.T) {
	const (
		hookTimeout = 2        // seconds: the apiserver's deadline for each call
		padding     = 64 << 10 // makes the object's review a large one
	)
	scope := newScope(t, "overload")
	// The request's first call: to /mutate when it is deployed, as
	// mutating webhooks run first.
	route := deployedRoutes(t)[0]
	largeReviews(t, scope, route, padding)
	w := startWebhook(t, "", "-metrics-listen=127.0.0.1:0")
	metricsURL := "http://" + w.metricsAddr(t) + "/metrics"
	registerDeployed(t, w, scope, hookOptions{timeout: hookTimeout, failurePolicy: "Fail"})

	// What the request acts on, stored before the turn is held.
	overloaded := scope.admitted(route, "overloaded", padding)
	if err := overloaded.storeFirst(context.Background()); err != nil {
		t.Fatal(err)
	}
	leave := holdTheTurn(t, w)
	waitUntil(t, "the slow client holds the turn", func() bool { return scrape(t, metricsURL)["webhook_inflight_bytes"] > 0 })
	before := scrape(t, metricsURL)

	start := time.Now()
	err := overloaded.send(context.Background(), false)
	took := time.Since(start)
	t.Logf("the %s while the turn is held: %v after %s", overloaded, err, took.Round(time.Millisecond))
	if err == nil {
		t.Fatal("the request was admitted while the webhook could not read its review in time, want it refused (failurePolicy: Fail)")
	}
	if !strings.Contains(err.Error(), "the webhook is busy") || !strings.Contains(err.Error(), "-max-inflight-bytes") {
		t.Errorf("got error %q, want the webhook's message, naming -max-inflight-bytes", err)
	}
	if took > hookTimeout*time.Second+time.Second {
		t.Errorf("the refusal took %s, want it within the webhook's timeout of %ds: the apiserver retried", took, hookTimeout)
	}

	// The apiserver called once and did not retry: one 429, one refusal.
	after := scrape(t, metricsURL)
	key := `webhook_requests_total{code="429",webhook="` + route + `"}`
	if got := after[key] - before[key]; got != 1 {
		t.Errorf("got %v answers %s for one create, want 1: without Retry-After the apiserver must not send the review again", got, key)
	}
	if got := sumOf(after, "webhook_overload_refusals_total") - sumOf(before, "webhook_overload_refusals_total"); got != 1 {
		t.Errorf("got %v refusals for overload, want 1", got)
	}

	// Once the slow client goes, the turn is free and writes go on.
	leave()
	waitUntil(t, "the budget is given back when the slow client leaves", func() bool { return scrape(t, metricsURL)["webhook_inflight_bytes"] == 0 })
	if err := scope.admitted(route, "after-overload", padding).send(context.Background(), false); err != nil {
		t.Errorf("the request after the overload: %v", err)
	}
}

// holdTheTurn starts a client that sends w the largest review, over
// TLS, at 1.6 MiB/s: above the slowest rate the webhook accepts, so it is
// not cut, but slow enough to keep its large body in flight for about 4 s,
// as a real client on a slow link would. Large reviews are read one at a
// time, and the others wait for it. The function it returns closes the
// connection.
func holdTheTurn(t *testing.T, w *webhookServer) (leave func()) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.caPEM)
	host, _, _ := net.SplitHostPort(w.addr)
	conn, err := tls.Dial("tcp", w.addr, &tls.Config{RootCAs: pool, ServerName: host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "POST /validate?timeout=25s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", w.addr, largestReview); err != nil {
		t.Fatal(err)
	}
	go func() {
		chunk := bytes.Repeat([]byte{' '}, 64<<10)
		for sent := 0; sent < largestReview-len(chunk); sent += len(chunk) {
			if _, err := conn.Write(chunk); err != nil {
				return
			}
			time.Sleep(40 * time.Millisecond)
		}
	}()
	return func() { conn.Close() }
}

// sumOf sums the samples of the counter name over its labels, as scrape
// keys them.
func sumOf(samples map[string]float64, name string) float64 {
	sum := 0.0
	for key, v := range samples {
		if key == name || strings.HasPrefix(key, name+"{") {
			sum += v
		}
	}
	return sum
}

// scrape reads the webhook's metrics as Prometheus parses them, each
// sample keyed by its name and labels as the text format writes them
// (labels sorted by name, so `name{a="1",b="2"}`); histograms are left out.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the metrics do not parse as the Prometheus text format: %v", err)
	}
	samples := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			slices.Sort(labels)
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetCounter() != nil:
				samples[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				samples[key] = m.GetGauge().GetValue()
			}
		}
	}
	return samples
}

// TestBurstServed sends a burst of the policy's admitted requests, each
// padded to a large review (over 16 KiB, read within the byte budget),
// all at once through the real apiserver, to the webhook run as the
// Deployment runs it, while a slow client's large review is in flight
// (holdTheTurn) so that they must wait for it: more of them wait at once
// than maxConnections/2, the count of waiting bodies that was once
// refused at once whatever time it had left. Each can still be read and
// answered well before its deadline, so every one is admitted: a burst is
// served, not shed, and no review is refused for overload.
func TestBurstServed(t *testing.T) {
	const (
		burst   = 192      // more than maxConnections/2 (128)
		padding = 32 << 10 // a large review
		// onceRefused is how many waiting large bodies made the next
		// one refused, whatever time it had left.
		onceRefused = 128
	)
	scope := newScope(t, "burst")
	routes := deployedRoutes(t)
	for _, route := range routes {
		largeReviews(t, scope, route, padding)
	}
	w, metricsAddr, _ := startAsDeployed(t)
	metricsURL := "http://" + metricsAddr + "/metrics"
	registerDeployed(t, w, scope, hookOptions{timeout: 10})
	mark := apiserver.logMark()
	before := scrape(t, metricsURL)

	requests := make([]*preparedRequest, burst)
	for i := range requests {
		requests[i] = scope.admitted(routes[i%len(routes)], fmt.Sprintf("burst-%d", i), padding)
		// What they act on first, so that the burst is of the requests
		// themselves.
		if err := requests[i].storeFirst(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	leave := holdTheTurn(t, w)
	waitUntil(t, "the slow client's review is in flight", func() bool { return scrape(t, metricsURL)["webhook_inflight_bytes"] > 0 })
	stopScraping := make(chan struct{})
	scraped := make(chan scrapeSummary, 1)
	go func() { scraped <- scrapeUntil(t, metricsURL, stopScraping) }()

	errs := make([]error, burst)
	var wg sync.WaitGroup
	began := time.Now()
	for i, r := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.send(context.Background(), false)
		}()
	}
	wg.Wait()
	took := time.Since(began)
	close(stopScraping)
	s := <-scraped
	leave()
	failed := 0
	for i, err := range errs {
		if err != nil {
			if failed++; failed <= 5 {
				t.Errorf("the %s failed in the burst: %v", requests[i], err)
			}
		}
	}
	after := scrape(t, metricsURL)
	refused := sumOf(after, "webhook_overload_refusals_total") - sumOf(before, "webhook_overload_refusals_total")
	t.Logf("%d requests of about %d KiB at once, behind a slow client: %d failed, in %s; at most %d reviews waited at once; %v refused for overload", burst, padding>>10, failed, took.Round(time.Millisecond), s.maxWaiting, refused)
	if failed > 5 {
		t.Errorf("%d of %d requests failed in all", failed, burst)
	}
	if refused != 0 {
		t.Errorf("%v reviews were refused for overload, want none: each could be answered before its deadline", refused)
	}
	if s.maxWaiting <= onceRefused {
		t.Errorf("at most %d reviews waited at once, want more than %d: the burst did not wait behind the slow client", s.maxWaiting, onceRefused)
	}
	noFailedCalls(t, mark)
}
