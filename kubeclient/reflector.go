package kubeclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Store is what a Reflector keeps in step with a resource. Each object
// comes as its JSON, in a buffer the Reflector reuses: the store keeps
// what it needs of it, never the slice. The Reflector calls one method at
// a time.
type Store interface {
	// Replace makes the store's content what list adds, in place of
	// everything it held, or, if list (or add) fails, keeps what it held:
	// a store serves its old content until the new one is whole.
	Replace(list func(add func(object []byte) error) error) error
	// Apply applies one watch event: eventType is ADDED, MODIFIED or
	// DELETED.
	Apply(eventType string, object []byte) error
}

// Health is how current a Reflector's store is.
type Health struct {
	// Synced is true once a list has been whole.
	Synced bool
	// Since is zero while a watch is open: the store is as current as the
	// apiserver's watch cache. Otherwise it is when the store was last
	// known current: the end of its last list or watch, or the
	// Reflector's start.
	Since time.Time
	// Err is the last failure, until a watch opens.
	Err error
	// Objects is how many objects the last list held, and Lists and
	// Watches how many of each the Reflector has sent: one list, then a
	// watch every 5 to 10 minutes, is the steady state.
	Objects        int
	Lists, Watches int64
}

// What client-go's reflector does, which the Reflector follows
// (k8s.io/client-go v0.37.2, tools/cache/reflector.go).
const (
	// minWatchTimeout: each watch asks the apiserver to end it after a
	// time drawn from [minWatchTimeout, 2×minWatchTimeout], so that
	// clients that start together do not reconnect together
	// (defaultMinWatchTimeout, Reflector.watch).
	minWatchTimeout = 5 * time.Minute

	// The backoff after a failure: from backoffInitial, doubled each time
	// to backoffMax, each delay with up to as much again at random, and
	// back to backoffInitial after backoffReset with no failure
	// (defaultBackoffInit, …Max, …Factor, …Jitter, …Reset).
	backoffInitial = 800 * time.Millisecond
	backoffMax     = 30 * time.Second
	backoffReset   = 2 * time.Minute

	// listPageSize is the pager's page (k8s.io/client-go/tools/pager,
	// defaultPageSize).
	listPageSize = 500
)

// Reflector keeps a Store in step with one resource of the apiserver, as
// client-go's reflector keeps an informer's: it lists the resource, then
// watches it from the list's resourceVersion, with bookmarks, so that the
// apiserver bears one list and one long-lived watch, renewed every 5 to 10
// minutes, however many reviews read the store.
//
//   - The first list is at resourceVersion "0", served from the
//     apiserver's watch cache (relistResourceVersion), 500 objects a page
//     where the apiserver pages it (it does not from its cache).
//   - A watch that ends at its timeout is opened again from the last
//     resourceVersion seen, an object's or a bookmark's, with no list.
//   - A watch the apiserver ends with 410 Gone (its resourceVersion was
//     compacted away) is followed by a list at that resourceVersion, from
//     the watch cache; if that is gone too, or too new for the apiserver
//     it reached, a list at "" (from etcd, as of now), page by page
//     (isExpiredError, isTooLargeResourceVersionError,
//     setIsLastSyncResourceVersionUnavailable).
//   - Any other failure is followed, after the backoff, by a list at the
//     last resourceVersion: a watch that cannot start (the apiserver
//     unreachable, 429, 5xx) is opened again after the backoff, without
//     a list (isWatchErrorRetriable).
//
// Each state it enters is logged once: synced, and every failure with its
// reason. Health says how current the store is.
type Reflector struct {
	client   *Client
	resource Resource
	store    Store
	logger   *slog.Logger

	lists, watches atomic.Int64

	mu     sync.Mutex
	health Health
}

// NewReflector returns a Reflector of resource into store, logging to
// logger; Run starts it.
func NewReflector(client *Client, resource Resource, store Store, logger *slog.Logger) *Reflector {
	return &Reflector{client: client, resource: resource, store: store, logger: logger.With("resource", resource.String()),
		health: Health{Since: time.Now()}}
}

// Health says how current the store is.
func (r *Reflector) Health() Health {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.health
	h.Lists, h.Watches = r.lists.Load(), r.watches.Load()
	return h
}

