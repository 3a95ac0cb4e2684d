package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestOverloadAnswer proves the answer the webhook gives a review that
// finds no room in its byte budget before its deadline (overloadStatus in
// handler.go): the apiserver does not send the review again, the write is
// refused under failurePolicy Fail with the webhook's own message, and the
// next write after the overload is admitted.
//
// The budget is held by a client that declares the largest body and sends
// none of it, which is how a slow or stuck client looks to the webhook.
func TestOverloadAnswer(t *testing.T) {
	const (
		largestReview = 7 << 20 // maxBodyBytes, the smallest budget allowed
		hookTimeout   = 2       // seconds: the apiserver's deadline for each call
	)
	ns := createNamespace(t, "overload")
	metricsPort, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	w := startWebhook(t, "", fmt.Sprintf("-max-inflight-bytes=%d", largestReview), fmt.Sprintf("-metrics-listen=127.0.0.1:%d", metricsPort))
	registerDeployed(t, w, ns, hookOptions{timeout: hookTimeout, failurePolicy: "Fail"})
	// The create's first call: to /mutate when it is deployed, as mutating
	// webhooks run first.
	route := deployedRoutes(t)[0]

	// Take the whole budget: headers that declare the largest review, then
	// nothing. The webhook holds its bytes until this request's own
	// deadline (?timeout=) or until the connection closes.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.caPEM)
	conn, err := tls.Dial("tcp", w.addr, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST /validate?timeout=25s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", w.addr, largestReview); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the stalled request takes the whole budget", func() bool { return scrape(t, metricsURL)["webhook_inflight_bytes"] == largestReview })
	before := scrape(t, metricsURL)

	obj, resource := admittedObject(route, "overloaded", 0)
	objects := apiserver.dynamic.Resource(resource).Namespace(ns)
	start := time.Now()
	_, err = objects.Create(context.Background(), obj, metav1.CreateOptions{})
	took := time.Since(start)
	t.Logf("create while the budget is full: %v after %s", err, took.Round(time.Millisecond))
	if err == nil {
		t.Fatal("the create was admitted while the webhook had no room for its review, want it refused (failurePolicy: Fail)")
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
	if got := after["webhook_inflight_rejected_total"] - before["webhook_inflight_rejected_total"]; got != 1 {
		t.Errorf("got %v rejections by the budget, want 1", got)
	}

	// Once the stalled client goes, the budget is free and writes go on.
	conn.Close()
	waitUntil(t, "the budget is given back when the stalled client leaves", func() bool { return scrape(t, metricsURL)["webhook_inflight_bytes"] == 0 })
	obj, _ = admittedObject(route, "after-overload", 0)
	if _, err := objects.Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Errorf("create after the overload: %v", err)
	}
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
