package main

// The overload rows: the webhook held to one core, its peak measured, then
// offered twice that, as a burst of writes offers it to a webhook short of
// CPU (a throttled container, a busy node). What it must show: the reviews
// answered in time stay near the peak, and each refusal is a 429 answered
// quickly, never a 400 or 408 for a review sent whole.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// overloadOptions are one overload row's settings.
type overloadOptions struct {
	caFile   string
	body     string // a benchmark body's name, and its file
	file     string
	timeout  time.Duration // each review's ?timeout=, and its client's deadline
	d        time.Duration // each phase's length
	rounds   int           // of the peak, then the load, alternated
	conns    int           // the most connections the client opens, as the webhook's cap
	peakConc int           // the closed loop that measures the peak
	// closed, when set, is a closed loop of this many connections instead
	// of twice the peak offered open loop.
	closed int
}

// overloadResult is one overload row: its rounds' medians and sums.
type overloadResult struct {
	opts                     overloadOptions
	peak, offered, inTime    float64 // reviews a second: medians
	ratio                    float64 // the median of each round's inTime/peak
	sum                      loadReport
	refused                  []float64 // the 429s' latencies, every round's
	refusedByReason          map[string]float64
	peakRSSMB, cpuPerSeconds float64
}

// loadReport is what the overload client measured in one phase.
type loadReport struct {
	Sent       int            `json:"sent"`
	Seconds    float64        `json:"seconds"`
	InTime     int            `json:"in_time"`         // 200, answered before the client's deadline
	Late       int            `json:"late"`            // 200, after it
	Codes      map[string]int `json:"codes"`           // every answer by HTTP status
	Errors     map[string]int `json:"errors"`          // no answer, by kind
	OKMillis   []float64      `json:"ok_ms"`           // latencies of the 200s: p50, p99, max
	Refused    []float64      `json:"refused_ms"`      // latencies of every 429
	RefusedLag map[string]int `json:"refused_by_left"` // 429s by how much of the deadline was left
}

// runOverload starts the webhook on one core (taskset -c 0, GOMAXPROCS=1),
// and alternates, opts.rounds times, a closed loop of opts.peakConc
// connections that measures its peak, and a load: twice that peak offered
// open loop, or a closed loop of opts.closed connections; the client runs
// in a process of its own on the other cores.
func runOverload(webhookBin string, certArgs []string, opts overloadOptions) (overloadResult, error) {
	res := overloadResult{opts: opts, refusedByReason: map[string]float64{}}
	if runtime.NumCPU() < 2 {
		return res, errors.New("the overload rows need 2 cores: one for the webhook, one for the client")
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return res, errors.New("the overload rows need taskset (util-linux)")
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		return res, err
	}
	tlsConfig, err := clientTLS(opts.caFile)
	if err != nil {
		return res, err
	}
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	wh, err := startPinned(webhookBin, certArgs, probe, "-metrics-listen", metricsAddr)
	if err != nil {
		return res, err
	}
	defer stop(wh)

	var peaks, offered, inTimes, ratios []float64
	res.sum = loadReport{Codes: map[string]int{}, Errors: map[string]int{}, RefusedLag: map[string]int{}}
	var cpu, seconds float64
	for round := range opts.rounds {
		peak, err := overloadClient(wh.addr, opts, "-closed", strconv.Itoa(opts.peakConc))
		if err != nil {
			return res, fmt.Errorf("measuring the peak, round %d: %w", round+1, err)
		}
		p := float64(peak.InTime) / peak.Seconds
		if p == 0 {
			return res, fmt.Errorf("no review answered in time at the peak: %+v", peak)
		}
		mode := []string{"-closed", strconv.Itoa(opts.closed)}
		if opts.closed == 0 {
			mode = []string{"-rate", strconv.FormatFloat(2*p, 'f', 1, 64)}
			offered = append(offered, 2*p)
		}
		before := scrapeRefusals(metricsAddr)
		if round == 0 {
			_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", wh.pid()), []byte("5"), 0)
		}
		cpuBefore, _ := cpuSeconds(wh.pid())
		began := time.Now()
		load, err := overloadClient(wh.addr, opts, mode...)
		if err != nil {
			return res, fmt.Errorf("the load, round %d: %w", round+1, err)
		}
		cpuAfter, _ := cpuSeconds(wh.pid())
		cpu += cpuAfter - cpuBefore
		seconds += time.Since(began).Seconds()
		for reason, n := range scrapeRefusals(metricsAddr) {
			res.refusedByReason[reason] += n - before[reason]
		}
		inTime := float64(load.InTime) / load.Seconds
		peaks, inTimes, ratios = append(peaks, p), append(inTimes, inTime), append(ratios, inTime/p)
		res.sum.Sent += load.Sent
		res.sum.InTime += load.InTime
		res.sum.Late += load.Late
		for code, n := range load.Codes {
			res.sum.Codes[code] += n
		}
		for kind, n := range load.Errors {
			res.sum.Errors[kind] += n
		}
		for left, n := range load.RefusedLag {
			res.sum.RefusedLag[left] += n
		}
		res.refused = append(res.refused, load.Refused...)
		fmt.Fprintf(os.Stderr, "bench: overload, %s, round %d: peak %.1f/s, in time under the load %.1f/s, codes %v, no answer %v\n", opts.body, round+1, p, inTime, load.Codes, load.Errors)
	}
	res.peak, res.inTime, res.ratio = median(peaks), median(inTimes), median(ratios)
	if len(offered) > 0 {
		res.offered = median(offered)
	}
	res.cpuPerSeconds = cpu / seconds
	res.peakRSSMB, err = peakRSS(wh.pid())
	return res, err
}

