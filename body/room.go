package body

import (
	"context"
	"sync/atomic"
)

// roomUnit is what one token of room is worth: every buffer size is a
// multiple of it.
const roomUnit = 8 << 10

// room is the budget's bytes, as tokens in a channel, taken first come,
// first served: a body that does not fit waits, and those behind it wait
// too, so that a large body is not starved by a stream of smaller ones.
type room struct {
	capacity int64
	// turn is held by the one body taking tokens; the others wait for it
	// in order of arrival, as a channel's senders do.
	turn    chan struct{}
	tokens  chan struct{} // one for each roomUnit free
	waiting atomic.Int64
}

// init makes capacity bytes of room, to the roomUnit below.
func (r *room) init(capacity int64) {
	r.capacity, r.turn, r.tokens = capacity/roomUnit*roomUnit, make(chan struct{}, 1), make(chan struct{}, capacity/roomUnit)
	r.give(r.capacity)
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
	for taken := int64(0); taken < n; taken += roomUnit {
		select {
		case <-r.tokens:
		case <-ctx.Done():
			r.give(taken)
			return ctx.Err()
		}
	}
	return nil
}

// give gives back n bytes taken.
func (r *room) give(n int64) {
	for ; n > 0; n -= roomUnit {
		r.tokens <- struct{}{}
	}
}

// state returns the bytes held, and how many bodies wait for room.
func (r *room) state() (held int64, waiting int) {
	return r.capacity - int64(len(r.tokens))*roomUnit, int(r.waiting.Load())
}
