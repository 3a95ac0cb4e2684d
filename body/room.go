package body

import (
	"context"
	"sync"
	"sync/atomic"
)

// room is the budget's bytes, taken first come, first served: a body that
// does not fit waits, and those behind it wait too, so that a large body is
// not starved by a stream of smaller ones. (golang.org/x/sync/semaphore's
// Weighted does the same; the root module may not depend on it.)
type room struct {
	capacity int64
	// turn is held by the one body taking room; the others wait for it in
	// order of arrival, as a channel's receivers do.
	turn    chan struct{}
	freed   chan struct{} // room was given back, for the one holding the turn
	waiting atomic.Int64

	mu   sync.Mutex
	free int64
}

// take takes n bytes of room, n at most the capacity, waiting its turn and
// then for room until ctx ends.
func (r *room) take(ctx context.Context, n int64) error {
	r.waiting.Add(1)
	defer r.waiting.Add(-1)
	select {
	case r.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-r.turn }()
	for {
		r.mu.Lock()
		if r.free >= n {
			r.free -= n
			r.mu.Unlock()
			return nil
		}
		r.mu.Unlock()
		select {
		case <-r.freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// give gives back n bytes taken.
func (r *room) give(n int64) {
	r.mu.Lock()
	r.free += n
	r.mu.Unlock()
	select {
	case r.freed <- struct{}{}:
	default:
	}
}

// state returns the bytes held, and how many bodies wait for room.
func (r *room) state() (held int64, waiting int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.capacity - r.free, int(r.waiting.Load())
}
