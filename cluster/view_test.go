package cluster

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/example/webhook/cluster/kubeclient"
)

// testPod is what the view tests keep of a Pod: its name, and the
// ServiceAccount and images it names.
type testPod struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		ServiceAccountName string `json:"serviceAccountName"`
		Containers         []struct {
			Image string `json:"image"`
		} `json:"containers"`
	} `json:"spec"`
}

var podKind = Kind{APIVersion: "v1", Kind: "Pod"}

// byImage indexes a Pod by its containers' images.
var byImage = IndexBy("image", func(p testPod) []string {
	var images []string
	for _, c := range p.Spec.Containers {
		images = append(images, c.Image)
	}
	return images
})

func pod(namespace, name, serviceAccount string, images ...string) string {
	var containers []string
	for _, i := range images {
		containers = append(containers, `{"name":"c","image":"`+i+`"}`)
	}
	return `{"apiVersion":"v1","kind":"Pod","metadata":{"namespace":"` + namespace + `","name":"` + name + `","resourceVersion":"1"},"spec":{"serviceAccountName":"` + serviceAccount + `","containers":[` + strings.Join(containers, ",") + `]}}`
}

// filledView is a view of Pods made through fillViews, the door tests
// use, from the Pods given as JSON.
func filledView(t *testing.T, kind Kind, pods ...string) *View[testPod] {
	t.Helper()
	var v *View[testPod]
	var objects []clusterObject
	for i, p := range pods {
		got, err := readClusterObjects(fmt.Sprint("pod ", i), strings.NewReader(p))
		if err != nil {
			t.Fatal(err)
		}
		objects = append(objects, got...)
	}
	if err := fillViews([]Read{ReadInto(&v, kind, byImage)}, objects); err != nil {
		t.Fatal(err)
	}
	return v
}

func names(pods []testPod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Metadata.Name)
	}
	return out
}

// TestViewLookups: a view answers by namespace and name, by namespace, and
// by the policy's index, in order; watch events add, change and remove
// objects and their index entries; a list whose object does not decode
// into what the policy keeps leaves the view as it was.
func TestViewLookups(t *testing.T) {
	v := filledView(t, podKind, pod("a", "web", "builder", "nginx"), pod("a", "api", "default", "go", "nginx"), pod("b", "db", "default", "postgres"))
	if p, ok, err := v.Get("a", "web"); err != nil || !ok || p.Spec.ServiceAccountName != "builder" {
		t.Errorf("get a/web: got %+v, %v, %v", p, ok, err)
	}
	if _, ok, err := v.Get("b", "web"); err != nil || ok {
		t.Errorf("get b/web: got %v, %v, want not found", ok, err)
	}
	for _, tc := range []struct {
		namespace string
		want      []string
	}{{"a", []string{"api", "web"}}, {"", []string{"api", "web", "db"}}, {"c", nil}} {
		if got, err := v.List(tc.namespace); err != nil || !slices.Equal(names(got), tc.want) {
			t.Errorf("list(%q): got %v, %v, want %v", tc.namespace, names(got), err, tc.want)
		}
	}
	if got, err := v.Indexed("image", "nginx"); err != nil || !slices.Equal(names(got), []string{"api", "web"}) {
		t.Errorf("indexed nginx: got %v, %v", names(got), err)
	}
	if _, err := v.Indexed("color", "red"); err == nil || !strings.Contains(err.Error(), `has no index "color"`) {
		t.Errorf("an index the view lacks: got %v, want an error", err)
	}

	// web changes its image, api goes, a new one comes.
	for _, e := range []struct{ eventType, object string }{
		{"MODIFIED", pod("a", "web", "builder", "caddy")},
		{"DELETED", pod("a", "api", "default")},
		{"ADDED", pod("c", "cache", "default", "nginx")},
	} {
		if err := v.Apply(e.eventType, []byte(e.object)); err != nil {
			t.Fatal(err)
		}
	}
	for image, want := range map[string][]string{"nginx": {"cache"}, "caddy": {"web"}, "go": nil} {
		if got, _ := v.Indexed("image", image); !slices.Equal(names(got), want) {
			t.Errorf("after the events, indexed %s: got %v, want %v", image, names(got), want)
		}
	}
	if v.size() != 3 {
		t.Errorf("got %d objects, want 3", v.size())
	}

	bad := `{"apiVersion":"v1","kind":"Pod","metadata":{"namespace":"a","name":"odd"},"spec":{"serviceAccountName":5}}`
	err := v.Replace(func(add func([]byte) error) error {
		if err := add([]byte(pod("z", "new", "default"))); err != nil {
			return err
		}
		return add([]byte(bad))
	})
	if err == nil || !strings.Contains(err.Error(), "Pod a/odd does not decode into the policy's cluster.testPod") {
		t.Errorf("a list with an object that does not decode: got %v, want an error naming it", err)
	}
	if got, _ := v.List(""); !slices.Equal(names(got), []string{"web", "db", "cache"}) {
		t.Errorf("after a failed list: got %v, want the view as it was", names(got))
	}

	// A field's own decoder quotes the value it refuses: never said.
	type withTime struct {
		Data struct{ Rotated time.Time } `json:"data"`
	}
	timed := newView[withTime](podKind, nil, nil, nil)
	_, _, err = timed.decode([]byte(`{"metadata":{"namespace":"a","name":"s"},"data":{"Rotated":"c3VwZXItc2VjcmV0"}}`))
	if err == nil || strings.Contains(err.Error(), "c3VwZXItc2VjcmV0") || !strings.Contains(err.Error(), "Pod a/s does not decode into the policy's") {
		t.Errorf("an object whose field does not decode: got %v, want an error naming it, not the value", err)
	}
}

