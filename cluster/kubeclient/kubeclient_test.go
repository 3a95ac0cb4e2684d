package kubeclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// fakeAPIServer serves one resource, configmaps, as the kube-apiserver
// does, for the client's tests: lists page by page, watches that send what
// the test queues, and refusals. It records each request.
type fakeAPIServer struct {
	*httptest.Server
	mu        sync.Mutex
	objects   map[string]int // name → its resourceVersion
	rv        int            // the latest resourceVersion
	requests  []string       // "LIST rv=0 limit=500", "WATCH rv=3", "GET a"
	tokens    []string       // the bearer token of each request
	events    chan string    // watch events to send, as JSON
	refuse    map[string]int // the next request of a kind, LIST or WATCH, is answered with this code
	watchGone bool           // the next watch sends an ERROR event of 410 and ends
	// watchesGone: every watch does, as one of an apiserver that lags
	// behind the one that served the list.
	watchesGone bool
	// watchEmpty: every watch is answered 200 and ended at once, with
	// nothing sent, as by a proxy that cannot hold a stream.
	watchEmpty bool
	// refuseWatches: so many watches to come are refused with 503.
	refuseWatches int
	// listGate, when set, holds each list until it is closed.
	listGate chan struct{}
}

func newFakeAPIServer(t *testing.T) *fakeAPIServer {
	f := &fakeAPIServer{objects: map[string]int{}, events: make(chan string, 100), refuse: map[string]int{}}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.EnableHTTP2 = true
	f.StartTLS()
	t.Cleanup(func() { close(f.events); f.Close() })
	return f
}

func (f *fakeAPIServer) add(names ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range names {
		f.rv++
		f.objects[n] = f.rv
	}
}

func object(name string, rv int) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"ns","resourceVersion":"%d"},"data":{"a":"b"}}`, name, rv)
}

// event queues a watch event of the object name, at a new
// resourceVersion.
func (f *fakeAPIServer) event(eventType, name string) {
	f.mu.Lock()
	f.rv++
	rv := f.rv
	f.mu.Unlock()
	f.events <- fmt.Sprintf(`{"type":%q,"object":%s}`, eventType, object(name, rv))
}

func (f *fakeAPIServer) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	kind := "LIST"
	switch {
	case q.Get("watch") == "true":
		kind = "WATCH"
	case !strings.HasSuffix(r.URL.Path, "/configmaps"):
		kind = "GET"
	}
	f.mu.Lock()
	f.requests = append(f.requests, fmt.Sprintf("%s rv=%s limit=%s continue=%s", kind, q.Get("resourceVersion"), q.Get("limit"), q.Get("continue")))
	f.tokens = append(f.tokens, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	code, refused := f.refuse[kind]
	delete(f.refuse, kind)
	gone := kind == "WATCH" && (f.watchGone || f.watchesGone)
	f.watchGone = f.watchGone && !gone
	empty, gate := f.watchEmpty, f.listGate
	if kind == "WATCH" && f.refuseWatches > 0 {
		f.refuseWatches--
		code, refused = http.StatusServiceUnavailable, true
	}
	f.mu.Unlock()
	if refused {
		w.WriteHeader(code)
		reason := map[int]string{http.StatusServiceUnavailable: "ServiceUnavailable", http.StatusTooManyRequests: "TooManyRequests"}[code]
		if reason == "" {
			reason = "Expired"
		}
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":%d,"reason":%q,"message":"refused by the test"}`, code, reason)
		return
	}
	switch kind {
	case "GET":
		name := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		f.mu.Lock()
		rv, ok := f.objects[name]
		f.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":404,"reason":"NotFound","message":"configmaps %q not found"}`, name)
			return
		}
		fmt.Fprint(w, object(name, rv))
	case "LIST":
		if gate != nil {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		f.mu.Lock()
		names := slices.Sorted(func(yield func(string) bool) {
			for n := range f.objects {
				if !yield(n) {
					return
				}
			}
		})
		start, _ := strconv.Atoi(q.Get("continue"))
		limit, _ := strconv.Atoi(q.Get("limit"))
		end := len(names)
		if limit > 0 {
			end = min(start+limit, len(names))
		}
		items := make([]string, 0, end-start)
		for _, n := range names[start:end] {
			items = append(items, object(n, f.objects[n]))
		}
		next := ""
		if end < len(names) {
			next = strconv.Itoa(end)
		}
		rv := f.rv
		f.mu.Unlock()
		fmt.Fprintf(w, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"%d","continue":%q},"items":[%s]}`, rv, next, strings.Join(items, ","))
	case "WATCH":
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		if empty {
			return
		}
		if gone {
			fmt.Fprint(w, `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired","message":"too old resource version"}}`)
			return
		}
		timeout, _ := strconv.Atoi(q.Get("timeoutSeconds"))
		end := time.After(time.Duration(timeout) * time.Second)
		for {
			select {
			case e, ok := <-f.events:
				if !ok || e == "END" {
					return
				}
				fmt.Fprintln(w, e)
				w.(http.Flusher).Flush()
			case <-end:
				return
			case <-r.Context().Done():
				return
			}
		}
	}
}

