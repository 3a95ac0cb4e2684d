// Command auditreplay measures `webhook review -audit-log` on a long log:
// it writes an audit log of -events events, as a kube-apiserver with the
// audit policy docs/review.md gives writes them, builds the webhook, and
// replays the log with deploy/webhooks.yaml and a -deny rule, reporting
// the wall time, events per second, CPU and peak RSS of each output
// format.
//
//	cd bench && go run ./auditreplay                  # a million events
//	cd bench && go run ./auditreplay -events 100000   # a quicker look
//
// The log is deterministic (a fixed seed). Of each 100 events: 75 reads at
// level Metadata (get, list, watch; a watch's ResponseStarted and its
// ResponseComplete far apart), 3 requests for other paths (/healthz,
// /version), and 22 writes of Deployments at level RequestResponse, each
// with the object sent and as stored (about 2 KB, the root module's
// testdata/v1-deployment-create.json): creates, updates of the version
// last stored (so each needs its oldObject), merge patches and deletes, in
// -namespaces namespaces over a pool of -objects names. A third of the
// writers and readers are in a group the -deny rule refuses, when the
// policy has a -deny flag (the demonstration's); one that has none is
// replayed without it.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "auditreplay:", err)
		os.Exit(1)
	}
}

func run() error {
	events := flag.Int("events", 1_000_000, "events in the log")
	objects := flag.Int("objects", 20_000, "distinct Deployments written")
	namespaces := flag.Int("namespaces", 200, "namespaces they live in")
	keep := flag.String("keep", "", "write the log to this `file` and keep it, instead of a temporary one")
	cacheBytes := flag.Int64("audit-cache-bytes", 0, "pass -audit-cache-bytes `n` to the replay; 0 leaves its default")
	formats := flag.String("o", "text,json", "the output `formats` to replay with, comma-separated")
	flag.Parse()

	root, err := filepath.Abs("..")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "auditreplay-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	logFile := filepath.Join(dir, "audit.log")
	if *keep != "" {
		logFile = *keep
	}
	start := time.Now()
	size, err := writeLog(logFile, filepath.Join(root, "testdata", "v1-deployment-create.json"), *events, *objects, *namespaces)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %d events, %.0f MiB, in %s\n", *events, float64(size)/(1<<20), time.Since(start).Round(time.Second))

	bin := filepath.Join(dir, "webhook")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the webhook: %v\n%s", err, out)
	}
	// A policy of a copier's may have no -deny: its help says.
	help, _ := exec.Command(bin, "review", "-h").CombinedOutput()
	var deny []string
	if strings.Contains(string(help), "\n  -deny ") {
		deny = []string{"-deny", "group=bench:denied,verb=list"}
	} else {
		fmt.Fprintln(os.Stderr, "the policy has no -deny flag: replaying without a rule")
	}
	cache := "default"
	if *cacheBytes > 0 {
		cache = fmt.Sprintf("%d MiB", *cacheBytes>>20)
	}
	fmt.Printf("| output | -audit-cache-bytes | events | log MiB | wall s | events/s | CPU s | peak RSS MiB | exit |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, format := range strings.Split(*formats, ",") {
		args := append([]string{"review", "-audit-log", logFile, "-config", filepath.Join(root, "deploy", "webhooks.yaml"), "-o", format}, deny...)
		if *cacheBytes > 0 {
			args = append(args, "-audit-cache-bytes", fmt.Sprint(*cacheBytes))
		}
		cmd := exec.Command(bin, args...)
		devnull, err := os.Create(os.DevNull)
		if err != nil {
			return err
		}
		summary := filepath.Join(dir, "summary-"+format)
		errFile, err := os.Create(summary)
		if err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = devnull, errFile
		if format == "text" {
			cmd.Stdout = errFile
		}
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			return err
		}
		peak := watchPeak(cmd.Process.Pid)
		err = cmd.Wait()
		wall := time.Since(t0)
		devnull.Close()
		errFile.Close()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			return err
		}
		usage := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		cpu := time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
		fmt.Printf("| %s | %s | %d | %.0f | %.1f | %.0f | %.1f | %.1f | %d |\n", format, cache, *events, float64(size)/(1<<20), wall.Seconds(),
			float64(*events)/wall.Seconds(), cpu.Seconds(), float64(peak())/(1<<20), cmd.ProcessState.ExitCode())
		// The summary follows the lines, hundreds of MiB of them in text:
		// read its end only. Read whole, it would make this process as
		// large, and Linux counts the high-water mark of the process that
		// starts the next replay (vfork, then exec) in that replay's
		// ru_maxrss: the -o json row read 120 MiB, its own peak 95.
		b, _ := tail(summary, 64<<10)
		if i := strings.LastIndex(string(b), "\nreplayed "); i >= 0 && format == "text" {
			b = b[i:]
		}
		fmt.Fprintf(os.Stderr, "the summary, -o %s:\n%s", format, b)
	}
	return nil
}

