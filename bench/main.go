// Command bench measures the webhook against the physical limit of a
// net/http webhook on this machine: it builds both, gives them the same
// ECDSA P-256 certificate, drives each with wrk over HTTP/1.1 keep-alive
// TLS (as the apiserver calls) round by round, alternating the two, and
// reports medians as a table and a chart.
//
//	cd bench && go run .               # the full run, written to bench/results/
//	cd bench && go run . -slow-clients # hostile clients beside a steady one
//	cd bench && go run . -overload     # on one core, offered twice its peak
//	cd bench && go run . -smoke        # a minute: that it works, not how fast
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// server is one of the two servers under load.
type server struct {
	name string
	cmd  *exec.Cmd
	addr string
}

// result is one wrk run against one server.
type result struct {
	requests              int
	seconds               float64
	p50, p99              time.Duration
	errors                int // requests that got no answer
	non2xx                int // answers other than 2xx or 3xx
	cpuSeconds, peakRSSMB float64
}

func (r result) rps() float64            { return float64(r.requests) / r.seconds }
func (r result) cpuPer1000() float64     { return r.cpuSeconds / float64(r.requests) * 1000 }
func median(xs []float64) float64        { s := slices.Clone(xs); sort.Float64s(s); return s[len(s)/2] }
func ms(d time.Duration) float64         { return float64(d) / float64(time.Millisecond) }
func durMS(f float64) time.Duration      { return time.Duration(f * float64(time.Millisecond)) }
func (s *server) pid() int               { return s.cmd.Process.Pid }
func (s *server) url(path string) string { return "https://" + s.addr + path }

// scenario is one load shape.
type scenario struct {
	body        string // a file name from the root module's benchmark bodies
	connections int
	handshake   bool          // a new TLS connection per request
	duration    time.Duration // of each run, when not the -duration flag's
	rounds      int           // when not the -rounds flag's
}

func (s scenario) String() string {
	mode := "keep-alive"
	if s.handshake {
		mode = "new TLS handshake per request"
	}
	if s.duration != 0 {
		mode += fmt.Sprintf(", %s", s.duration)
	}
	return fmt.Sprintf("%s, %d connections, %s", s.body, s.connections, mode)
}

