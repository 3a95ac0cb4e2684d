package cluster

// The policy's view of the cluster: what it keeps of each object of a
// kind it reads (policy.Reads), looked up by namespace and name, by
// namespace, and by an index the policy defines, without a request to the
// apiserver per review. main.go keeps each view in step with the apiserver
// (a kubeclient.Reflector: one list, then one watch); a test fills one
// from objects, and `webhook review -cluster` from a file, through the
// same door (reads.go). What a lookup cannot answer from the view, a miss
// of GetOrFetch or a read as of now (GetLatest, ListLatest,
// IndexedLatest), it asks the apiserver, sharing the request with the
// lookups waiting for the same and within the operator's rate
// (reads.go).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/json"

	"github.com/example/webhook/cluster/kubeclient"
	"github.com/example/webhook/jsonfield"
)

// View is the policy's view of one kind of the cluster's objects: of
// each, only T, a struct of the policy's own holding the fields it reads,
// as decodeObject decodes the object under review. Its lookups say when
// the view cannot answer for the cluster: before it has synced, and once
// it may lag the apiserver by more than its kind's MaxStale, or the
// lookup's own bound (StaleAtMost); a policy answers unavailable(err) then.
// What they return is the view's: never write into it (a map or a slice
// of T is shared).
//
// Its memory is what T holds and the keys: bench/README.md measures it.
type View[T any] struct {
	kind    Kind
	indexes []Index[T]
	// health says how current the view is: its Reflector's, or always
	// current for a view filled once.
	health func() kubeclient.Health
	// apiserver asks the apiserver itself: nil for a view filled once,
	// which answers every lookup from what it was filled with.
	apiserver *apiserverReads
	gets      sharing[objectKey, fetched[T]]
	lists     sharing[string, []listed[T]]

	mu      sync.RWMutex
	content *viewContent[T]
}

// fetched is an object the apiserver was asked for: T, or not found.
type fetched[T any] struct {
	obj   T
	found bool
}

// listed is an object of a list the apiserver answered.
type listed[T any] struct {
	key objectKey
	obj T
}

// Bound is how old, at most, the view may be for one lookup to
// answer from it: StaleAtMost makes one.
type Bound struct{ maxStale time.Duration }

// StaleAtMost bounds how far behind the apiserver the view may be for this
// lookup to answer from it, when that is tighter than the kind's MaxStale:
// the view is current (0) while its watch is established, and otherwise as
// old as the time since it last heard from the apiserver.
// StaleAtMost(0) answers only while the watch is established. Past the
// bound, the lookup's error is ErrStale.
func StaleAtMost(d time.Duration) Bound { return Bound{maxStale: max(d, 0)} }

// Index is an index a policy defines on a view (IndexBy): its name,
// and the keys under which an object is found.
type Index[T any] struct {
	name string
	keys func(T) []string
}

// IndexBy defines an index named name, under which View.Indexed finds each
// object by every key keys returns for it: the images of a Pod's
// containers, a ConfigMap's label, a name across namespaces (T then keeps
// metadata.name).
func IndexBy[T any](name string, keys func(T) []string) Index[T] {
	return Index[T]{name: name, keys: keys}
}

// objectKey is an object's place in a view: its namespace ("" for a kind
// of cluster scope) and name.
type objectKey struct{ namespace, name string }

func (k objectKey) String() string {
	if k.namespace == "" {
		return k.name
	}
	return k.namespace + "/" + k.name
}

// viewContent is a view's objects and indexes at one time.
type viewContent[T any] struct {
	objects map[string]map[string]T             // by namespace, then name
	indexed []map[string]map[objectKey]struct{} // by index, then key
	count   int
}

// The errors of a view that cannot answer for the cluster: errors.Is
// tells them apart. ErrOverRate (reads.go) is a lookup the apiserver
// was not asked, the webhook's rate of such lookups spent.
var (
	ErrNotSynced = errors.New("not synced yet")
	ErrStale     = errors.New("too stale")
)

