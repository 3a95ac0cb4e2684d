// Package body reads a request's body whole, for a server that must answer
// every request before its deadline whatever its clients send: Budget.Read
// is the one call, and its comment is the whole contract. It knows nothing
// of webhooks but their sizes: the largest review, and the few kilobytes
// most of them are.
package body

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// MaxBytes caps what a body may be. The apiserver accepts request
	// bodies up to 3 MiB and a review can carry both object and oldObject,
	// so 2 × 3 MiB plus the envelope fits; anything larger is not from it.
	MaxBytes = 7 << 20

	// UnbudgetedBytes is the most a body may be and be read outside the
	// budget, into a buffer of its own: most of the apiserver's reviews
	// are 2 to 14 KB.
	UnbudgetedBytes = 16 << 10

	// readBeforeRoom is how much of a larger body is read, at the pace,
	// before it takes room in the budget: a client that declares much and
	// stalls or trickles is cut before it holds any room, and a body
	// waiting for room holds only this (256 KiB at the connection cap:
	// 16 KiB each kept the heap so near the soft memory limit that 1 MB
	// reviews were answered 20 % slower; bench/README.md).
	readBeforeRoom = 1 << 10

	// StallTimeout is how long a body may send nothing. The apiserver
	// writes a body from memory, but may pause between its header and the
	// rest: a lost TCP segment is resent after 200 ms, and on a busy node
	// its writing goroutine waits for a core. With the apiserver and the
	// webhook on two cores beside other work (load 7-10), e2e
	// TestBurstServed saw 1 in about 1,600 writes pause over a second, and
	// fail, with one second here.
	StallTimeout = 5 * time.Second

	// MinRate is the slowest a body may arrive, in bytes a second of the
	// server's waiting, after StallTimeout of grace. 1 MiB/s is 8 Mbit/s, a
	// hundredth of a datacenter link: the largest body still has 8 s.
	MinRate = 1 << 20

	// AnswerMargin is how long before its deadline a body must be read
	// for its answer to arrive in time: decoding the largest review and
	// answering it takes tens of milliseconds, more on a busy core.
	AnswerMargin = 250 * time.Millisecond
)

// BusyStatus answers a body that could not be read before its deadline,
// without Retry-After. The apiserver calls an admission webhook with
// client-go's rest.Request.Do (k8s.io/apiserver/pkg/admission/plugin/
// webhook/validating/dispatcher.go, callHook), which retries a 429 or 5xx
// only with Retry-After (k8s.io/client-go/rest/with_retry.go, checkWait);
// without it, the answer's message is the error failurePolicy judges, and
// a retry could not be served in the time left anyway. 429, not 503, so
// that apiserver_admission_webhook_rejection_count{rejection_code} tells it
// from the 503 of a webhook it cannot reach. An authorization webhook's
// client retries a 429 with backoff whatever the headers.
const BusyStatus = http.StatusTooManyRequests

// Why a body was refused or cut: the metrics' reason labels.
const (
	LongQueue = "long_queue" // BusyStatus: at once, as it could not have room by its deadline
	NoRoom    = "no_room"    // BusyStatus: its deadline came while it waited for room
	SlowRead  = "slow_read"  // BusyStatus: its deadline came while it was read
	Stalled   = "stalled"    // 408: it sent nothing for StallTimeout
	TooSlow   = "too_slow"   // 408: it arrived slower than MinRate, after its grace
)

// Budget reads request bodies, those over UnbudgetedBytes within a budget of
// bytes: see Read. It counts what it refuses and cuts, for the metrics.
type Budget struct {
	room room

	// buffers keeps large bodies' buffers once released, a pool for each
	// of bufferSizes, for the next large body. A new buffer costs the
	// kernel's page faults and the GC's collections as well as its size:
	// taken from here, the 1.1 MB review of the benchmarks costs 16–18 %
	// less CPU served (bench/README.md). A kept buffer is outside the
	// budget until two collections pass without a large body taking it;
	// the runtime's soft memory limit bounds it with the rest of the heap.
	buffers []sync.Pool

	longQueue, noRoom, slowRead, stalled, tooSlow atomic.Uint64
}