func run() error {
	if len(os.Args) > 1 && os.Args[1] == "hostile-clients" {
		return hostileClients(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == "overload-client" {
		return overloadLoad(os.Args[2:])
	}
	smoke := flag.Bool("smoke", false, "a few seconds in all: check that everything works")
	out := flag.String("out", "results", "`directory` for results.md and latency.png")
	rounds := flag.Int("rounds", 5, "rounds per scenario; each runs both servers, alternating which goes first")
	duration := flag.Duration("duration", 3*time.Second, "length of one wrk run, in whole seconds (wrk's unit)")
	only := flag.String("only", "", "run only the scenarios (or, with -slow-clients, the loads) whose name contains this `text`, such as update-1m")
	slowClients := flag.Bool("slow-clients", false, "run only the slow-clients scenario (about 8 minutes): hostile clients of each kind beside a steady one, written to results/slow-clients.md")
	slowFor := flag.Duration("slow-clients-for", 60*time.Second, "how long each load of the slow-clients scenario runs")
	oneAddress := flag.Bool("one-address", false, "with -slow-clients, the steady client and the prober connect from the hostile clients' address, as behind a proxy that gives every client one; written to results/slow-clients-one-address.md")
	steadyDelay := flag.Duration("steady-delay", 0, "with -slow-clients, each of the steady client's writes arrives this `long` after it is made, as from an apiserver far away or busy; written to results/slow-clients-far.md")
	http2Flood := flag.Bool("http2", false, "with -slow-clients, run the webhook with -http2 against a flood of HTTP/2 streams; written to results/slow-clients-http2.md")
	oneClient := flag.Bool("one-client", false, "run only the one-client rows (about a minute): one client sending 2,000 reviews at once, as the apiserver's burst, written to results/one-client.md")
	overload := flag.Bool("overload", false, "run only the overload rows (about 4 minutes): the webhook on one core, its peak, then twice the peak offered, and 240 connections of 100 KB reviews; written to results/overload.md")
	overloadFor := flag.Duration("overload-for", 15*time.Second, "how long each phase of an overload row runs")
	busyNeighbour := flag.Int("busy-neighbour", 0, "with -slow-clients, processes spinning this many `cores` beside the webhook through each load, as a node's other Pods do; written to results/slow-clients-busy-N.md")
	flag.Parse()
	if *smoke {
		*rounds, *duration = 1, time.Second
		*out = filepath.Join(os.TempDir(), "webhook-bench-smoke")
	}
	wrk, err := exec.LookPath("wrk")
	if err != nil && !*slowClients && !*overload && !*oneClient {
		return errors.New("wrk is not installed: apt-get install wrk (make bench does)")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "webhook-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}

	// The two servers, built as the Dockerfile builds the webhook.
	webhookBin, limitBin := filepath.Join(work, "webhook"), filepath.Join(work, "limit")
	if err := command(root, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", webhookBin, "."); err != nil {
		return err
	}
	if err := command(".", "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", limitBin, "./limit"); err != nil {
		return err
	}
	binInfo, err := os.Stat(webhookBin)
	if err != nil {
		return err
	}
	certs := filepath.Join(work, "certs")
	if err := command(root, webhookBin, "certs", "-dir", certs, "-hosts", "127.0.0.1"); err != nil {
		return err
	}
	bodies := filepath.Join(work, "bodies")
	if err := os.Mkdir(bodies, 0o755); err != nil {
		return err
	}
	if err := command(root, "go", "test", "-count=1", "-run", "^TestWriteBenchBodies$", ".", "-args", "-write-bench-bodies", bodies); err != nil {
		return err
	}
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

	starts := 7
	if *smoke {
		starts = 1
	}
	startup, err := startupTime(webhookBin, certs, client, starts)
	if err != nil {
		return err
	}
	certArgs := []string{"-tls-cert-file", filepath.Join(certs, "tls.crt"), "-tls-private-key-file", filepath.Join(certs, "tls.key")}
	if *oneClient {
		results, err := runOneClient(webhookBin, certArgs, filepath.Join(certs, "ca.crt"), filepath.Join(bodies, "deployment-2k.json"),
			[]oneClientOptions{{reviews: 2000, rounds: 3}, {reviews: 2000, maxConns: 400, rounds: 3}})
		if err != nil {
			return err
		}
		report := renderOneClient(results)
		fmt.Print(report)
		return os.WriteFile(filepath.Join(*out, "one-client.md"), []byte(report), 0o644)
	}
	if *overload {
		var results []overloadResult
		// The 1 MB review offered twice the peak with the apiserver's
		// shortest timeout but one: at twice the peak, the reviews in
		// flight stay under the connection cap. Then issue 35's own load:
		// as many connections of the 100 KB review as one client may hold
		// (addressPlaces), one review after another, with the shortest
		// timeout.
		for _, o := range []overloadOptions{
			{body: "update-1m", timeout: 2 * time.Second},
			{body: "pod-100k", timeout: time.Second, closed: addressPlaces},
		} {
			if *only != "" && !strings.Contains(o.body, *only) {
				continue
			}
			o.caFile, o.file, o.d, o.rounds, o.conns, o.peakConc = filepath.Join(certs, "ca.crt"), filepath.Join(bodies, o.body+".json"), *overloadFor, 3, addressPlaces, 32
			r, err := runOverload(webhookBin, certArgs, o)
			if err != nil {
				return fmt.Errorf("overload, %s: %w", o.body, err)
			}
			results = append(results, r)
		}
		report := renderOverload(results)
		fmt.Print(report)
		return os.WriteFile(filepath.Join(*out, "overload.md"), []byte(report), 0o644)
	}
	if *slowClients || *smoke {
		d := *slowFor
		if *smoke {
			d = 2 * time.Second
		}
		steadyFrom, probeFrom := steadyAddr, probeAddr
		if *oneAddress {
			steadyFrom, probeFrom = hostileAddr, hostileAddr
		}
		opts := slowClientsOptions{caFile: filepath.Join(certs, "ca.crt"), reviewFile: filepath.Join(bodies, "deployment-2k.json"), d: d, only: *only, steadyFrom: steadyFrom, probeFrom: probeFrom, busyNeighbour: *busyNeighbour, steadyDelay: *steadyDelay, http2: *http2Flood}
		results, costs, err := runSlowClients(webhookBin, certArgs, certs, bodies, opts)
		if err != nil {
			return err
		}
		for _, r := range results {
			if r.steadyOK == 0 {
				return fmt.Errorf("slow clients, %s: the steady client got no answer: %v", r.load, r.steadyFailures)
			}
		}
		if *slowClients {
			report := renderSlowClients(results, costs, opts)
			fmt.Print(report)
			name := "slow-clients"
			if *oneAddress {
				name += "-one-address"
			}
			if *steadyDelay > 0 {
				name += "-far"
			}
			if *http2Flood {
				name += "-http2"
			}
			if *busyNeighbour > 0 {
				name += fmt.Sprintf("-busy-%d", *busyNeighbour)
			}
			name += ".md"
			return os.WriteFile(filepath.Join(*out, name), []byte(report), 0o644)
		}
	}
	webhook, err := start("webhook", webhookBin, certArgs, client, "-log-format", "json")
	if err != nil {
		return err
	}
	defer stop(webhook)
	limit, err := start("limit", limitBin, certArgs, client)
	if err != nil {
		return err
	}
	defer stop(limit)
	// The webhook logs a line per review; that is part of its cost, as in
	// production, but the lines themselves go nowhere.
	servers := []*server{limit, webhook}

	var scenarios []scenario
	concurrencies := []int{1, 8, 32, 128}
	if *smoke {
		concurrencies = []int{1, 8}
	}
	for _, body := range []string{"deployment-2k", "pod-100k", "update-1m"} {
		for _, c := range concurrencies {
			if body == "update-1m" && c == 128 {
				continue // a row of its own below: 3 s is less than its latency
			}
			scenarios = append(scenarios, scenario{body: body, connections: c})
		}
		// As many as one client may hold (addressPlaces), and 192: every
		// review waits its turn and is answered, none refused.
		if body == "pod-100k" && !*smoke {
			for _, c := range []int{192, addressPlaces} {
				scenarios = append(scenarios, scenario{body: body, connections: c})
			}
		}
		// Right after the small bodies: memory the Go runtime keeps after
		// the large ones would otherwise show as this run's peak RSS.
		if body == "deployment-2k" {
			scenarios = append(scenarios, scenario{body: body, connections: 8, handshake: true})
		}
	}
	// The memory budget under sustained pressure: many large reviews at
	// once for 20 s, with the webhook's default -max-inflight-bytes and no
	// GOMEMLIMIT. Peak RSS is the figure to read. The last is as many as
	// one client may hold (addressPlaces): every review waits its turn and
	// is answered, none refused. Then 192 connections of 2 MB reviews,
	// whose line is longest: with ?timeout=10s, none is refused either.
	if !*smoke {
		for _, c := range []int{64, 128, 192, addressPlaces} {
			scenarios = append(scenarios, scenario{body: "update-1m", connections: c, duration: 20 * time.Second, rounds: 1})
		}
		scenarios = append(scenarios, scenario{body: "update-2m", connections: 192, duration: 20 * time.Second, rounds: 1})
	}

	if *only != "" {
		scenarios = slices.DeleteFunc(scenarios, func(sc scenario) bool { return !strings.Contains(sc.String(), *only) })
		if len(scenarios) == 0 {
			return fmt.Errorf("-only %q matches no scenario", *only)
		}
	}

	results := map[string]map[scenario][]result{"webhook": {}, "limit": {}}
	for _, sc := range scenarios {
		scRounds, scDuration := *rounds, *duration
		if sc.rounds != 0 {
			scRounds = sc.rounds
		}
		if sc.duration != 0 {
			scDuration = sc.duration
		}
		for round := 0; round < scRounds; round++ {
			order := servers
			if round%2 == 1 { // alternate who goes first: the machine is shared and noisy
				order = []*server{servers[1], servers[0]}
			}
			for _, s := range order {
				r, err := load(wrk, s, sc, filepath.Join(bodies, sc.body+".json"), scDuration)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", s.name, sc, err)
				}
				if r.errors > 0 {
					return fmt.Errorf("%s, %s: %d requests got no answer", s.name, sc, r.errors)
				}
				results[s.name][sc] = append(results[s.name][sc], r)
			}
		}
		fmt.Fprintf(os.Stderr, "bench: %s done\n", sc)
	}

	report := renderReport(scenarios, results, binInfo.Size(), startup, starts, *rounds, *duration)
	fmt.Print(report)
	if err := os.WriteFile(filepath.Join(*out, "results.md"), []byte(report), 0o644); err != nil {
		return err
	}
	return writeChart(filepath.Join(*out, "latency.png"), scenarios, results)
}

// command runs name with args in dir, failing with its output.
func command(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// start runs a server and waits until /ping (or any answer) comes back.
func start(name, bin string, certArgs []string, client *http.Client, extra ...string) (*server, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append(append([]string{"-listen", addr}, certArgs...), extra...)...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{name: name, cmd: cmd, addr: addr}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if resp, err := client.Get(s.url("/ping")); err == nil {
			resp.Body.Close()
			return s, nil
		}
	}
	stop(s)
	return nil, fmt.Errorf("%s did not start", name)
}

func stop(s *server) {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(35 * time.Second):
		_ = s.cmd.Process.Kill()
	}
}

// startupTime is the median time from exec to the first answered /ping, the
// time a new replica takes to be ready.
func startupTime(bin, certs string, client *http.Client, n int) (time.Duration, error) {
	var times []float64
	for i := 0; i < n; i++ {
		addr, err := freeAddr()
		if err != nil {
			return 0, err
		}
		begin := time.Now()
		cmd := exec.Command(bin, "-listen", addr, "-tls-cert-file", filepath.Join(certs, "tls.crt"), "-tls-private-key-file", filepath.Join(certs, "tls.key"))
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		for {
			if resp, err := client.Get("https://" + addr + "/ping"); err == nil && resp.StatusCode == 200 {
				resp.Body.Close()
				break
			}
			if time.Since(begin) > 10*time.Second {
				_ = cmd.Process.Kill()
				return 0, errors.New("the webhook did not answer /ping within 10s of starting")
			}
			time.Sleep(time.Millisecond)
		}
		times = append(times, ms(time.Since(begin)))
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	return durMS(median(times)), nil
}

var resultLine = regexp.MustCompile(`RESULT requests=(\d+) duration_us=(\d+) p50_us=(\d+) p99_us=(\d+) errors=(\d+) non2xx=(\d+)`)

// waitIdle waits until s holds at most one connection, the probe's, or
// for 15 s: the last run's connections, closed by wrk, may still hold
// their places (reviews wrk gave up on are still being answered, and the
// server has yet to see the others close), which the next run's 240 would
// find taken at its address's share of the webhook's places.
func waitIdle(s *server) {
	_, port, _ := net.SplitHostPort(s.addr)
	p, _ := strconv.Atoi(port)
	local := fmt.Sprintf(":%04X ", p)
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			return
		}
		open := 0
		for line := range strings.Lines(string(b)) {
			// sl local_address rem_address st: the server's side of a
			// connection, established (01) or closed by the client only
			// (08, CLOSE_WAIT): the server still holds its place.
			if f := strings.Fields(line); len(f) > 3 && strings.HasSuffix(f[1]+" ", local) && (f[3] == "01" || f[3] == "08") {
				open++
			}
		}
		if open <= 1 {
			return
		}
	}
}