func (f *fakeAPIServer) requested() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

// config is a client configuration for f with token.
func (f *fakeAPIServer) config(t *testing.T, token string) *Config {
	t.Helper()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw})
	return &Config{Server: f.URL, CAData: ca, Token: token, Source: "test"}
}

// mapStore is a Store of objects' names and resourceVersions.
type mapStore struct {
	mu      sync.Mutex
	objects map[string]string
	fail    string // an object whose name this is does not decode
}

func (s *mapStore) Replace(list func(add func([]byte) error) error) error {
	next := map[string]string{}
	if err := list(func(object []byte) error { return s.put(next, "ADDED", object) }); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects = next
	return nil
}

func (s *mapStore) Apply(eventType string, object []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.put(s.objects, eventType, object)
}

func (s *mapStore) put(into map[string]string, eventType string, object []byte) error {
	var o struct {
		Metadata struct{ Name, ResourceVersion string }
	}
	if err := json.Unmarshal(object, &o); err != nil {
		return err
	}
	if o.Metadata.Name == s.fail {
		return fmt.Errorf("object %s does not decode", o.Metadata.Name)
	}
	if eventType == "DELETED" {
		delete(into, o.Metadata.Name)
		return nil
	}
	into[o.Metadata.Name] = o.Metadata.ResourceVersion
	return nil
}

func (s *mapStore) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(func(yield func(string) bool) {
		for n := range s.objects {
			if !yield(n) {
				return
			}
		}
	})
}

var configMaps = Resource{Version: "v1", Resource: "configmaps"}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
	}
}