// TestViewFreshness: a view answers only once synced, and until it has
// heard nothing from the apiserver for longer than its kind's MaxStale;
// its errors say which, and errors.Is tells them apart. A nil view is an
// error, not a panic.
func TestViewFreshness(t *testing.T) {
	for _, tc := range []struct {
		name    string
		health  kubeclient.Health
		wantErr error
		want    string
	}{
		{"listing", kubeclient.Health{}, ErrNotSynced, "its first list is under way"},
		{"refused", kubeclient.Health{Err: errors.New("pods is forbidden")}, ErrNotSynced, "pods is forbidden"},
		{"watching", kubeclient.Health{Synced: true, Current: true, Heard: time.Now().Add(-time.Hour)}, nil, ""},
		{"reconnecting", kubeclient.Health{Synced: true, Heard: time.Now().Add(-time.Second)}, nil, ""},
		{"cut off", kubeclient.Health{Synced: true, Heard: time.Now().Add(-time.Minute), Err: errors.New("connection refused")}, ErrStale, "has not heard from the apiserver for 1m0"},
	} {
		v := newView[testPod](podKind, nil, func() kubeclient.Health { return tc.health }, nil)
		_, _, err := v.Get("a", "b")
		if !errors.Is(err, tc.wantErr) || (tc.want != "" && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: got %v, want %v saying %q", tc.name, err, tc.wantErr, tc.want)
		}
		if _, listErr := v.List(""); !errors.Is(listErr, tc.wantErr) {
			t.Errorf("%s: list: got %v, want %v", tc.name, listErr, tc.wantErr)
		}
	}
	var missing *View[testPod]
	if _, _, err := missing.Get("a", "b"); !errors.Is(err, ErrNotSynced) {
		t.Errorf("a nil view: got %v, want ErrNotSynced", err)
	}
}

