package e2e

// Scale out behind the Service: how the apiserver's reviews spread over
// the replicas, and what each costs (docs/deploy.md, "Sizing").

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestServiceScaleOut sends writes through the Service from many clients
// at once, behind two replicas, then three, and logs what each replica
// served and cost: reviews, CPU and memory, and the connections the
// apiserver opened to it through kube-proxy. The apiserver opens a
// connection for each call in flight and keeps it, and kube-proxy places
// each new connection, so the share of a replica is the share of the
// connections it was given:
//   - two replicas, started together, each serve a share;
//   - a third added to the endpoints, as `kubectl scale` does, is sent only
//     the connections the apiserver opens from then on: none while the
//     ones it keeps suffice (logged, not asserted);
//   - three after a rollout each serve a share: each old replica closed
//     its connections after their next answer, and the apiserver opened
//     new ones, spread over the new three.
func TestServiceScaleOut(t *testing.T) {
	const (
		// writers are the clients writing at once: the apiserver's calls
		// in flight, and so its connections, follow them.
		writers     = 24
		phaseTime   = 4 * time.Second
		phaseWrites = 4000 // bounds a phase
	)
	ic := deployInCluster(t, 0)
	two := []*replica{ic.startReplica(t), ic.startReplica(t)}
	ic.proxy.setNow(endpoints(two)...)
	scope := newScope(t, "service-scale-out")
	registerRendered(t, ic.configurations, scope, ic.saw)
	mark := apiserver.logMark()

	measure := func(phase string, replicas []*replica) []replicaLoad {
		t.Helper()
		before := loadsOf(t, ic, replicas)
		start := time.Now()
		ok, failed := writeFor(scope, phase, writers, phaseTime, phaseWrites)
		took := time.Since(start)
		for _, f := range failed {
			t.Errorf("%s: write of %s failed: %v", phase, f.name, f.err)
		}
		loads := loadsOf(t, ic, replicas)
		var lines []string
		var reviews float64
		var cpu time.Duration
		for i := range loads {
			loads[i].reviews -= before[i].reviews
			loads[i].cpu -= before[i].cpu
			loads[i].connections -= before[i].connections
			reviews += loads[i].reviews
			cpu += loads[i].cpu
			lines = append(lines, loads[i].String())
		}
		t.Logf("%s: %d writers, %d writes in %s (%.0f/s), %.0f reviews, %.0f reviews per CPU second in all (load %s):\n  %s",
			phase, writers, ok, took.Round(time.Millisecond), float64(ok)/took.Seconds(), reviews, reviews/cpu.Seconds(), loadAverage(), strings.Join(lines, "\n  "))
		return loads
	}
	// everyShare fails the test unless each replica served at least a
	// quarter of an even share: shares follow connections, which kube-proxy
	// places at random, so an even split is not to be expected, but a
	// replica left out is not one of N.
	everyShare := func(phase string, loads []replicaLoad) {
		t.Helper()
		var reviews float64
		for _, l := range loads {
			reviews += l.reviews
		}
		for _, l := range loads {
			if l.reviews < reviews/float64(len(loads))/4 {
				t.Errorf("%s: replica %s served %.0f of %.0f reviews, want at least a quarter of an even share", phase, l.addr, l.reviews, reviews)
			}
		}
	}

	everyShare("two replicas", measure("two replicas", two))

	three := append(two, ic.startReplica(t))
	ic.proxy.set(endpoints(three)...)
	measure("a third added", three)

	var rolled []*replica
	for range three {
		rolled = append(rolled, ic.startReplica(t))
	}
	ic.proxy.set(endpoints(rolled)...)
	for _, old := range three {
		old.signal(syscall.SIGTERM)
	}
	loads := measure("three after a rollout (the old three draining)", append(rolled, three...))
	everyShare("three after a rollout", loads[:len(rolled)])
	noFailedCalls(t, mark)
}

// writeFor sends the admitted requests through every deployed webhook
// from writers clients at once, each one write after another, for d or
// until limit have begun, naming them after phase, and returns how many
// succeeded and those that failed.
func writeFor(s *testScope, phase string, writers int, d time.Duration, limit int) (ok int, failed []failedCreate) {
	var mu sync.Mutex
	var n atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	prefix := strings.Join(strings.Fields(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return ' '
	}, phase)), "-")
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				i := n.Add(1)
				if i > int64(limit) {
					return
				}
				base := fmt.Sprintf("%s-%d", prefix, i)
				err := s.sendThroughAll(context.Background(), base)
				mu.Lock()
				if err != nil {
					failed = append(failed, failedCreate{s.name(base), time.Now(), err})
				} else {
					ok++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ok, failed
}

// replicaLoad is what a replica has served and cost.
type replicaLoad struct {
	addr        string
	reviews     float64       // requests to its review routes (webhook_requests_total)
	cpu         time.Duration // user and system
	connections int           // kube-proxy opened to it
	peak        int64         // its peak resident memory (bytes)
}

func (l replicaLoad) String() string {
	perCPU := 0.0
	if l.cpu > 0 {
		perCPU = l.reviews / l.cpu.Seconds()
	}
	return fmt.Sprintf("%s: %.0f reviews on %d new connections, %s CPU (%.0f reviews per CPU second), peak RSS %.1f MiB",
		l.addr, l.reviews, l.connections, l.cpu.Round(time.Millisecond), perCPU, float64(l.peak)/(1<<20))
}

// loadsOf reads each replica's load so far.
func loadsOf(t *testing.T, ic *inCluster, replicas []*replica) []replicaLoad {
	t.Helper()
	opened, _ := ic.proxy.counts()
	var loads []replicaLoad
	for _, r := range replicas {
		l := replicaLoad{addr: r.addr, connections: opened[r.addr]}
		if !r.exited() {
			pid := r.cmd.Process.Pid
			l.cpu, l.peak = processCPU(t, pid), peakRSS(t, pid)
			l.reviews = requestsServed(t, r)
		}
		loads = append(loads, l)
	}
	return loads
}

// requestsServed sums the replica's webhook_requests_total.
func requestsServed(t *testing.T, r *replica) float64 {
	t.Helper()
	resp, err := http.Get("http://" + r.metricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("scraping %s: %v", r.metricsAddr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "webhook_requests_total{") {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", r.metricsAddr, line, err)
			}
			sum += v
		}
	}
	return sum
}

// processCPU is the CPU time, user and system, a process has used, from
// /proc.
func processCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command's closing parenthesis; utime and stime are
	// the 14th and 15th of the line, in clock ticks of 1/100 s on Linux.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+2:])
	f := strings.Fields(rest)
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// loadAverage is the machine's load over the last minute, for a figure's
// context.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}