// TestListPages lists 1,201 objects 500 a page: three requests, the first
// at the resourceVersion asked for and the others at the continue token
// alone, as the apiserver requires; every object is handed over once, and
// the list's resourceVersion is returned.
func TestListPages(t *testing.T) {
	f := newFakeAPIServer(t)
	for i := range 1201 {
		f.add(fmt.Sprintf("cm-%04d", i))
	}
	c, err := New(f.config(t, "t"), "test")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	rv, err := c.List(context.Background(), configMaps, ListOptions{ResourceVersion: "0", Limit: 500}, func(object []byte) error {
		var o struct{ Metadata struct{ Name string } }
		if err := json.Unmarshal(object, &o); err != nil {
			return err
		}
		seen[o.Metadata.Name] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1201 || rv != "1201" {
		t.Errorf("got %d objects at resourceVersion %s, want 1201 at 1201", len(seen), rv)
	}
	want := []string{"LIST rv=0 limit=500 continue=", "LIST rv= limit=500 continue=500", "LIST rv= limit=500 continue=1000"}
	if got := f.requested(); !slices.Equal(got, want) {
		t.Errorf("got requests %q, want %q", got, want)
	}
}

// TestGetNotFound: a GET of what does not exist is an error for which
// apierrors.IsNotFound is true, carrying the apiserver's message.
func TestGetNotFound(t *testing.T) {
	f := newFakeAPIServer(t)
	f.add("there")
	c, err := New(f.config(t, "t"), "test")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := c.Get(context.Background(), configMaps, "ns", "there"); err != nil || !strings.Contains(string(b), `"name":"there"`) {
		t.Errorf("GET there: got %s, %v", b, err)
	}
	_, err = c.Get(context.Background(), configMaps, "ns", "missing")
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `configmaps "missing" not found`) {
		t.Errorf("GET missing: got %v, want NotFound with the apiserver's message", err)
	}
	// Without a name, the path would be the whole namespace's: a list.
	sent := len(f.requested())
	if b, err := c.Get(context.Background(), configMaps, "ns", ""); err == nil {
		t.Errorf("GET of no name: got %s, want an error", b)
	}
	if n := len(f.requested()) - sent; n != 0 {
		t.Errorf("a GET of no name sent %d requests, want none", n)
	}
}

// TestReflector runs a Reflector against the fake: it lists at "0", is
// synced, applies watch events, follows a bookmark's resourceVersion,
// opens the watch again without a list when it ends, and after a 410
// lists again at the last resourceVersion; a list refused with 410 falls
// back to a list as of now. The health says not synced until the first
// list, and the watch open while it is.
func TestReflector(t *testing.T) {
	f := newFakeAPIServer(t)
	f.add("a", "b")
	c, err := New(f.config(t, "t"), "test")
	if err != nil {
		t.Fatal(err)
	}
	store := &mapStore{}
	r := NewReflector(c, configMaps, store, slog.New(slog.DiscardHandler))
	if h := r.Health(); h.Synced || h.Current {
		t.Errorf("before Run: got %+v, want not synced, not current", h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	waitUntil(t, "the watch to be established", func() bool { h := r.Health(); return h.Synced && h.Current })
	if got := store.names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("after the list: got %v, want a b", got)
	}

	f.event("ADDED", "c")
	f.event("DELETED", "a")
	f.events <- `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"40"}}}`
	waitUntil(t, "the events", func() bool { return slices.Equal(store.names(), []string{"b", "c"}) })
	f.events <- "END" // the watch's timeout
	waitUntil(t, "a second watch", func() bool { return len(f.requested()) >= 3 })
	if got := f.requested()[1:3]; got[0] != "WATCH rv=2 limit= continue=" || got[1] != "WATCH rv=40 limit= continue=" {
		t.Errorf("got %q, want a watch from the list's resourceVersion, then one from the bookmark's, with no list", got)
	}

	// 410 on the watch: a list at the last resourceVersion; that list
	// refused with 410: a list as of now, paged.
	f.mu.Lock()
	f.watchGone = true
	f.refuse["LIST"] = http.StatusGone
	f.mu.Unlock()
	// The bookmark the apiserver sends 2 s before a watch's timeout, then
	// the timeout: a watch that ended having sent nothing at all, within
	// a second, would be a very short one (TestVeryShortWatch).
	f.events <- `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"40"}}}`
	f.events <- "END"
	waitUntil(t, "the relists", func() bool { return len(f.requested()) >= 7 })
	want := []string{"WATCH rv=40 limit= continue=", "LIST rv=40 limit= continue=", "LIST rv= limit=500 continue=", "WATCH rv=4 limit= continue="}
	if got := f.requested()[3:7]; !slices.Equal(got, want) {
		t.Errorf("after a 410: got %q, want %q", got, want)
	}
	if h := r.Health(); !h.Synced || h.Lists != 3 || h.Watches != 4 {
		t.Errorf("got %+v, want synced after 3 lists and 4 watches", h)
	}
}

// TestReflectorKeepsTheStoreOnFailure: an object the store cannot take
// fails the list, which is retried after the backoff: the store keeps
// what it had, and the health says why.
func TestReflectorKeepsTheStoreOnFailure(t *testing.T) {
	f := newFakeAPIServer(t)
	f.add("a", "bad")
	c, err := New(f.config(t, "t"), "test")
	if err != nil {
		t.Fatal(err)
	}
	store := &mapStore{fail: "bad"}
	r := NewReflector(c, configMaps, store, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	waitUntil(t, "a failure", func() bool { return r.Health().Err != nil })
	if h := r.Health(); h.Synced || !strings.Contains(h.Err.Error(), "object bad does not decode") || store.names() != nil {
		t.Errorf("got %+v and store %v, want not synced, the store empty, and why", h, store.names())
	}
}

// logBuffer is a log the tests read while the Reflector writes it.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines returns the lines of the log that contain s.
func (l *logBuffer) lines(s string) []string {
	var out []string
	for line := range strings.Lines(l.String()) {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// startReflector runs a Reflector of configmaps against f into a new
// mapStore until the test ends, logging into the returned buffer.
func startReflector(t *testing.T, f *fakeAPIServer) (*Reflector, *mapStore, *logBuffer) {
	return startReflectorSilentAfter(t, f, SilentAfter)
}

// startReflectorSilentAfter is startReflector with a Reflector that takes
// a watch for silent after silentAfter.
func startReflectorSilentAfter(t *testing.T, f *fakeAPIServer, silentAfter time.Duration) (*Reflector, *mapStore, *logBuffer) {
	t.Helper()
	c, err := New(f.config(t, "t"), "test")
	if err != nil {
		t.Fatal(err)
	}
	store, logs := &mapStore{}, &logBuffer{}
	r := NewReflector(c, configMaps, store, slog.New(slog.NewTextHandler(logs, nil)))
	r.silentAfter = silentAfter
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r, store, logs
}

// TestVeryShortWatch: an apiserver, or a proxy before it, that answers
// every watch with 200 and ends it at once having sent nothing is not
// watched again in a tight loop: each such watch is an error, logged once,
// followed by the backoff and a list, and the store is never current.
func TestVeryShortWatch(t *testing.T) {
	f := newFakeAPIServer(t)
	f.add("a")
	f.watchEmpty = true
	r, _, logs := startReflector(t, f)
	time.Sleep(2500 * time.Millisecond)
	watches := 0
	for _, req := range f.requested() {
		if strings.HasPrefix(req, "WATCH") {
			watches++
		}
	}
	// The first watch at once, the second after 0.8-1.6 s, the third
	// after 1.6-3.2 s more.
	if watches < 1 || watches > 3 {
		t.Errorf("in 2.5 s: got %d watches, want 1 to 3 (the backoff): %q", watches, f.requested())
	}
	h := r.Health()
	if h.Current || h.Err == nil || !strings.Contains(h.Err.Error(), "a very short watch") || h.Failures < 1 {
		t.Errorf("got %+v, want not current, failed with a very short watch", h)
	}
	if got := logs.lines("a very short watch"); len(got) != 1 || !strings.Contains(got[0], "is stale") {
		t.Errorf("got log lines %q, want one saying the view is stale, with the very short watch", got)
	}
}

// TestSilentWatch: a watch that stays open but delivers nothing, not even
// a bookmark, counts as current for silentAfter at most: then it is
// closed, and the store listed again from etcd (resourceVersion ""), so
// that what the watch never delivered reaches it, and watched from that
// list. Before, the watch was opened again from where it was: a store fed
// by watches that all stay silent counted as current and never changed.
func TestSilentWatch(t *testing.T) {
	f := newFakeAPIServer(t)
	f.add("a")
	const silentAfter = 3 * time.Second
	r, store, logs := startReflectorSilentAfter(t, f, silentAfter)
	waitUntil(t, "the watch to be established", func() bool { return r.Health().Current })
	f.events <- `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"1"}}}`
	bookmarked := time.Now()
	f.add("b") // in the apiserver, and never in a watch
	waitUntil(t, "the silent watch to be closed", func() bool { return len(logs.lines("delivered nothing")) == 1 })
	if silent := time.Since(bookmarked); silent < silentAfter {
		t.Errorf("the watch was closed %s after it last delivered, want %s", silent.Round(time.Millisecond), silentAfter)
	}
	waitUntil(t, "the list that follows", func() bool { return slices.Contains(store.names(), "b") })
	waitUntil(t, "the watch to be opened again", func() bool { return r.Health().Watches == 2 && r.Health().Current })
	var lists, watches []string
	for _, req := range f.requested() {
		switch {
		case strings.HasPrefix(req, "LIST"):
			lists = append(lists, req)
		case strings.HasPrefix(req, "WATCH"):
			watches = append(watches, req)
		}
	}
	if want := []string{"LIST rv=0 limit=500 continue=", "LIST rv= limit=500 continue="}; !slices.Equal(lists, want) || len(watches) != 2 || watches[1] != "WATCH rv=2 limit= continue=" {
		t.Errorf("got lists %q and watches %q, want lists %q, and the second watch from the second list's resourceVersion, 2", lists, watches, want)
	}
	if h := r.Health(); h.Failures != 0 || h.Err != nil {
		t.Errorf("got %+v, want no failure: a quiet watch may be one served from etcd, which sends no bookmarks", h)
	}
}

// TestSilentWatchesThatEndSoon: a proxy before a stuck apiserver that ends
// each silent stream cleanly before silentAfter (its idle timeout) gives
// watch after watch that delivers nothing. Silence counts across them:
// the store is listed again, and never counts as current on quiet alone
// once silentAfter has passed with nothing delivered. Before, each watch
// was current a second after it opened, and the store was never listed
// again (helper-32).
func TestSilentWatchesThatEndSoon(t *testing.T) {
	f := newFakeAPIServer(t)
	f.add("a")
	const silentAfter = 3 * time.Second
	inner := f.Config.Handler
	f.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" {
			ctx, cancel := context.WithTimeout(r.Context(), silentAfter-500*time.Millisecond)
			defer cancel()
			r = r.WithContext(ctx)
		}
		inner.ServeHTTP(w, r)
	})
	r, store, _ := startReflectorSilentAfter(t, f, silentAfter)
	waitUntil(t, "the first watch to be established", func() bool { return r.Health().Current })
	f.add("b") // in the apiserver, and never in a watch
	waitUntil(t, "a list that holds b", func() bool { return slices.Contains(store.names(), "b") })
}

// TestSilentWatchAfterAnOutage: after watches refused for longer than
// silentAfter, a watch answered 200 that delivers nothing is closed at
// once and the store listed: it holds what was made during the outage
// before it counts as current. Before, the store was current a second
// after that watch opened, as old as the outage.
func TestSilentWatchAfterAnOutage(t *testing.T) {
	f := newFakeAPIServer(t)
	f.add("a")
	const silentAfter = 1500 * time.Millisecond
	r, store, _ := startReflectorSilentAfter(t, f, silentAfter)
	waitUntil(t, "the first watch to be established", func() bool { return r.Health().Current })
	f.mu.Lock()
	f.refuseWatches = 2 // the backoff: 0.8 + 1.6 s at least, 4.8 s at most
	f.mu.Unlock()
	f.events <- "END" // the watch ends; the next two are refused
	waitUntil(t, "the outage to begin", func() bool { return !r.Health().Current })
	f.add("b") // during the outage, and never in a watch
	waitUntil(t, "a watch after the outage", func() bool { return r.Health().Watches >= 4 })
	waitUntil(t, "the store to be current", func() bool { return r.Health().Current })
	if names := store.names(); !slices.Contains(names, "b") {
		t.Errorf("current again, holding %v, want b, made during the outage: requests %q", names, f.requested())
	}
}

// TestGoneAfterEstablished: a watch answered 200 that ends with 410
// after EstablishedAfter, having delivered nothing, was never as current
// as the apiserver: the store's age counts from before it, not from its
// end. Before, its end counted as heard from (helper-32).
func TestGoneAfterEstablished(t *testing.T) {
	f := newFakeAPIServer(t)
	f.add("a")
	r, _, _ := startReflector(t, f)
	waitUntil(t, "the watch to be established by its quiet", func() bool { return r.Health().Current })
	established := time.Now()
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	f.mu.Lock()
	f.listGate = gate // the relist waits: Heard is the watch's doing alone
	f.mu.Unlock()
	f.events <- `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired","message":"too old resource version"}}`
	waitUntil(t, "the watch to end", func() bool { return !r.Health().Current })
	if h := r.Health(); !h.Heard.Before(established) {
		t.Errorf("heard from at %s, after the watch was established by its quiet (%s), which then ended with 410 having delivered nothing", h.Heard.Format(time.StampMicro), established.Format(time.StampMicro))
	}
}

// TestListPageStuck: a list whose answer never comes, on a connection
// that stays up, fails at the page's timeout and is retried, and the view
// syncs. Before, the first list waited for good, and the view never
// synced (helper-32).
func TestListPageStuck(t *testing.T) {
	f := newFakeAPIServer(t)
	f.add("a")
	inner := f.Config.Handler
	var lists atomic.Int64
	f.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "true" && lists.Add(1) == 1 {
			<-r.Context().Done() // the first list: stuck
			return
		}
		inner.ServeHTTP(w, r)
	})
	c, err := New(f.config(t, "t"), "test")
	if err != nil {
		t.Fatal(err)
	}
	c.pageTimeout = 300 * time.Millisecond
	store, logs := &mapStore{}, &logBuffer{}
	r := NewReflector(c, configMaps, store, slog.New(slog.NewTextHandler(logs, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitUntil(t, "the view to sync", func() bool { return r.Health().Synced })
	if h := r.Health(); h.Lists != 2 || h.Failures != 1 || len(logs.lines("not answered whole within 300ms")) != 1 {
		t.Errorf("got %+v, and logs:\n%s\nwant two lists, the first failed at its page's timeout, and logged", h, logs)
	}
}

// TestWatchAfterAnEtcdRestore: the apiserver stops (its watch ends as at
// its timeout, and the next is refused while it is down) and comes back on
// an etcd restored to resourceVersion 1, from 6. A watch from 6 would be
// accepted and deliver nothing of what etcd holds (the watch cache waits
// for newer events: k8s.io/apiserver v0.37.2, storage/cacher/cacher.go,
// waitUntilWatchCacheFreshAndForceAllEvents), so the view is listed
// after a watch that did not start. Before, the watch was started again
// from 6, and the view was current, holding what the restore removed and
// not what was created since (helper-38).
func TestWatchAfterAnEtcdRestore(t *testing.T) {
	f := newFakeAPIServer(t)
	f.add("a", "b", "c", "d", "e", "f")
	r, store, _ := startReflectorSilentAfter(t, f, 30*time.Second)
	waitUntil(t, "the watch to be established", func() bool { return r.Health().Current })
	f.mu.Lock()
	f.refuseWatches = 1
	f.mu.Unlock()
	f.events <- "END"
	f.mu.Lock()
	f.objects, f.rv = map[string]int{"a": 1}, 1
	f.mu.Unlock()
	f.add("new")
	waitUntil(t, "the view to be current again", func() bool { h := r.Health(); return h.Failures == 1 && h.Current })
	if got := store.names(); !slices.Equal(got, []string{"a", "new"}) {
		t.Errorf("current, holding %v; want [a new], what the restored etcd holds; requests %q", got, f.requested())
	}
}

// TestWatchThrottledIsWatchedAgain: a watch refused 429 by the
// apiserver's priority and fairness is watched again after the backoff,
// as client-go's reflector does, not listed, which would cost the
// apiserver that throttles it more (TestWatchAfterAnEtcdRestore lists
// after any other refusal).
func TestWatchThrottledIsWatchedAgain(t *testing.T) {
	f := newFakeAPIServer(t)
	f.add("a")
	r, _, _ := startReflectorSilentAfter(t, f, 30*time.Second)
	waitUntil(t, "the watch to be established", func() bool { return r.Health().Current })
	f.mu.Lock()
	f.refuse["WATCH"] = http.StatusTooManyRequests
	f.mu.Unlock()
	f.events <- "END"
	waitUntil(t, "the view to be current again", func() bool { h := r.Health(); return h.Failures == 1 && h.Current })
	if h := r.Health(); h.Lists != 1 || h.Watches != 3 {
		t.Errorf("got %d lists and %d watches, want the one list, and the watch refused 429 watched again; requests %q", h.Lists, h.Watches, f.requested())
	}
}

// TestWatchAnswerNeverComes: a watch whose answer's header never comes,
// on a connection that stays up, is silence, and a failure: once
// silentAfter has passed since the last delivery, the view is listed
// again after the backoff. Before, the request waited for the watch's own
// timeout, 5.5 to 10.5 minutes, with nothing retried and no failure
// counted (helper-38); and then, for a time, listed again at once each
// silentAfter, no failure counted (helper-41).
func TestWatchAnswerNeverComes(t *testing.T) {
	f := newFakeAPIServer(t)
	f.add("a")
	inner := f.Config.Handler
	var watches atomic.Int64
	f.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" && watches.Add(1) == 2 {
			<-r.Context().Done() // the second watch: no answer
			return
		}
		inner.ServeHTTP(w, r)
	})
	r, _, logs := startReflectorSilentAfter(t, f, 3*time.Second)
	waitUntil(t, "the watch to be established", func() bool { return r.Health().Current })
	f.events <- "END"
	waitUntil(t, "the unanswered watch given up as a failure, and the view listed again", func() bool {
		h := r.Health()
		return len(logs.lines("did not answer the watch")) == 1 && h.Failures >= 1 && h.Lists >= 2
	})
}