// load runs wrk against s and reads the server's CPU time and peak RSS
// around it from /proc.
func load(wrk string, s *server, sc scenario, body string, d time.Duration) (result, error) {
	waitIdle(s)
	// Writing 5 to clear_refs resets the peak RSS the kernel keeps, so each
	// run's peak is its own.
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", s.pid()), []byte("5"), 0)
	cpuBefore, err := cpuSeconds(s.pid())
	if err != nil {
		return result{}, err
	}
	// One wrk thread: the generator shares this 2-core machine with the
	// server and should take as little of it as it can.
	cmd := exec.CommandContext(context.Background(), wrk, "-t1", "-c", strconv.Itoa(sc.connections),
		"-d", fmt.Sprintf("%ds", max(int(d.Seconds()), 1)), "--timeout", "10s", "-s", "wrk.lua", s.url("/mutate?timeout=10s"))
	cmd.Env = append(os.Environ(), "BODY="+body)
	if sc.handshake {
		cmd.Env = append(cmd.Env, "CLOSE=1")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return result{}, fmt.Errorf("wrk: %w\n%s", err, out)
	}
	cpuAfter, err := cpuSeconds(s.pid())
	if err != nil {
		return result{}, err
	}
	m := resultLine.FindStringSubmatch(string(out))
	if m == nil {
		return result{}, fmt.Errorf("no RESULT line in wrk's output:\n%s", out)
	}
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	r := result{
		requests: n(1), seconds: float64(n(2)) / 1e6,
		p50: time.Duration(n(3)) * time.Microsecond, p99: time.Duration(n(4)) * time.Microsecond,
		errors: n(5), non2xx: n(6), cpuSeconds: cpuAfter - cpuBefore,
	}
	if r.requests == 0 {
		return result{}, fmt.Errorf("wrk completed no request:\n%s", out)
	}
	r.peakRSSMB, err = peakRSS(s.pid())
	return r, err
}

