package e2e

// The shipped deployment, run by the node (node_test.go): the image `make
// image` builds, deployed by the README's two commands, `deploy/render.sh
// in-cluster out/` and `kubectl apply -f out/`, then rolled, renewed,
// killed and burst, the apiserver calling the Pods through their Service
// and kube-proxy as in any cluster.

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// nodeRolloutTimeout bounds a rollout of the webhook on the node, and
	// an old Pod's drain: its delay, its wait for the apiserver to let go
	// of its kept-alive connections (125 s at most), its reviews in flight.
	nodeRolloutTimeout = 3 * time.Minute
	// nodeWritesPerSecond is the steady writes' pace during a rollout.
	nodeWritesPerSecond = 30
)

// deployment is the webhook as the README deploys it on the node.
type deployment struct {
	n               *node
	out             string // render.sh's output directory
	namespace, name string
	env             []string // render.sh's environment
}

// deployAsTheREADMESays builds the image from repo with `make image` (or
// from a context of the test's own), renders with render.sh and env, and
// applies with `kubectl apply -f out/`, once, on whatever the cluster
// holds: no retry, no sorting.
func deployAsTheREADMESays(t *testing.T, n *node, image string, env ...string) *deployment {
	t.Helper()
	d := &deployment{n: n, out: filepath.Join(t.TempDir(), "out"), namespace: "webhook-system", name: "webhook", env: append([]string{"IMAGE=" + image}, env...)}
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "NAMESPACE="); ok {
			d.namespace = v
		}
		if v, ok := strings.CutPrefix(e, "NAME="); ok {
			d.name = v
		}
	}
	d.render(t)
	if out, err := n.kubectl("apply", "-f", d.out); err != nil {
		t.Fatalf("kubectl apply -f out/ on the node: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			d.dump(t)
		}
		// As a user undeploys it; the namespace goes with its Pods.
		if out, err := n.kubectl("delete", "-f", d.out, "--wait=true", "--timeout=2m"); err != nil {
			t.Logf("kubectl delete -f out/: %v\n%s", err, out)
		}
	})
	d.waitRolledOut(t)
	d.waitServed(t)
	return d
}

// waitServed waits until the apiserver reaches the webhook through its
// Service: kube-proxy learns of the Pods a moment after they are Ready,
// and until then a ClusterIP with no endpoint refuses connections. How
// long that took is logged (docs/deploy.md).
func (d *deployment) waitServed(t *testing.T) {
	t.Helper()
	scope := newScopeIn(t, d.n.apiServer, "served-"+d.name)
	start := time.Now()
	var err error
	for i := 0; time.Since(start) < time.Minute; i++ {
		err = nil
		for _, req := range scope.admittedThroughAll(fmt.Sprintf("served-%d", i)) {
			if err = req.send(context.Background(), true); err != nil {
				break
			}
		}
		if err == nil {
			t.Logf("the apiserver reached the webhook through its Service %s after kubectl rollout status", time.Since(start).Round(10*time.Millisecond))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the apiserver did not reach the webhook through its Service within a minute of kubectl rollout status: %v", err)
}

// render runs deploy/render.sh in-cluster into d.out, as a user runs it to
// deploy and to renew: the CA in out/certs is kept.
func (d *deployment) render(t *testing.T) {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot, "deploy", "render.sh"), "in-cluster", d.out)
	cmd.Env = append(append(os.Environ(), "WEBHOOK="+webhookBinary), d.env...)
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy/render.sh in-cluster: %v\n%s", err, output)
	}
}

// waitRolledOut waits, as a user would, with kubectl rollout status.
func (d *deployment) waitRolledOut(t *testing.T) {
	t.Helper()
	if out, err := d.n.kubectl("rollout", "status", "-n", d.namespace, "deployment/"+d.name, "--timeout="+nodeRolloutTimeout.String()); err != nil {
		t.Fatalf("kubectl rollout status: %v\n%s", err, out)
	}
}