// TestViewAsksTheAPIServerOnAMiss: an object the view lacks is asked of
// the apiserver before GetOrFetch says it does not exist; a failure to ask
// is an error, never "not found"; get asks nothing.
func TestViewAsksTheAPIServerOnAMiss(t *testing.T) {
	ctx := context.Background()
	var asked []string
	fetch := func(_ context.Context, namespace, name string) ([]byte, error) {
		asked = append(asked, namespace+"/"+name)
		switch name {
		case "late":
			return []byte(pod(namespace, name, "builder")), nil
		case "gone":
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
		}
		return nil, errors.New("connection reset")
	}
	v := newView[testPod](podKind, nil, func() kubeclient.Health { return kubeclient.Health{Synced: true, Current: true} }, newAPIServerReads(newLookupRate(100, time.Now()), fetch, nil))
	if p, ok, err := v.GetOrFetch(ctx, "a", "late"); !ok || err != nil || p.Spec.ServiceAccountName != "builder" {
		t.Errorf("late: got %+v, %v, %v, want the apiserver's", p, ok, err)
	}
	if _, ok, err := v.GetOrFetch(ctx, "a", "gone"); ok || err != nil {
		t.Errorf("gone: got %v, %v, want not found", ok, err)
	}
	if _, ok, err := v.GetOrFetch(ctx, "a", "broken"); ok || err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Errorf("broken: got %v, %v, want the error", ok, err)
	}
	if _, ok, err := v.Get("a", "late"); ok || err != nil {
		t.Errorf("get of late: got %v, %v, want the view's answer alone", ok, err)
	}
	if want := []string{"a/late", "a/gone", "a/broken"}; !slices.Equal(asked, want) {
		t.Errorf("asked %v, want %v", asked, want)
	}
}

// TestLookupBounds: a lookup may bound how old the view may be more
// tightly than its kind's MaxStale; the view is current (age 0) while its
// watch is established, and StaleAtMost(0) answers only then.
func TestLookupBounds(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name    string
		health  kubeclient.Health
		bound   time.Duration
		wantErr error
	}{
		{"current, bound 0", kubeclient.Health{Synced: true, Current: true, Heard: now.Add(-time.Minute)}, 0, nil},
		{"2 s old, bound 0", kubeclient.Health{Synced: true, Heard: now.Add(-2 * time.Second)}, 0, ErrStale},
		{"2 s old, bound 5 s", kubeclient.Health{Synced: true, Heard: now.Add(-2 * time.Second)}, 5 * time.Second, nil},
		{"10 s old, bound 5 s", kubeclient.Health{Synced: true, Heard: now.Add(-10 * time.Second)}, 5 * time.Second, ErrStale},
		{"40 s old, bound 1 h: MaxStale still holds", kubeclient.Health{Synced: true, Heard: now.Add(-40 * time.Second)}, time.Hour, ErrStale},
	} {
		v := newView[testPod](podKind, []Index[testPod]{byImage}, func() kubeclient.Health { return tc.health }, nil)
		_, _, err := v.Get("a", "b", StaleAtMost(tc.bound))
		if !errors.Is(err, tc.wantErr) {
			t.Errorf("%s: get: got %v, want %v", tc.name, err, tc.wantErr)
		}
		if _, err := v.List("a", StaleAtMost(tc.bound)); !errors.Is(err, tc.wantErr) {
			t.Errorf("%s: list: got %v, want %v", tc.name, err, tc.wantErr)
		}
		if _, err := v.Indexed("image", "x", StaleAtMost(tc.bound)); !errors.Is(err, tc.wantErr) {
			t.Errorf("%s: indexed: got %v, want %v", tc.name, err, tc.wantErr)
		}
		if _, _, err := v.Get("a", "b"); tc.name == "10 s old, bound 5 s" && err != nil {
			t.Errorf("%s: without a bound: got %v, want the kind's MaxStale (30 s) to allow it", tc.name, err)
		}
	}
}

// fakeAPIServerReads is the apiserver behind a view, for the tests of the
// lookups that ask it: each GET and list is counted, and waits until
// release is closed when it is set.
type fakeAPIServerReads struct {
	mu      sync.Mutex
	gets    int
	lists   int
	release chan struct{}
	pods    []string // what a list answers, and a GET finds by name
}