// startPinned is start for a webhook held to the first core.
func startPinned(bin string, certArgs []string, client *http.Client, extra ...string) (*server, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := append(append([]string{"-c", "0", bin, "-listen", addr}, certArgs...), extra...)
	cmd := exec.Command("taskset", args...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{name: "webhook", cmd: cmd, addr: addr}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if resp, err := client.Get(s.url("/ping")); err == nil {
			resp.Body.Close()
			return s, nil
		}
	}
	stop(s)
	return nil, errors.New("the webhook did not start")
}

func clientTLS(caFile string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}, nil
}

// overloadClient runs `bench overload-client` on every core but the
// webhook's, and returns its report.
func overloadClient(addr string, opts overloadOptions, mode ...string) (loadReport, error) {
	self, err := os.Executable()
	if err != nil {
		return loadReport{}, err
	}
	cores := fmt.Sprintf("1-%d", runtime.NumCPU()-1)
	args := append([]string{"-c", cores, self, "overload-client", "-addr", addr, "-ca", opts.caFile, "-body", opts.file,
		"-timeout", opts.timeout.String(), "-for", opts.d.String(), "-conns", strconv.Itoa(opts.conns)}, mode...)
	out, err := exec.Command("taskset", args...).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return loadReport{}, fmt.Errorf("%w: %s", err, exit.Stderr)
		}
		return loadReport{}, err
	}
	var r loadReport
	return r, json.Unmarshal(out, &r)
}

// overloadLoad is the body of `bench overload-client`: reviews POSTed to
// -addr's /mutate?timeout=, each with that deadline from when it was due,
// over at most -conns keep-alive connections, as the apiserver calls;
// either -closed N connections one review after another, or -rate reviews
// a second, each due at its time whether or not the last was answered.
// It prints a loadReport as JSON.
func overloadLoad(args []string) error {
	flags := flag.NewFlagSet("overload-client", flag.ContinueOnError)
	addr := flags.String("addr", "", "the webhook's `address`")
	caFile := flags.String("ca", "", "its CA `file`")
	bodyFile := flags.String("body", "", "the review `file`")
	timeout := flags.Duration("timeout", 2*time.Second, "each review's ?timeout= and deadline")
	d := flags.Duration("for", 15*time.Second, "how `long`")
	conns := flags.Int("conns", 256, "the most connections open")
	closed := flags.Int("closed", 0, "a closed loop of this many `connections`")
	rate := flags.Float64("rate", 0, "an open loop of this many reviews a `second`")
	if err := flags.Parse(args); err != nil {
		return err
	}
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		return err
	}
	tlsConfig, err := clientTLS(*caFile)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig, MaxConnsPerHost: *conns, MaxIdleConnsPerHost: *conns, DisableCompression: true}}
	url := fmt.Sprintf("https://%s/mutate?timeout=%s", *addr, *timeout)

	var mu sync.Mutex
	r := loadReport{Codes: map[string]int{}, Errors: map[string]int{}, RefusedLag: map[string]int{}}
	var ok, refused []float64
	send := func(due time.Time) {
		ctx, cancel := context.WithDeadline(context.Background(), due.Add(*timeout))
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		var code int
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			code = resp.StatusCode
		}
		took := time.Since(due)
		mu.Lock()
		defer mu.Unlock()
		r.Sent++
		switch {
		case code != 0:
			r.Codes[strconv.Itoa(code)]++
		case errors.Is(err, context.DeadlineExceeded):
			r.Errors["deadline"]++
		default:
			r.Errors[errorKind(err)]++
		}
		switch {
		case code == http.StatusOK && took <= *timeout:
			r.InTime++
			ok = append(ok, float64(took)/float64(time.Millisecond))
		case code == http.StatusOK:
			r.Late++
		case code == http.StatusTooManyRequests:
			refused = append(refused, float64(took)/float64(time.Millisecond))
			left := *timeout - took
			switch {
			case left > *timeout/2:
				r.RefusedLag["more than half"]++
			case left > 0:
				r.RefusedLag["less than half"]++
			default:
				r.RefusedLag["none"]++
			}
		}
	}

	start := time.Now()
	end := start.Add(*d)
	var wg sync.WaitGroup
	switch {
	case *closed > 0:
		for range *closed {
			wg.Go(func() {
				for time.Now().Before(end) {
					send(time.Now())
				}
			})
		}
	case *rate > 0:
		interval := time.Duration(float64(time.Second) / *rate)
		for due := start; due.Before(end); due = due.Add(interval) {
			time.Sleep(time.Until(due))
			wg.Go(func() { send(due) })
		}
	default:
		return errors.New("want -closed or -rate")
	}
	wg.Wait()
	r.Seconds = d.Seconds()
	r.OKMillis, r.Refused = percentiles(ok), refused
	return json.NewEncoder(os.Stdout).Encode(r)
}