// TestWatchesAllGoneBackOff: an apiserver whose every watch is answered
// 200, then 410 (one that lags behind the one that served the list), is
// listed again only after the backoff, as client-go's reflector waits
// between each ListAndWatch, not in a loop: before, 4,760 lists in 2 s.
func TestWatchesAllGoneBackOff(t *testing.T) {
	f := newFakeAPIServer(t)
	f.add("a")
	f.mu.Lock()
	f.watchesGone = true
	f.mu.Unlock()
	startReflector(t, f)
	time.Sleep(2 * time.Second)
	lists := 0
	for _, req := range f.requested() {
		if strings.HasPrefix(req, "LIST") {
			lists++
		}
	}
	// The first list, then one a backoff (0.8 s at least) after each 410.
	if lists > 3 {
		t.Errorf("in 2 s: %d lists, want 3 at most, each after the backoff", lists)
	}
}

// TestListAgeFromItsSnapshot: a list is as of its first request, its
// snapshot, however long it takes to arrive, and the store's age counts
// from then: before, from its end, so that with no watch after it the
// store was older than its age said by the list's length.
func TestListAgeFromItsSnapshot(t *testing.T) {
	f := newFakeAPIServer(t)
	f.add("a")
	f.refuseWatches = 1000
	listed := make(chan time.Time, 1)
	inner := f.Config.Handler
	f.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" {
			inner.ServeHTTP(w, r)
			return
		}
		listed <- time.Now()
		rec := httptest.NewRecorder()
		inner.ServeHTTP(rec, r) // the snapshot
		time.Sleep(2 * time.Second)
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
	r, _, _ := startReflector(t, f)
	asked := <-listed
	waitUntil(t, "the list", func() bool { return r.Health().Synced })
	now := time.Now()
	if h := r.Health(); h.Age(now) < now.Sub(asked) {
		t.Errorf("the store holds a snapshot taken %s ago, and its age is %s", now.Sub(asked).Round(time.Millisecond), h.Age(now).Round(time.Millisecond))
	}
}