// watchPeak reads the peak resident memory of the process pid (VmHWM in
// /proc/PID/status) every 100 ms until it exits, and returns a function
// that gives the last read, in bytes. Not ru_maxrss: Linux counts in a
// child's ru_maxrss the high-water mark of the parent it was started from
// (vfork, then exec), and this process grows to about 100 MiB as it
// writes the log, which the first replay's row then showed.
func watchPeak(pid int) func() int64 {
	var peak atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if err != nil {
				return // exited
			}
			for _, line := range strings.Split(string(b), "\n") {
				if kb, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					var n int64
					fmt.Sscanf(strings.TrimSpace(kb), "%d", &n)
					peak.Store(max(peak.Load(), n<<10))
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return func() int64 {
		<-done
		return peak.Load()
	}
}

// tail is the last n bytes of the file at path, or all of a shorter one.
func tail(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if info.Size() > n {
		if _, err := f.Seek(info.Size()-n, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(f)
}

// writeLog writes the log and returns its size.
func writeLog(path, deploymentFile string, events, objects, namespaces int) (int64, error) {
	b, err := os.ReadFile(deploymentFile)
	if err != nil {
		return 0, err
	}
	var review struct {
		Request struct {
			Object map[string]any `json:"object"`
		} `json:"request"`
	}
	if err := json.Unmarshal(b, &review); err != nil {
		return 0, err
	}
	template := review.Request.Object
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	type stored struct {
		rv     int
		exists bool
	}
	state := make([]stored, objects)
	rv := 1000
	type later struct {
		due  int
		line []byte
	}
	var watches []later // the ResponseComplete events of watches still open
	users := []map[string]any{
		{"username": "system:serviceaccount:kube-system:deployment-controller", "groups": []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}},
		{"username": "alice", "groups": []string{"developers", "system:authenticated"}},
		{"username": "bob", "groups": []string{"bench:denied", "system:authenticated"}},
	}
	deployment := func(i, resourceVersion int, replicas int) map[string]any {
		d := clone(template)
		meta := d["metadata"].(map[string]any)
		meta["name"] = fmt.Sprintf("web-%d", i)
		meta["namespace"] = fmt.Sprintf("ns-%d", i%namespaces)
		delete(meta, "generateName")
		if resourceVersion > 0 {
			meta["resourceVersion"] = fmt.Sprint(resourceVersion)
			meta["uid"] = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
			meta["annotations"] = map[string]any{"webhook.example.com/allow": "true"}
		}
		if spec, ok := d["spec"].(map[string]any); ok {
			spec["replicas"] = replicas
		}
		return d
	}
	written := 0
	emit := func(line []byte) error {
		written++
		_, err := fmt.Fprintf(w, "%s\n", line)
		return err
	}
	for n := 0; written < events; n++ {
		for len(watches) > 0 && watches[0].due <= n && written < events {
			if err := emit(watches[0].line); err != nil {
				return 0, err
			}
			watches = watches[1:]
		}
		if written == events {
			break
		}
		user := users[rng.IntN(len(users))]
		e := map[string]any{
			"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": fmt.Sprintf("a-%d", n),
			"stage": "ResponseComplete", "user": user, "sourceIPs": []string{"10.0.0.1"}, "userAgent": "bench",
			"requestReceivedTimestamp": "2026-11-26T00:00:00.000000Z", "stageTimestamp": "2026-11-26T00:00:00.001000Z",
			"annotations": map[string]any{"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""},
		}
		i := rng.IntN(objects)
		ns := fmt.Sprintf("ns-%d", i%namespaces)
		name := fmt.Sprintf("web-%d", i)
		ref := map[string]any{"resource": "deployments", "namespace": ns, "name": name, "apiGroup": "apps", "apiVersion": "v1"}
		status := func(code int) map[string]any { return map[string]any{"metadata": map[string]any{}, "code": code} }
		switch r := n % 100; {
		case r < 60:
			e["verb"], e["requestURI"], e["objectRef"], e["responseStatus"] = "get", "/apis/apps/v1/namespaces/"+ns+"/deployments/"+name, ref, status(200)
		case r < 73:
			e["verb"], e["requestURI"], e["responseStatus"] = "list", "/apis/apps/v1/namespaces/"+ns+"/deployments?labelSelector=app%3Dweb", status(200)
			e["objectRef"] = map[string]any{"resource": "deployments", "namespace": ns, "apiGroup": "apps", "apiVersion": "v1"}
		case r < 75:
			// A watch: ResponseStarted now, ResponseComplete 5000 events on.
			e["verb"], e["requestURI"], e["stage"], e["responseStatus"] = "watch", "/apis/apps/v1/deployments?watch=true", "ResponseStarted", status(200)
			e["objectRef"] = map[string]any{"resource": "deployments", "apiGroup": "apps", "apiVersion": "v1"}
			started, _ := json.Marshal(e)
			e["stage"] = "ResponseComplete"
			done, _ := json.Marshal(e)
			watches = append(watches, later{n + 5000, done})
			if err := emit(started); err != nil {
				return 0, err
			}
			continue
		case r < 78:
			e["verb"], e["requestURI"], e["responseStatus"] = "get", []string{"/healthz", "/version", "/readyz"}[r%3], status(200)
		default:
			e["level"] = "RequestResponse"
			e["objectRef"] = ref
			s := &state[i]
			rv++
			switch {
			case !s.exists:
				e["verb"], e["requestURI"], e["responseStatus"] = "create", "/apis/apps/v1/namespaces/"+ns+"/deployments", status(201)
				e["requestObject"], e["responseObject"] = deployment(i, 0, 1), deployment(i, rv, 1)
				e["annotations"].(map[string]any)["mutation.webhook.admission.k8s.io/round_0_index_0"] = `{"configuration":"webhook.example.com","webhook":"mutate.webhook.example.com","mutated":true}`
				s.rv, s.exists = rv, true
			case r < 88:
				e["verb"], e["requestURI"], e["responseStatus"] = "update", "/apis/apps/v1/namespaces/"+ns+"/deployments/"+name, status(200)
				e["requestObject"], e["responseObject"] = deployment(i, s.rv, 2), deployment(i, rv, 2)
				s.rv = rv
			case r < 96:
				e["verb"], e["requestURI"], e["responseStatus"] = "patch", "/apis/apps/v1/namespaces/"+ns+"/deployments/"+name, status(200)
				e["requestObject"], e["responseObject"] = map[string]any{"spec": map[string]any{"replicas": 3}}, deployment(i, rv, 3)
				s.rv = rv
			default:
				e["verb"], e["requestURI"], e["responseStatus"] = "delete", "/apis/apps/v1/namespaces/"+ns+"/deployments/"+name, status(200)
				e["responseObject"] = map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Success", "details": map[string]any{"name": name, "group": "apps", "kind": "deployments"}}
				s.exists = false
			}
		}
		line, err := json.Marshal(e)
		if err != nil {
			return 0, err
		}
		if err := emit(line); err != nil {
			return 0, err
		}
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return info.Size(), f.Close()
}

func clone(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}
