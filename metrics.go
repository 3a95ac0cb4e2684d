package main

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The webhook's metrics, in the Prometheus text exposition format 0.0.4,
// written by hand: the root module depends on nothing beyond the standard
// library, k8s.io/api and k8s.io/apimachinery. The names follow
// controller-runtime's controller_runtime_webhook_* with the prefix
// webhook_, and the label "webhook" is the route's path, as there.
//
// No label carries anything from a request: routes, HTTP codes, verdicts
// and certificate names are a small fixed set, and a review's object,
// namespace and user never become a label.

// latencyBuckets are the upper bounds, in seconds, of the latency
// histogram: a review takes well under a millisecond for a small object and
// tens of milliseconds for a megabyte, and the apiserver gives up at
// timeoutSeconds (at most 30 s).
var latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// metrics holds every series the webhook exports. A nil *metrics records
// nothing, so the generic path needs no metrics to run (the tests' own
// handlers have none).
type metrics struct {
	requests *counterVec   // HTTP requests by route and code
	reviews  *counterVec   // reviews by route and verdict
	panics   *counterVec   // admit or authorize functions that panicked, by route
	inFlight *counterVec   // requests being served, by route (a gauge kept as up/down counts)
	latency  *histogramVec // seconds from the request's arrival to its answer, by route

	budget         *byteBudget // nil without one
	budgetRejected atomic.Uint64

	certNotAfter *gaugeVec   // certificates' expiry, Unix seconds, by certificate
	reloadErrors *counterVec // certificate reloads that failed, by certificate
}

func newMetrics() *metrics {
	return &metrics{
		requests:     newCounterVec("webhook", "code"),
		reviews:      newCounterVec("webhook", "verdict"),
		panics:       newCounterVec("webhook"),
		inFlight:     newCounterVec("webhook"),
		latency:      newHistogramVec(latencyBuckets, "webhook"),
		certNotAfter: newGaugeVec("certificate"),
		reloadErrors: newCounterVec("certificate"),
	}
}

// request records a request to route answered with code, and for a review
// its verdict ("" when there was no review to answer).
func (m *metrics) request(route string, code int, verdict string, took time.Duration) {
	if m == nil {
		return
	}
	m.requests.add(1, route, codeLabel(code))
	if verdict != "" {
		m.reviews.add(1, route, verdict)
	}
	m.latency.observe(took.Seconds(), route)
}

// codeLabels spells out every HTTP status code once, because
// strconv.Itoa allocates for numbers over 99: one allocation per review.
var codeLabels = func() (labels [600]string) {
	for code := range labels {
		labels[code] = strconv.Itoa(code)
	}
	return labels
}()

// codeLabel is an HTTP status code as a label value.
func codeLabel(code int) string {
	if code >= 0 && code < len(codeLabels) {
		return codeLabels[code]
	}
	return strconv.Itoa(code)
}

// inFlightAdd counts requests to route in flight: +1 as one arrives, -1
// once it is answered. (Not a func returned for defer: that closure would
// cost an allocation per review.)
func (m *metrics) inFlightAdd(route string, delta int64) {
	if m != nil {
		m.inFlight.add(delta, route)
	}
}

func (m *metrics) panicked(route string) {
	if m != nil {
		m.panics.add(1, route)
	}
}

func (m *metrics) budgetRejection() {
	if m != nil {
		m.budgetRejected.Add(1)
	}
}

// certificate records a certificate's expiry at each load.
func (m *metrics) certificate(name string, notAfter time.Time) {
	if m != nil {
		m.certNotAfter.set(float64(notAfter.Unix()), name)
	}
}

func (m *metrics) reloadFailed(name string) {
	if m != nil {
		m.reloadErrors.add(1, name)
	}
}

// ServeHTTP writes every series in the text format, sorted, so that two
// scrapes of the same state are the same bytes.
func (m *metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "metrics are read with GET", http.StatusMethodNotAllowed)
		return
	}
	var b bytes.Buffer
	m.write(&b)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

func (m *metrics) write(w io.Writer) {
	family(w, "webhook_requests_total", "counter", "HTTP requests to the webhook's review routes, by route and HTTP status code.")
	m.requests.write(w, "webhook_requests_total")
	family(w, "webhook_reviews_total", "counter", "Reviews answered, by route and verdict: allowed, patched, denied, warned, audited, warned_and_audited (denials that -validation-action let through) or errored (admission); allowed, denied or no_opinion (authorization).")
	m.reviews.write(w, "webhook_reviews_total")
	family(w, "webhook_requests_in_flight", "gauge", "Requests being served now, by route, waiting for the budget included.")
	m.inFlight.write(w, "webhook_requests_in_flight")
	family(w, "webhook_latency_seconds", "histogram", "Time from a request's arrival to its answer, by route.")
	m.latency.write(w, "webhook_latency_seconds")
	family(w, "webhook_panics_total", "counter", "Admit and authorize functions that panicked, by route; each was answered with HTTP 500.")
	m.panics.write(w, "webhook_panics_total")

	if m.budget != nil {
		used, waiting := m.budget.state()
		family(w, "webhook_inflight_budget_bytes", "gauge", "The most bytes of reviews that are read and decoded at once (-max-inflight-bytes).")
		sample(w, "webhook_inflight_budget_bytes", "", float64(m.budget.capacity))
		family(w, "webhook_inflight_bytes", "gauge", "Bytes of the reviews being read and decoded now.")
		sample(w, "webhook_inflight_bytes", "", float64(used))
		family(w, "webhook_inflight_waiting_requests", "gauge", "Requests waiting for room in the budget.")
		sample(w, "webhook_inflight_waiting_requests", "", float64(waiting))
		family(w, "webhook_inflight_rejected_total", "counter", "Requests answered without a review because the budget had no room for them before their deadline.")
		sample(w, "webhook_inflight_rejected_total", "", float64(m.budgetRejected.Load()))
	}

	family(w, "webhook_certificate_expiration_timestamp_seconds", "gauge", "When each certificate last loaded expires (for a CA bundle, its first to expire), in Unix seconds.")
	m.certNotAfter.write(w, "webhook_certificate_expiration_timestamp_seconds")
	family(w, "webhook_certificate_reload_errors_total", "counter", "Changes of a certificate's files that did not load; the last good one kept serving.")
	m.reloadErrors.write(w, "webhook_certificate_reload_errors_total")
}

