package review

// The stored versions replay remembers: for an UPDATE's or a DELETE's
// oldObject, and the object a PATCH applied to, the last version of that
// object the log showed as stored, in bounded memory.

import (
	"container/list"
	"hash/maphash"
	"strings"

	"k8s.io/apimachinery/pkg/util/resourceversion"
)

const (
	// defaultVersionCacheBytes is how much of the stored versions replay
	// keeps by default (-audit-cache-bytes): a few tens of thousands of
	// objects of a few KB, which covers the objects a week's log writes
	// more than once in most clusters, and half of replay's peak memory
	// (bench/README.md).
	defaultVersionCacheBytes = 64 << 20

	// versionOverheadBytes is what one kept version costs beside its JSON,
	// its key and its resourceVersion: its list element, its map entry and
	// its record.
	versionOverheadBytes = 176

	// maxDroppedKeys bounds how many dropped objects replay remembers, to
	// say of an UPDATE that finds no earlier version whether the cache
	// dropped it (raise -audit-cache-bytes) or the log never had it: a
	// 64-bit hash each, about 3 MiB at most.
	maxDroppedKeys = 1 << 17
)

// storedVersion is an object as the apiserver stored it, and where the log
// showed it.
type storedVersion struct {
	key             string
	raw             []byte // JSON, as the event held it
	resourceVersion string // its metadata's
	at              logLine
}

// versionCache keeps the last stored version of each object, least
// recently stored out first once its bytes pass maxBytes, and remembers
// (up to maxDroppedKeys) which objects it let go.
type versionCache struct {
	maxBytes int64
	bytes    int64
	byKey    map[string]*list.Element // of *storedVersion
	lru      *list.List               // front: most recently stored

	seed    maphash.Seed
	dropped map[uint64]struct{}
	// droppedCount is every version let go, remembered or not.
	droppedCount int
	// blind are the objects written by a request whose result the log
	// does not hold (up to maxDroppedKeys), and the line that wrote them.
	blind map[uint64]logLine
}

func newVersionCache(maxBytes int64) *versionCache {
	return &versionCache{maxBytes: maxBytes, byKey: map[string]*list.Element{}, lru: list.New(), seed: maphash.MakeSeed(),
		dropped: map[uint64]struct{}{}, blind: map[uint64]logLine{}}
}

func (c *versionCache) cost(v *storedVersion) int64 {
	return int64(len(v.raw)+len(v.key)+len(v.resourceVersion)) + versionOverheadBytes
}

// put keeps raw, of resourceVersion, as the stored version of key,
// replacing the one before, and lets the oldest go while the cache holds
// more than maxBytes. A version larger than the whole cache is not kept.
// One older than the version kept, which a log shows after it when
// requests overlap or several apiservers write it, is not kept either; of
// two the apiserver's rules cannot order, neither is (writtenBlind).
func (c *versionCache) put(key string, raw []byte, resourceVersion string, at logLine) {
	if e, ok := c.byKey[key]; ok {
		switch order, err := resourceversion.CompareResourceVersion(resourceVersion, e.Value.(*storedVersion).resourceVersion); {
		case err != nil:
			c.writtenBlind(key, at)
			return
		case order < 0:
			return
		}
	}
	c.remove(key)
	v := &storedVersion{key: key, raw: raw, resourceVersion: resourceVersion, at: at}
	if c.cost(v) > c.maxBytes {
		c.drop(key)
		return
	}
	c.byKey[key] = c.lru.PushFront(v)
	c.bytes += c.cost(v)
	for c.bytes > c.maxBytes {
		oldest := c.lru.Back()
		old := oldest.Value.(*storedVersion)
		c.lru.Remove(oldest)
		delete(c.byKey, old.key)
		c.bytes -= c.cost(old)
		c.drop(old.key)
	}
	delete(c.dropped, maphash.String(c.seed, key))
	delete(c.blind, maphash.String(c.seed, key))
}

// writtenBlind forgets key's version: at wrote the object, and the log
// does not hold what it stored.
func (c *versionCache) writtenBlind(key string, at logLine) {
	c.remove(key)
	if h := maphash.String(c.seed, key); len(c.blind) < maxDroppedKeys {
		c.blind[h] = at
	}
}

// writtenBlindUnder is writtenBlind of each version kept whose key begins
// with prefix (versionPrefix).
func (c *versionCache) writtenBlindUnder(prefix string, at logLine) {
	for key := range c.byKey {
		if strings.HasPrefix(key, prefix) {
			c.writtenBlind(key, at)
		}
	}
}

func (c *versionCache) drop(key string) {
	c.droppedCount++
	if len(c.dropped) < maxDroppedKeys {
		c.dropped[maphash.String(c.seed, key)] = struct{}{}
	}
}

// get returns the stored version of key, or nil and whether the cache let
// it go, or the line that wrote it without its result.
func (c *versionCache) get(key string) (v *storedVersion, dropped bool, writtenAt *logLine) {
	if e, ok := c.byKey[key]; ok {
		return e.Value.(*storedVersion), false, nil
	}
	h := maphash.String(c.seed, key)
	if at, ok := c.blind[h]; ok {
		return nil, false, &at
	}
	_, dropped = c.dropped[h]
	return nil, dropped, nil
}

// remove forgets key's version: the object was deleted.
func (c *versionCache) remove(key string) {
	if e, ok := c.byKey[key]; ok {
		c.lru.Remove(e)
		delete(c.byKey, key)
		c.bytes -= c.cost(e.Value.(*storedVersion))
	}
}

// len is how many versions the cache holds.
func (c *versionCache) len() int { return len(c.byKey) }
