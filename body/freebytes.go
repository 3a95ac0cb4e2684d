package body

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// reserveUnit is one token of room; every buffer size is a multiple of it.
const reserveUnit = 8 << 10

// freeBytes is the budget's bytes as tokens in a channel, taken first come,
// first served: those behind a body that does not fit wait too, so that no
// large body is starved by smaller ones.
type freeBytes struct {
	capacity int64
	turn     chan struct{} // held by the one body taking tokens
	tokens   chan struct{} // one for each reserveUnit free
	waiting  atomic.Int64
	taken    atomic.Int64  // by the body holding the turn, of its take so far
	short    atomic.Uint64 // bodies that found too little room free, and waited

	mu     sync.Mutex
	wanted int64 // by the bodies waiting
	// pace is the bytes a second room came back over the faster of the
	// last two whole seconds that bodies waited (0 until one has; lastPace
	// the last one's), so that one slow second (a collection, a burst)
	// refuses no body the line serves in time. waited and given count
	// toward the next, on a clock that runs only while bodies wait (since
	// waitedSince). A pace measured paceKept ago is used only once the
	// line now waiting has waited a second, since lineSince.
	pace, lastPace                   float64
	waited                           time.Duration
	given                            int64
	waitedSince, measured, lineSince time.Time
}

const paceKept = 5 * time.Second // freeBytes.pace

// init makes capacity bytes of room, to the reserveUnit below.
func (r *freeBytes) init(capacity int64) {
	r.capacity, r.turn, r.tokens = capacity/reserveUnit*reserveUnit, make(chan struct{}, 1), make(chan struct{}, capacity/reserveUnit)
	r.release(r.capacity)
}

// errLongQueue is a body refused at once: at the pace room lately came
// back, the room the line and it lack would outlast the time it has left.
type errLongQueue struct {
	ahead int64
	wait  time.Duration
}

func (e *errLongQueue) Error() string {
	return fmt.Sprintf("the %d bytes of large reviews waiting ahead of it would keep it waiting about %s, longer than the time it has left", e.ahead, e.wait.Round(time.Millisecond))
}

// reserve takes n bytes of room, n at most the capacity, waiting its turn
// and then for room until ctx ends; or refuses at once (*errLongQueue): a
// line that outlasts its deadlines serves every body too late.
func (r *freeBytes) reserve(ctx context.Context, n int64) error {
	r.mu.Lock()
	lacking := r.wanted + n - int64(len(r.tokens))*reserveUnit - r.taken.Load() // free, or taken, is not waited for
	if deadline, ok := ctx.Deadline(); ok && r.wanted > 0 && lacking > 0 && r.pace > 0 && (time.Since(r.measured) < paceKept || time.Since(r.lineSince) >= time.Second) {
		if wait := time.Duration(float64(lacking) / r.pace * float64(time.Second)); wait > time.Until(deadline) {
			r.mu.Unlock()
			return &errLongQueue{r.wanted, wait}
		}
	}
	if r.wanted == 0 {
		r.waitedSince = time.Now()
		r.lineSince = r.waitedSince
	}
	if int64(len(r.tokens))*reserveUnit < n {
		r.short.Add(1)
	}
	r.wanted += n
	r.mu.Unlock()
	r.waiting.Add(1)
	defer func() {
		r.waiting.Add(-1)
		r.mu.Lock()
		if r.wanted -= n; r.wanted == 0 {
			r.waited += time.Since(r.waitedSince)
		}
		r.mu.Unlock()
	}()
	select {
	case r.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-r.turn }()
	for taken := int64(0); taken < n; taken += reserveUnit {
		select {
		case <-r.tokens:
			r.taken.Add(reserveUnit)
		case <-ctx.Done():
			r.taken.Add(-taken) // back, but not toward the pace: nothing was served
			for ; taken > 0; taken -= reserveUnit {
				r.tokens <- struct{}{}
			}
			return ctx.Err()
		}
	}
	r.taken.Add(-n)
	return nil
}

// release gives back n bytes taken, and keeps the pace.
func (r *freeBytes) release(n int64) {
	for left := n; left > 0; left -= reserveUnit {
		r.tokens <- struct{}{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wanted == 0 {
		return
	}
	now := time.Now()
	r.waited, r.waitedSince, r.given = r.waited+now.Sub(r.waitedSince), now, r.given+n
	if r.waited >= time.Second {
		last := float64(r.given) / r.waited.Seconds()
		r.pace, r.lastPace, r.waited, r.given, r.measured = max(last, r.lastPace), last, 0, 0, now
	}
}

// state returns the bytes held, and how many bodies wait for room.
func (r *freeBytes) state() (held int64, waiting int) {
	return r.capacity - int64(len(r.tokens))*reserveUnit, int(r.waiting.Load())
}
