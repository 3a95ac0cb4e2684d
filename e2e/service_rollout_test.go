package e2e

// The webhook's own rollout through its Service (docs/deploy.md, "What a
// rollout guarantees"): the Deployment's strategy replacing replicas under
// steady writes, against kubernetes/kubernetes#127335, the apiserver
// sending reviews over kept-alive connections to a replica that has left
// the endpoints and is terminating.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var rolloutShutdownDelay = flag.String("rollout-shutdown-delay", "",
	"TestServiceRollout runs the replicas with this -shutdown-delay instead of the Deployment's; 0 shows what the delay prevents: the test then fails, counting the writes lost")

// writeResults is what a run of writes did.
type writeResults struct {
	ok     []string // the bases (testScope.name) of the writes that succeeded
	failed []failedCreate
}

// steadyWrites sends the admitted requests through every deployed webhook
// (sendThroughAll), perSecond of them a second, each begun on time
// whether or not those before have finished, as a cluster's clients write,
// until the function it returns is called or limit have begun; that
// function waits for those begun and returns what they did.
func steadyWrites(s *testScope, perSecond, limit int) (stop func() writeResults) {
	quit := make(chan struct{})
	done := make(chan writeResults, 1)
	go func() {
		var mu sync.Mutex
		var r writeResults
		var wg sync.WaitGroup
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
	writing:
		for i := 1; i <= limit; i++ {
			select {
			case <-quit:
				break writing
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				base := fmt.Sprintf("write-%d", i)
				err := s.sendThroughAll(context.Background(), base)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					r.failed = append(r.failed, failedCreate{s.name(base), time.Now(), err})
				} else {
					r.ok = append(r.ok, base)
				}
			}()
		}
		wg.Wait()
		done <- r
	}()
	return func() writeResults {
		close(quit)
		return <-done
	}
}