// pods are the Deployment's Pods that are not being deleted, by name.
func (d *deployment) pods(t *testing.T) []corev1.Pod {
	t.Helper()
	list, err := d.n.client.CoreV1().Pods(d.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + d.name})
	if err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			pods = append(pods, p)
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods
}

// logOf is what the Pod's container logged, from kubelet's log files, every
// restart's in order: the webhook's JSON lines.
func (d *deployment) logOf(pod corev1.Pod) string {
	files, _ := filepath.Glob(filepath.Join(d.n.podLogs, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), "*", "*.log"))
	sort.Strings(files)
	var b strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		// CRI's format: TIME STREAM TAG MESSAGE.
		for line := range strings.Lines(string(data)) {
			if f := strings.SplitN(line, " ", 4); len(f) == 4 {
				b.WriteString(f[3])
			}
		}
	}
	return b.String()
}

// dump logs what a user would look at when a deployment fails: the Pods'
// states, their logs, and the namespace's events.
func (d *deployment) dump(t *testing.T) {
	t.Helper()
	out, _ := d.n.kubectl("get", "pods,deployments,replicasets,endpointslices", "-n", d.namespace, "-o", "wide")
	t.Logf("kubectl get -n %s:\n%s", d.namespace, out)
	out, _ = d.n.kubectl("get", "events", "-n", d.namespace, "--sort-by=.lastTimestamp")
	t.Logf("events in %s:\n%s", d.namespace, out)
	for _, p := range d.pods(t) {
		js, _ := json.MarshalIndent(p.Status.ContainerStatuses, "", "  ")
		t.Logf("pod %s: %s\n%s\nits log:\n%s", p.Name, p.Status.Phase, js, d.logOf(p))
	}
}

// containerPID is the webhook's process in the Pod: its container's first
// process, as containerd's runc shim recorded it.
func (d *deployment) containerPID(t *testing.T, pod corev1.Pod) int {
	t.Helper()
	inits := containerInits(d.n.dir)
	for _, s := range pod.Status.ContainerStatuses {
		if pid, ok := inits[strings.TrimPrefix(s.ContainerID, "containerd://")]; ok {
			return pid
		}
	}
	t.Fatalf("no process found for the container of %s (%+v)", pod.Name, pod.Status.ContainerStatuses)
	return 0
}

// restarts is each Pod's container restarts, and why the last ended.
func (d *deployment) restarts(t *testing.T) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, p := range d.pods(t) {
		for _, s := range p.Status.ContainerStatuses {
			if s.RestartCount > 0 {
				reason := "?"
				if term := s.LastTerminationState.Terminated; term != nil {
					reason = fmt.Sprintf("%s (exit %d)", term.Reason, term.ExitCode)
				}
				got[p.Name] = fmt.Sprintf("%d restarts, the last %s", s.RestartCount, reason)
			}
		}
	}
	return got
}

// writeResults is what a run of writes did.
type writeResults struct {
	ok     []string // the bases (testScope.name) of the writes that succeeded
	failed []failedCreate
}