// TestWatchAnsweredThenGoneIsNotCurrent: a watch the apiserver answers
// with 200, then ends with 410, does not make the store current, nor
// heard from: while the list that follows is under way, the store is as
// old as when its last established watch ended.
func TestWatchAnsweredThenGoneIsNotCurrent(t *testing.T) {
	f := newFakeAPIServer(t)
	f.add("a")
	r, _, logs := startReflector(t, f)
	waitUntil(t, "the watch to be established", func() bool { return r.Health().Current })
	f.mu.Lock()
	f.watchGone = true
	f.listGate = make(chan struct{})
	f.mu.Unlock()
	f.events <- `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"1"}}}`
	f.events <- "END"
	waitUntil(t, "the relist", func() bool { return len(f.requested()) >= 4 })
	ended := r.Health().Heard
	time.Sleep(300 * time.Millisecond)
	if h := r.Health(); h.Current || !h.Heard.Equal(ended) || h.Age(time.Now()) < 300*time.Millisecond {
		t.Errorf("while relisting after a watch answered then gone: got %+v, want not current, heard last when the established watch ended (%v)", h, ended)
	}
	if got := logs.lines("relisting"); len(got) != 1 || !strings.Contains(got[0], "too old resource version") {
		t.Errorf("got log lines %q, want one relisting line with the apiserver's reason", got)
	}
	close(f.listGate)
	waitUntil(t, "the view to be current again", func() bool { return r.Health().Current })
	if got := logs.lines("fresh again"); len(got) != 1 {
		t.Errorf("got log lines %q, want one saying the view is fresh again", got)
	}
}