// errorKind names a request's failure for the report.
func errorKind(err error) string {
	for _, kind := range []string{"connection reset", "broken pipe", "EOF", "connection refused", "server closed idle connection"} {
		if strings.Contains(err.Error(), kind) {
			return kind
		}
	}
	return err.Error()
}

// percentiles is p50, p99 and the max of xs, or nothing.
func percentiles(xs []float64) []float64 {
	if len(xs) == 0 {
		return nil
	}
	sort.Float64s(xs)
	at := func(q float64) float64 { return xs[min(len(xs)-1, int(q*float64(len(xs))))] }
	return []float64{at(0.5), at(0.99), xs[len(xs)-1]}
}

// scrapeRefusals reads webhook_overload_refusals_total by reason.
func scrapeRefusals(addr string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, `webhook_overload_refusals_total{reason="`)
		if !ok {
			continue
		}
		reason, value, _ := strings.Cut(rest, `"} `)
		out[reason], _ = strconv.ParseFloat(strings.TrimSpace(value), 64)
	}
	return out
}

// renderOverload is the overload rows' table.
func renderOverload(results []overloadResult) string {
	var b strings.Builder
	host, _ := os.Hostname()
	if len(results) == 0 {
		return ""
	}
	o := results[0].opts
	fmt.Fprintf(&b, "Measured %s on %s (%d CPUs, %s): the webhook under `taskset -c 0` with GOMAXPROCS=1 and default flags, the client in a process of its own on the other cores, at most %d connections. %d rounds of the peak (a closed loop of %d connections, %s), then the load (%s), medians; each review due at its time, with `?timeout=` and that deadline from when it was due.\n\n",
		time.Now().UTC().Format("2006-01-02"), host, runtime.NumCPU(), runtime.Version(), o.conns, o.rounds, o.peakConc, o.d, o.d)
	fmt.Fprintf(&b, "| review, timeout | load | peak, in time /s | load /s offered | answered 200 in time /s | of the peak | 200 late | 429 | 429 ms p50 / p99 / max | 429s with over half the deadline left | 429 by reason (webhook) | other answers | no answer (client) | webhook CPU s/s | peak RSS MiB |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		p := r.sum
		var other, reasons, noAnswer []string
		for code, n := range p.Codes {
			if code != "200" && code != "429" {
				other = append(other, fmt.Sprintf("%d × %s", n, code))
			}
		}
		for reason, n := range r.refusedByReason {
			if n > 0 {
				reasons = append(reasons, fmt.Sprintf("%s %.0f", reason, n))
			}
		}
		for kind, n := range p.Errors {
			noAnswer = append(noAnswer, fmt.Sprintf("%d %s", n, kind))
		}
		slices.Sort(other)
		slices.Sort(reasons)
		slices.Sort(noAnswer)
		load, offered := "twice the peak, open loop", fmt.Sprintf("%.1f", r.offered)
		if r.opts.closed > 0 {
			load, offered = fmt.Sprintf("closed loop of %d connections", r.opts.closed), "–"
		}
		fmt.Fprintf(&b, "| %s, %s | %s | %.1f | %s | %.1f | %.0f %% | %d | %d | %s | %d | %s | %s | %s | %.2f | %.1f |\n",
			r.opts.body, r.opts.timeout, load, r.peak, offered, r.inTime, 100*r.ratio, p.Late, p.Codes["429"], joinMillis(percentiles(r.refused)), p.RefusedLag["more than half"],
			orNone(strings.Join(reasons, ", ")), orNone(strings.Join(other, ", ")), orNone(strings.Join(noAnswer, ", ")), r.cpuPerSeconds, r.peakRSSMB)
	}
	return b.String()
}

func joinMillis(xs []float64) string {
	if len(xs) == 0 {
		return "–"
	}
	var s []string
	for _, x := range xs {
		s = append(s, strconv.FormatFloat(x, 'f', 0, 64))
	}
	return strings.Join(s, " / ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
