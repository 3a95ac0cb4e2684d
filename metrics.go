package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/example/webhook/body"
	"github.com/example/webhook/limits"
	"github.com/example/webhook/promtext"
)

// The webhook's metrics, after controller-runtime's
// controller_runtime_webhook_* with the prefix webhook_ and the route's
// path as the label "webhook". No label carries anything from a request or
// its client (object, namespace, user, address): each is a small fixed set.

// latencyBuckets are in seconds, from a fraction of a small review's time
// to maxWebhookTimeout, after which the apiserver has given up
// (bench/README.md has the reviews' times).
var latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// metrics counts what the review routes serve, and, scraped, writes that
// with what the body reader, the listener, the views of the cluster and
// the process report. Its counting methods do nothing on a nil *metrics:
// the handlers of webhook review and of the tests have none.
type metrics struct {
	requests *promtext.CounterVec   // HTTP requests by route and code
	reviews  *promtext.CounterVec   // reviews by route and verdict
	panics   *promtext.CounterVec   // policies that panicked deciding a review, by route
	inFlight *promtext.CounterVec   // requests being served, by route (a gauge kept as up/down counts)
	latency  *promtext.HistogramVec // seconds from the handler's start, its header read, to its answer, by route

	clientsRefused *promtext.CounterVec // requests without an allowed client certificate, by reason

	listener   *limits.Listener // the review port's: connections open, waiting, and closed; nil until it is made
	bodyBudget *body.Budget     // the byte budget, and bodies refused and cut

	certNotAfter *promtext.GaugeVec   // certificates' expiry, Unix seconds, by certificate
	reloadErrors *promtext.CounterVec // certificate reloads that failed, by certificate

	parts []func(io.Writer) // the parts' series
}

// newMetrics counts the review routes' requests, and reads the rest from
// the body reader and the review port's listener (set once made, as its TLS
// configuration records its certificates here) as it is scraped.
func newMetrics(bodies *body.Budget) *metrics {
	return &metrics{
		requests:       promtext.NewCounterVec("webhook", "code"),
		reviews:        promtext.NewCounterVec("webhook", "verdict"),
		panics:         promtext.NewCounterVec("webhook"),
		inFlight:       promtext.NewCounterVec("webhook"),
		latency:        promtext.NewHistogramVec(latencyBuckets, "webhook"),
		clientsRefused: promtext.NewCounterVec("reason"),
		bodyBudget:     bodies,
		certNotAfter:   promtext.NewGaugeVec("certificate"),
		reloadErrors:   promtext.NewCounterVec("certificate"),
	}
}

// request records a request to route answered with code, and its verdict
// ("" without a review).
func (m *metrics) request(route string, code int, verdict string, took time.Duration) {
	if m == nil {
		return
	}
	m.requests.Add(1, route, promtext.CodeLabel(code))
	if verdict != "" {
		m.reviews.Add(1, route, verdict)
	}
	m.latency.Observe(took.Seconds(), route)
}

// inFlightAdd counts requests to route in flight, +1 or -1. (Not a func
// returned for defer: that closure would cost an allocation per review.)
func (m *metrics) inFlightAdd(route string, delta int64) {
	if m != nil {
		m.inFlight.Add(delta, route)
	}
}

// countPanic counts a panic of the policy's on route.
func (m *metrics) countPanic(route string) {
	if m != nil {
		m.panics.Add(1, route)
	}
}

// clientRefused counts a request refused for its client certificate:
// reason is "missing" or "name" (requireClient).
func (m *metrics) clientRefused(reason string) {
	if m != nil {
		m.clientsRefused.Add(1, reason)
	}
}

// certificate records a certificate's expiry at each load.
func (m *metrics) certificate(name string, notAfter time.Time) {
	if m != nil {
		m.certNotAfter.Set(float64(notAfter.Unix()), name)
	}
}

func (m *metrics) reloadFailed(name string) {
	if m != nil {
		m.reloadErrors.Add(1, name)
	}
}

// ServeHTTP writes every series, sorted: two scrapes of one state are the
// same bytes.
func (m *metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "metrics are read with GET", http.StatusMethodNotAllowed)
		return
	}
	var b bytes.Buffer
	m.write(&b)
	w.Header().Set("Content-Type", promtext.ContentType)
	_, _ = w.Write(b.Bytes())
}

