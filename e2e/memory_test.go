package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// startAsDeployed starts the webhook under load (loadBinary) as
// deploymentRun says, with metrics on a port of its own, and returns it,
// its metrics address and the container's memory limit in bytes.
func startAsDeployed(t *testing.T) (*webhookServer, string, int64) {
	t.Helper()
	dir := t.TempDir()
	webhookCerts(t, filepath.Join(dir, "tls"))
	args, env, memoryLimit := deploymentRun(t, filepath.Join(dir, "tls"), "127.0.0.1:0")
	w := startWebhookBinary(t, loadBinary(t), dir, "127.0.0.1:0", env, args...)
	t.Logf("the webhook runs as the Deployment does: %v %v", env, args)
	return w, w.metricsAddr(t), memoryLimit
}

// deploymentRun returns how deploy/in-cluster/deployment.yaml runs the
// webhook: its arguments, with the certificate files and the metrics
// address replaced by this test's, its GOMEMLIMIT as the downward API
// fills it in, and the container's memory limit in bytes.
func deploymentRun(t *testing.T, certDir, metricsAddr string) (args, env []string, memoryLimit int64) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "in-cluster", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(raw, &d); err != nil {
		t.Fatalf("deploy/in-cluster/deployment.yaml: %v", err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	for _, a := range c.Args {
		switch {
		case strings.HasPrefix(a, "-tls-cert-file="):
			a = "-tls-cert-file=" + filepath.Join(certDir, "tls.crt")
		case strings.HasPrefix(a, "-tls-private-key-file="):
			a = "-tls-private-key-file=" + filepath.Join(certDir, "tls.key")
		case strings.HasPrefix(a, "-metrics-listen="):
			a = "-metrics-listen=" + metricsAddr
		}
		args = append(args, a)
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil {
			t.Fatalf("env %s: this test knows only resourceFieldRef values", e.Name)
		}
		q, ok := map[string]*resource.Quantity{"requests.memory": c.Resources.Requests.Memory(), "limits.memory": c.Resources.Limits.Memory()}[e.ValueFrom.ResourceFieldRef.Resource]
		if !ok {
			t.Fatalf("env %s: this test knows only requests.memory and limits.memory", e.Name)
		}
		// With no divisor the downward API gives bytes.
		env = append(env, fmt.Sprintf("%s=%d", e.Name, q.Value()))
	}
	return args, env, c.Resources.Limits.Memory().Value()
}

// TestMemoryUnderBurst sends the policy's admitted requests, padded to
// large objects, through the real apiserver, many at once, to the webhook
// run as the Deployment runs it. No request fails, reviews wait for the
// byte budget (webhook_inflight_waited_total counts them), and the
// webhook's peak RSS stays under the Deployment's memory limit.
func TestMemoryUnderBurst(t *testing.T) {
	takeLoadTurn(t)
	const (
		writers = 24
		// writesEach is each writer's requests, one after another: with 3,
		// one first round in four left the budget unpressed.
		writesEach  = 5
		objectBytes = 700 << 10 // within etcd's 1.5 MiB request limit even as an UPDATE's review doubles it
		// maxRounds bounds the burst. Each write is reviewed once by every
		// deployed webhook whose rules send it, so a policy with one
		// webhook sends half the reviews of one whose object goes through
		// two; a round that does not press on the budget is followed by
		// one with twice the writers. More would press on the apiserver
		// (its own request timeouts) rather than on the webhook.
		maxRounds = 2
	)
	scope := newScope(t, "memory-burst")
	routes := deployedRoutes(t)
	for _, route := range routes {
		largeReviews(t, scope, route, objectBytes)
	}
	w, metricsAddr, memoryLimit := startAsDeployed(t)
	registerDeployed(t, w, scope, hookOptions{timeout: 10})
	mark := apiserver.logMark()

	// burst runs n writers at once, each sending large requests one after
	// another, while it scrapes the metrics, parsing them as Prometheus
	// does.
	burst := func(round, n int) scrapeSummary {
		stopScraping := make(chan struct{})
		scraped := make(chan scrapeSummary, 1)
		go func() { scraped <- scrapeUntil(t, "http://"+metricsAddr+"/metrics", stopScraping) }()
		var wg sync.WaitGroup
		errs := make(chan error, n*writesEach)
		start := time.Now()
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each deployed webhook's own request, in turn, so that
				// every write is one its rules send.
				for u := range writesEach {
					r := scope.admitted(routes[i%len(routes)], fmt.Sprintf("large-%d-%d-%d", round, i, u), objectBytes)
					if err := r.send(context.Background(), false); err != nil {
						errs <- fmt.Errorf("%s: %w", r, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		took := time.Since(start)
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		close(stopScraping)
		s := <-scraped
		t.Logf("round %d: %d requests of about %d KiB by %d writers in %s; %d reviews in all waited for the budget, at most %d at once seen, %d bytes in use",
			round+1, n*writesEach, objectBytes>>10, n, took.Round(time.Millisecond), s.waited, s.maxWaiting, s.maxInUse)
		return s
	}
	var s scrapeSummary
	for round, n := 0, writers; round < maxRounds && s.waited == 0; round, n = round+1, 2*n {
		r := burst(round, n)
		s.scrapes += r.scrapes
		s.maxWaiting, s.maxInUse, s.budget = max(s.maxWaiting, r.maxWaiting), max(s.maxInUse, r.maxInUse), r.budget
		s.waited, s.rejected = max(s.waited, r.waited), max(s.rejected, r.rejected) // counters: the last round's are the totals
	}

	peak := peakRSS(t, w.cmd.Process.Pid)
	t.Logf("webhook peak RSS %.1f MiB (limit %d MiB)", float64(peak)/(1<<20), memoryLimit>>20)
	if peak >= memoryLimit {
		t.Errorf("the webhook's peak RSS was %.1f MiB, want under the Deployment's limit of %d MiB", float64(peak)/(1<<20), memoryLimit>>20)
	}
	if s.scrapes == 0 {
		t.Fatal("no scrape of the metrics succeeded during the burst")
	}
	if s.waited == 0 {
		t.Errorf("no review waited for the budget in %d rounds (webhook_inflight_waited_total, %d scrapes); the burst did not press on it", maxRounds, s.scrapes)
	}
	if s.maxInUse > s.budget {
		t.Errorf("%d bytes of the budget were in use at once, over the budget of %d", s.maxInUse, s.budget)
	}
	if s.rejected != 0 {
		t.Errorf("%d reviews found no room before their deadline", s.rejected)
	}
	logCutCounters(t, "http://"+metricsAddr+"/metrics")
	noFailedCalls(t, mark)
}

// largeBodyBytes is the size of review above which the webhook reads a
// body within its byte budget (body.MaxSmallBodyBytes, in the webhook's body
// package).
const largeBodyBytes = 16 << 10

// largeReviews skips the test unless route's admitted request, padded
// with padding, makes a review over largeBodyBytes, and returns the size
// of what the webhook is sent: the object, and the stored one an UPDATE
// or DELETE carries as oldObject. A policy whose requests cannot carry
// padding (a DELETE of a Namespace with no annotations, say) never sends
// the webhook a large review, so a burst of them tests nothing here.
func largeReviews(t *testing.T, s *testScope, route string, padding int) int {
	t.Helper()
	r := s.admitted(route, "size", padding)
	size := 0
	for _, obj := range []*unstructured.Unstructured{r.Object, r.Stored} {
		if obj != nil && (obj != r.Stored || r.Operation != admissionregistrationv1.Create) {
			b, _ := obj.MarshalJSON()
			size += len(b)
		}
	}
	if size <= largeBodyBytes {
		t.Skipf("admittedRequest(%q, …, %d) (e2e/demonstration_test.go) gives the %s, whose review carries %d bytes of objects: with padding its object must carry about that many more bytes, for the tests of large reviews", route, padding, r, size)
	}
	return size
}

// logCutCounters logs the webhook's counters of connections and bodies it
// cut, which say why a review it never logged failed.
func logCutCounters(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Logf("scraping %s: %v", url, err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "webhook_connections_closed_total") || strings.HasPrefix(line, "webhook_request_bodies_cut_total") {
			t.Logf("webhook: %s", strings.TrimSpace(line))
		}
	}
}

// scrapeSummary is what the scrapes during the burst saw.
type scrapeSummary struct {
	scrapes                      int
	maxWaiting, maxInUse, budget int64
	waited, rejected             int64 // counters: the total at the last scrape
}

// scrapeUntil scrapes url every few milliseconds until stop is closed,
// parsing each scrape with the Prometheus text parser and checking the
// families the webhook exports are there with their types.
func scrapeUntil(t *testing.T, url string, stop <-chan struct{}) scrapeSummary {
	var s scrapeSummary
	parser := expfmt.NewTextParser(model.UTF8Validation)
	wantTypes := map[string]dto.MetricType{
		"webhook_requests_total":                           dto.MetricType_COUNTER,
		"webhook_reviews_total":                            dto.MetricType_COUNTER,
		"webhook_requests_in_flight":                       dto.MetricType_GAUGE,
		"webhook_latency_seconds":                          dto.MetricType_HISTOGRAM,
		"webhook_inflight_budget_bytes":                    dto.MetricType_GAUGE,
		"webhook_inflight_bytes":                           dto.MetricType_GAUGE,
		"webhook_inflight_waiting_requests":                dto.MetricType_GAUGE,
		"webhook_inflight_waited_total":                    dto.MetricType_COUNTER,
		"webhook_overload_refusals_total":                  dto.MetricType_COUNTER,
		"webhook_certificate_expiration_timestamp_seconds": dto.MetricType_GAUGE,
	}
	for {
		select {
		case <-stop:
			return s
		case <-time.After(20 * time.Millisecond):
		}
		resp, err := http.Get(url)
		if err != nil {
			continue
		}
		families, err := parser.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Errorf("the metrics do not parse as the Prometheus text format: %v", err)
			return s
		}
		s.scrapes++
		for name, want := range wantTypes {
			f, ok := families[name]
			if !ok && s.scrapes > 1 { // request series appear with the first request
				t.Errorf("scrape %d has no %s", s.scrapes, name)
				delete(wantTypes, name)
				continue
			}
			if ok && f.GetType() != want {
				t.Errorf("%s is a %s, want a %s", name, f.GetType(), want)
				delete(wantTypes, name)
			}
		}
		gauge := func(name string) int64 {
			if f := families[name]; f != nil && len(f.GetMetric()) == 1 {
				if g := f.GetMetric()[0].GetGauge(); g != nil {
					return int64(g.GetValue())
				}
				return int64(f.GetMetric()[0].GetCounter().GetValue())
			}
			return 0
		}
		s.maxWaiting = max(s.maxWaiting, gauge("webhook_inflight_waiting_requests"))
		s.maxInUse = max(s.maxInUse, gauge("webhook_inflight_bytes"))
		s.budget = gauge("webhook_inflight_budget_bytes")
		s.waited = gauge("webhook_inflight_waited_total")
		s.rejected = 0
		if f := families["webhook_overload_refusals_total"]; f != nil {
			for _, m := range f.GetMetric() {
				s.rejected += int64(m.GetCounter().GetValue())
			}
		}
	}
}

// peakRSS is the process's peak resident set size (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}
