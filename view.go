package main

// The policy's view of the cluster: what it keeps of each object of a
// kind it reads (policy.reads), looked up by namespace and name, by
// namespace, and by an index the policy defines, without a request to the
// apiserver per review. main.go keeps each view in step with the apiserver
// (a kubeclient.Reflector: one list, then one watch); a test fills one
// from objects, and `webhook review -cluster` from a file, through the
// same door (reads.go).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/json"

	"github.com/example/webhook/jsonfield"
	"github.com/example/webhook/kubeclient"
)

// view is the policy's view of one kind of the cluster's objects: of
// each, only T, a struct of the policy's own holding the fields it reads,
// as decodeObject decodes the object under review. Its lookups say when
// the view cannot answer for the cluster: before it has synced, and once
// it has heard nothing from the apiserver for longer than its kind's
// MaxStale; a policy answers undecided(err) then. What they return is the
// view's: never write into it (a map or a slice of T is shared).
//
// Its memory is what T holds and the keys: bench/README.md measures it.
type view[T any] struct {
	kind    clusterKind
	indexes []viewIndex[T]
	// health says how current the view is: its Reflector's, or always
	// synced for a view filled once.
	health func() kubeclient.Health
	// fetch GETs an object from the apiserver: nil for a view filled once.
	fetch func(ctx context.Context, namespace, name string) ([]byte, error)

	mu      sync.RWMutex
	content *viewContent[T]
}

// viewIndex is an index a policy defines on a view (indexBy): its name,
// and the keys under which an object is found.
type viewIndex[T any] struct {
	name string
	keys func(T) []string
}