func (m *metrics) write(w io.Writer) {
	family, sample := promtext.Family, promtext.Sample
	family(w, "webhook_requests_total", "counter", "HTTP requests to the webhook's review routes, by route and HTTP status code.")
	m.requests.Write(w, "webhook_requests_total")
	family(w, "webhook_reviews_total", "counter", "Reviews answered, by route and verdict: allowed, patched, denied, warned, audited, warned_and_audited (denials that -validation-action let through) or errored (admission); allowed, denied or no_opinion (authorization).")
	m.reviews.Write(w, "webhook_reviews_total")
	family(w, "webhook_requests_in_flight", "gauge", "Requests being served now, by route, waiting for the budget included.")
	m.inFlight.Write(w, "webhook_requests_in_flight")
	family(w, "webhook_latency_seconds", "histogram", "Time from a request's header, read, to its answer, by route: waiting for a connection, the TLS handshake and the header are not in it.")
	m.latency.Write(w, "webhook_latency_seconds")
	family(w, "webhook_panics_total", "counter", "Admit and authorize functions that panicked, by route; each was answered with HTTP 500.")
	m.panics.Write(w, "webhook_panics_total")

	if m.bodyBudget != nil {
		b := m.bodyBudget.Stats()
		family(w, "webhook_inflight_budget_bytes", "gauge", "The most bytes of large review bodies held at once (-max-inflight-bytes).")
		sample(w, "webhook_inflight_budget_bytes", "", float64(b.BudgetBytes))
		family(w, "webhook_inflight_bytes", "gauge", "Bytes of large review bodies held now, as read and while answered.")
		sample(w, "webhook_inflight_bytes", "", float64(b.HeldBytes))
		family(w, "webhook_inflight_waiting_requests", "gauge", "Large reviews waiting for room in the budget.")
		sample(w, "webhook_inflight_waiting_requests", "", float64(b.Waiting))
		family(w, "webhook_inflight_waited_total", "counter", "Large reviews that found too little room free in the budget, and waited for it.")
		sample(w, "webhook_inflight_waited_total", "", float64(b.Waited))
		family(w, "webhook_overload_refusals_total", "counter", "Reviews answered 429 because they could not be read before their deadline, by reason: at once, as the large reviews waiting ahead would outlast it (long_queue), waiting for room in the budget (no_room), or while the body was read (slow_read).")
		var refused uint64
		for _, reason := range []string{body.LongQueue, body.NoRoom, body.SlowRead} {
			sample(w, "webhook_overload_refusals_total", `reason="`+reason+`"`, float64(b.Refused[reason]))
			refused += b.Refused[reason]
		}
		family(w, "webhook_inflight_rejected_total", "counter", "Reviews answered 429 because they could not be read before their deadline: webhook_overload_refusals_total summed over its reasons.")
		sample(w, "webhook_inflight_rejected_total", "", float64(refused))
		family(w, "webhook_request_bodies_cut_total", "counter", "Request bodies cut because they stopped arriving (stalled) or arrived too slowly (too_slow).")
		sample(w, "webhook_request_bodies_cut_total", `reason="stalled"`, float64(b.Cut[body.Stalled]))
		sample(w, "webhook_request_bodies_cut_total", `reason="too_slow"`, float64(b.Cut[body.TooSlow]))
	}
	if m.listener != nil {
		l := m.listener.Stats()
		family(w, "webhook_connections_open", "gauge", "Connections open to the review port.")
		sample(w, "webhook_connections_open", "", float64(l.Open))
		family(w, "webhook_connections_limit", "gauge", "The most connections the review port holds open at once.")
		sample(w, "webhook_connections_limit", "", float64(l.Max))
		family(w, "webhook_connections_waiting", "gauge", "New connections waiting for a place, before their TLS handshake.")
		sample(w, "webhook_connections_waiting", "", float64(l.Waiting))
		family(w, "webhook_connections_closed_total", "counter", "Connections the listener closed: waiting for a place, when too many waited (shed), or whose TLS handshake failed or took too long (handshake).")
		for _, reason := range []string{"handshake", "shed"} {
			sample(w, "webhook_connections_closed_total", `reason="`+reason+`"`, float64(l.Closed[reason]))
		}
	}
	family(w, "webhook_client_certificates_refused_total", "counter", "Requests to a review route refused with -client-ca-file: without a client certificate (missing), or with one whose name is not in -allowed-client-names (name).")
	m.clientsRefused.Write(w, "webhook_client_certificates_refused_total")

	family(w, "webhook_certificate_expiration_timestamp_seconds", "gauge", "When each certificate last loaded expires (for a CA bundle, its first to expire), in Unix seconds.")
	m.certNotAfter.Write(w, "webhook_certificate_expiration_timestamp_seconds")
	family(w, "webhook_certificate_reload_errors_total", "counter", "Changes of a certificate's files that did not load; the last good one kept serving.")
	m.reloadErrors.Write(w, "webhook_certificate_reload_errors_total")

	for _, write := range m.parts {
		write(w)
	}

	promtext.WriteProcess(w)
}

// refusalSummaryInterval is how often the log sums up the review bodies
// refused or cut since its last line: soon enough to see an overload as
// it happens, seldom enough that no client can flood the log.
const refusalSummaryInterval = 10 * time.Second

// logRefusals logs, for each interval in which review bodies were refused
// (429) or cut (408), one line of how many, by reason, until the returned
// func is called. A line for each would let any client that reaches the
// port flood the log; the metrics count them too.
// stats is the body reader's (body.Budget.Stats).
func logRefusals(logger *slog.Logger, stats func() body.Stats, interval time.Duration) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		last := stats()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			now := stats()
			if line := refusalsSince(last, now); len(line) > 0 {
				logger.LogAttrs(context.Background(), slog.LevelWarn, "review bodies refused or cut", append(line, slog.Duration("in", interval))...)
			}
			last = now
		}
	}()
	return func() { close(done); <-stopped }
}

// refusalsSince is what was refused and cut between two Stats, as log
// attributes by reason; none when nothing was.
func refusalsSince(before, after body.Stats) []slog.Attr {
	var refused, cut []any
	for _, reason := range []string{body.LongQueue, body.NoRoom, body.SlowRead} {
		if n := after.Refused[reason] - before.Refused[reason]; n > 0 {
			refused = append(refused, slog.Uint64(reason, n))
		}
	}
	for _, reason := range []string{body.Stalled, body.TooSlow} {
		if n := after.Cut[reason] - before.Cut[reason]; n > 0 {
			cut = append(cut, slog.Uint64(reason, n))
		}
	}
	var line []slog.Attr
	if refused != nil {
		line = append(line, slog.Group("refused_429", refused...))
	}
	if cut != nil {
		line = append(line, slog.Group("cut_408", cut...))
	}
	return line
}
