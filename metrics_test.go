package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	m := newMetrics()
	m.budget = newByteBudget(maxBodyBytes)
	reviews := &reviewServer{logger: discardLogger, metrics: m, budget: m.budget}
	all := plumbingReviews(t)
	mutating := reviews.handle("/mutate", admissionReviews(patchingAdmit))
	validating := reviews.handle("/validate", admissionReviews(denyingAdmit))
	post(mutating, "/mutate", all["v1-deployment-create"])
	post(mutating, "/mutate", all["v1-deployment-delete"])
	post(validating, "/validate", all["v1-secret-create"])
	post(validating, "/validate", []byte(`{}`))
	post(reviews.handle("/panics", admissionReviews(func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse { panic("no") })), "/panics", all["v1-deployment-create"])
	sars := plumbingSubjectAccessReviews(t)
	post(reviews.handle("/authorize", subjectAccessReviews(denyingAuthorize)), "/authorize", sars["v1-get-configmap"])
	post(reviews.handle("/authorize", subjectAccessReviews(indifferentAuthorize)), "/authorize", sars["v1beta1-get-version"])
	post(reviews.handle("/authorize", subjectAccessReviews(indifferentAuthorize)), "/authorize", sars["v1-get-version"])
	post(reviews.handle("/authorize", subjectAccessReviews(allowingAuthorize)), "/authorize", sars["v1-delete-namespace"])
	post(reviews.handle("/authorize", subjectAccessReviews(allowingAuthorize)), "/authorize", []byte(`{}`))
	m.certificate("serving", time.Unix(1893456000, 0))
	m.reloadFailed("serving")

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
		`webhook_inflight_budget_bytes`:                                           maxBodyBytes,
		`webhook_inflight_bytes`:                                                  0,
		`webhook_inflight_waiting_requests`:                                       0,
		`webhook_inflight_rejected_total`:                                         0,
		`webhook_certificate_expiration_timestamp_seconds{certificate="serving"}`: 1893456000,
		`webhook_certificate_reload_errors_total{certificate="serving"}`:          1,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s: got %v (present: %v), want %v", series, v, ok, want)
		}
	}
	// The buckets are cumulative and end at the count.
	last := -1.0
	for _, le := range append(latencyBuckets, math.Inf(+1)) {
		v := got[`webhook_latency_seconds_bucket{webhook="/mutate",le="`+formatValue(le)+`"}`]
		if v < last {
			t.Errorf("bucket le=%v holds %v, fewer than the one before (%v)", le, v, last)
		}
		last = v
	}
	// Nothing of the objects or the reviews reaches a label: names,
	// namespaces, users, paths.
	w := httptest.NewRecorder()
	m.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, forbidden := range []string{"nginx", "db-credentials", "fixtures", "admin", "s3cr3t", plumbingUser, "plumbing-testers", "configmaps", "/version"} {
		if strings.Contains(w.Body.String(), forbidden) {
			t.Errorf("the metrics mention %q, a value of a request", forbidden)
		}
	}
}

func TestMetricsLabelEscaping(t *testing.T) {
	var b bytes.Buffer
	c := newCounterVec("a")
	c.add(1, "back\\slash \"quoted\"\nnewline")
	c.write(&b, "x_total")
	if want := `x_total{a="back\\slash \"quoted\"\nnewline"} 1` + "\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

// TestBudgetOverload fills the budget and sends a review that cannot get
// room before its deadline: it is answered before it is read, a little
// before the deadline, with a Status naming the budget.
func TestBudgetOverload(t *testing.T) {
	m := newMetrics()
	m.budget = newByteBudget(maxBodyBytes)
	h := (&reviewServer{logger: discardLogger, metrics: m, budget: m.budget}).handle("/validate", admissionReviews(denyingAdmit))
	body := plumbingReviews(t)["v1-deployment-create"]
	if err := m.budget.acquire(context.Background(), maxBodyBytes); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	w := post(h, "/validate?timeout=1s", body)
	took := time.Since(start)
	s := checkStatusBody(t, w, overloadStatus, metav1.StatusReasonTooManyRequests)
	for _, want := range []string{"busy", "-max-inflight-bytes", strconv.Itoa(len(body))} {
		if !strings.Contains(s.Message, want) {
			t.Errorf("got message %q, want it to mention %q", s.Message, want)
		}
	}
	if w.Header().Get("Retry-After") != "" {
		t.Errorf("got Retry-After %q; see overloadStatus for why there is none", w.Header().Get("Retry-After"))
	}
	if took < time.Second-overloadMargin-50*time.Millisecond || took > time.Second {
		t.Errorf("answered after %s, want a little before the 1s deadline (%s before it)", took, overloadMargin)
	}
	if got := scrape(t, m)["webhook_inflight_rejected_total"]; got != 1 {
		t.Errorf("webhook_inflight_rejected_total = %v, want 1", got)
	}

	// A review that gets room in time is served.
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- post(h, "/validate?timeout=5s", body) }()
	deadline := time.Now().Add(5 * time.Second)
	for _, waiting := m.budget.state(); waiting == 0; _, waiting = m.budget.state() {
		if time.Now().After(deadline) {
			t.Fatal("the review never waited for the budget")
		}
		time.Sleep(time.Millisecond)
	}
	if got := scrape(t, m)["webhook_inflight_waiting_requests"]; got != 1 {
		t.Errorf("webhook_inflight_waiting_requests = %v, want 1", got)
	}
	m.budget.release(maxBodyBytes)
	checkReview(t, "/validate", decodeReviewIn(t, body), <-done)
	if used, waiting := m.budget.state(); used != 0 || waiting != 0 {
		t.Errorf("after the answer: %d bytes used, %d waiting; want 0 and 0", used, waiting)
	}
}

