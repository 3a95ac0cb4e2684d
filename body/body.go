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
	"io"
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

	// StallTimeout is how long a body may send nothing. The only pause in a
	// body the apiserver writes from memory is a lost TCP segment, resent
	// after Linux's shortest retransmission timeout, 200 ms; one second
	// allows that twice over.
	StallTimeout = time.Second

	// MinRate is the slowest a body may arrive, in bytes a second of the
	// server's waiting, after StallTimeout of grace. 1 MiB/s is 8 Mbit/s, a
	// hundredth of a datacenter link: the largest body still has 8 s.
	MinRate = 1 << 20

	// AnswerMargin is how long before its deadline a body must be read
	// for its answer to arrive in time: decoding the largest review and
	// answering it takes tens of milliseconds, more on a busy core.
	AnswerMargin = 250 * time.Millisecond

	// drainTime is how long the rest of a refused body may take to arrive
	// and be dropped, so that its connection serves the client's next
	// review rather than make it dial and shake hands again. The apiserver
	// sends a body whole: the largest takes milliseconds to arrive.
	drainTime = 100 * time.Millisecond
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
	NoRoom   = "no_room"   // BusyStatus: its deadline came while it waited for room
	SlowRead = "slow_read" // BusyStatus: its deadline came while it was read
	Stalled  = "stalled"   // 408: it sent nothing for StallTimeout
	TooSlow  = "too_slow"  // 408: it arrived slower than MinRate, after its grace
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

	noRoom, slowRead, stalled, tooSlow atomic.Uint64
}

