package main

import (
	"context"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/example/webhook/body"
	"github.com/example/webhook/limits"
	"github.com/example/webhook/part"
	"github.com/example/webhook/promtext"
	admissionv1 "k8s.io/api/admission/v1"
)

// scrape returns the metrics as the text format has them, one sample a
// line, by "name{labels}".
func scrape(t *testing.T, m *metrics) map[string]float64 {
	t.Helper()
	w := httptest.NewRecorder()
	m.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if ct := w.Header().Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
		t.Errorf("got Content-Type %q, want the text format 0.0.4", ct)
	}
	samples := map[string]float64{}
	line := regexp.MustCompile(`^([a-z_]+(?:\{[^}]*\})?) (\S+)$`)
	for _, l := range strings.Split(strings.TrimSpace(w.Body.String()), "\n") {
		if strings.HasPrefix(l, "# HELP ") || strings.HasPrefix(l, "# TYPE ") {
			continue
		}
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("line %q is not a sample", l)
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		samples[m[1]] = v
	}
	return samples
}

func TestMetricsCountReviews(t *testing.T) {
	// A listener of one connection, so that a second waits.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listener := limits.NewListener(ln, nil, 1)
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go srv.Serve(listener)
	defer srv.Close()
	bodies := body.NewBudget(body.MaxBytes)
	m := newMetrics(bodies)
	m.listener = listener
	reviews := &reviewRoutes{logger: discardLogger, metrics: m, bodyBudget: bodies}
	all := plumbingReviews(t)
	mutating := reviews.admissionRoute("/mutate", patchingAdmit, nil)
	validating := reviews.admissionRoute("/validate", denyingAdmit, nil)
	post(mutating, "/mutate", all["v1-deployment-create"])
	post(mutating, "/mutate", all["v1-deployment-delete"])
	post(validating, "/validate", all["v1-secret-create"])
	post(validating, "/validate", []byte(`{}`))
	post(reviews.admissionRoute("/panics", func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse { panic("no") }, nil), "/panics", all["v1-deployment-create"])
	// A part's route, /authorize's as a part serves it: its verdicts are
	// its own.
	verdicts := map[string]string{"deny": "denied", "none": "no_opinion", "allow": "allowed"}
	decide := func(_ context.Context, body []byte) (part.Decision, error) {
		if v, ok := verdicts[string(body)]; ok {
			return part.Decision{Review: []byte(`{}`), Verdict: v}, nil
		}
		return part.Decision{}, &part.Error{Code: http.StatusBadRequest, Message: "not a review"}
	}
	authorize := reviews.handle("/authorize", "a review of the test's", decide)
	for _, body := range []string{"deny", "none", "none", "allow", "{}"} {
		post(authorize, "/authorize", []byte(body))
	}
	m.certificate("serving", time.Unix(1893456000, 0))
	m.reloadFailed("serving")
	m.clientRefused("missing")
	// One connection holds the port, kept alive by a client keeping one;
	// the next waits.
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	// Both, not the first alone: the first may wait for its place a moment
	// before the second arrives.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if st := listener.Stats(); st.Open == 1 && st.Waiting == 1 {
			break
		}
	}

	got := scrape(t, m)
	for series, want := range map[string]float64{
		`webhook_requests_total{webhook="/mutate",code="200"}`:                    2,
		`webhook_requests_total{webhook="/validate",code="200"}`:                  1,
		`webhook_requests_total{webhook="/validate",code="400"}`:                  1,
		`webhook_requests_total{webhook="/panics",code="500"}`:                    1,
		`webhook_reviews_total{webhook="/mutate",verdict="patched"}`:              1,
		`webhook_reviews_total{webhook="/mutate",verdict="allowed"}`:              1,
		`webhook_reviews_total{webhook="/validate",verdict="denied"}`:             1,
		`webhook_panics_total{webhook="/panics"}`:                                 1,
		`webhook_requests_total{webhook="/authorize",code="200"}`:                 4,
		`webhook_requests_total{webhook="/authorize",code="400"}`:                 1,
		`webhook_reviews_total{webhook="/authorize",verdict="denied"}`:            1,
		`webhook_reviews_total{webhook="/authorize",verdict="no_opinion"}`:        2,
		`webhook_reviews_total{webhook="/authorize",verdict="allowed"}`:           1,
		`webhook_requests_in_flight{webhook="/mutate"}`:                           0,
		`webhook_latency_seconds_count{webhook="/mutate"}`:                        2,
		`webhook_latency_seconds_bucket{webhook="/mutate",le="+Inf"}`:             2,
		`webhook_inflight_budget_bytes`:                                           body.MaxBytes,
		`webhook_inflight_bytes`:                                                  0,
		`webhook_inflight_waiting_requests`:                                       0,
		`webhook_inflight_waited_total`:                                           0,
		`webhook_inflight_rejected_total`:                                         0,
		`webhook_overload_refusals_total{reason="no_room"}`:                       0,
		`webhook_overload_refusals_total{reason="slow_read"}`:                     0,
		`webhook_certificate_expiration_timestamp_seconds{certificate="serving"}`: 1893456000,
		`webhook_certificate_reload_errors_total{certificate="serving"}`:          1,
		`webhook_connections_open`:                                                1,
		`webhook_connections_limit`:                                               1,
		`webhook_connections_waiting`:                                             1,
		`webhook_connections_closed_total{reason="shed"}`:                         0,
		`webhook_connections_closed_total{reason="handshake"}`:                    0,
		`webhook_request_bodies_cut_total{reason="stalled"}`:                      0,
		`webhook_client_certificates_refused_total{reason="missing"}`:             1,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s: got %v (present: %v), want %v", series, v, ok, want)
		}
	}
	// Every bucket is there, cumulative, and they end at the count.
	last := -1.0
	for _, le := range append(latencyBuckets, math.Inf(+1)) {
		v, ok := got[`webhook_latency_seconds_bucket{webhook="/mutate",le="`+promtext.FormatValue(le)+`"}`]
		if !ok {
			t.Errorf("bucket le=%v is missing", le)
		}
		if v < last {
			t.Errorf("bucket le=%v holds %v, fewer than the one before (%v)", le, v, last)
		}
		last = v
	}
	// Nothing of the objects or the reviews reaches a label: names,
	// namespaces, users, paths.
	w := httptest.NewRecorder()
	m.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, forbidden := range []string{"nginx", "db-credentials", "fixtures", "admin", "s3cr3t"} {
		if strings.Contains(w.Body.String(), forbidden) {
			t.Errorf("the metrics mention %q, a value of a request", forbidden)
		}
	}
}