// nodeWrites sends the policy's admitted requests through every deployed
// webhook as server-side dry runs, perSecond of them a second, each begun
// on time, until the function it returns is called or limit have begun:
// the apiserver reviews a dry run as it does a write, and the node's
// controllers have nothing to do with what is not stored.
func nodeWrites(s *testScope, perSecond, limit int) (stop func() writeResults) {
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
				var err error
				for _, req := range s.admittedThroughAll(base) {
					if err = req.send(context.Background(), true); err != nil {
						break
					}
				}
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

// failureCauses sums failures by their cause: the error's last clause,
// what the apiserver says went wrong calling the webhook.
func failureCauses(failed []failedCreate) string {
	causes := map[string]int{}
	for _, f := range failed {
		msg := f.err.Error()
		if i := strings.LastIndex(msg, ": "); i >= 0 {
			msg = msg[i+2:]
		}
		causes[msg]++
	}
	var parts []string
	for c, k := range causes {
		parts = append(parts, fmt.Sprintf("%d× %s", k, c))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// TestNodeDeploy deploys the webhook on the node exactly as the README
// says, on a fresh cluster, once, and proves there what a cluster asks of
// it: its Pods run as 65532 and become Ready; the apiserver calls them
// through the Service with the demonstration's verdicts; three `kubectl
// rollout restart`s under steady writes lose none (without the shutdown
// delay, writes are lost); a renewed Secret is served without a restart;
// a container killed hard costs what docs/deploy.md says under each
// failurePolicy; and the apiserver's bursts of 600 and 1,000 are served,
// under the Pods' own CPU and memory limits, with no OOM kill.
func TestNodeDeploy(t *testing.T) {
	n := theNode(t)
	image := "webhook:e2e"
	n.loadWebhookImage(t, repoRoot, image)
	d := deployAsTheREADMESays(t, n, image)

	t.Run("Pods", func(t *testing.T) {
		pods := d.pods(t)
		if len(pods) != 2 {
			t.Fatalf("got %d Pods, want the Deployment's 2", len(pods))
		}
		for _, p := range pods {
			uid := processIDs(t, d.containerPID(t, p))
			if uid != "65532 65532" {
				t.Errorf("%s's webhook runs as uid and gid %s, want 65532 65532", p.Name, uid)
			}
			if log := d.logOf(p); !strings.Contains(log, `"msg":"serving"`) || strings.Contains(log, "permission denied") {
				t.Errorf("%s logged no serving line, or a permission denied:\n%s", p.Name, log)
			}
		}
		if r := d.restarts(t); len(r) > 0 {
			t.Errorf("containers restarted: %v", r)
		}
	})

	t.Run("ThroughTheService", func(t *testing.T) {
		demonstrateEnforced(t, n.apiServer, "node-demonstration")
		for _, p := range d.pods(t) {
			if !strings.Contains(d.logOf(p), `"msg":"review"`) {
				t.Logf("%s reviewed nothing (kube-proxy chose the other)", p.Name)
			}
		}
	})

	t.Run("RolloutRestart", func(t *testing.T) {
		results := d.rolloutsUnderWrites(t, "node-rollout", 3)
		if len(results.failed) > 0 {
			t.Errorf("%d of %d writes failed during three rollout restarts: %s", len(results.failed), len(results.failed)+len(results.ok), failureCauses(results.failed))
			for _, f := range results.failed {
				t.Logf("%s %s: %v", f.at.Format("15:04:05.000"), f.name, f.err)
			}
		}
		t.Logf("three rollout restarts under %d writes a second: %d writes, %d failed", nodeWritesPerSecond, len(results.ok)+len(results.failed), len(results.failed))
	})

	t.Run("RolloutWithoutShutdownDelay", func(t *testing.T) {
		d.setArg(t, "-shutdown-delay=", "-shutdown-delay=0s")
		defer d.setArg(t, "-shutdown-delay=", "-shutdown-delay=10s")
		results := d.rolloutsUnderWrites(t, "node-nodelay", 2)
		if len(results.failed) == 0 {
			t.Errorf("with -shutdown-delay=0, no write of %d failed during two rollout restarts: the test cannot tell what the delay prevents", len(results.ok))
		}
		t.Logf("two rollout restarts with -shutdown-delay=0: %d writes, %d failed: %s", len(results.ok)+len(results.failed), len(results.failed), failureCauses(results.failed))
	})

	t.Run("RenewedSecret", func(t *testing.T) {
		before := d.pods(t)
		d.render(t)
		if out, err := n.kubectl("apply", "-f", filepath.Join(d.out, "03-secret.yaml")); err != nil {
			t.Fatalf("kubectl apply -f out/03-secret.yaml: %v\n%s", err, out)
		}
		cert, err := os.ReadFile(filepath.Join(d.out, "certs", "tls.crt"))
		if err != nil {
			t.Fatal(err)
		}
		notAfter := certificateNotAfter(t, cert)
		// kubelet swaps the volume's ..data link at its next sync of the
		// Pod (syncFrequency, 10 s here); the webhook re-reads its files
		// within seconds.
		applied := time.Now()
		deadline := applied.Add(2 * time.Minute)
		for _, p := range before {
			for !strings.Contains(d.logOf(p), notAfter) && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
			}
			if !strings.Contains(d.logOf(p), notAfter) {
				t.Errorf("%s did not load the renewed certificate (not_after %s) within 2 minutes:\n%s", p.Name, notAfter, d.logOf(p))
			}
		}
		t.Logf("both Pods served the renewed certificate %s after kubectl apply", time.Since(applied).Round(100*time.Millisecond))
		if r := d.restarts(t); len(r) > 0 {
			t.Errorf("containers restarted: %v", r)
		}
		demonstrateEnforced(t, n.apiServer, "node-renewed")
	})

	t.Run("ScaleOut", func(t *testing.T) {
		if out, err := n.kubectl("scale", "-n", d.namespace, "deployment/"+d.name, "--replicas=3"); err != nil {
			t.Fatalf("kubectl scale: %v\n%s", err, out)
		}
		defer func() {
			if out, err := n.kubectl("scale", "-n", d.namespace, "deployment/"+d.name, "--replicas=2"); err != nil {
				t.Fatalf("kubectl scale: %v\n%s", err, out)
			}
		}()
		d.waitRolledOut(t)
		// kube-proxy balances connections, and the apiserver keeps them:
		// the replica added may be given none while those it holds
		// suffice. A rollout restart spreads them, each old replica
		// closing its connections after their next answer.
		scope := newScopeIn(t, n.apiServer, "node-scale")
		shares := func(phase string) map[string]int {
			t.Helper()
			before := map[string]int{}
			for _, p := range d.pods(t) {
				before[p.Name] = strings.Count(d.logOf(p), `"msg":"review"`)
			}
			if failed, _ := burstOf(scope, 90); len(failed) > 0 {
				t.Errorf("%s: %d of 90 failed: %s", phase, len(failed), failureCauses(failed))
			}
			got := map[string]int{}
			var line []string
			for _, p := range d.pods(t) {
				got[p.Name] = strings.Count(d.logOf(p), `"msg":"review"`) - before[p.Name]
				line = append(line, fmt.Sprint(got[p.Name]))
			}
			t.Logf("%s, 90 requests at once through both webhooks: reviews per replica %s", phase, strings.Join(line, ", "))
			return got
		}
		shares("a third replica added")
		if out, err := n.kubectl("rollout", "restart", "-n", d.namespace, "deployment/"+d.name); err != nil {
			t.Fatalf("kubectl rollout restart: %v\n%s", err, out)
		}
		// kube-proxy learns of the last new Pod a moment after it is
		// Ready (waitServed logs how long: 30 to 480 ms here), and only
		// then sends it new connections: as long as the old Pods' delay,
		// which the test once waited out. The old Pods drain meanwhile
		// (d.pods leaves them out): until the apiserver lets go of its
		// connections to them, which takes up to 125 s, they answer
		// what it sends on those.
		d.waitRolledOut(t)
		time.Sleep(10 * time.Second)
		for name, n := range shares("three replicas after a rollout restart") {
			if n == 0 {
				t.Errorf("%s reviewed nothing of 90 requests behind the Service after a rollout restart", name)
			}
		}
	})

	t.Run("KilledHard", func(t *testing.T) {
		for _, policy := range []admissionregistrationv1.FailurePolicyType{admissionregistrationv1.Fail, admissionregistrationv1.Ignore} {
			t.Run(string(policy), func(t *testing.T) { d.killUnderWrites(t, policy) })
		}
		// The configurations as rendered.
		if out, err := n.kubectl("apply", "-f", filepath.Join(d.out, "08-webhooks.yaml")); err != nil {
			t.Fatalf("kubectl apply -f out/08-webhooks.yaml: %v\n%s", err, out)
		}
		time.Sleep(2 * time.Second) // the apiserver's configuration watch
	})

	// The apiserver's bursts, each write reviewed by every deployed
	// webhook, with the Pods under their own limits.
	t.Run("Burst", func(t *testing.T) {
		before := d.restarts(t)
		scope := newScopeIn(t, n.apiServer, "node-burst")
		for _, size := range []int{600, 1000} {
			cpu := d.cpuUse(t)
			failed, took := burstOf(scope, size)
			t.Logf("the burst of %d cost, in CPU seconds: %s", size, cpu())
			t.Logf("a burst of %d at once through the Service (load %s): %d failed %s; %s", size, loadAverage(), len(failed), failureCauses(failed), took)
			// The webhook never refuses the apiserver: no connection of
			// its is closed or reset. A call that outlives timeoutSeconds
			// is the machine's CPU, which the cluster's own apiserver
			// takes the most of (the line above): counted, not failed.
			var refused []failedCreate
			for _, f := range failed {
				if !strings.Contains(f.err.Error(), "context deadline exceeded") {
					refused = append(refused, f)
				}
			}
			if len(refused) > 0 {
				t.Errorf("%d of a burst of %d failed otherwise than by the apiserver's deadline: %s", len(refused), size, failureCauses(refused))
			}
		}
		if r := d.restarts(t); !maps.Equal(r, before) {
			t.Errorf("containers restarted under the bursts (an OOM kill is OOMKilled): %v, before %v", r, before)
		}
	})
}

// rolloutsUnderWrites runs rollouts `kubectl rollout restart`s, each
// waited for with rollout status, under steady writes in a scope of its
// own, and returns what the writes did. The writes go on until the last
// old Pod has exited, and a little more.
func (d *deployment) rolloutsUnderWrites(t *testing.T, name string, rollouts int) writeResults {
	t.Helper()
	scope := newScopeIn(t, d.n.apiServer, name)
	stopWatch := d.watchEndpoints(t)
	stop := nodeWrites(scope, nodeWritesPerSecond, int(10*time.Minute/time.Second)*nodeWritesPerSecond)
	defer func() {
		changes := stopWatch()
		if t.Failed() {
			t.Logf("the Service's endpoints, as they changed:\n%s", changes)
		}
	}()
	time.Sleep(2 * time.Second)
	for i := range rollouts {
		if out, err := d.n.kubectl("rollout", "restart", "-n", d.namespace, "deployment/"+d.name); err != nil {
			stop()
			t.Fatalf("kubectl rollout restart (%d): %v\n%s", i+1, err, out)
		}
		d.waitRolledOut(t)
	}
	// The last old Pods drain after the rollout is complete, for their
	// shutdown delay and until the apiserver has let go of their
	// kept-alive connections, and the Pods that replaced them serve.
	d.waitOldPodsGone(t, 2)
	time.Sleep(2 * time.Second)
	return stop()
}

// watchEndpoints records the Service's EndpointSlices as they change,
// until the function it returns is called, which returns them: what the
// failures of writes are read against.
func (d *deployment) watchEndpoints(t *testing.T) func() string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := d.n.client.DiscoveryV1().EndpointSlices(d.namespace).Watch(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + d.name})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			slice, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			var eps []string
			for _, e := range slice.Endpoints {
				c := e.Conditions
				eps = append(eps, fmt.Sprintf("%s ready=%v serving=%v terminating=%v", strings.Join(e.Addresses, ","), c.Ready != nil && *c.Ready, c.Serving != nil && *c.Serving, c.Terminating != nil && *c.Terminating))
			}
			fmt.Fprintf(&b, "%s %s %s\n", time.Now().Format("15:04:05.000"), ev.Type, strings.Join(eps, "; "))
		}
	}()
	return func() string {
		cancel()
		w.Stop()
		<-done
		return b.String()
	}
}

