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
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestOverloadAnswer proves the answer the webhook gives a review that
// cannot be read before its deadline (body.BusyStatus, the webhook's
// body package): the apiserver does not send the review again, the write
// is refused under failurePolicy Fail with the webhook's own message, and
// the next write after the overload is admitted.
//
// A large review (over 16 KiB) takes room in the byte budget for all of
// it (body.Budget.Read). A client that sends the largest review at 1.6
// MiB/s, above the slowest rate the webhook accepts, so that it is not
// cut, holds 7 MiB of the default 8 MiB for about 4 s (holdTheRoom): a
// real client on a slow link looks the same. The request's review needs
// more than the rest.
func TestOverloadAnswer(t *testing.T) {
	takeLoadTurn(t)
	const (
		hookTimeout = 2 // seconds: the apiserver's deadline for each call
		// padding makes the object's review need more room than the
		// slow client leaves (its buffer: 1.5 MiB), within etcd's 1.5 MiB.
		padding = 1200 << 10
	)
	scope := newScope(t, "overload")
	// The request's first call: to /mutate when it is deployed, as
	// mutating webhooks run first.
	route := deployedRoutes(t)[0]
	largeReviews(t, scope, route, padding)
	w := startWebhookBinary(t, loadBinary(t), "", "127.0.0.1:0", nil, "-metrics-listen=127.0.0.1:0")
	metricsURL := "http://" + w.metricsAddr(t) + "/metrics"
	registerDeployed(t, w, scope, hookOptions{timeout: hookTimeout, failurePolicy: "Fail"})

	// What the request acts on, stored before the turn is held.
	overloaded := scope.admitted(route, "overloaded", padding)
	if err := overloaded.storeFirst(context.Background()); err != nil {
		t.Fatal(err)
	}
	leave := holdTheRoom(t, w)
	waitUntil(t, "the slow client holds its room", func() bool { return scrape(t, metricsURL)["webhook_inflight_bytes"] > 0 })
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
	// The apiserver called once and did not retry: one request to the
	// route, whatever its answer, and that one a 429, one refusal. (How
	// long the write took is logged, not judged: on a busy machine the
	// apiserver's own work on a 1.2 MiB object outlasts the call.)
	after := scrape(t, metricsURL)
	key := `webhook_requests_total{code="429",webhook="` + route + `"}`
	if got := after[key] - before[key]; got != 1 {
		t.Errorf("got %v answers %s for one create, want 1: without Retry-After the apiserver must not send the review again", got, key)
	}
	calls := func(samples map[string]float64) (n float64) {
		for k, v := range samples {
			if strings.HasPrefix(k, "webhook_requests_total{") && strings.Contains(k, `webhook="`+route+`"`) {
				n += v
			}
		}
		return n
	}
	if got := calls(after) - calls(before); got != 1 {
		t.Errorf("got %v requests to %s for one create, want 1: the apiserver sent the review again", got, route)
	}
	if got := sumOf(after, "webhook_overload_refusals_total") - sumOf(before, "webhook_overload_refusals_total"); got != 1 {
		t.Errorf("got %v refusals for overload, want 1", got)
	}

	// Once the slow client goes, its room is free and writes go on.
	leave()
	waitUntil(t, "the budget is given back when the slow client leaves", func() bool { return scrape(t, metricsURL)["webhook_inflight_bytes"] == 0 })
	if err := scope.admitted(route, "after-overload", padding).send(context.Background(), false); err != nil {
		t.Errorf("the request after the overload: %v", err)
	}
}

// holdTheRoom starts a client that sends w the largest review, over TLS,
// at 1.6 MiB/s: above the slowest rate the webhook accepts, so it is not
// cut, but slow enough to keep its large body in flight for about 4 s, as
// a real client on a slow link would, holding room in the budget for all
// of it. The function it returns closes the connection.
func holdTheRoom(t *testing.T, w *webhookServer) (leave func()) {
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