// NewBudget reads bodies within a budget of bytes of large ones. It must be
// at least MaxBytes, or the largest body could never be read.
func NewBudget(bytes int64) *Budget {
	b := &Budget{buffers: make([]sync.Pool, len(bufferSizes))}
	b.room.init(bytes)
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

// Read reads r's body whole, for a request to be answered by ctx's
// deadline, and returns it, to Release once answered; or an *Error to
// answer with. It is safe for concurrent use. Read guarantees:
//
// Memory. A body of up to UnbudgetedBytes, most reviews, is read into a
// buffer of its declared length, allocated before it arrives: one per
// connection, so the connection cap bounds them. A larger body is first
// read for readBeforeRoom bytes at the pace; then it takes room in the
// budget for a buffer that holds it, at most half as large again, waiting
// for room first come, first served; then it is read into that buffer,
// keeping the room until Release. The budget is never exceeded, and a body
// waiting for room holds none, so no two wait for each other.
//
// Pace. A body is cut, answered 408, when it sends nothing for
// StallTimeout, or when the server has waited for it longer in all than
// StallTimeout plus a second for each MinRate bytes it sent; its room is
// given back at once. Only time the server spends in a read waiting for
// the client counts, never its time waiting for room. And a deadline that
// lapses is the client's only if, when the server checks on time, the
// client sends less than 20 ms of MinRate (or the rest of the body) within
// 20 ms (checkWindow): a lapse while the server was short of CPU, or with
// the bytes already in the socket, is not the client's, and reading goes
// on. A server too starved to check on time checks again over twice the
// window, until it checks on time: then a client that sent nothing is cut.
//
// Deadline. Nothing is read, and no room waited for, past ctx's deadline
// less AnswerMargin, so that the answer can still arrive in time: a body
// still waiting for room then (NoRoom), or still being read (SlowRead), is
// refused. And a large body that, at the pace room has come back over the
// last whole second that bodies waited for it, would wait for room, behind
// what the bodies waiting ahead of it want, more than half the time it has
// left, is refused at once (LongQueue). A refusal is answered BusyStatus
// with a message that says why; never 400 or 408, which would blame the
// client.
//
// Errors. A body is answered 413 when it declares more than MaxBytes, 411
// when it declares no length (the apiserver always does), 408 when cut,
// BusyStatus when refused, and 400 when it cannot be read (a reset
// connection).
//
// The connection. Each read sets the connection's read deadline through
// http.ResponseController: the pace's next, or the request's. A body read
// whole leaves it to net/http, which clears it as it starts its own read
// for the next request (connReader.startBackgroundRead in
// net/http/server.go). A body not read whole sets "Connection: close" on
// w and the read deadline to now: nothing more is read from its
// connection, which net/http closes once the answer is written.
func (b *Budget) Read(ctx context.Context, w http.ResponseWriter, r *http.Request) (Body, error) {
	switch {
	case r.ContentLength > MaxBytes:
		return Body{}, stop(w, &Error{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes, the most a review can be: two objects of the apiserver's 3 MiB limit and the envelope", MaxBytes)})
	case r.ContentLength < 0:
		return Body{}, stop(w, &Error{http.StatusLengthRequired, "request body has no Content-Length: the apiserver sends a review with its length"})
	}
	readBy, _ := ctx.Deadline()
	if !readBy.IsZero() {
		readBy = readBy.Add(-AnswerMargin)
	}
	in := pacedReader{body: r.Body, conn: http.NewResponseController(w), deadline: readBy, length: r.ContentLength}
	if in.length <= UnbudgetedBytes {
		body := make([]byte, in.length)
		if _, err := in.readFull(body); err != nil {
			return Body{}, b.failed(w, &in, err)
		}
		return Body{bytes: body}, nil
	}

	// A large body: its first KiB, room for all of it, then the rest.
	first := make([]byte, readBeforeRoom)
	if _, err := in.readFull(first); err != nil {
		return Body{}, b.failed(w, &in, err)
	}
	size := bufferSize(in.length)
	waitCtx, cancel := context.WithCancel(ctx)
	if !readBy.IsZero() {
		waitCtx, cancel = context.WithDeadline(ctx, readBy)
	}
	err := b.room.take(waitCtx, size)
	cancel()
	var long *errLongQueue
	switch {
	case errors.As(err, &long):
		b.longQueue.Add(1)
		return Body{}, busy(w, &in, fmt.Sprintf("%v (at most %d bytes of them are held at once: -max-inflight-bytes)", long, b.room.capacity))
	case err != nil:
		b.noRoom.Add(1)
		return Body{}, busy(w, &in, fmt.Sprintf("its deadline came while it waited for room among the large reviews being read and answered (at most %d bytes of them are held at once: -max-inflight-bytes)", b.room.capacity))
	}
	body := append(b.buffer(size), first...)[:in.length]
	if _, err := in.readFull(body[readBeforeRoom:]); err != nil {
		b.release(body)
		return Body{}, b.failed(w, &in, err)
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
		return stop(w, &Error{http.StatusRequestTimeout, err.Error()})
	case errors.As(err, &cut):
		b.tooSlow.Add(1)
		return stop(w, &Error{http.StatusRequestTimeout, err.Error()})
	default:
		return stop(w, &Error{http.StatusBadRequest, fmt.Sprintf("reading the request body: %v", err)})
	}
}

// busy answers a body refused because of why, which completes "was not
// read because".
func busy(w http.ResponseWriter, in *pacedReader, why string) *Error {
	return stop(w, &Error{BusyStatus, fmt.Sprintf("the webhook is busy: this %d-byte review was not read because %s; retry the request", in.length, why)})
}

// stop ends a body not read to its end: nothing more is read from its
// connection, which net/http closes once e is answered.
func stop(w http.ResponseWriter, e *Error) *Error {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	return e
}

// Stats is what a Budget holds and has done, for the metrics.
type Stats struct {
	BudgetBytes int64             // the budget of large bodies
	HeldBytes   int64             // of it, held now
	Waiting     int               // large bodies waiting for room
	Refused     map[string]uint64 // bodies answered BusyStatus, by reason: LongQueue, NoRoom, SlowRead
	Cut         map[string]uint64 // bodies answered 408: Stalled, TooSlow
}

// Stats returns what b holds now and has refused and cut so far.
func (b *Budget) Stats() Stats {
	held, waiting := b.room.state()
	return Stats{BudgetBytes: b.room.capacity, HeldBytes: held, Waiting: waiting,
		Refused: map[string]uint64{LongQueue: b.longQueue.Load(), NoRoom: b.noRoom.Load(), SlowRead: b.slowRead.Load()},
		Cut:     map[string]uint64{Stalled: b.stalled.Load(), TooSlow: b.tooSlow.Load()}}
}