func (f *fakeAPIServerReads) reads(perSecond float64) *apiserverReads {
	return newAPIServerReads(newLookupRate(perSecond, time.Now()), func(ctx context.Context, namespace, name string) ([]byte, error) {
		f.mu.Lock()
		f.gets++
		n, release, pods := f.gets, f.release, f.pods
		f.mu.Unlock()
		if release != nil {
			<-release
		}
		for _, p := range pods {
			if strings.Contains(p, `"namespace":"`+namespace+`","name":"`+name+`"`) {
				return []byte(strings.Replace(p, `"serviceAccountName":"`, `"serviceAccountName":"`+fmt.Sprint(n)+`-`, 1)), nil
			}
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
	}, func(ctx context.Context, namespace string, _ func() error, each func([]byte) error) error {
		f.mu.Lock()
		f.lists++
		pods := f.pods
		f.mu.Unlock()
		for _, p := range pods {
			if namespace == "" || strings.Contains(p, `"namespace":"`+namespace+`"`) {
				if err := each([]byte(p)); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

func (f *fakeAPIServerReads) count() (gets, lists int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets, f.lists
}

// TestMissesShareARequest: fifty lookups of one object the view lacks,
// arriving together, send the apiserver two GETs, not fifty: the first
// lookup's, and one that the others, which arrived while it was under
// way, share. Each of those answers as the later GET does, never as the
// one under way when it arrived.
func TestMissesShareARequest(t *testing.T) {
	f := &fakeAPIServerReads{release: make(chan struct{}), pods: []string{pod("a", "late", "builder")}}
	reads := f.reads(1000)
	v := newView[testPod](podKind, nil, func() kubeclient.Health { return kubeclient.Health{Synced: true, Current: true} }, reads)
	ctx := context.Background()
	first := make(chan string)
	go func() {
		p, _, _ := v.GetOrFetch(ctx, "a", "late")
		first <- p.Spec.ServiceAccountName
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if gets, _ := f.count(); gets == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first lookup sent no GET")
		}
	}
	var wg sync.WaitGroup
	answers := make([]string, 49)
	for i := range answers {
		wg.Go(func() {
			p, found, err := v.GetOrFetch(ctx, "a", "late")
			if !found || err != nil {
				t.Errorf("got %v, %v, want found", found, err)
			}
			answers[i] = p.Spec.ServiceAccountName
		})
	}
	// One more gives up while it waits: it leaves nothing behind.
	gaveUp, giveUp := context.WithCancel(ctx)
	wg.Go(func() {
		if _, _, err := v.GetOrFetch(gaveUp, "a", "late"); !errors.Is(err, context.Canceled) {
			t.Errorf("a lookup that gave up: got %v, want context.Canceled", err)
		}
	})
	time.Sleep(50 * time.Millisecond) // they arrive while the first GET is under way
	giveUp()
	close(f.release)
	wg.Wait()
	if n := len(v.gets.calls); n != 0 {
		t.Errorf("%d shared requests are left once every lookup has its answer, want none", n)
	}
	if got := <-first; got != "1-builder" {
		t.Errorf("the first lookup: got %q, want the first GET's answer", got)
	}
	for _, a := range answers {
		if a != "2-builder" {
			t.Errorf("a lookup that arrived while the first GET was under way: got %q, want the second GET's answer", a)
			break
		}
	}
	if gets, _ := f.count(); gets != 2 {
		t.Errorf("50 lookups sent %d GETs, want 2", gets)
	}
	if sent, shared := reads.counts["get"].sent.Load(), reads.counts["get"].shared.Load(); sent != 2 || shared != 48 {
		t.Errorf("counted %d sent and %d shared, want 2 and 48", sent, shared)
	}
}

// TestLookupOfAnImpossibleName: a lookup of a name no object can have,
// such as the empty one a request leaves unset, is not found, with no
// request: a GET without a name would be a list of the whole namespace.
func TestLookupOfAnImpossibleName(t *testing.T) {
	f := &fakeAPIServerReads{pods: []string{pod("a", "web", "builder")}}
	v := newView[testPod](podKind, nil, func() kubeclient.Health { return kubeclient.Health{Synced: true, Current: true} }, f.reads(1000))
	// ("", "a/web") is also one that lookups of a/web must not share.
	for _, key := range []objectKey{{"a", ""}, {"", ""}, {"a", ".."}, {"a", "."}, {"a", "web/x"}, {"", "a/web"}, {"a", "web%2F"}, {"..", "web"}} {
		for _, lookup := range []func(context.Context, string, string) (testPod, bool, error){v.GetLatest, func(ctx context.Context, ns, name string) (testPod, bool, error) {
			return v.GetOrFetch(ctx, ns, name)
		}} {
			if _, found, err := lookup(context.Background(), key.namespace, key.name); found || err != nil {
				t.Errorf("namespace %q, name %q: got %v, %v, want not found", key.namespace, key.name, found, err)
			}
		}
	}
	if gets, lists := f.count(); gets != 0 || lists != 0 {
		t.Errorf("lookups of impossible names sent %d GETs and %d lists, want none", gets, lists)
	}
}

// TestLookupsOverTheRate: a flood of lookups of objects the view lacks,
// each a different name, sends the apiserver no more than the rate allows
// (one second's worth at once); the others fail with ErrOverRate, which
// the policy answers undecided, and are counted.
func TestLookupsOverTheRate(t *testing.T) {
	f := &fakeAPIServerReads{}
	reads := f.reads(5)
	v := newView[testPod](podKind, nil, func() kubeclient.Health { return kubeclient.Health{Synced: true, Current: true} }, reads)
	start := time.Now()
	refused := 0
	for i := range 200 {
		_, found, err := v.GetOrFetch(context.Background(), "a", fmt.Sprint("made-up-", i))
		switch {
		case errors.Is(err, ErrOverRate):
			refused++
		case err != nil || found:
			t.Errorf("made-up-%d: got %v, %v, want not found or ErrOverRate", i, found, err)
		}
	}
	// 5 at once, and 5 a second after.
	allowed := 5 + int(time.Since(start).Seconds()*5)
	if gets, _ := f.count(); gets > allowed || gets < 5 {
		t.Errorf("200 misses sent %d GETs in %v, want 5 to %d", gets, time.Since(start), allowed)
	}
	if got := reads.counts["get"].refused.Load(); int(got) != refused || refused < 200-allowed {
		t.Errorf("counted %d refused, %d ErrOverRate, want at least %d", got, refused, 200-allowed)
	}
	_, _, err := v.GetOrFetch(context.Background(), "a", "one-more")
	if want := "-apiserver-lookups-per-second"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("over the rate: got %v, want an error naming %s", err, want)
	}
}

// TestLatestReads: GetLatest, ListLatest and IndexedLatest answer as the
// apiserver does now, when the view has not seen a write yet; the view's
// own lookups do not. A view filled once answers them from what it holds.
func TestLatestReads(t *testing.T) {
	ctx := context.Background()
	f := &fakeAPIServerReads{pods: []string{pod("a", "web", "builder", "nginx"), pod("a", "new", "default", "nginx"), pod("b", "db", "default", "postgres")}}
	v := newView[testPod](podKind, []Index[testPod]{byImage}, func() kubeclient.Health { return kubeclient.Health{Synced: true, Current: true} }, f.reads(100))
	if err := v.Replace(func(add func([]byte) error) error { return add([]byte(pod("a", "web", "builder", "nginx"))) }); err != nil {
		t.Fatal(err)
	}
	if got, _ := v.List("a"); !slices.Equal(names(got), []string{"web"}) {
		t.Errorf("list a: got %v, want the view's", names(got))
	}
	if got, err := v.ListLatest(ctx, "a"); err != nil || !slices.Equal(names(got), []string{"new", "web"}) {
		t.Errorf("ListLatest a: got %v, %v, want the apiserver's", names(got), err)
	}
	if got, err := v.IndexedLatest(ctx, "image", "nginx"); err != nil || !slices.Equal(names(got), []string{"new", "web"}) {
		t.Errorf("IndexedLatest nginx: got %v, %v, want the apiserver's", names(got), err)
	}
	if _, err := v.IndexedLatest(ctx, "color", "red"); err == nil {
		t.Error("IndexedLatest of an index the view lacks: got no error")
	}
	if _, found, err := v.GetLatest(ctx, "b", "db"); !found || err != nil {
		t.Errorf("GetLatest b/db: got %v, %v, want found", found, err)
	}
	if gets, lists := f.count(); gets != 1 || lists != 2 {
		t.Errorf("sent %d GETs and %d lists, want 1 and 2", gets, lists)
	}

	filled := filledView(t, podKind, pod("a", "web", "builder", "nginx"))
	if got, err := filled.ListLatest(ctx, "a"); err != nil || !slices.Equal(names(got), []string{"web"}) {
		t.Errorf("a filled view's ListLatest: got %v, %v, want what it holds", names(got), err)
	}
	if got, err := filled.IndexedLatest(ctx, "image", "nginx"); err != nil || !slices.Equal(names(got), []string{"web"}) {
		t.Errorf("a filled view's IndexedLatest: got %v, %v, want what it holds", names(got), err)
	}
}

// TestViewOfOneNamespace: a view of one namespace holds only its objects,
// and a lookup elsewhere is an error saying so, not a miss.
func TestViewOfOneNamespace(t *testing.T) {
	kind := podKind
	kind.Namespace = "a"
	v := filledView(t, kind, pod("a", "web", "x"), pod("b", "db", "x"))
	if got, err := v.List(""); err != nil || !slices.Equal(names(got), []string{"web"}) {
		t.Errorf("got %v, %v, want namespace a's alone", names(got), err)
	}
	if _, _, err := v.Get("b", "db"); err == nil || !strings.Contains(err.Error(), "holds only namespace a") {
		t.Errorf("get in b: got %v, want an error", err)
	}
}

// benchServiceAccount is a ServiceAccount as the apiserver lists it, with
// a label and the managedFields kubectl create leaves: about 600 bytes of
// JSON, numbered i, in one of 100 namespaces.
func benchServiceAccount(i int) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"account-%06d","namespace":"team-%03d","uid":"6f1c2a4e-%04d-4b7e-9c51-%012d","resourceVersion":"%d","creationTimestamp":"2026-11-26T20:00:00Z","labels":{"app.kubernetes.io/name":"web"},"managedFields":[{"manager":"kubectl-create","operation":"Update","apiVersion":"v1","time":"2026-11-26T20:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:app.kubernetes.io/name":{}}}}}]}}`, i, i%100, i%10000, i, 1000+i))
}

// benchFill fills v with n of benchServiceAccount's, as a list does.
func benchFill(tb testing.TB, v viewStore, n int) {
	tb.Helper()
	err := v.Replace(func(add func([]byte) error) error {
		for i := range n {
			if err := add(benchServiceAccount(i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// benchLabels is what a policy keeps of an object when it reads its
// labels.
type benchLabels struct {
	Metadata struct {
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
}

// BenchmarkViewMemory is a view's memory at 10,000 and 100,000
// ServiceAccounts, as the live heap after each fill: keeping nothing but
// the names (T struct{}, "names"), and keeping the labels too ("labels").
// ns/op is the time to decode and file them all, as the first list does.
func BenchmarkViewMemory(b *testing.B) {
	synced := func() kubeclient.Health { return kubeclient.Health{Synced: true, Current: true} }
	for _, n := range []int{10_000, 100_000} {
		for _, kind := range []struct {
			name string
			view func() viewStore
		}{
			{"names", func() viewStore { return newView[struct{}](podKind, nil, synced, nil) }},
			{"labels", func() viewStore { return newView[benchLabels](podKind, nil, synced, nil) }},
		} {
			b.Run(fmt.Sprintf("%s/%d", kind.name, n), func(b *testing.B) {
				var heap uint64
				for b.Loop() {
					before := liveHeap()
					v := kind.view()
					benchFill(b, v, n)
					heap = liveHeap() - before
					runtime.KeepAlive(v)
				}
				b.ReportMetric(float64(heap)/(1<<20), "MiB")
				b.ReportMetric(float64(heap)/float64(n), "bytes/object")
			})
		}
	}
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkViewGet is one lookup by namespace and name in a view of
// 100,000 ServiceAccounts, found and not, from the view alone.
func BenchmarkViewGet(b *testing.B) {
	var accounts *View[struct{}]
	store := ReadInto(&accounts, Kind{APIVersion: "v1", Kind: "ServiceAccount"}).makeView(func() kubeclient.Health { return kubeclient.Health{Synced: true, Current: true} }, nil)
	benchFill(b, store, 100_000)
	for _, name := range []string{"account-050050", "absent"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := accounts.Get("team-050", name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