// TestReflectorSaysEachChangeOnce: syncing, synced, stale with the
// apiserver's error (once for two refusals alike), fresh again; a watch
// that ends at its timeout is logged too.
func TestReflectorSaysEachChangeOnce(t *testing.T) {
	f := newFakeAPIServer(t)
	f.add("a")
	f.refuseWatches = 2
	r, _, logs := startReflector(t, f)
	waitUntil(t, "the watch to be established", func() bool { return r.Health().Current })
	if h := r.Health(); h.Failures != 2 || h.Watches != 3 {
		t.Errorf("got %+v, want 2 failures and 3 watches", h)
	}
	for _, tc := range []struct {
		says string
		want int
	}{{"is syncing", 1}, {"is synced", 1}, {"is stale", 1}, {"refused by the test", 1}, {"still stale", 0}, {"fresh again", 1}} {
		if got := logs.lines(tc.says); len(got) != tc.want {
			t.Errorf("got %d log lines saying %q, want %d:\n%s", len(got), tc.says, tc.want, logs)
		}
	}
	f.events <- `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"1"}}}`
	f.events <- "END"
	waitUntil(t, "the watch's end to be logged", func() bool { return len(logs.lines("the watch ended")) == 1 })
}

// TestTokenFileIsReadAgain: a token file rewritten, as kubelet rotates a
// ServiceAccount token, is sent from the next request on.
func TestTokenFileIsReadAgain(t *testing.T) {
	f := newFakeAPIServer(t)
	cfg := f.config(t, "")
	cfg.TokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(cfg.TokenFile, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(cfg, "test")
	if err != nil {
		t.Fatal(err)
	}
	list := func() {
		if _, err := c.List(context.Background(), configMaps, ListOptions{}, func([]byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	list()
	if err := os.WriteFile(cfg.TokenFile, []byte("second"), 0o600); err != nil {
		t.Fatal(err)
	}
	list()
	if got := f.tokens; !slices.Equal(got, []string{"first", "second"}) {
		t.Errorf("got tokens %q, want first, then second", got)
	}
}

// TestLoadKubeconfig reads a kubeconfig's current context, files relative
// to it, and refuses what the webhook cannot do, naming the file and the
// entry.
func TestLoadKubeconfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	f := newFakeAPIServer(t)
	write("ca.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw})))
	write("token", "from-a-file")
	const base = `apiVersion: v1
kind: Config
current-context: webhook
contexts:
- name: other
  context: {cluster: nowhere, user: nobody}
- name: webhook
  context: {cluster: test, user: reader}
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: ca.crt
users:
- name: reader
  user:
%s
`
	good := write("good.yaml", fmt.Sprintf(base, f.URL, "    tokenFile: token"))
	cfg, err := LoadKubeconfig(good)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TokenFile != filepath.Join(dir, "token") || cfg.Server != f.URL || !strings.Contains(cfg.Source, "context webhook") {
		t.Errorf("got %+v", cfg)
	}
	c, err := New(cfg, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.List(context.Background(), configMaps, ListOptions{}, func([]byte) error { return nil }); err != nil {
		t.Fatalf("listing through the kubeconfig: %v", err)
	}
	if f.tokens[0] != "from-a-file" {
		t.Errorf("got token %q, want the file's", f.tokens[0])
	}

	for _, tc := range []struct{ name, server, user, want string }{
		{"exec", f.URL, "    exec: {command: aws, apiVersion: client.authentication.k8s.io/v1}", `user "reader" authenticates with an exec plugin (aws)`},
		{"auth-provider", f.URL, "    auth-provider: {name: oidc}", `auth-provider "oidc"`},
		{"basic", f.URL, "    username: a\n    password: b", "no basic auth"},
		{"nothing", f.URL, "    {}", "no token, tokenFile or client certificate"},
		{"cert without key", f.URL, "    client-certificate: ca.crt", "without its key"},
		{"http", "http://127.0.0.1:1", "    token: t", "is not https"},
	} {
		path := write(tc.name+".yaml", fmt.Sprintf(base, tc.server, tc.user))
		_, err := LoadKubeconfig(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: got %v, want an error naming %s and saying %q", tc.name, err, path, tc.want)
		}
	}
	missing := write("missing-context.yaml", "current-context: gone\n")
	if _, err := LoadKubeconfig(missing); err == nil || !strings.Contains(err.Error(), `current-context "gone" is not among its contexts`) {
		t.Errorf("got %v", err)
	}
}

// TestInCluster reads a Pod's configuration, and says what is missing
// outside one.
func TestInCluster(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
	getenv := func(k string) string { return env[k] }
	if _, err := inClusterFrom(dir, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "not in a Pod") {
		t.Errorf("without the environment: got %v", err)
	}
	if _, err := inClusterFrom(dir, getenv); err == nil || !strings.Contains(err.Error(), "automountServiceAccountToken: true") {
		t.Errorf("without a token: got %v", err)
	}
	for _, f := range []string{"token", "ca.crt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := inClusterFrom(dir, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server != "https://[fd00::1]:443" || cfg.TokenFile != filepath.Join(dir, "token") {
		t.Errorf("got %+v", cfg)
	}
}

var _ io.Closer = (*Watch)(nil)

// TestClientCertificateRenewed: once the kubeconfig's client certificate
// file holds a renewed certificate, the next request presents it, on a
// connection of its own. Before, the connection kept alive (never idle
// long, with watches and pings) presented the old one for ever, and the
// apiserver, which checks a certificate at each request, refused every
// request once it expired (helper-38).
func TestClientCertificateRenewed(t *testing.T) {
	dir := t.TempDir()
	selfSigned(t, dir, 1)
	f := &fakeAPIServer{objects: map[string]int{}, events: make(chan string, 100), refuse: map[string]int{}}
	var mu sync.Mutex
	var presented []string // the serial of each request's certificate
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		for _, c := range r.TLS.PeerCertificates[:1] {
			presented = append(presented, c.SerialNumber.String())
		}
		mu.Unlock()
		f.serve(w, r)
	}))
	f.EnableHTTP2 = true
	f.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	f.StartTLS()
	t.Cleanup(func() { close(f.events); f.Close() })
	f.add("a")
	cfg := f.config(t, "")
	cfg.CertFile, cfg.KeyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	c, err := New(cfg, "test")
	if err != nil {
		t.Fatal(err)
	}
	get := func() {
		t.Helper()
		if _, err := c.Get(context.Background(), configMaps, "ns", "a"); err != nil {
			t.Fatal(err)
		}
	}
	get()
	get()
	selfSigned(t, dir, 2)
	get()
	mu.Lock()
	if !slices.Equal(presented, []string{"1", "1", "2"}) {
		t.Errorf("the apiserver saw the certificates %v; want 1, 1, then the renewed 2", presented)
	}
	mu.Unlock()

	// Half written: the certificate renamed before its key, then the
	// file emptied by a writer that truncates. The requests then go over
	// the connections of the last pair that loaded; before, each forced a
	// new connection, whose handshake failed (helper-41).
	cert, key := certPair(t, 3)
	writePEM(t, dir, "cert.pem", cert)
	get()
	if err := os.WriteFile(cfg.CertFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	get()
	writePEM(t, dir, "cert.pem", cert)
	writePEM(t, dir, "key.pem", key)
	get()
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"1", "1", "2", "2", "2", "3"}; !slices.Equal(presented, want) {
		t.Errorf("the apiserver saw the certificates %v; want %v", presented, want)
	}
}

// selfSigned writes a client certificate and its key into dir, as
// cert.pem and key.pem, the key first.
func selfSigned(t *testing.T, dir string, serial int64) {
	t.Helper()
	cert, key := certPair(t, serial)
	writePEM(t, dir, "key.pem", key)
	writePEM(t, dir, "cert.pem", cert)
}

// certPair is a self-signed client certificate of serial, and its key.
func certPair(t *testing.T, serial int64) (cert, key *pem.Block) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "webhook"}, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return &pem.Block{Type: "CERTIFICATE", Bytes: der}, &pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}
}

// writePEM writes block into dir/name, written anew and renamed into place.
func writePEM(t *testing.T, dir, name string, block *pem.Block) {
	t.Helper()
	tmp := filepath.Join(dir, name+".tmp")
	if err := os.WriteFile(tmp, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}