// NewBudget reads bodies within a budget of bytes of large ones. It must be
// at least MaxBytes, or the largest body could never be read.
func NewBudget(bytes int64) *Budget {
	return &Budget{room: room{capacity: bytes, free: bytes, turn: make(chan struct{}, 1), freed: make(chan struct{}, 1)},
		buffers: make([]sync.Pool, len(bufferSizes))}
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
// buffer of its declared length (UnbudgetedBytes when unknown), allocated
// before it arrives: one per connection, so the connection cap bounds them.
// A larger body is first read for readBeforeRoom bytes at the pace; then
// it takes room in the budget for a buffer that holds its declared length,
// at most half as large again (MaxBytes when unknown), waiting for room
// first come, first served; then it is read into that buffer, keeping the
// room until Release. The budget is never exceeded, and a body waiting
// for room holds none, so no two wait for each other.
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
// on. A server too starved to check on time checks again, for at most
// StallTimeout more: then a client that sent nothing is cut.
//
// Deadline. Nothing is read, and no room waited for, past ctx's deadline
// less AnswerMargin, so that the answer can still arrive in time: a body
// still waiting for room then, or still being read, is refused (NoRoom,
// SlowRead), answered BusyStatus with a message that says why; never 400
// or 408, which would blame the client.
//
// The connection. Each read sets the connection's read deadline through
// http.ResponseController: the pace's next, or the request's. A body read
// to its end leaves it to net/http, which clears it as it starts its own
// read for the next request (connReader.startBackgroundRead in
// net/http/server.go). A refused body is read to its end and dropped if
// it arrives within drainTime, keeping its connection for the client's
// next review. Any other body not read to its end sets "Connection:
// close" on w and the read deadline to now: nothing more is read from that
// connection, which net/http closes once the answer is written.
//
// Errors. A body is answered 413 when it is over MaxBytes (when declared,
// before a byte is read), 408 when cut, BusyStatus when refused, and 400
// when it cannot be read at all (a broken chunked encoding, a reset
// connection).
func (b *Budget) Read(ctx context.Context, w http.ResponseWriter, r *http.Request) (Body, error) {
	if r.ContentLength > MaxBytes {
		return Body{}, stop(w, tooLarge())
	}
	readBy, _ := ctx.Deadline()
	if !readBy.IsZero() {
		readBy = readBy.Add(-AnswerMargin)
	}
	known := r.ContentLength >= 0
	in := pacedReader{body: r.Body, conn: http.NewResponseController(w), deadline: readBy, declared: r.ContentLength, ceiling: r.ContentLength}
	if !known {
		in.ceiling = MaxBytes
		in.body = http.MaxBytesReader(w, r.Body, MaxBytes)
	}
	firstBytes := min(in.ceiling, UnbudgetedBytes)
	if known && in.ceiling > UnbudgetedBytes {
		firstBytes = readBeforeRoom
	}
	first := make([]byte, firstBytes)
	n, err := in.readFull(first)
	switch {
	case !known && errors.Is(err, io.EOF):
		return Body{bytes: first[:n]}, nil // of unknown length, and small
	case err != nil:
		return Body{}, b.failed(w, &in, err)
	case in.ceiling <= UnbudgetedBytes:
		return Body{bytes: first}, nil
	}

	// A large body: room for all of it, then the rest.
	size := bufferSize(in.ceiling)
	waitCtx, cancel := context.WithCancel(ctx)
	if !readBy.IsZero() {
		waitCtx, cancel = context.WithDeadline(ctx, readBy)
	}
	err = b.room.take(waitCtx, size)
	cancel()
	if err != nil {
		b.noRoom.Add(1)
		return Body{}, b.refuse(w, &in, fmt.Sprintf("its deadline came while it waited for room among the large reviews being read and answered (at most %d bytes of them are held at once: -max-inflight-bytes)", b.room.capacity))
	}
	body := append(b.buffer(size), first...)
	for {
		var n int
		if known || len(body) < cap(body) {
			// Of a known length, a read past its end is io.EOF.
			n, err = in.Read(body[len(body):min(in.ceiling, int64(cap(body)))])
			body = body[:len(body)+n]
		} else if n, err = in.Read(make([]byte, 1)); n > 0 {
			err = &http.MaxBytesError{Limit: MaxBytes} // of unknown length, it must end here
		}
		if errors.Is(err, io.EOF) && (!known || int64(len(body)) == in.ceiling) {
			return Body{bytes: body, budget: b}, nil
		}
		if err != nil {
			b.release(body)
			return Body{}, b.failed(w, &in, err)
		}
	}
}

// failed answers a body whose read failed with err: refused when its
// deadline came, else cut, too large, or unreadable.
func (b *Budget) failed(w http.ResponseWriter, in *pacedReader, err error) *Error {
	var cut *cutError
	switch {
	case errors.Is(err, errPastDeadline):
		b.slowRead.Add(1)
		return b.refuse(w, in, fmt.Sprintf("its deadline came when %d of its bytes had arrived: its client sent it slowly, or the webhook was short of CPU", in.received))
	case errors.As(err, new(*http.MaxBytesError)):
		return stop(w, tooLarge())
	case errors.As(err, &cut):
		if cut.reason == Stalled {
			b.stalled.Add(1)
		} else {
			b.tooSlow.Add(1)
		}
		return stop(w, &Error{http.StatusRequestTimeout, err.Error()})
	default:
		return stop(w, &Error{http.StatusBadRequest, fmt.Sprintf("reading the request body: %v", err)})
	}
}

func tooLarge() *Error {
	return &Error{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes, the most a review can be: two objects of the apiserver's 3 MiB limit and the envelope", MaxBytes)}
}

// refuse answers a body refused because of why, which completes "was not
// read because". The rest of the body is read and dropped if it arrives
// within drainTime, and its connection kept for the client's next review;
// else nothing more is read (stop).
func (b *Budget) refuse(w http.ResponseWriter, in *pacedReader, why string) *Error {
	review := "this review"
	if in.declared >= 0 {
		review = fmt.Sprintf("this %d-byte review", in.declared)
	}
	e := &Error{BusyStatus, fmt.Sprintf("the webhook is busy: %s was not read because %s; retry the request", review, why)}
	if in.drain(drainTime) {
		return e
	}
	return stop(w, e)
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
	Refused     map[string]uint64 // bodies answered BusyStatus, by reason: NoRoom, SlowRead
	Cut         map[string]uint64 // bodies answered 408: Stalled, TooSlow
}

// Stats returns what b holds now and has refused and cut so far.
func (b *Budget) Stats() Stats {
	held, waiting := b.room.state()
	return Stats{BudgetBytes: b.room.capacity, HeldBytes: held, Waiting: waiting,
		Refused: map[string]uint64{NoRoom: b.noRoom.Load(), SlowRead: b.slowRead.Load()},
		Cut:     map[string]uint64{Stalled: b.stalled.Load(), TooSlow: b.tooSlow.Load()}}
}
