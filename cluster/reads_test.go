package cluster

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/example/webhook/part"
)

// fakeCluster is an apiserver for the tests of a policy that reads the
// cluster: it lists the objects it holds of any resource (an empty list
// of any other), holds every watch open without an event, and answers a
// GET of one of its objects, or 404. It counts each kind of request.
type fakeCluster struct {
	*httptest.Server
	mu       sync.Mutex
	objects  map[string][]string // by the resource's path, /api/v1/pods: each object's JSON
	requests map[string]int      // "LIST", "WATCH", "GET"
	listGate chan struct{}       // when set, a list waits until it is closed
	// watch is how a watch is answered: "" holds it open without an
	// event, until ending is closed; "refuse" answers 503; "gone"
	// answers 200, then an ERROR event of 410, as an apiserver that no
	// longer serves the resourceVersion.
	watch  string
	ending chan struct{}
}

func startFakeCluster(t testing.TB) *fakeCluster {
	t.Helper()
	f := &fakeCluster{objects: map[string][]string{}, requests: map[string]int{}, ending: make(chan struct{})}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes a stopping server's client cuts
	f.EnableHTTP2 = true
	f.StartTLS()
	t.Cleanup(f.Close)
	return f
}

func (f *fakeCluster) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	items := f.objects[r.URL.Path]
	// After /api/v1 or /apis/GROUP/VERSION: RESOURCE or
	// namespaces/NS/RESOURCE is a list, one more segment a GET.
	segments := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	rest := segments[2:]
	if segments[0] == "apis" {
		rest = segments[3:]
	}
	kind := "GET"
	switch {
	case r.URL.Query().Get("watch") == "true":
		kind = "WATCH"
	case len(rest) == 1 || len(rest) == 3:
		kind = "LIST"
	}
	f.requests[kind]++
	var one string
	if kind == "GET" {
		parent, name := r.URL.Path[:strings.LastIndex(r.URL.Path, "/")], r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		for _, o := range f.objects[parent] {
			if strings.Contains(o, `"name":"`+name+`"`) {
				one = o
			}
		}
	}
	gate, watch, ending := f.listGate, f.watch, f.ending
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch kind {
	case "LIST":
		if gate != nil {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		// Paged as the apiserver pages: limit a page, continue from there.
		start, _ := strconv.Atoi(r.URL.Query().Get("continue"))
		end := len(items)
		if limit, _ := strconv.Atoi(r.URL.Query().Get("limit")); limit > 0 {
			end = min(start+limit, len(items))
		}
		next := ""
		if end < len(items) {
			next = strconv.Itoa(end)
		}
		fmt.Fprintf(w, `{"kind":"List","apiVersion":"v1","metadata":{"resourceVersion":"7","continue":%q},"items":[%s]}`, next, strings.Join(items[start:end], ","))
	case "WATCH":
		switch watch {
		case "refuse":
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":503,"reason":"ServiceUnavailable","message":"refused by the test"}`)
		case "gone":
			fmt.Fprint(w, `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired","message":"too old resource version: 7 (9)"}}`)
		default:
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-ending:
			}
		}
	default:
		if one == "" {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":404,"reason":"NotFound","message":"not found"}`)
			return
		}
		fmt.Fprint(w, one)
	}
}

func (f *fakeCluster) count(kind string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[kind]
}