// TestBudgetCharge checks what a request takes from the budget: its
// declared length, or the most a review can be when it declares none.
func TestBudgetCharge(t *testing.T) {
	body := plumbingReviews(t)["v1-deployment-create"]
	for _, tc := range []struct {
		name     string
		declared bool
		want     int64
	}{{"declared", true, int64(len(body))}, {"chunked", false, maxBodyBytes}} {
		t.Run(tc.name, func(t *testing.T) {
			budget := newByteBudget(maxBodyBytes)
			var held int64
			admit := func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
				held, _ = budget.state()
				return allowed()
			}
			h := (&reviewServer{logger: discardLogger, budget: budget}).handle("/validate", admissionReviews(admit))
			var rd io.Reader = bytes.NewReader(body)
			if !tc.declared {
				rd = io.MultiReader(rd) // an unknown length, as chunked
			}
			r := httptest.NewRequest(http.MethodPost, "/validate", rd)
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusOK || held != tc.want {
				t.Errorf("got HTTP %d holding %d bytes while admitting, want 200 and %d", w.Code, held, tc.want)
			}
			if used, _ := budget.state(); used != 0 {
				t.Errorf("%d bytes still held after the answer", used)
			}
		})
	}
}

// TestSlowBodyGivesUpItsBudget checks that a body that does not arrive
// holds its bytes of the budget until the request's deadline or the body
// timeout, whichever comes first, and is then told why.
func TestSlowBodyGivesUpItsBudget(t *testing.T) {
	for _, tc := range []struct {
		name        string
		query       string
		bodyTimeout time.Duration
		want        time.Duration // when the bytes come back
	}{
		{"the request's deadline", "?timeout=1s", 0, time.Second},
		{"the body timeout", "?timeout=10s", 300 * time.Millisecond, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			budget := newByteBudget(maxBodyBytes)
			srv := httptest.NewServer((&reviewServer{logger: discardLogger, budget: budget, bodyTimeout: tc.bodyTimeout}).handle("/validate", admissionReviews(denyingAdmit)))
			defer srv.Close()
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			// The largest body declared, and one byte of it sent.
			fmt.Fprintf(conn, "POST /validate%s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", tc.query, maxBodyBytes)
			for used, _ := budget.state(); used != maxBodyBytes; used, _ = budget.state() {
				if time.Since(start) > 5*time.Second {
					t.Fatalf("the slow review never took its bytes of the budget (%d used)", used)
				}
				time.Sleep(time.Millisecond)
			}
			for used, _ := budget.state(); used != 0; used, _ = budget.state() {
				if time.Since(start) > 5*time.Second {
					t.Fatalf("the slow review still holds %d bytes of the budget after %s, want them back after %s", used, time.Since(start), tc.want)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if took := time.Since(start); took < tc.want-100*time.Millisecond || took > tc.want+time.Second {
				t.Errorf("the budget was given back after %s, want after %s", took, tc.want)
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			answer, _ := io.ReadAll(conn)
			if !bytes.Contains(answer, []byte("400 Bad Request")) || !bytes.Contains(answer, []byte("reading the request body")) {
				t.Errorf("got answer %q, want 400 with a Status saying the body was not read", answer)
			}
		})
	}
}