// waitOldPodsGone waits until only the Deployment's current Pods, of
// replicas, exist: each old one has drained, for its delay and until the
// apiserver let go of its kept-alive connections, and exited.
func (d *deployment) waitOldPodsGone(t *testing.T, replicas int) {
	t.Helper()
	deadline := time.Now().Add(nodeRolloutTimeout)
	for time.Now().Before(deadline) {
		list, err := d.n.client.CoreV1().Pods(d.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + d.name})
		if err == nil && len(list.Items) == replicas {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("old Pods of %s/%s still there after %s", d.namespace, d.name, nodeRolloutTimeout)
}

// setArg replaces the Deployment's argument that begins with prefix by
// arg, with kubectl patch, and waits for the rollout.
func (d *deployment) setArg(t *testing.T, prefix, arg string) {
	t.Helper()
	dep, err := d.n.client.AppsV1().Deployments(d.namespace).Get(context.Background(), d.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	args := dep.Spec.Template.Spec.Containers[0].Args
	i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, prefix) })
	if i < 0 {
		t.Fatalf("the Deployment has no argument %s…: %v", prefix, args)
	}
	patch := fmt.Sprintf(`[{"op": "replace", "path": "/spec/template/spec/containers/0/args/%d", "value": %q}]`, i, arg)
	if out, err := d.n.kubectl("patch", "-n", d.namespace, "deployment/"+d.name, "--type=json", "-p", patch); err != nil {
		t.Fatalf("kubectl patch: %v\n%s", err, out)
	}
	d.waitRolledOut(t)
}