func family(w io.Writer, name, kind, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
}

func sample(w io.Writer, name, labels string, v float64) {
	if labels != "" {
		labels = "{" + labels + "}"
	}
	fmt.Fprintf(w, "%s%s %s\n", name, labels, formatValue(v))
}

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, +1):
		return "+Inf"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatInt(int64(v), 10)
	default:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
}

// labelEscaper escapes a label value as the text format requires.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// labelPairs renders names and values as name="value",… .
func labelPairs(names, values []string) string {
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n)
		b.WriteString(`="`)
		labelEscaper.WriteString(&b, values[i])
		b.WriteByte('"')
	}
	return b.String()
}

// maxLabels is the most labels any family here has: webhook and code, or
// webhook and verdict.
const maxLabels = 2

// seriesKey is a series' label values as a map key: an array rather than
// the values joined into a string, which would cost an allocation on every
// review.
type seriesKey [maxLabels]string

func keyOf(values []string) (key seriesKey) {
	copy(key[:], values)
	return key
}

// counterVec is a family of counters (or, with negative adds, up/down
// gauges) by label values.
type counterVec struct {
	names  []string
	mu     sync.RWMutex
	series map[seriesKey]*counterSeries
}

type counterSeries struct {
	values []string
	n      atomic.Int64
}

func newCounterVec(labelNames ...string) *counterVec {
	return &counterVec{names: labelNames, series: map[seriesKey]*counterSeries{}}
}

func (c *counterVec) add(delta int64, values ...string) {
	key := keyOf(values)
	c.mu.RLock()
	s, ok := c.series[key]
	c.mu.RUnlock()
	if !ok {
		c.mu.Lock()
		if s, ok = c.series[key]; !ok {
			s = &counterSeries{values: slices.Clone(values)}
			c.series[key] = s
		}
		c.mu.Unlock()
	}
	s.n.Add(delta)
}

func (c *counterVec) write(w io.Writer, name string) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, key := range sortedKeys(c.series) {
		s := c.series[key]
		sample(w, name, labelPairs(c.names, s.values), float64(s.n.Load()))
	}
}

// gaugeVec is a family of gauges set to a value, by label values.
type gaugeVec struct {
	names  []string
	mu     sync.Mutex
	series map[seriesKey]gaugeSeries
}

type gaugeSeries struct {
	values []string
	v      float64
}

func newGaugeVec(labelNames ...string) *gaugeVec {
	return &gaugeVec{names: labelNames, series: map[seriesKey]gaugeSeries{}}
}

func (g *gaugeVec) set(v float64, values ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.series[keyOf(values)] = gaugeSeries{values: slices.Clone(values), v: v}
}

func (g *gaugeVec) write(w io.Writer, name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, key := range sortedKeys(g.series) {
		s := g.series[key]
		sample(w, name, labelPairs(g.names, s.values), s.v)
	}
}

// histogramVec is a family of histograms with fixed buckets, by label
// values.
type histogramVec struct {
	names   []string
	buckets []float64
	mu      sync.RWMutex
	series  map[seriesKey]*histogramSeries
}

type histogramSeries struct {
	values []string
	counts []atomic.Uint64 // per bucket, not cumulative; the last is +Inf
	sumNS  atomic.Uint64   // the sum in nanoseconds, so it adds atomically
}

func newHistogramVec(buckets []float64, labelNames ...string) *histogramVec {
	return &histogramVec{names: labelNames, buckets: buckets, series: map[seriesKey]*histogramSeries{}}
}

func (h *histogramVec) observe(seconds float64, values ...string) {
	key := keyOf(values)
	h.mu.RLock()
	s, ok := h.series[key]
	h.mu.RUnlock()
	if !ok {
		h.mu.Lock()
		if s, ok = h.series[key]; !ok {
			s = &histogramSeries{values: slices.Clone(values), counts: make([]atomic.Uint64, len(h.buckets)+1)}
			h.series[key] = s
		}
		h.mu.Unlock()
	}
	i, _ := slices.BinarySearch(h.buckets, seconds) // the first bound ≥ seconds
	s.counts[i].Add(1)
	s.sumNS.Add(uint64(seconds * 1e9))
}

func (h *histogramVec) write(w io.Writer, name string) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, key := range sortedKeys(h.series) {
		s := h.series[key]
		labels := labelPairs(h.names, s.values)
		bucketLabels := labels + ","
		if labels == "" {
			bucketLabels = ""
		}
		// The count is the +Inf bucket's, so a scrape during an
		// observation is still consistent.
		var cumulative uint64
		for i, le := range append(slices.Clone(h.buckets), math.Inf(+1)) {
			cumulative += s.counts[i].Load()
			sample(w, name+"_bucket", bucketLabels+`le="`+formatValue(le)+`"`, float64(cumulative))
		}
		sample(w, name+"_sum", labels, float64(s.sumNS.Load())/1e9)
		sample(w, name+"_count", labels, float64(cumulative))
	}
}

func sortedKeys[V any](m map[seriesKey]V) []seriesKey {
	keys := make([]seriesKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b seriesKey) int { return slices.Compare(a[:], b[:]) })
	return keys
}
