// Package promtext writes metrics in the Prometheus text exposition format
// 0.0.4, by hand, with the standard library only: counters, gauges and
// histograms by label values, and the process series every Go exporter
// has. It knows nothing of webhooks; the webhook's metrics.go says what
// it counts. (client_golang would do all of this, but the webhook's root
// module depends on nothing beyond the standard library, k8s.io/api and
// k8s.io/apimachinery, so that it can be copied.)
package promtext

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// ContentType is the Content-Type of the text format.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Family writes the HELP and TYPE lines that open a metric family; kind is
// "counter", "gauge" or "histogram".
func Family(w io.Writer, name, kind, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
}

// Sample writes one sample; labels is name="value",… as LabelPairs makes
// it, or "".
func Sample(w io.Writer, name, labels string, v float64) {
	if labels != "" {
		labels = "{" + labels + "}"
	}
	fmt.Fprintf(w, "%s%s %s\n", name, labels, FormatValue(v))
}

// FormatValue spells a sample's value: integers without a decimal point,
// +Inf as the format wants it.
func FormatValue(v float64) string {
	switch {
	case math.IsInf(v, +1):
		return "+Inf"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatInt(int64(v), 10)
	default:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
}

// CodeLabel is an HTTP status code as a label value, as client_golang's
// promhttp labels requests by code.
func CodeLabel(code int) string {
	if code >= 0 && code < len(codeLabels) {
		return codeLabels[code]
	}
	return strconv.Itoa(code)
}

// codeLabels spells out every HTTP status code once, because
// strconv.Itoa allocates for numbers over 99: one allocation per request.
var codeLabels = func() (labels [600]string) {
	for code := range labels {
		labels[code] = strconv.Itoa(code)
	}
	return labels
}()

// labelEscaper escapes a label value as the text format requires.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// LabelPairs renders names and values as name="value",… .
func LabelPairs(names, values []string) string {
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

// maxLabels is the most labels a family here may have. Two is all the
// webhook uses (route and code, route and verdict).
const maxLabels = 2

// seriesKey is a series' label values as a map key: an array rather than
// the values joined into a string, which would cost an allocation on every
// observation.
type seriesKey [maxLabels]string

func keyOf(values []string) (key seriesKey) {
	copy(key[:], values)
	return key
}

// CounterVec is a family of counters (or, with negative adds, of up/down
// gauges) by label values.
type CounterVec struct {
	names  []string
	mu     sync.RWMutex
	series map[seriesKey]*counterSeries
}

type counterSeries struct {
	values []string
	n      atomic.Int64
}

// NewCounterVec makes a family with these label names, at most two.
func NewCounterVec(labelNames ...string) *CounterVec {
	return &CounterVec{names: labelNames, series: map[seriesKey]*counterSeries{}}
}

// Add adds delta to the series of these label values.
func (c *CounterVec) Add(delta int64, values ...string) {
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

// Write writes every series, sorted by label values, under name.
func (c *CounterVec) Write(w io.Writer, name string) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, key := range sortedKeys(c.series) {
		s := c.series[key]
		Sample(w, name, LabelPairs(c.names, s.values), float64(s.n.Load()))
	}
}

// GaugeVec is a family of gauges set to a value, by label values.
type GaugeVec struct {
	names  []string
	mu     sync.Mutex
	series map[seriesKey]gaugeSeries
}

type gaugeSeries struct {
	values []string
	v      float64
}

// NewGaugeVec makes a family with these label names, at most two.
func NewGaugeVec(labelNames ...string) *GaugeVec {
	return &GaugeVec{names: labelNames, series: map[seriesKey]gaugeSeries{}}
}

// Set sets the series of these label values to v.
func (g *GaugeVec) Set(v float64, values ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.series[keyOf(values)] = gaugeSeries{values: slices.Clone(values), v: v}
}

// Write writes every series, sorted by label values, under name.
func (g *GaugeVec) Write(w io.Writer, name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, key := range sortedKeys(g.series) {
		s := g.series[key]
		Sample(w, name, LabelPairs(g.names, s.values), s.v)
	}
}

// HistogramVec is a family of histograms with fixed buckets, by label
// values.
type HistogramVec struct {
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

// NewHistogramVec makes a family with these upper bounds, ascending, and
// label names, at most two.
func NewHistogramVec(buckets []float64, labelNames ...string) *HistogramVec {
	return &HistogramVec{names: labelNames, buckets: buckets, series: map[seriesKey]*histogramSeries{}}
}

// Observe counts one observation, in seconds, in the series of these label
// values.
func (h *HistogramVec) Observe(seconds float64, values ...string) {
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

// Write writes every series' buckets, sum and count under name.
func (h *HistogramVec) Write(w io.Writer, name string) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, key := range sortedKeys(h.series) {
		s := h.series[key]
		labels := LabelPairs(h.names, s.values)
		bucketLabels := labels + ","
		if labels == "" {
			bucketLabels = ""
		}
		// The count is the +Inf bucket's, so a scrape during an
		// observation is still consistent.
		var cumulative uint64
		for i, le := range append(slices.Clone(h.buckets), math.Inf(+1)) {
			cumulative += s.counts[i].Load()
			Sample(w, name+"_bucket", bucketLabels+`le="`+FormatValue(le)+`"`, float64(cumulative))
		}
		Sample(w, name+"_sum", labels, float64(s.sumNS.Load())/1e9)
		Sample(w, name+"_count", labels, float64(cumulative))
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