// indexBy defines an index named name, under which view.indexed finds each
// object by every key keys returns for it: the images of a Pod's
// containers, a ConfigMap's label, a name across namespaces (T then keeps
// metadata.name).
func indexBy[T any](name string, keys func(T) []string) viewIndex[T] {
	return viewIndex[T]{name: name, keys: keys}
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
// tells them apart.
var (
	errNotSynced = errors.New("not synced yet")
	errStale     = errors.New("too stale")
)

// defaultMaxStale is how long a view answers after it last heard from the
// apiserver, when its kind sets no MaxStale: longer than the reflector's
// reconnection after a watch ends (milliseconds) or a failure (0.8 to
// 1.6 s at first), short enough that a webhook cut off from the apiserver
// stops deciding from an old view within half a minute. A connection that
// died without a word is found by an HTTP/2 ping within 45 s
// (kubeclient.Client) before this begins.
const defaultMaxStale = 30 * time.Second

func newView[T any](kind clusterKind, indexes []viewIndex[T], health func() kubeclient.Health, fetch func(context.Context, string, string) ([]byte, error)) *view[T] {
	v := &view[T]{kind: kind, indexes: indexes, health: health, fetch: fetch}
	v.content = v.emptyContent()
	return v
}

// get returns what the policy keeps of the object name in namespace ("" for
// a kind of cluster scope) and whether the view has it, or an error when
// the view cannot say (errNotSynced, errStale). It asks the apiserver
// nothing: an object created a moment ago may not be there yet, as the
// watch brings it milliseconds later. A policy that denies what it does
// not find uses getOrFetch.
func (v *view[T]) get(namespace, name string) (T, bool, error) {
	var zero T
	if err := v.fresh(); err != nil {
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

// getOrFetch is get for a policy that denies what it does not find: an
// object the view lacks is asked of the apiserver, once, before
// getOrFetch says it does not exist, as it may have been created a moment
// ago (`kubectl apply -f dir/` creates a ServiceAccount just before the
// Deployment that names it). That GET, on a miss alone, is the only
// request a review costs the apiserver; a view filled from objects or a
// file answers from them alone.
func (v *view[T]) getOrFetch(ctx context.Context, namespace, name string) (T, bool, error) {
	obj, ok, err := v.get(namespace, name)
	if ok || err != nil || v.fetch == nil {
		return obj, ok, err
	}
	raw, err := v.fetch(ctx, namespace, name)
	if apierrors.IsNotFound(err) {
		return obj, false, nil
	}
	if err != nil {
		return obj, false, fmt.Errorf("the webhook's view of %s lacks %s, and asking the apiserver for it failed: %w", v.kind, objectKey{namespace, name}, err)
	}
	_, obj, err = v.decode(raw)
	if err != nil {
		return obj, false, err
	}
	return obj, true, nil
}

// list returns what the policy keeps of every object in namespace, or in
// every namespace for "", sorted by namespace and name, or an error when
// the view cannot say.
func (v *view[T]) list(namespace string) ([]T, error) {
	if err := v.fresh(); err != nil {
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

// indexed returns what the policy keeps of every object that index, an
// index of the view's kind (indexBy), finds under key, sorted by namespace
// and name, or an error when the view cannot say. An index the view does
// not have is an error, never an empty answer.
func (v *view[T]) indexed(index, key string) ([]T, error) {
	if err := v.fresh(); err != nil {
		return nil, err
	}
	i := slices.IndexFunc(v.indexes, func(x viewIndex[T]) bool { return x.name == index })
	if i < 0 {
		return nil, fmt.Errorf("the webhook's view of %s has no index %q: policy.go's reads names it with indexBy", v.kind, index)
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	var keys []objectKey
	for k := range v.content.indexed[i][key] {
		keys = append(keys, k)
	}
	return v.sortedLocked(keys), nil
}

// fresh returns nil when the view answers for the cluster, or says why it
// does not: it has not synced yet, or it has heard nothing from the
// apiserver for longer than its kind's MaxStale. A nil view, which
// main.go never hands a policy, is an error too, never a panic.
func (v *view[T]) fresh() error {
	if v == nil {
		return fmt.Errorf("the policy's view of a kind it reads was never made: policy.go's reads must name it with readInto: %w", errNotSynced)
	}
	h := v.health()
	switch {
	case !h.Synced && h.Err != nil:
		return fmt.Errorf("the webhook's view of %s is %w: %v", v.kind, errNotSynced, h.Err)
	case !h.Synced:
		return fmt.Errorf("the webhook's view of %s is %w: its first list is under way", v.kind, errNotSynced)
	case !h.Since.IsZero() && time.Since(h.Since) > v.kind.maxStale():
		why := "it is reconnecting"
		if h.Err != nil {
			why = h.Err.Error()
		}
		return fmt.Errorf("the webhook's view of %s is %w: it has heard nothing from the apiserver for %s (%s)", v.kind, errStale, time.Since(h.Since).Round(time.Second), why)
	}
	return nil
}

// holds reports, as an error, a namespace the view does not hold: one
// other than its kind's Namespace.
func (v *view[T]) holds(namespace string) error {
	if v.kind.Namespace != "" && namespace != v.kind.Namespace {
		return fmt.Errorf("the webhook's view of %s holds only namespace %s, not %q: policy.go's reads names the namespace", v.kind, v.kind.Namespace, namespace)
	}
	return nil
}

// sortedLocked returns the objects at keys, sorted; v.mu is held.
func (v *view[T]) sortedLocked(keys []objectKey) []T {
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
func (v *view[T]) size() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.content.count
}

// Replace makes the view's content the objects list adds, or, if one of
// them does not decode, keeps what it had (kubeclient.Store). Lookups are
// answered from the old content until the new one is whole: for a moment,
// both are in memory.
func (v *view[T]) Replace(list func(add func(object []byte) error) error) error {
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
func (v *view[T]) Apply(eventType string, object []byte) error {
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

func (v *view[T]) emptyContent() *viewContent[T] {
	c := &viewContent[T]{objects: map[string]map[string]T{}, indexed: make([]map[string]map[objectKey]struct{}, len(v.indexes))}
	for i := range c.indexed {
		c.indexed[i] = map[string]map[objectKey]struct{}{}
	}
	return c
}

func (v *view[T]) put(c *viewContent[T], key objectKey, obj T) {
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
func (v *view[T]) remove(c *viewContent[T], key objectKey) {
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
func (v *view[T]) decode(object []byte) (objectKey, T, error) {
	var obj T
	key, err := keyOf(object)
	if err != nil {
		return key, obj, fmt.Errorf("an object of %s: %w", v.kind, err)
	}
	if err := json.Unmarshal(object, &obj); err != nil {
		return key, obj, fmt.Errorf("%s %s does not decode into the policy's %T: %w", v.kind.Kind, key, obj, err)
	}
	return key, obj, nil
}

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