// killUnderWrites kills one Pod's webhook process with SIGKILL under
// steady writes, with the webhook configurations' failurePolicy set to
// policy, and measures what the apiserver did with the writes until the
// container was back: under Fail, the writes that reached the dead Pod
// fail with the apiserver's "failed calling webhook"; under Ignore, none
// fails and the apiserver admits them unreviewed (it logs each).
func (d *deployment) killUnderWrites(t *testing.T, policy admissionregistrationv1.FailurePolicyType) {
	ctx := context.Background()
	for _, kind := range []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"} {
		out, err := d.n.kubectl("get", kind, "-o", "name")
		if err != nil {
			t.Fatalf("kubectl get %s: %v\n%s", kind, err, out)
		}
		for _, name := range strings.Fields(out) {
			patch := fmt.Sprintf(`[{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": %q}]`, policy)
			if out, err := d.n.kubectl("patch", name, "--type=json", "-p", patch); err != nil {
				t.Fatalf("kubectl patch %s: %v\n%s", name, err, out)
			}
		}
	}
	time.Sleep(2 * time.Second) // the apiserver's configuration watch
	scope := newScopeIn(t, d.n.apiServer, "node-kill-"+strings.ToLower(string(policy)))
	mark := d.n.logMark()
	victim := d.pods(t)[0]
	restarts := victim.Status.ContainerStatuses[0].RestartCount
	stop := nodeWrites(scope, nodeWritesPerSecond, int(5*time.Minute/time.Second)*nodeWritesPerSecond)
	time.Sleep(2 * time.Second)
	killed := time.Now()
	if err := syscall.Kill(d.containerPID(t, victim), syscall.SIGKILL); err != nil {
		stop()
		t.Fatal(err)
	}
	// Back once kubelet has restarted the container and it is Ready again.
	var back time.Duration
	for deadline := time.Now().Add(nodeRolloutTimeout); time.Now().Before(deadline) && back == 0; time.Sleep(200 * time.Millisecond) {
		p, err := d.n.client.CoreV1().Pods(d.namespace).Get(ctx, victim.Name, metav1.GetOptions{})
		if err == nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount > restarts && p.Status.ContainerStatuses[0].Ready {
			back = time.Since(killed)
		}
	}
	time.Sleep(3 * time.Second)
	results := stop()
	if back == 0 {
		t.Fatalf("%s was not Ready again within %s of the kill", victim.Name, nodeRolloutTimeout)
	}
	unreviewed := strings.Count(d.n.logSince(mark), "failing open")
	var last time.Duration
	// Under Fail, what fails is the call of the killed Pod. Under
	// Ignore, no call fails a write; a write whose /mutate call failed
	// open reaches /validate without what /mutate sets, and the policy
	// may deny it: that is Ignore on a mutating webhook, counted.
	var deniedUnmutated int
	for _, f := range results.failed {
		last = max(last, f.at.Sub(killed))
		calling := strings.Contains(f.err.Error(), "failed calling webhook")
		switch {
		case policy == admissionregistrationv1.Fail && !calling:
			t.Errorf("a write failed otherwise than by the webhook's call: %v", f.err)
		case policy == admissionregistrationv1.Ignore && calling:
			t.Errorf("under failurePolicy Ignore, a write failed by the webhook's call: %v", f.err)
		case policy == admissionregistrationv1.Ignore:
			deniedUnmutated++
		}
	}
	t.Logf("failurePolicy %s: %s's container killed hard under %d writes a second, Ready again %s later; %d writes, %d failed (the last %s after the kill: %s), %d calls failed open, %d writes denied for want of what /mutate sets",
		policy, victim.Name, nodeWritesPerSecond, back.Round(100*time.Millisecond), len(results.ok)+len(results.failed), len(results.failed), last.Round(100*time.Millisecond), failureCauses(results.failed), unreviewed, deniedUnmutated)
}