// cpuSeconds is the process's user plus system CPU time.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	const clockTicks = 100 // USER_HZ on Linux
	return (utime + stime) / clockTicks, nil
}

// peakRSS is VmHWM, the peak resident set size, in MiB.
func peakRSS(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("no VmHWM in /proc status")
}

// summary is the median of each figure over the rounds.
type summary struct {
	rps, p50, p99, cpu, rss float64
	non2xx                  int // over every round
}

func summarize(rs []result) summary {
	var rps, p50, p99, cpu, rss []float64
	non2xx := 0
	for _, r := range rs {
		non2xx += r.non2xx
		rps = append(rps, r.rps())
		p50 = append(p50, ms(r.p50))
		p99 = append(p99, ms(r.p99))
		cpu = append(cpu, r.cpuPer1000())
		rss = append(rss, r.peakRSSMB)
	}
	return summary{median(rps), median(p50), median(p99), median(cpu), slices.Max(rss), non2xx}
}

func renderReport(scenarios []scenario, results map[string]map[scenario][]result, binSize int64, startup time.Duration, starts, rounds int, d time.Duration) string {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "Measured %s on %s (%d CPUs, %s/%s, %s), load from wrk 1 thread on the same machine, %d rounds of %s per server, medians; ratio = webhook / limit.\n\n",
		time.Now().UTC().Format("2006-01-02"), host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), rounds, d)
	fmt.Fprintf(&b, "| load | webhook req/s | ratio | p50 ms | ratio | p99 ms | ratio | CPU s / 1000 reviews | ratio | peak RSS MiB | ratio | non-2xx |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, sc := range scenarios {
		w, l := summarize(results["webhook"][sc]), summarize(results["limit"][sc])
		fmt.Fprintf(&b, "| %s | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %.3f | %.2f | %.1f | %.2f | %d |\n", sc,
			w.rps, w.rps/l.rps, w.p50, w.p50/l.p50, w.p99, w.p99/l.p99, w.cpu, w.cpu/l.cpu, w.rss, w.rss/l.rss, w.non2xx)
	}
	fmt.Fprintf(&b, "\nThe limit itself:\n\n| load | limit req/s | p50 ms | p99 ms | CPU s / 1000 | peak RSS MiB |\n|---|---|---|---|---|---|\n")
	for _, sc := range scenarios {
		l := summarize(results["limit"][sc])
		fmt.Fprintf(&b, "| %s | %.0f | %.2f | %.2f | %.3f | %.1f |\n", sc, l.rps, l.p50, l.p99, l.cpu, l.rss)
	}
	fmt.Fprintf(&b, "\nStripped static binary: %.1f MB. Ready (exec to first answered /ping), median of %d starts: %.1f ms.\n",
		float64(binSize)/1e6, starts, ms(startup))
	return b.String()
}
