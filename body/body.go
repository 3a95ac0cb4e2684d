// Package body reads a request's body whole, for a server that must answer
// every request before its deadline whatever its clients send. Budget.Read
// is the one call; its comment is the whole contract.
package body

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// MaxBytes caps a body: object and oldObject of the apiserver's 3 MiB
	// each, and the envelope.
	MaxBytes = 7 << 20

	// MaxSmallBodyBytes is the most a body is and is read outside the budget,
	// into a buffer of its own: most reviews are 2 to 14 KB.
	MaxSmallBodyBytes = 16 << 10

	// bytesBeforeReserving is what a larger body sends before it takes
	// room, so that one that declares much and sends nothing holds none.
	bytesBeforeReserving = 1 << 10

	// StallTimeout is how long a body holding room may send nothing: the
	// apiserver can pause for over a second on a busy node.
	StallTimeout = 5 * time.Second

	// MinRate is the slowest a body holding room may arrive after
	// StallTimeout of grace, in bytes a second of the server's waiting.
	MinRate = 1 << 20

	// AnswerMargin is how long before its deadline a body must be read for
	// its answer to arrive in time.
	AnswerMargin = 250 * time.Millisecond
)

// BusyStatus answers a body not read before its deadline, without
// Retry-After, with which the apiserver would retry a review it can no
// longer have answered in time (docs/operations.md, "Memory"). 429, not
// 503, tells it from an unreachable webhook in the apiserver's metrics.
const BusyStatus = http.StatusTooManyRequests

// Why a body was refused or cut: the metrics' reason labels.
const (
	LongQueue = "long_queue" // BusyStatus: at once, as it could not have room by its deadline
	NoRoom    = "no_room"    // BusyStatus: its deadline came while it waited for room
	SlowRead  = "slow_read"  // BusyStatus: its deadline came while it was read
	Stalled   = "stalled"    // 408: it sent nothing for StallTimeout
	TooSlow   = "too_slow"   // 408: it arrived slower than MinRate, after its grace
)

// Budget reads request bodies, those over MaxSmallBodyBytes within a budget of
// bytes: see Read. It counts what it refuses and cuts, for the metrics.
type Budget struct {
	free freeBytes

	// buffers keeps released buffers for the next large body, a pool for
	// each of bufferSizes, outside the budget: a new one costs page faults.
	buffers []sync.Pool

	longQueue, noRoom, slowRead, stalled, tooSlow atomic.Uint64
}

// NewBudget reads bodies within a budget of bytes of large ones. It must be
// at least MaxBytes, or the largest body could never be read.
func NewBudget(bytes int64) *Budget {
	b := &Budget{buffers: make([]sync.Pool, len(bufferSizes))}
	b.free.init(bytes)
	return b
}

// Body is a request body read whole. Its bytes, and the room they hold in
// the budget, are the caller's until Release.
type Body struct {
	bytes  []byte
	budget *Budget
}

// Bytes returns the body. Nothing may use them after Release.
func (b Body) Bytes() []byte { return b.bytes }

// Release gives the body back, once answered: the room it held in the
// budget, and its buffer for the next large body. Call it once.
func (b Body) Release() {
	if b.budget != nil {
		b.budget.release(b.bytes)
	}
}

// Error is a body that was not read: the HTTP status to answer with, and a
// message that says why, for the client to show.
type Error struct {
	Code    int
	Message string
}

func (e *Error) Error() string { return e.Message }

