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
	// Current is true while the store is as current as the apiserver's
	// watch: a watch is open and established, having delivered an event
	// or a bookmark, or stayed open EstablishedAfter without an error,
	// within SilentAfter of the last thing delivered.
	Current bool
	// Heard is when the store was last known to be as current as the
	// apiserver: the start of a list (its snapshot) once it is whole, an
	// event or a bookmark, or the end of an established watch but at 410.
	// A watch merely answered (200) is not heard from: an apiserver that
	// cannot serve its resourceVersion answers 200, then an ERROR event,
	// which may come after EstablishedAfter: then the watch's quiet
	// established nothing, and Heard is as it was before it.
	Heard time.Time
	// Err is the last failure, until a watch is established.
	Err error
	// Objects is how many objects the last list held. Lists and Watches
	// are the requests of each kind the Reflector has sent, whatever
	// their answer (one list, then a watch every 5 to 10 minutes, is the
	// steady state), and Failures the lists and watches that failed or
	// ended too soon.
	Objects                  int
	Lists, Watches, Failures int64
}

// Age is how far behind the apiserver the store may be at now: 0 while
// it is current, else the time since it was last heard from.
func (h Health) Age(now time.Time) time.Duration {
	if h.Current || h.Heard.IsZero() {
		return 0
	}
	return now.Sub(h.Heard)
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

// EstablishedAfter is how long a watch that has delivered nothing must
// stay open, without an error, before the store counts as current: a
// watch the apiserver cannot serve ends at once (an ERROR event after
// its 200), and a watch that ends sooner having delivered nothing is
// client-go's "very short watch", an error. An idle resource hears a
// bookmark only once a minute, so waiting for one would leave its view
// stale for most of a minute after every watch it opens.
const EstablishedAfter = time.Second

// SilentAfter is how long an open watch may deliver nothing, not even a
// bookmark, before it is taken for one that stopped and opened again: the
// apiserver's watch cache sends each watch a bookmark about once a minute
// (k8s.io/apiserver v0.37.2, pkg/storage/cacher/cacher.go,
// defaultBookmarkFrequency, and DefaultEventFreshDuration, a minute and
// 15 s). An HTTP/2 ping proves the connection alive, not the stream: a
// proxy whose upstream died, or an apiserver whose watch is stuck, would
// keep it open and silent until its timeout, 5 to 10 minutes on. (A watch
// served from etcd, with no watch cache, has no bookmarks: a quiet one is
// followed by a list each SilentAfter.)
const SilentAfter = time.Minute + 15*time.Second

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
//   - When nothing is delivered (a list whole, an event or a bookmark)
//     for SilentAfter, across watches, the open watch is closed, and
//     followed by a list at "" (from etcd, as of now): one that opens
//     later than that is closed at once.
//   - A watch that ends within EstablishedAfter having delivered nothing
//     is an error: a "very short watch", followed by the backoff and a
//     list.
//   - A watch the apiserver ends with 410 Gone (it no longer serves its
//     resourceVersion) is followed by a list at that resourceVersion, from
//     the watch cache; if that is gone too, or too new for the apiserver
//     it reached, a list at "" (from etcd, as of now), page by page
//     (isExpiredError, isTooLargeResourceVersionError,
//     setIsLastSyncResourceVersionUnavailable).
//   - Any other failure is followed, after the backoff, by a list at the
//     last resourceVersion, a watch that cannot start (unreachable, or
//     refused) too: an apiserver back on an etcd restored to an older
//     resourceVersion would accept a watch from a newer one and deliver
//     nothing, where it refuses the list as too large. But a watch refused
//     429 is opened again after the backoff, without a list, as client-go's
//     is (isWatchErrorRetriable); and one whose answer never comes, within
//     SilentAfter of the last delivery, is followed, after the backoff, by
//     a list at "".
//
// Health says how current the store is. Each change of that is logged
// once: syncing, synced, stale (with the apiserver's error), fresh again,
// relisting (with the reason), and a watch's end.
type Reflector struct {
	client   *Client
	resource Resource
	store    Store
	logger   *slog.Logger
	// silentAfter is SilentAfter, shorter in tests.
	silentAfter time.Duration

	lists, watches, failures atomic.Int64

	mu     sync.Mutex
	health Health
	// watching identifies the open watch, so that its establishment,
	// which a timer may report, is not taken for a later watch's.
	watching int64
	// staleSince is when the store stopped being current after a failure
	// (zero while it is current or has never been), and staleErr what was
	// last logged of why.
	staleSince time.Time
	staleErr   string
	// delivered is when the apiserver last delivered anything: a list
	// whole, an event or a bookmark. Silence counts from it across
	// watches, not from each watch's start: a proxy that ends each silent
	// stream before silentAfter would otherwise open one after another,
	// each counted current a second after it opens.
	delivered time.Time
	// heardBeforeQuiet is Heard before the open watch was established by
	// its quiet alone, to go back to should it end with 410 having
	// delivered nothing: its quiet established nothing.
	heardBeforeQuiet time.Time
}

// NewReflector returns a Reflector of resource into store, logging to
// logger; Run starts it.
func NewReflector(client *Client, resource Resource, store Store, logger *slog.Logger) *Reflector {
	return &Reflector{client: client, resource: resource, store: store, logger: logger.With("resource", resource.String()), silentAfter: SilentAfter}
}

// Health says how current the store is.
func (r *Reflector) Health() Health {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.health
	h.Lists, h.Watches, h.Failures = r.lists.Load(), r.watches.Load(), r.failures.Load()
	return h
}

// Run keeps the store in step until ctx is done, and returns once it has
// stopped: it leaves nothing running.
func (r *Reflector) Run(ctx context.Context) {
	r.logger.Info("the view of the cluster is syncing")
	var delay backoff
	resourceVersion := "" // the last one seen, from which to watch
	listFrom, list := "0", true
	for ctx.Err() == nil {
		if list {
			rv, err := r.list(ctx, listFrom)
			if (apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge)) && listFrom != "" {
				r.relisting("the apiserver no longer, or does not yet, serve the resourceVersion listed from, "+listFrom, err)
				listFrom = ""
				continue // at once, as client-go's reflector does
			}
			if err != nil {
				r.failed(ctx, err, "list")
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
		case errors.Is(err, errSilentWatch) && errors.Is(err, errWatchNotStarted):
			r.failed(ctx, err, "watch")
			listFrom, list = "", true
			sleep(ctx, delay.next())
		case errors.Is(err, errSilentWatch):
			listFrom, list = "", true
		case errors.Is(err, errWatchNotStarted) && apierrors.IsTooManyRequests(err):
			// Throttled: watched again after the backoff, as client-go's
			// reflector does (isWatchErrorRetriable), not listed, which
			// would cost the apiserver that throttles it more.
			r.failed(ctx, err, "watch")
			sleep(ctx, delay.next())
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
			r.relisting("the apiserver no longer serves the watch's resourceVersion "+resourceVersion, err)
			listFrom, list = resourceVersion, true
			// After the backoff, as client-go's reflector waits between
			// each ListAndWatch (RunWithContext): an apiserver whose every
			// watch ends 410 is not listed in a loop.
			sleep(ctx, delay.next())
		default:
			// A watch that did not start is listed after too, from its
			// resourceVersion: the apiserver may come back on an etcd
			// restored to an older one, and watch from a resourceVersion
			// it has not reached, delivering nothing of what it holds,
			// where a list from it is refused as too large.
			r.failed(ctx, err, "watch")
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
	// The list is as of its first page's request, its snapshot: its age
	// counts from then, however long its pages take.
	asked := time.Now()
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
	r.health.Synced, r.health.Heard, r.health.Objects = true, asked, objects
	r.delivered = time.Now() // not asked: a list of many pages is not silence
	r.mu.Unlock()
	if first {
		r.logger.Info("the view of the cluster is synced", "objects", objects, "resource_version", rv)
	}
	return rv, nil
}

// errWatchNotStarted marks a watch the apiserver did not answer with 200
// or could not be reached for: after the backoff, the store is listed
// from the same resourceVersion, and watched from there; but for a 429,
// watched again.
var errWatchNotStarted = errors.New("the watch did not start")

// errSilentWatch is a watch open when nothing, not even a bookmark, has
// been delivered for silentAfter: it is closed, and the store listed
// again from etcd (resourceVersion ""), so that a watch that stopped
// without a word, and the next ones, cannot keep a store that receives
// nothing current.
var errSilentWatch = errors.New("the watch delivered nothing, not even a bookmark")

// errVeryShortWatch is a watch that ended within EstablishedAfter having
// delivered nothing (client-go's VeryShortWatchError): an apiserver, or a
// proxy before it, that cannot serve it.
var errVeryShortWatch = fmt.Errorf("a very short watch: the apiserver ended it within %s having sent nothing", EstablishedAfter)

// watch watches from *resourceVersion until the watch ends, applying each
// event to the store and keeping *resourceVersion the last one seen. It
// returns nil when the apiserver ends the watch at its timeout,
// errSilentWatch when it delivers nothing for silentAfter and watch
// closes it, and an error when it ends within EstablishedAfter having
// delivered nothing.
func (r *Reflector) watch(ctx context.Context, resourceVersion *string) (err error) {
	r.watches.Add(1)
	// As client-go's, the clock starts before the request: a proxy may
	// hold the answer's header until the first event.
	start := time.Now()
	timeout := minWatchTimeout + rand.N(minWatchTimeout)
	// The apiserver ends the watch at its timeout; the context ends it a
	// little later in case the apiserver never does.
	ctx, cancel := context.WithTimeout(ctx, timeout+pingInterval)
	defer cancel()
	// Silence counts from the last delivery, the answer's header not
	// yet come included: a proxy, or an apiserver, that never answers
	// the request is silence too.
	r.mu.Lock()
	silentLeft := r.silentAfter - time.Since(r.delivered)
	r.mu.Unlock()
	var silent atomic.Bool
	silence := time.AfterFunc(max(silentLeft, 0), func() { silent.Store(true); cancel() })
	defer silence.Stop()
	w, err := r.client.Watch(ctx, r.resource, *resourceVersion, timeout)
	switch {
	case errors.Is(err, context.Canceled) && silent.Load():
		return fmt.Errorf("%w: %w: it did not answer the watch", errWatchNotStarted, errSilentWatch)
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		return err
	case err != nil:
		return fmt.Errorf("%w: %w", errWatchNotStarted, err)
	}
	defer w.Close()

	r.mu.Lock()
	r.watching++
	id := r.watching
	r.mu.Unlock()
	// Quiet but open for EstablishedAfter: established. The timer's
	// function has ended, or never runs, once watch returns.
	timerDone := make(chan struct{})
	timer := time.AfterFunc(EstablishedAfter, func() {
		defer close(timerDone)
		r.current(id, "")
	})
	defer func() {
		if !timer.Stop() {
			<-timerDone
		}
	}()
	events := 0
	defer func() { r.watchEnded(id, events, err) }()
	for {
		event, err := w.Next()
		if silent.Load() {
			r.logger.Info("the apiserver's watches delivered nothing, not even a bookmark, for "+r.silentAfter.String()+"; listing again", "events", events, "resource_version", *resourceVersion)
			return errSilentWatch
		}
		if errors.Is(err, io.EOF) {
			took := time.Since(start)
			if events == 0 && took < EstablishedAfter {
				return errVeryShortWatch
			}
			r.logger.Info("the watch ended; watching again", "after", took.Round(time.Second), "events", events, "resource_version", *resourceVersion)
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
		events++
		*resourceVersion = event.ResourceVersion
		r.current(id, event.Type)
		silence.Reset(r.silentAfter)
	}
}

// current records that the watch id is established, by an event of
// eventType, or by its quiet for EstablishedAfter (""): the store is
// current, heard from now. Quiet establishes nothing once silentAfter has
// passed with nothing delivered. A return to current after a failure is
// logged.
func (r *Reflector) current(id int64, eventType string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id != r.watching {
		return // that watch has ended
	}
	if eventType != "" {
		r.delivered = time.Now()
	} else if time.Since(r.delivered) >= r.silentAfter {
		return // silent: the watch is closed, and the store listed
	} else if !r.health.Current {
		r.heardBeforeQuiet = r.health.Heard
	}
	r.health.Current, r.health.Heard, r.health.Err = true, time.Now(), nil
	if !r.staleSince.IsZero() {
		how := "by a " + eventType
		if eventType == "" {
			how = "open " + EstablishedAfter.String() + " without an error"
		}
		r.logger.Info("the view of the cluster is fresh again: its watch is established", "by", how, "stale_for", time.Since(r.staleSince).Round(time.Millisecond))
		r.staleSince, r.staleErr = time.Time{}, ""
	}
}

// watchEnded records the end of the watch id, which delivered events
// (bookmarks included) and ended with err: an established one was current
// until now, unless the apiserver ended it with 410, which says it was
// behind; one that delivered nothing was then never established.
func (r *Reflector) watchEnded(id int64, events int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	gone := apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
	switch {
	case r.health.Current && gone && events == 0:
		r.health.Heard = r.heardBeforeQuiet
	case r.health.Current && !gone:
		r.health.Heard = time.Now()
	}
	r.health.Current = false
	if id == r.watching {
		r.watching++ // no later establishment of id counts
	}
}

// failed records a failure of a list or a watch (what) and logs it: once
// as the store goes stale, and again only when the apiserver's error
// changes, not at each retry of the same. A failure as ctx ends is not
// one.
func (r *Reflector) failed(ctx context.Context, err error, what string) {
	if ctx.Err() != nil {
		return
	}
	r.failures.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.health.Err = err
	msg := err.Error()
	switch {
	case r.staleSince.IsZero():
		r.staleSince, r.staleErr = time.Now(), msg
		r.logger.Warn("the view of the cluster is stale: its "+what+" failed; retrying", "err", msg, "last_heard", r.health.Heard.Format(time.RFC3339Nano))
	case msg != r.staleErr:
		r.staleErr = msg
		r.logger.Warn("the view of the cluster is still stale: its "+what+" failed again, for another reason; retrying", "err", msg, "stale_for", time.Since(r.staleSince).Round(time.Millisecond))
	}
}

// relisting logs that the store is being listed again, and why: err, the
// apiserver's answer, says what it no longer serves.
func (r *Reflector) relisting(why string, err error) {
	r.mu.Lock()
	if r.staleSince.IsZero() {
		r.staleSince = time.Now()
	}
	r.mu.Unlock()
	r.logger.Info("the view of the cluster is relisting: "+why, "err", err.Error())
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