// burstOf sends size of the admitted requests through every deployed
// webhook at once, as dry runs, and returns those that failed, and how
// long the requests took: the median, the 99th percentile and the
// longest.
func burstOf(s *testScope, size int) (failed []failedCreate, took string) {
	var mu sync.Mutex
	var durations []time.Duration
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := fmt.Sprintf("burst%d-%d", size, i)
			reqs := s.admittedThroughAll(base)
			<-start
			began := time.Now()
			var err error
			for _, req := range reqs {
				if err = req.send(context.Background(), true); err != nil {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			durations = append(durations, time.Since(began))
			if err != nil {
				failed = append(failed, failedCreate{s.name(base), time.Now(), err})
			}
		}()
	}
	close(start)
	wg.Wait()
	slices.Sort(durations)
	at := func(q float64) time.Duration {
		return durations[int(q*float64(len(durations)-1))].Round(10 * time.Millisecond)
	}
	return failed, fmt.Sprintf("p50 %s, p99 %s, max %s", at(0.5), at(0.99), at(1))
}

// cpuUse returns a function that says how much CPU each of the node's
// processes, the webhook's Pods and the test itself used since: where a
// burst's time goes on a machine they all share.
func (d *deployment) cpuUse(t *testing.T) func() string {
	t.Helper()
	pids := map[string]int{"test": os.Getpid()}
	for _, p := range d.n.procs {
		if p.cmd.Process != nil {
			pids[strings.TrimPrefix(p.name, "node ")] = p.cmd.Process.Pid
		}
	}
	for _, p := range d.pods(t) {
		pids[p.Name] = d.containerPID(t, p)
	}
	before := map[string]time.Duration{}
	for name, pid := range pids {
		before[name] = processCPU(pid)
	}
	return func() string {
		var parts []string
		for name, pid := range pids {
			parts = append(parts, fmt.Sprintf("%s %.1f", name, (processCPU(pid)-before[name]).Seconds()))
		}
		sort.Strings(parts)
		return strings.Join(parts, ", ")
	}
}