// Run keeps the store in step until ctx is done.
func (r *Reflector) Run(ctx context.Context) {
	var delay backoff
	resourceVersion := "" // the last one seen, from which to watch
	listFrom, list := "0", true
	for ctx.Err() == nil {
		if list {
			rv, err := r.list(ctx, listFrom)
			if (apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge)) && listFrom != "" {
				r.logger.Info("listing again as of now: the resourceVersion listed from is no longer, or not yet, served", "resource_version", listFrom, "err", err)
				listFrom = ""
				continue // at once, as client-go's reflector does
			}
			if err != nil {
				r.failed(err)
				sleep(ctx, delay.next())
				continue
			}
			resourceVersion, listFrom, list = rv, rv, false
		}
		err := r.watch(ctx, &resourceVersion)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil: // the watch's timeout
			listFrom = resourceVersion
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
			r.logger.Info("listing again: the watch's resourceVersion has been compacted away", "resource_version", resourceVersion)
			listFrom, list = resourceVersion, true
		case errors.Is(err, errWatchNotStarted):
			r.failed(err)
			sleep(ctx, delay.next())
		default:
			r.failed(err)
			listFrom, list = resourceVersion, true
			sleep(ctx, delay.next())
		}
	}
}

// list replaces the store's content with a list at resourceVersion from,
// and returns the list's resourceVersion. Listing at a resourceVersion
// other than "0" or "" is served whole from the watch cache, where paging
// would go to etcd instead.
func (r *Reflector) list(ctx context.Context, from string) (string, error) {
	r.lists.Add(1)
	opts := ListOptions{ResourceVersion: from}
	if from == "0" || from == "" {
		opts.Limit = listPageSize
	}
	var rv string
	objects := 0
	err := r.store.Replace(func(add func([]byte) error) error {
		var err error
		rv, err = r.client.List(ctx, r.resource, opts, func(object []byte) error {
			objects++
			return add(object)
		})
		return err
	})
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	first := !r.health.Synced
	r.health.Synced, r.health.Since, r.health.Objects, r.health.Err = true, time.Now(), objects, nil
	r.mu.Unlock()
	if first {
		r.logger.Info("the view of the cluster is synced", "objects", objects, "resource_version", rv)
	}
	return rv, nil
}

// errWatchNotStarted marks a watch the apiserver did not answer with 200
// or could not be reached for: it is started again, after the backoff,
// from the same resourceVersion.
var errWatchNotStarted = errors.New("the watch did not start")

// watch watches from *resourceVersion until the watch ends, applying each
// event to the store and keeping *resourceVersion the last one seen. It
// returns nil when the apiserver ends the watch at its timeout.
func (r *Reflector) watch(ctx context.Context, resourceVersion *string) error {
	r.watches.Add(1)
	timeout := minWatchTimeout + rand.N(minWatchTimeout)
	// The apiserver ends the watch at its timeout; the context ends it a
	// little later in case the apiserver never does.
	ctx, cancel := context.WithTimeout(ctx, timeout+pingInterval)
	defer cancel()
	w, err := r.client.Watch(ctx, r.resource, *resourceVersion, timeout)
	if err != nil {
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return err
		}
		return fmt.Errorf("%w: %w", errWatchNotStarted, err)
	}
	defer w.Close()
	r.mu.Lock()
	r.health.Since, r.health.Err = time.Time{}, nil
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.health.Since = time.Now()
		r.mu.Unlock()
	}()
	for {
		event, err := w.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if event.Type != "BOOKMARK" {
			if err := r.store.Apply(event.Type, event.Object); err != nil {
				return err
			}
		}
		*resourceVersion = event.ResourceVersion
	}
}

// failed records and logs err.
func (r *Reflector) failed(err error) {
	r.mu.Lock()
	r.health.Err = err
	r.mu.Unlock()
	r.logger.Warn("the view of the cluster failed to update; retrying", "err", err)
}

// backoff is the delay after each failure (the constants above).
type backoff struct {
	last time.Duration // the last delay, before its jitter
	at   time.Time     // when it was taken
}

func (b *backoff) next() time.Duration {
	now := time.Now()
	if b.last == 0 || now.Sub(b.at) > backoffReset {
		b.last = backoffInitial
	} else {
		b.last = min(2*b.last, backoffMax)
	}
	b.at = now
	return b.last + rand.N(b.last)
}

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