// Read reads r's body whole, to be answered by ctx's deadline, and returns
// it, to Release once answered; or an *Error to answer with. It is safe
// for concurrent use. It guarantees, for reasons docs/operations.md gives
// ("Hostile clients" and "Memory"):
//
//   - Memory: a body of up to MaxSmallBodyBytes has a buffer of its own. A
//     larger one sends bytesBeforeReserving bytes, then waits, first come,
//     first served, for room in the budget, which is never exceeded, and
//     holds it until Release. No two bodies wait for each other.
//   - Pace: a body holding room is cut (408) when it sends nothing for
//     StallTimeout, or arrives slower than MinRate after that grace, by
//     the server's time in reads alone. Any other is held to its deadline.
//   - Deadline: nothing is read, and no room waited for, past ctx's
//     deadline less AnswerMargin. A body not read by then, or that the
//     line ahead of it could not serve by then, is refused with
//     BusyStatus, never 400 or 408, which blame the client.
//   - Otherwise: 413 over MaxBytes, 411 without a Content-Length, 400 if
//     unreadable or abandoned. A body not read whole closes its connection.
//   - The clock is the connection's read deadline: serve with ConnContext,
//     or have every wrapper of w Unwrap.
func (b *Budget) Read(ctx context.Context, w http.ResponseWriter, r *http.Request) (Body, error) {
	readBy, _ := ctx.Deadline()
	if !readBy.IsZero() {
		readBy = readBy.Add(-AnswerMargin)
	}
	in := pacedReader{body: r.Body, deadline: readBy, length: r.ContentLength}
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok && r.ProtoMajor == 1 {
		in.conn = c
	} else {
		in.w = http.NewResponseController(w)
	}
	switch {
	case r.ContentLength > MaxBytes:
		return Body{}, in.stop(w, &Error{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes, the most a review can be: two objects of the apiserver's 3 MiB limit and the envelope", MaxBytes)})
	case r.ContentLength < 0:
		return Body{}, in.stop(w, &Error{http.StatusLengthRequired, "request body has no Content-Length: the apiserver sends a review with its length"})
	}
	if in.length > MaxSmallBodyBytes {
		return b.readLarge(ctx, w, &in)
	}
	body := make([]byte, in.length)
	if _, err := in.readFull(body); err != nil {
		return Body{}, b.failed(w, &in, err)
	}
	return Body{bytes: body}, nil
}

// readLarge reads a body over MaxSmallBodyBytes for Read: its first
// bytesBeforeReserving bytes, then room in the budget for all of it, then
// the rest, paced.
func (b *Budget) readLarge(ctx context.Context, w http.ResponseWriter, in *pacedReader) (Body, error) {
	first := make([]byte, bytesBeforeReserving)
	if _, err := in.readFull(first); err != nil {
		return Body{}, b.failed(w, in, err)
	}
	size := bufferSize(in.length)
	waitCtx, cancel := context.WithCancel(ctx)
	if !in.deadline.IsZero() {
		waitCtx, cancel = context.WithDeadline(ctx, in.deadline)
	}
	err := b.free.reserve(waitCtx, size)
	cancel()
	var long *errLongQueue
	switch {
	case errors.As(err, &long):
		b.longQueue.Add(1)
		return Body{}, busy(w, in, fmt.Sprintf("%v (at most %d bytes of them are held at once: -max-inflight-bytes)", long, b.free.capacity))
	case errors.Is(err, context.Canceled): // its client went away: not for want of room
		return Body{}, in.stop(w, &Error{http.StatusBadRequest, "reading the request body: the request ended while it waited for room among the large reviews"})
	case err != nil:
		b.noRoom.Add(1)
		return Body{}, busy(w, in, fmt.Sprintf("its deadline came while it waited for room among the large reviews being read and answered (at most %d bytes of them are held at once: -max-inflight-bytes)", b.free.capacity))
	}
	in.paced, in.waited = true, 0
	body := append(b.buffer(size), first...)[:in.length]
	if _, err := in.readFull(body[bytesBeforeReserving:]); err != nil {
		b.release(body)
		return Body{}, b.failed(w, in, err)
	}
	return Body{bytes: body, budget: b}, nil
}

// failed answers a body whose read failed with err: refused when its
// deadline came, else cut, or unreadable.
func (b *Budget) failed(w http.ResponseWriter, in *pacedReader, err error) *Error {
	var cut *cutError
	switch {
	case errors.Is(err, errPastDeadline):
		b.slowRead.Add(1)
		return busy(w, in, fmt.Sprintf("its deadline came when %d of its bytes had arrived: its client sent it slowly, or the webhook was short of CPU", in.received))
	case errors.As(err, &cut) && cut.reason == Stalled:
		b.stalled.Add(1)
		return in.stop(w, &Error{http.StatusRequestTimeout, err.Error()})
	case errors.As(err, &cut):
		b.tooSlow.Add(1)
		return in.stop(w, &Error{http.StatusRequestTimeout, err.Error()})
	default:
		return in.stop(w, &Error{http.StatusBadRequest, fmt.Sprintf("reading the request body: %v", err)})
	}
}

// busy answers a body refused: why completes "was not read because".
func busy(w http.ResponseWriter, in *pacedReader, why string) *Error {
	return in.stop(w, &Error{BusyStatus, fmt.Sprintf("the webhook is busy: this %d-byte review was not read because %s; retry the request", in.length, why)})
}

// stop ends a body not read to its end: its connection reads nothing more,
// and net/http closes it once e is answered ("Connection: close" alone
// keeps net/http from reading the rest, should the deadline not be set).
func (c *pacedReader) stop(w http.ResponseWriter, e *Error) *Error {
	w.Header().Set("Connection", "close")
	_ = c.setReadDeadline(time.Now())
	return e
}

// ConnContext is an http.Server's ConnContext, which gives Read each
// request's connection, for its clock.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

type connKey struct{}

// Stats is what a Budget holds and has done, for the metrics.
type Stats struct {
	BudgetBytes int64             // the budget of large bodies
	HeldBytes   int64             // of it, held now
	Waiting     int               // large bodies waiting for room
	Waited      uint64            // large bodies that found too little room free, so far
	Refused     map[string]uint64 // bodies answered BusyStatus, by reason: LongQueue, NoRoom, SlowRead
	Cut         map[string]uint64 // bodies answered 408: Stalled, TooSlow
}

// Stats returns what b holds now and has refused and cut so far.
func (b *Budget) Stats() Stats {
	held, waiting := b.free.state()
	return Stats{BudgetBytes: b.free.capacity, HeldBytes: held, Waiting: waiting, Waited: b.free.short.Load(),
		Refused: map[string]uint64{LongQueue: b.longQueue.Load(), NoRoom: b.noRoom.Load(), SlowRead: b.slowRead.Load()},
		Cut:     map[string]uint64{Stalled: b.stalled.Load(), TooSlow: b.tooSlow.Load()}}
}