// processCPU is the CPU time, user and system, a process has used, from
// /proc: its own and its threads', not its children's.
func processCPU(pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's name, which is in parentheses.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// processIDs is a process's real uid and gid, from /proc.
func processIDs(t *testing.T, pid int) string {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var uid, gid string
	for line := range strings.Lines(string(status)) {
		if f := strings.Fields(line); len(f) > 1 {
			switch f[0] {
			case "Uid:":
				uid = f[1]
			case "Gid:":
				gid = f[1]
			}
		}
	}
	return uid + " " + gid
}

// certificateNotAfter is a PEM certificate's expiry as the webhook logs it
// (slog's time.Time in JSON).
func certificateNotAfter(t *testing.T, pemBytes []byte) string {
	t.Helper()
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		t.Fatal("no PEM block in the certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(cert.NotAfter)
	return string(bytes.Trim(b, `"`))
}

// TestNodeReadsTheCluster deploys a policy that reads the cluster
// (e2e/testdata/lookup-policy.go as policy.go, built into an image as a
// copier builds theirs) with render.sh's RBAC, in a namespace and under a
// name of its own (NAMESPACE, NAME): the Pods become Ready only once their
// views have synced, reading the apiserver through the kubernetes Service
// with the token kubelet mounted, the Pod's own, bound to it, of the
// ServiceAccount render.sh names; lookups see the cluster.
func TestNodeReadsTheCluster(t *testing.T) {
	n := theNode(t)
	buildContext := lookupPolicyContext(t)
	image := "webhook:e2e-lookup"
	archive := filepath.Join(t.TempDir(), "image.tar")
	cmd := exec.Command("go", "run", "./ociimage", "-o", archive, "-name", image, "-repo", buildContext)
	cmd.Dir = filepath.Join(repoRoot, "e2e")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the lookup policy's image: %v\n%s", err, out)
	}
	if err := n.importImage(archive); err != nil {
		t.Fatal(err)
	}
	d := deployAsTheREADMESays(t, n, image, "NAMESPACE=lookup-system", "NAME=lookup", "WEBHOOK="+lookupPolicyBinary(t))
	mountedToken := func(p corev1.Pod) string {
		t.Helper()
		tokens, _ := filepath.Glob(filepath.Join(n.dir, "kubelet", "pods", string(p.UID), "volumes", "kubernetes.io~projected", "kube-api-access-*", "token"))
		if len(tokens) != 1 {
			t.Fatalf("%s: found %d mounted tokens, want 1", p.Name, len(tokens))
		}
		token, err := os.ReadFile(tokens[0])
		if err != nil {
			t.Fatal(err)
		}
		return string(token)
	}
	for _, p := range d.pods(t) {
		if log := d.logOf(p); !strings.Contains(log, "synced") {
			t.Errorf("%s is Ready without its view's synced line:\n%s", p.Name, log)
		}
		// The token kubelet mounted for the Pod, as the webhook reads it.
		token := mountedToken(p)
		review, err := n.client.AuthenticationV1().TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := "system:serviceaccount:lookup-system:lookup"; !review.Status.Authenticated || review.Status.User.Username != want || !slices.Contains(review.Status.User.Extra["authentication.kubernetes.io/pod-name"], p.Name) {
			t.Errorf("%s's mounted token authenticates as %+v, want %s bound to the Pod", p.Name, review.Status, want)
		}
	}
	lookedUp(t, n, d, "node-lookup")

	// kubelet rotates the token at 80 % of its life, about 48 minutes
	// (the apiserver makes it live an hour at least): the suite does not
	// wait. The webhook reads the file again at each request to the
	// apiserver (kubeclient's TestTokenFileIsReadAgain).
}

// lookedUp proves the lookup policy's Pods read the cluster now: the
// policy's admitted requests are admitted, and once a namespace holds the
// ConfigMap e2e-undecided, which the Pods' views see through their
// watches, its request is refused with the policy's reason.
func lookedUp(t *testing.T, n *node, d *deployment, name string) {
	t.Helper()
	ctx := context.Background()
	scope := newScopeIn(t, n.apiServer, name)
	for i := range 10 {
		for _, req := range scope.admittedThroughAll(fmt.Sprintf("lookup-%d", i)) {
			if err := req.send(ctx, true); err != nil {
				t.Errorf("%s: %v", req, err)
			}
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "e2e-undecided"}}
	if _, err := n.client.CoreV1().ConfigMaps(scope.namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		err = nil
		for _, req := range scope.admittedThroughAll("undecided") {
			if err = req.send(ctx, true); err != nil {
				break
			}
		}
		if err != nil && strings.Contains(err.Error(), "holds the ConfigMap e2e-undecided") {
			return
		}
	}
	t.Errorf("the request in a namespace holding e2e-undecided got %v, want the policy's undecided: do the Pods' views see the cluster?", err)
}

// lookupPolicyContext is the webhook's image build context with
// lookup-policy.go as its policy.go, as a copier's would be.
func lookupPolicyContext(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	err := filepath.WalkDir(repoRoot, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if e.IsDir() {
			if rel == ".git" || rel == "e2e" || rel == "bench" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if rel == "policy.go" {
			if data, err = os.ReadFile(filepath.Join(repoRoot, "e2e", lookupPolicy)); err != nil {
				return err
			}
		}
		return os.WriteFile(filepath.Join(dir, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