// defaultMaxStale is how long a view answers after it last heard from the
// apiserver, when its kind sets no MaxStale: longer than the reflector's
// reconnection after a watch ends (a second, until the new watch is
// established) or a failure (0.8 to 1.6 s at first), short enough that a
// webhook cut off from the apiserver stops deciding from an old view
// within half a minute. A connection that died without a word is found by
// an HTTP/2 ping within 45 s (kubeclient.Client) before this begins.
const defaultMaxStale = 30 * time.Second

func newView[T any](kind Kind, indexes []Index[T], health func() kubeclient.Health, apiserver *apiserverReads) *View[T] {
	v := &View[T]{kind: kind, indexes: indexes, health: health, apiserver: apiserver}
	v.content = v.emptyContent()
	return v
}

// Get returns what the policy keeps of the object name in namespace ("" for
// a kind of cluster scope) and whether the view has it, or an error when
// the view cannot say (ErrNotSynced, ErrStale). It asks the apiserver
// nothing: an object created a moment ago may not be there yet, as the
// watch brings it milliseconds later. A policy that denies what it does
// not find uses GetOrFetch, or GetLatest.
func (v *View[T]) Get(namespace, name string, bounds ...Bound) (T, bool, error) {
	var zero T
	if err := v.fresh(bounds); err != nil {
		return zero, false, err
	}
	if err := v.holds(namespace); err != nil {
		return zero, false, err
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	obj, ok := v.content.objects[namespace][name]
	return obj, ok, nil
}

// GetOrFetch is Get for a policy that denies what it does not find: an
// object the view lacks is asked of the apiserver (a GET, as GetLatest
// sends it) before GetOrFetch says it does not exist, as it may have been
// created a moment ago (`kubectl apply -f dir/` creates a ServiceAccount
// just before the Deployment that names it). That GET, on a miss alone,
// is shared by the lookups of the same object that wait for it, and
// counts against the webhook's rate of lookups that reach the apiserver:
// over it, the error is ErrOverRate. A view filled from objects or a file
// answers from them alone.
func (v *View[T]) GetOrFetch(ctx context.Context, namespace, name string, bounds ...Bound) (T, bool, error) {
	obj, ok, err := v.Get(namespace, name, bounds...)
	if ok || err != nil || v.apiserver == nil {
		return obj, ok, err
	}
	return v.GetLatest(ctx, namespace, name)
}

// GetLatest is Get as of now: the object is asked of the apiserver (a GET
// with no resourceVersion, which the apiserver answers from etcd), whether
// or not the view has it, for a decision that must see a write made a
// moment ago. The lookups of one object that arrive while the GET is
// under way share the next one; each GET counts against the webhook's
// rate of lookups that reach the apiserver (ErrOverRate over it). It
// costs a round trip to the apiserver and etcd: docs/cluster.md.
func (v *View[T]) GetLatest(ctx context.Context, namespace, name string) (T, bool, error) {
	if v == nil {
		var zero T
		return zero, false, v.fresh(nil)
	}
	if v.apiserver == nil {
		return v.Get(namespace, name)
	}
	if err := v.holds(namespace); err != nil {
		var zero T
		return zero, false, err
	}
	if !possibleName(namespace, name) {
		var zero T
		return zero, false, nil // nothing to ask: a path without a name is a list
	}
	got, shared, err := v.gets.do(ctx, objectKey{namespace, name}, func(ctx context.Context) (fetched[T], error) {
		if err := v.apiserver.take("get"); err != nil {
			return fetched[T]{}, err
		}
		raw, err := v.apiserver.get(ctx, namespace, name)
		if apierrors.IsNotFound(err) {
			return fetched[T]{}, nil
		}
		if err != nil {
			return fetched[T]{}, err
		}
		_, obj, err := v.decode(raw)
		return fetched[T]{obj: obj, found: err == nil}, err
	})
	v.apiserver.shared("get", shared)
	if err != nil {
		return got.obj, false, fmt.Errorf("the webhook asked the apiserver for %s %s, and could not learn it: %w", v.kind.Kind, objectKey{namespace, name}, err)
	}
	return got.obj, got.found, nil
}

// possibleName reports whether an object may be named name in namespace
// ("" for a kind of cluster scope). The apiserver stores no object whose
// name or namespace is empty or not a path segment: ".", "..", or one with
// "/" or "%" (k8s.io/apiserver v0.37.2,
// pkg/registry/generic/registry/store.go, NamespaceKeyFunc). A GET of one
// is never needed, and would be another request: without a name, a list.
func possibleName(namespace, name string) bool {
	return name != "" && len(content.IsPathSegmentName(name)) == 0 &&
		(namespace == "" || len(content.IsPathSegmentName(namespace)) == 0)
}

// List returns what the policy keeps of every object in namespace, or in
// every namespace for "", sorted by namespace and name, or an error when
// the view cannot say.
func (v *View[T]) List(namespace string, bounds ...Bound) ([]T, error) {
	if err := v.fresh(bounds); err != nil {
		return nil, err
	}
	if namespace != "" {
		if err := v.holds(namespace); err != nil {
			return nil, err
		}
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	var keys []objectKey
	for ns, names := range v.content.objects {
		if namespace == "" || ns == namespace {
			for name := range names {
				keys = append(keys, objectKey{ns, name})
			}
		}
	}
	return v.sortedLocked(keys), nil
}

// ListLatest is List as of now: the apiserver lists namespace (every one
// the view holds, for ""), with no resourceVersion, a consistent read,
// whatever the view holds. The lookups of one namespace that arrive while
// a list is under way share the next one; each list counts against the
// webhook's rate of lookups that reach the apiserver (ErrOverRate over
// it). It costs the apiserver a list of the namespace, and the webhook
// decoding it: docs/cluster.md.
func (v *View[T]) ListLatest(ctx context.Context, namespace string) ([]T, error) {
	all, err := v.latest(ctx, namespace)
	if err != nil || all == nil {
		return nil, err
	}
	out := make([]T, len(all))
	for i, l := range all {
		out[i] = l.obj
	}
	return out, nil
}

// Indexed returns what the policy keeps of every object that index, an
// index of the view's kind (IndexBy), finds under key, sorted by namespace
// and name, or an error when the view cannot say. An index the view does
// not have is an error, never an empty answer.
func (v *View[T]) Indexed(index, key string, bounds ...Bound) ([]T, error) {
	if err := v.fresh(bounds); err != nil {
		return nil, err
	}
	i, err := v.index(index)
	if err != nil {
		return nil, err
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	var keys []objectKey
	for k := range v.content.indexed[i][key] {
		keys = append(keys, k)
	}
	return v.sortedLocked(keys), nil
}

// IndexedLatest is Indexed as of now: the apiserver lists every object the
// view holds (ListLatest of ""), and index is applied to that. It costs a
// list of the whole kind: a policy that knows the namespace calls
// ListLatest of it instead.
func (v *View[T]) IndexedLatest(ctx context.Context, index, key string) ([]T, error) {
	if v == nil {
		return nil, v.fresh(nil)
	}
	i, err := v.index(index)
	if err != nil {
		return nil, err
	}
	all, err := v.latest(ctx, "")
	if err != nil {
		return nil, err
	}
	var out []T
	for _, l := range all {
		if slices.Contains(v.indexes[i].keys(l.obj), key) {
			out = append(out, l.obj)
		}
	}
	return out, nil
}

// latest is what ListLatest and IndexedLatest read: every object of
// namespace ("" for every one the view holds) as the apiserver lists it
// now, sorted, or the view's own for a view filled once.
func (v *View[T]) latest(ctx context.Context, namespace string) ([]listed[T], error) {
	if v == nil {
		return nil, v.fresh(nil)
	}
	if namespace != "" {
		if err := v.holds(namespace); err != nil {
			return nil, err
		}
	}
	if v.apiserver == nil {
		if err := v.fresh(nil); err != nil {
			return nil, err
		}
		v.mu.RLock()
		defer v.mu.RUnlock()
		var all []listed[T]
		for ns, names := range v.content.objects {
			if namespace == "" || ns == namespace {
				for name, obj := range names {
					all = append(all, listed[T]{objectKey{ns, name}, obj})
				}
			}
		}
		sortListed(all)
		return all, nil
	}
	if namespace == "" {
		namespace = v.kind.Namespace
	}
	all, shared, err := v.lists.do(ctx, namespace, func(ctx context.Context) ([]listed[T], error) {
		if err := v.apiserver.take("list"); err != nil {
			return nil, err
		}
		var all []listed[T]
		err := v.apiserver.list(ctx, namespace, v.apiserver.nextPage, func(object []byte) error {
			key, obj, err := v.decode(object)
			if err != nil {
				return err
			}
			all = append(all, listed[T]{key, obj})
			return nil
		})
		sortListed(all)
		return all, err
	})
	v.apiserver.shared("list", shared)
	if err != nil {
		where := "every namespace"
		if namespace != "" {
			where = "namespace " + namespace
		}
		return nil, fmt.Errorf("the webhook asked the apiserver for the %s of %s, and could not learn them: %w", v.kind.Kind, where, err)
	}
	return all, nil
}

func sortListed[T any](all []listed[T]) {
	slices.SortFunc(all, func(a, b listed[T]) int {
		return cmp.Or(cmp.Compare(a.key.namespace, b.key.namespace), cmp.Compare(a.key.name, b.key.name))
	})
}

// index returns the place of the index named name among the view's.
func (v *View[T]) index(name string) (int, error) {
	i := slices.IndexFunc(v.indexes, func(x Index[T]) bool { return x.name == name })
	if i < 0 {
		return 0, fmt.Errorf("the webhook's view of %s has no index %q: policy.go's reads names it with IndexBy", v.kind, name)
	}
	return i, nil
}

// fresh returns nil when the view answers for the cluster, or says why it
// does not: it has not synced yet, or it may lag the apiserver by more
// than its kind's MaxStale or a bound of the lookup's (StaleAtMost). A nil
// view, which main.go never hands a policy, is an error too, never a
// panic.
func (v *View[T]) fresh(bounds []Bound) error {
	if v == nil {
		return fmt.Errorf("the policy's view of a kind it reads was never made: policy.go's Reads must name it with ReadInto, on a pointer receiver (p *policy) so that ReadInto writes into the policy and not a copy: %w", ErrNotSynced)
	}
	h := v.health()
	switch {
	case !h.Synced && h.Err != nil:
		return fmt.Errorf("the webhook's view of %s is %w: %v", v.kind, ErrNotSynced, h.Err)
	case !h.Synced:
		return fmt.Errorf("the webhook's view of %s is %w: its first list is under way", v.kind, ErrNotSynced)
	}
	if h.Current {
		return nil // as current as the apiserver's watch, whatever the bound
	}
	limit, whose := v.kind.maxStale(), "its MaxStale"
	for _, b := range bounds {
		if b.maxStale < limit {
			limit, whose = b.maxStale, "this lookup's bound"
		}
	}
	if age := h.Age(time.Now()); age > limit {
		why := "its watch is not yet established"
		if h.Err != nil {
			why = h.Err.Error()
		}
		return fmt.Errorf("the webhook's view of %s is %w: it has not heard from the apiserver for %s, longer than %s (%s) allows (%s)", v.kind, ErrStale, age.Round(time.Millisecond), whose, limit, why)
	}
	return nil
}

// holds reports, as an error, a namespace the view does not hold: one
// other than its kind's Namespace.
func (v *View[T]) holds(namespace string) error {
	if v.kind.Namespace != "" && namespace != v.kind.Namespace {
		return fmt.Errorf("the webhook's view of %s holds only namespace %s, not %q: policy.go's reads names the namespace", v.kind, v.kind.Namespace, namespace)
	}
	return nil
}

// sortedLocked returns the objects at keys, sorted; v.mu is held.
func (v *View[T]) sortedLocked(keys []objectKey) []T {
	slices.SortFunc(keys, func(a, b objectKey) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
	})
	out := make([]T, len(keys))
	for i, k := range keys {
		out[i] = v.content.objects[k.namespace][k.name]
	}
	return out
}

// size is how many objects the view holds.
func (v *View[T]) size() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.content.count
}

// Replace makes the view's content the objects list adds, or, if one of
// them does not decode, keeps what it had (kubeclient.Store). Lookups are
// answered from the old content until the new one is whole: for a moment,
// both are in memory.
func (v *View[T]) Replace(list func(add func(object []byte) error) error) error {
	next := v.emptyContent()
	err := list(func(object []byte) error {
		key, obj, err := v.decode(object)
		if err != nil {
			return err
		}
		if v.kind.Namespace == "" || key.namespace == v.kind.Namespace {
			v.put(next, key, obj)
		}
		return nil
	})
	if err != nil {
		return err
	}
	v.mu.Lock()
	v.content = next
	v.mu.Unlock()
	return nil
}

// Apply applies a watch event (kubeclient.Store).
func (v *View[T]) Apply(eventType string, object []byte) error {
	if eventType == "DELETED" {
		key, err := keyOf(object)
		if err != nil {
			return fmt.Errorf("a %s of %s: %w", eventType, v.kind, err)
		}
		v.mu.Lock()
		defer v.mu.Unlock()
		v.remove(v.content, key)
		return nil
	}
	key, obj, err := v.decode(object)
	if err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.remove(v.content, key)
	v.put(v.content, key, obj)
	return nil
}

func (v *View[T]) emptyContent() *viewContent[T] {
	c := &viewContent[T]{objects: map[string]map[string]T{}, indexed: make([]map[string]map[objectKey]struct{}, len(v.indexes))}
	for i := range c.indexed {
		c.indexed[i] = map[string]map[objectKey]struct{}{}
	}
	return c
}

func (v *View[T]) put(c *viewContent[T], key objectKey, obj T) {
	names := c.objects[key.namespace]
	if names == nil {
		names = map[string]T{}
		c.objects[key.namespace] = names
	}
	names[key.name] = obj
	c.count++
	for i, index := range v.indexes {
		for _, k := range index.keys(obj) {
			set := c.indexed[i][k]
			if set == nil {
				set = map[objectKey]struct{}{}
				c.indexed[i][k] = set
			}
			set[key] = struct{}{}
		}
	}
}

// remove takes the object at key out of c, and out of its indexes under
// the keys its old version gave.
func (v *View[T]) remove(c *viewContent[T], key objectKey) {
	old, ok := c.objects[key.namespace][key.name]
	if !ok {
		return
	}
	delete(c.objects[key.namespace], key.name)
	if len(c.objects[key.namespace]) == 0 {
		delete(c.objects, key.namespace)
	}
	c.count--
	for i, index := range v.indexes {
		for _, k := range index.keys(old) {
			delete(c.indexed[i][k], key)
			if len(c.indexed[i][k]) == 0 {
				delete(c.indexed[i], k)
			}
		}
	}
}

// decode returns an object's key and what the policy keeps of it: T,
// decoded case-sensitively as the apiserver decodes, unknown fields
// skipped (decodeObject). An object that does not decode into T is an
// error naming it and the field: the view keeps its old content, and
// fails closed once stale, rather than go without the object.
func (v *View[T]) decode(object []byte) (objectKey, T, error) {
	var obj T
	key, err := keyOf(object)
	if err != nil {
		return key, obj, fmt.Errorf("an object of %s: %w", v.kind, err)
	}
	if err := json.Unmarshal(object, &obj); err != nil {
		// Logged, and in the policy's errors: never a value, which a field
		// decoder quotes (a time's "parsing time \"…\"") and may be a Secret's.
		msg := quotedValue.ReplaceAllLiteralString(err.Error(), `"…"`)
		return key, obj, fmt.Errorf("%s %s does not decode into the policy's %T: %s", v.kind.Kind, key, obj, msg)
	}
	return key, obj, nil
}

// quotedValue is a JSON string in a decoder's error.
var quotedValue = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// keyOf reads an object's metadata.namespace and .name, reading the
// object only as far as its metadata.
func keyOf(object []byte) (objectKey, error) {
	meta, found, err := jsonfield.Top(object, "metadata")
	if err != nil || !found {
		return objectKey{}, fmt.Errorf("it has no metadata (%v)", err)
	}
	fields, err := jsonfield.Members(meta, "namespace", "name")
	if err != nil {
		return objectKey{}, fmt.Errorf("metadata: %w", err)
	}
	var key objectKey
	for i, into := range []*string{&key.namespace, &key.name} {
		if fields[i] != nil {
			if err := json.Unmarshal(fields[i], into); err != nil {
				return objectKey{}, fmt.Errorf("metadata: %w", err)
			}
		}
	}
	if key.name == "" {
		return objectKey{}, errors.New("it has no metadata.name")
	}
	return key, nil
}

// sharing lets the lookups that wait for the same request to the apiserver
// share one. A lookup shares only a request sent after it arrived: one
// already under way may answer as of a moment before the write the lookup
// must see, so the lookups that arrive meanwhile share the next one, sent
// when it ends. Of each key, one request at a time is under way.
type sharing[K comparable, R any] struct {
	mu    sync.Mutex
	calls map[K]*sharedCall[R] // by key: the one under way, or the next, not yet sent
}

type sharedCall[R any] struct {
	after   <-chan struct{} // the request this one waits for, if any
	sending bool            // a lookup is sending it
	waiting int             // lookups that share it and have not given up
	next    *sharedCall[R]  // the one that lookups arriving while it is under way share
	done    chan struct{}   // closed once val and err are set
	val     R
	err     error
}

// do returns what send returns for key, sending it at most once for the
// lookups that arrive together, and whether it was another lookup's
// request. send runs with the context of the lookup that sends it; one
// that fails because that context ended is sent again for a lookup whose
// own has not.
func (s *sharing[K, R]) do(ctx context.Context, key K, send func(context.Context) (R, error)) (val R, shared bool, err error) {
	s.mu.Lock()
	c := s.calls[key]
	switch {
	case c == nil:
		c = &sharedCall[R]{done: make(chan struct{})}
		if s.calls == nil {
			s.calls = map[K]*sharedCall[R]{}
		}
		s.calls[key] = c
	case c.sending:
		if c.next == nil {
			c.next = &sharedCall[R]{after: c.done, done: make(chan struct{})}
		}
		c = c.next
	}
	c.waiting++
	s.mu.Unlock()
	if c.after != nil {
		select {
		case <-c.after:
		case <-ctx.Done():
			s.giveUp(key, c)
			return val, false, ctx.Err()
		}
	}
	s.mu.Lock()
	if !c.sending {
		c.sending = true
		s.mu.Unlock()
		val, err = send(ctx)
		s.mu.Lock()
		c.val, c.err = val, err
		close(c.done)
		if c.next != nil && c.next.waiting > 0 {
			s.calls[key] = c.next
		} else {
			delete(s.calls, key)
		}
		s.mu.Unlock()
		return val, false, err
	}
	s.mu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		s.giveUp(key, c)
		return val, false, ctx.Err()
	}
	if errors.Is(c.err, context.Canceled) || errors.Is(c.err, context.DeadlineExceeded) {
		return s.do(ctx, key, send) // the sender's context ended, not this lookup's
	}
	return c.val, true, c.err
}

// giveUp is a lookup that waited for c and gives up: a request not yet
// sent that no lookup waits for any longer is forgotten, so that lookups
// of made-up keys that give up leave nothing behind.
func (s *sharing[K, R]) giveUp(key K, c *sharedCall[R]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.waiting--
	if c.waiting == 0 && !c.sending && s.calls[key] == c {
		delete(s.calls, key)
	}
}