// kubeconfig writes a kubeconfig for f, with a token, and returns its path.
func (f *fakeCluster) kubeconfig(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: test
contexts: [{name: test, context: {cluster: test, user: test}}]
clusters: [{name: test, cluster: {server: %q, certificate-authority: ca.crt}}]
users: [{name: test, user: {token: test-token}}]
`, f.URL)
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestWatchCluster: the server's views, from a kubeconfig, list each kind
// once and hold one watch, are not synced until their list is whole (so
// the webhook is not ready), then answer; the metrics say what each holds
// and what it cost the apiserver.
func TestWatchCluster(t *testing.T) {
	f := startFakeCluster(t)
	f.objects["/api/v1/pods"] = []string{pod("a", "web", "builder"), pod("b", "db", "default")}
	var pods *View[testPod]
	var secrets *View[struct{}]
	reads := []Read{
		ReadInto(&pods, podKind),
		ReadInto(&secrets, Kind{APIVersion: "v1", Kind: "Secret", Namespace: "vault"}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs bytes.Buffer
	c, err := watchCluster(reads, clusterFlags{kubeconfig: f.kubeconfig(t), lookupsPerSecond: 100}, func(string) string { return "" }, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	for deadline := time.Now().Add(10 * time.Second); c.notSynced() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not synced after 10 s: %v", c.notSynced())
		}
	}
	if p, ok, err := pods.Get("a", "web"); !ok || err != nil || p.Spec.ServiceAccountName != "builder" {
		t.Errorf("get a/web: got %+v, %v, %v", p, ok, err)
	}
	if _, ok, err := secrets.GetOrFetch(ctx, "vault", "token"); ok || err != nil {
		t.Errorf("get vault/token: got %v, %v, want not found after asking", ok, err)
	}
	if f.count("LIST") != 2 || f.count("GET") != 1 {
		t.Errorf("got %v requests, want a list of each kind and a GET for the miss", f.requests)
	}
	var metrics bytes.Buffer
	c.writeMetrics(&metrics)
	for _, want := range []string{`webhook_view_objects{resource="pods"} 2`, `webhook_view_synced{resource="secrets in namespace vault"} 1`, `webhook_view_list_requests_total{resource="pods"} 1`} {
		if !strings.Contains(metrics.String(), want) {
			t.Errorf("the metrics have no %q:\n%s", want, &metrics)
		}
	}
	if strings.Contains(logs.String(), "test-token") || !strings.Contains(logs.String(), "credentials=") {
		t.Errorf("got log %q, want where the credentials came from, never the token", &logs)
	}
}

// TestListLatestPagesWithinTheRate: each page of a list as of now is
// charged to the lookups' rate: a namespace of 1,200 Pods, three pages,
// is listed whole, and leaves the rate two lookups below none, for the
// lookups after it to make up. Before, a list took one token for all its
// pages, and a whole kind of 100,000 objects 200 requests for one
// (helper-38); and then, for a time, a list of more pages than the rate
// held was refused partway, whatever the rate (helper-41).
func TestListLatestPagesWithinTheRate(t *testing.T) {
	f := startFakeCluster(t)
	var big []string
	for i := range 1200 {
		big = append(big, pod("big", fmt.Sprintf("p-%04d", i), "default"))
	}
	f.objects["/api/v1/namespaces/big/pods"] = big
	var pods *View[testPod]
	c, err := watchCluster([]Read{ReadInto(&pods, podKind)}, clusterFlags{kubeconfig: f.kubeconfig(t), lookupsPerSecond: 0.01}, testEnv, discardLogger)
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	for deadline := time.Now().Add(10 * time.Second); c.notSynced() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not synced after 10 s: %v", c.notSynced())
		}
	}
	lists := f.count("LIST")
	got, err := pods.ListLatest(context.Background(), "big")
	if sent := f.count("LIST") - lists; err != nil || len(got) != 1200 || sent != 3 {
		t.Errorf("ListLatest: %d objects, %v, in %d requests; want 1,200 in 3", len(got), err, sent)
	}
	rate := c.views[0].apiserver.rate
	rate.mu.Lock()
	tokens := rate.tokens
	rate.mu.Unlock()
	if tokens > -1.9 {
		t.Errorf("the rate holds %.2f lookups after a list of three pages, from one; want about -2", tokens)
	}
}

// set sets how the fake answers watches from now on, and ends those it
// holds open.
func (f *fakeCluster) set(watch string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watch = watch
	close(f.ending)
	f.ending = make(chan struct{})
}

// TestViewAfterAWatchAnsweredThenGone: a view cut off from the apiserver
// for longer than its MaxStale answers ErrStale, and goes on doing so
// when a watch is answered 200, then 410, while the list that follows is
// under way: the old content is not taken for fresh (a ServiceAccount
// deleted meanwhile was allowed so). Once the list is whole and a watch
// established, it answers again.
func TestViewAfterAWatchAnsweredThenGone(t *testing.T) {
	f := startFakeCluster(t)
	f.objects["/api/v1/pods"] = []string{pod("a", "web", "builder")}
	var pods *View[testPod]
	kind := podKind
	kind.MaxStale = time.Second
	c, err := watchCluster([]Read{ReadInto(&pods, kind)}, clusterFlags{kubeconfig: f.kubeconfig(t)}, testEnv, discardLogger)
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	lookup := func() error { _, _, err := pods.Get("a", "web"); return err }
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waited 15 s for %s", what)
			}
		}
	}
	waitFor("the view's watch to be established", func() bool { return c.views[0].reflector.Health().Current })

	f.set("refuse")
	waitFor("the view to be too stale", func() bool { return errors.Is(lookup(), ErrStale) })

	f.set("gone")
	watches := f.count("WATCH")
	waitFor("a watch answered 200, then 410", func() bool { return f.count("WATCH") > watches })
	// The list after it comes after the backoff, which the watches
	// refused have grown to seconds.
	f.mu.Lock()
	f.listGate = make(chan struct{})
	lists := f.requests["LIST"]
	f.mu.Unlock()
	waitFor("the list after it", func() bool { return f.count("LIST") > lists })
	if err := lookup(); !errors.Is(err, ErrStale) {
		t.Errorf("while listing after a watch answered 200, then 410: got %v, want ErrStale", err)
	}

	f.set("")
	close(f.listGate)
	waitFor("the view to answer again", func() bool { return lookup() == nil })
}

// TestViewsStopBeforeReturning: stop returns once nothing that keeps the
// views in step runs any longer, so that nothing of them writes to a log
// after run returns (TestBadFlags raced on it with a policy that reads the
// cluster).
func TestViewsStopBeforeReturning(t *testing.T) {
	f := startFakeCluster(t)
	f.listGate = make(chan struct{}) // the first list is under way as it stops
	defer close(f.listGate)
	var pods *View[testPod]
	logs := &stoppedLog{}
	c, err := watchCluster([]Read{ReadInto(&pods, podKind)}, clusterFlags{kubeconfig: f.kubeconfig(t)}, testEnv, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); f.count("LIST") == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no list within 10 s")
		}
	}
	c.stop()
	logs.stop()
	buf := make([]byte, 1<<20)
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "kubeclient.(*Reflector)") {
		t.Errorf("a Reflector still runs once stop has returned:\n%s", stacks)
	}
	time.Sleep(100 * time.Millisecond)
	if late := logs.late.Load(); late > 0 {
		t.Errorf("%d lines were logged after stop returned", late)
	}
}

// stoppedLog is a log that counts what is written after stop.
type stoppedLog struct {
	stopped atomic.Bool
	late    atomic.Int64
}

func (l *stoppedLog) Write(p []byte) (int, error) {
	if l.stopped.Load() {
		l.late.Add(1)
	}
	return len(p), nil
}

func (l *stoppedLog) stop() { l.stopped.Store(true) }

// TestWatchClusterNeedsCredentials: a policy that reads the cluster, run
// outside a Pod with no -kubeconfig, stops at start-up naming the kinds and
// what to give; one that reads nothing asks for no credentials at all,
// and does not even open a -kubeconfig it is given.
func TestWatchClusterNeedsCredentials(t *testing.T) {
	var pods *View[testPod]
	noEnv := func(string) string { return "" }
	_, err := watchCluster([]Read{ReadInto(&pods, podKind)}, clusterFlags{}, noEnv, discardLogger)
	if err == nil || !strings.Contains(err.Error(), "the policy reads pods of the cluster: give -kubeconfig FILE") {
		t.Errorf("got %v, want a start-up error naming pods and -kubeconfig", err)
	}
	c, err := watchCluster(nil, clusterFlags{kubeconfig: "/nonexistent/kubeconfig"}, noEnv, discardLogger)
	if c != nil || err != nil || c.notSynced() != nil {
		t.Errorf("reading nothing: got %v, %v, want no views, no error, ready", c, err)
	}
}

// TestClusterFlags: -apiserver-lookups-per-second is 20 unless given; a
// value that is not a number of lookups a second stops the server, naming
// the flag.
func TestClusterFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    float64
		wantErr bool
	}{
		{nil, 20, false},
		{[]string{"-apiserver-lookups-per-second", "0"}, 0, false},
		{[]string{"-apiserver-lookups-per-second", "2.5"}, 2.5, false},
		{[]string{"-apiserver-lookups-per-second", "-1"}, 0, true},
		{[]string{"-apiserver-lookups-per-second", "many"}, 0, true},
		{[]string{"-apiserver-lookups-per-second", "NaN"}, 0, true},
	} {
		var f clusterFlags
		fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.register(fs)
		err := fs.Parse(tc.args)
		switch {
		case tc.wantErr && (err == nil || !strings.Contains(err.Error(), "-apiserver-lookups-per-second")):
			t.Errorf("%q: got %v, want an error naming the flag", tc.args, err)
		case !tc.wantErr && (err != nil || f.lookupsPerSecond != tc.want):
			t.Errorf("%q: got %v, %v, want %v", tc.args, f.lookupsPerSecond, err, tc.want)
		}
	}
}

// TestReadsSubcommand: `webhook reads` prints the kinds, as a table, as
// JSON, or as RBAC for another ServiceAccount.
func TestReadsSubcommand(t *testing.T) {
	var pods *View[testPod]
	reads := []Read{ReadInto(&pods, podKind)}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "v1  Pod  pods  every namespace"},
		{[]string{"-o", "json"}, `"resource": "pods"`},
		{[]string{"-o", "rbac", "-service-account", "e2e/reader"}, "name: reader\n  namespace: e2e"},
	} {
		var out bytes.Buffer
		if err := runReads(tc.args, reads, &out, io.Discard); err != nil || !strings.Contains(out.String(), tc.want) {
			t.Errorf("reads %v: got %q, %v, want %q", tc.args, &out, err, tc.want)
		}
	}
	if err := runReads([]string{"-o", "rbac", "-service-account", "webhook"}, reads, io.Discard, io.Discard); err == nil {
		t.Error("a -service-account without its namespace: got no error")
	}
}

// TestNotReadyUntilSynced: the part is not ready (main.go's /ping fails
// with its error), saying which view, until the policy's views of the
// cluster have synced, and then is: a replica that could only answer
// undecided gets no traffic.
func TestNotReadyUntilSynced(t *testing.T) {
	f := startFakeCluster(t)
	f.listGate = make(chan struct{})
	p := &podPolicy{}
	pt := Part(p)
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	pt.Flags(fs, false)
	if err := fs.Parse([]string{"-kubeconfig", f.kubeconfig(t)}); err != nil {
		t.Fatal(err)
	}
	if err := pt.NotReady(); err != nil {
		t.Errorf("before Start: got %v, want ready (nothing to wait for yet)", err)
	}
	stop, err := pt.Start(part.Env{Logger: discardLogger, Getenv: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := pt.NotReady(); err == nil || !strings.Contains(err.Error(), "the view of pods has not synced yet") {
		t.Errorf("while the list is under way: got %v, want an error naming the view", err)
	}
	close(f.listGate)
	for deadline := time.Now().Add(10 * time.Second); pt.NotReady() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not ready 10 s after the list could end: %v", pt.NotReady())
		}
	}
}

// podPolicy is a policy that reads every Pod, as the part finds it.
type podPolicy struct{ pods *View[testPod] }

func (p *podPolicy) Reads() []Read { return []Read{ReadInto(&p.pods, podKind)} }

// TestOfflineViews: `webhook review` fills the views from -cluster's
// files, a kind none holds being empty; without any file, each view says
// to give one, so that a lookup answers undecided rather than as if the
// cluster were empty.
func TestOfflineViews(t *testing.T) {
	var pods *View[testPod]
	reads := []Read{ReadInto(&pods, podKind)}
	if err := offlineViews(reads, clusterFiles{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pods.Get("a", "web"); err == nil || !strings.Contains(err.Error(), "give -cluster FILE, such as the output of kubectl get pods -A -o json") {
		t.Errorf("without -cluster: got %v, want an error saying to give it", err)
	}
	var files clusterFiles
	path := filepath.Join(t.TempDir(), "cluster.json")
	if err := os.WriteFile(path, []byte(`{"apiVersion":"v1","kind":"List","items":[`+pod("a", "web", "builder")+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := files.Set(path); err != nil {
		t.Fatal(err)
	}
	if err := offlineViews(reads, files); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := pods.Get("a", "web"); !ok || err != nil {
		t.Errorf("with -cluster: got %v, %v, want a/web", ok, err)
	}
	if err := files.Set(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("-cluster of a missing file: got no error")
	}
}