// TestServiceRollout: three successive rollouts of the webhook, as the
// Deployment's strategy does them (maxSurge 1, maxUnavailable 0), while
// writes go through both webhooks at a steady pace; not one write fails.
// For each replica in turn a new one starts, with the Deployment's own
// arguments, and joins the endpoints once /ping answers; the old one gets
// SIGTERM and leaves the endpoints at that moment, as kubelet and the
// EndpointSlice controller do. kube-proxy learns of each change 2 s
// later, and sends new connections to the old replica until then, while
// the apiserver's kept-alive connections to it stay open. The writes go on
// until every old replica has exited, and the Deployment's shutdown delay
// and the propagation have passed since the last SIGTERM. With
// -rollout-shutdown-delay=0 the replicas stop serving at SIGTERM and
// writes fail: the test fails.
func TestServiceRollout(t *testing.T) {
	const (
		rollouts = 3
		// propagation is how long an endpoint change takes to reach
		// kube-proxy: a second or two in a small cluster, more in a
		// large one, which the Deployment's -shutdown-delay=10s covers.
		propagation     = 2 * time.Second
		writesPerSecond = 30
		maxWrites       = 60 * writesPerSecond // bounds the loop at a minute
	)
	start := time.Now()
	ic := deployInCluster(t, propagation)
	var flags []string
	shutdownDelay := ic.shutdownDelay // the replicas'
	if *rolloutShutdownDelay != "" {
		flags = append(flags, "-shutdown-delay="+*rolloutShutdownDelay)
		var err error
		if shutdownDelay, err = time.ParseDuration(*rolloutShutdownDelay); err != nil {
			t.Fatalf("-rollout-shutdown-delay: %v", err)
		}
	}
	serving := make([]*replica, ic.replicas)
	for i := range serving {
		serving[i] = ic.startReplica(t, flags...)
	}
	ic.proxy.setNow(endpoints(serving)...)
	scope := newScope(t, "service-rollout")
	registerRendered(t, ic.configurations, scope, ic.saw)

	mark := apiserver.logMark()
	stopWrites := steadyWrites(scope, writesPerSecond, maxWrites)
	time.Sleep(time.Second) // writes under way before the first rollout
	// replaced are the old replicas, each with the connections kube-proxy
	// had opened to it when it got SIGTERM.
	type replacement struct {
		*replica
		sigterm      time.Time
		openedBefore int
		// idleAtClose counts its connections still open just before its
		// delay ended: those the apiserver had not used since SIGTERM,
		// which the server then closes unused.
		idleAtClose atomic.Int64
	}
	var replaced []*replacement
	for range rollouts {
		for i, old := range serving {
			fresh := ic.startReplica(t, flags...) // ready: its /ping answered
			serving[i] = fresh
			ic.proxy.set(append(endpoints(serving), old.addr)...)
			opened, _ := ic.proxy.counts()
			r := &replacement{replica: old, sigterm: time.Now(), openedBefore: opened[old.addr]}
			replaced = append(replaced, r)
			old.signal(syscall.SIGTERM)
			if shutdownDelay > idleSampleLead {
				time.AfterFunc(shutdownDelay-idleSampleLead, func() { r.idleAtClose.Store(int64(ic.proxy.openTo(old.addr))) })
			}
			ic.proxy.set(endpoints(serving)...)
		}
	}
	// Each old replica drains for its -shutdown-delay, then finishes what
	// it serves, within the grace period kubelet gives it.
	for _, old := range replaced {
		select {
		case <-old.done:
			if old.err != nil {
				t.Errorf("replica %s exited with %v, want status 0", old.addr, old.err)
			}
		case <-time.After(time.Until(old.sigterm.Add(ic.gracePeriod))):
			t.Errorf("replica %s still runs %s after SIGTERM, the Deployment's terminationGracePeriodSeconds: kubelet would kill it", old.addr, ic.gracePeriod)
		}
	}
	// The writes go on after the last exit, on what the apiserver kept,
	// until the Deployment's own shutdown delay and the propagation have
	// passed since the last SIGTERM, whatever the replicas' delay, so that
	// -rollout-shutdown-delay=0 counts over as long a run.
	time.Sleep(time.Until(replaced[len(replaced)-1].sigterm.Add(ic.shutdownDelay + propagation)))
	results := stopWrites()
	elapsed := time.Since(start)

	for i, f := range results.failed {
		if i == 20 {
			t.Errorf("… and %d more", len(results.failed)-i)
			break
		}
		t.Errorf("write of %s failed %s after the first SIGTERM: %v", f.name, f.at.Sub(replaced[0].sigterm).Round(time.Millisecond), f.err)
	}
	if len(results.ok) < writesPerSecond*5 {
		t.Errorf("%d writes succeeded, want the writes to run across the rollouts", len(results.ok))
	}

	// Every write that succeeded was reviewed by each deployed webhook,
	// which a replica logs just after its answer; and the old replicas
	// answered reviews while they drained.
	var missing []string
	var drained map[string]int
	for deadline := time.Now().Add(logTimeout); ; time.Sleep(50 * time.Millisecond) {
		var reviewed map[string]bool
		reviewed, drained = reviewsLogged(ic.runs)
		missing = nil
		for _, base := range results.ok {
			for _, route := range deployedRoutes(t) {
				if !reviewed[route+" "+scope.name(base)] {
					missing = append(missing, route+" "+scope.name(base))
				}
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, m := range missing {
		t.Errorf("no replica logged the review %s, whose write succeeded", m)
	}
	opened, reset := ic.proxy.counts()
	var after []string
	drainedReviews, openedAfter, idleAtClose := 0, 0, 0
	for _, old := range replaced {
		n := opened[old.addr] - old.openedBefore
		openedAfter += n
		drainedReviews += drained[old.addr]
		idleAtClose += int(old.idleAtClose.Load())
		after = append(after, fmt.Sprintf("%s: %d reviews, %d new connections, %d open as its delay ended", old.addr, drained[old.addr], n, old.idleAtClose.Load()))
	}
	if drainedReviews == 0 {
		t.Error("no old replica answered a review after its SIGTERM: the test did not cover the drain")
	}
	noFailedCalls(t, mark)

	var counts []string
	for e, n := range opened {
		counts = append(counts, fmt.Sprintf("%s %d", e, n))
	}
	sort.Strings(counts)
	delay := "the Deployment's -shutdown-delay"
	if *rolloutShutdownDelay != "" {
		delay = "-shutdown-delay=" + *rolloutShutdownDelay
	}
	t.Logf("%d rollouts of %d replicas with %s, endpoint changes reaching kube-proxy after %s: %d writes succeeded, %d failed, in %s",
		rollouts, ic.replicas, delay, propagation, len(results.ok), len(results.failed), elapsed.Round(100*time.Millisecond))
	t.Logf("after SIGTERM the old replicas answered %d reviews, on %d connections kube-proxy opened to them and on kept-alive ones:\n  %s",
		drainedReviews, openedAfter, strings.Join(after, "\n  "))
	t.Logf("kube-proxy's connections, by endpoint: %s; reset: %d", strings.Join(counts, ", "), reset)
	if shutdownDelay > idleSampleLead {
		t.Logf("%d connections were open to old replicas %s before their delay ended, for the server to close unused", idleAtClose, idleSampleLead)
	}
}

// idleSampleLead is how long before an old replica's delay ends its open
// connections are counted: those the server will close unused, unless the
// apiserver sends a review on one in that time.
const idleSampleLead = 100 * time.Millisecond

// reviewsLogged reads the replicas' logs (JSON, as the Deployment has
// them): the reviews logged, by route and name ("/mutate NAME"), and how
// many each replica answered after it began to shut down.
func reviewsLogged(replicas []*replica) (reviewed map[string]bool, drained map[string]int) {
	reviewed, drained = map[string]bool{}, map[string]int{}
	for _, r := range replicas {
		draining := false
		for line := range strings.Lines(r.log.String()) {
			var entry struct{ Msg, Path, Name string }
			if json.Unmarshal([]byte(line), &entry) != nil {
				continue
			}
			switch {
			case strings.HasPrefix(entry.Msg, "shutting down"):
				draining = true
			case entry.Msg == "review":
				name := entry.Name // ns/NAME, or NAME when cluster-scoped
				if _, n, ok := strings.Cut(name, "/"); ok {
					name = n
				}
				reviewed[entry.Path+" "+name] = true
				if draining {
					drained[r.addr]++
				}
			}
		}
	}
	return reviewed, drained
}
