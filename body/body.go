// Package body reads a request's body whole, for a server that must answer
// every request before its deadline whatever its clients send: Reader.Read
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
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// MaxBytes caps what a body may be. The apiserver accepts request
	// bodies up to 3 MiB and a review can carry both object and oldObject,
	// so 2 × 3 MiB plus the envelope fits; anything larger is not from it.
	MaxBytes = 7 << 20

	// SmallBytes is the most a body is read without the budget: one TLS
	// record, the most one read from the connection returns. The
	// apiserver's reviews of most objects are 2 to 14 KB.
	SmallBytes = 16 << 10

	// probeBytes is how much of a larger body is read, at the pace, before
	// it waits in line: a client that stalls or trickles (sends less than
	// this within StallTimeout) is cut there, never holding the turn that
	// reviews sent whole wait for, and a body waiting holds only this,
	// 256 KiB at the connection cap. Probing with SmallBytes held 4 MiB
	// there, which kept the heap so near the runtime's soft memory limit
	// that 256 connections of 1 MB reviews were answered 20 % slower
	// (bench/README.md).
	probeBytes = 1 << 10

	// StallTimeout is how long a body may send nothing. The only pause in a
	// body the apiserver writes from memory is a lost TCP segment, resent
	// after Linux's shortest retransmission timeout, 200 ms; one second
	// allows that twice over.
	StallTimeout = time.Second

	// MinRate is the slowest a body may arrive, in bytes a second of the
	// server's waiting, after StallTimeout of grace. 1 MiB/s is 8 Mbit/s, a
	// hundredth of a datacenter link: the largest body still has 8 s.
	MinRate = 1 << 20

	// OverloadMargin is how long before its deadline a body must be read
	// for its answer to arrive in time: decoding the largest review and
	// answering it takes tens of milliseconds, more on a busy core.
	OverloadMargin = 250 * time.Millisecond

	// drainTime is how long the rest of a refused body may take to arrive
	// and be dropped, so that its connection serves the client's next
	// review rather than make it dial and shake hands again. The apiserver
	// sends a body whole, at once: the largest takes milliseconds to
	// arrive. A body that does not come in that time closes its connection.
	drainTime = 100 * time.Millisecond
)

// OverloadStatus answers a body that cannot be read before its deadline,
// without Retry-After. The apiserver calls an admission webhook with
// client-go's rest.Request.Do (k8s.io/apiserver/pkg/admission/plugin/
// webhook/validating/dispatcher.go, callHook), which retries a 429 or 5xx
// only with Retry-After (k8s.io/client-go/rest/with_retry.go, checkWait);
// without it, the answer's message is the error failurePolicy judges, and
// a retry could not be served in the time left anyway. 429, not 503, so
// that apiserver_admission_webhook_rejection_count{rejection_code} tells it
// from the 503 of a webhook it cannot reach. An authorization webhook's
// client retries a 429 with backoff whatever the headers, and soon finds
// room.
const OverloadStatus = http.StatusTooManyRequests

// Why a body was refused with OverloadStatus: the metrics' reason label.
// Each is a deadline that came, or would come, before the body was read.
const (
	// LongQueue: the bodies waiting ahead of it, and its own bytes, would
	// take it past its deadline at the pace the line has lately moved: on
	// arrival, or at a turn while it waited.
	LongQueue = "long_queue"
	// NoTurn: its deadline came while it waited in line.
	NoTurn = "no_turn"
	// NoRoom: its deadline came while it waited for room in the budget.
	NoRoom = "no_room"
	// SlowRead: its deadline came while it was read, because its client
	// sent it slowly (if not slowly enough to be cut) or the server was
	// short of CPU.
	SlowRead = "slow_read"
)

// RefusalReasons are the reasons a body is refused with OverloadStatus.
var RefusalReasons = refusalReasons[:]

var refusalReasons = [...]string{LongQueue, NoTurn, NoRoom, SlowRead}

// Why a body was cut for its pace, answered 408: the metrics' reason label.
const (
	Stalled = "stalled"  // it sent nothing for StallTimeout
	TooSlow = "too_slow" // it arrived slower than MinRate, after its grace
)

// Reader reads bodies within a byte budget: see Read. It counts what it
// refuses and cuts, for the metrics (Stats).
type Reader struct {
	budget *semaphore // bytes of large bodies held, from their first bytes until Release
	line   line       // large bodies waiting to be read, one at a time

	// buffers keeps large bodies' buffers once released, a pool for each
	// of bufferSizes, for the next large body. A new buffer costs the
	// kernel's page faults and the GC's collections as well as its size:
	// taken from here, the 1.1 MB review of the benchmarks costs 16–18 %
	// less CPU served (bench/README.md). A kept buffer is outside the
	// budget until two collections pass without a large body taking it;
	// the runtime's soft memory limit bounds it with the rest of the heap.
	buffers []sync.Pool

	refused          [len(refusalReasons)]atomic.Uint64 // by reason, in their order
	stalled, tooSlow atomic.Uint64
}

// NewReader reads bodies within a budget of budgetBytes of large ones. It
// must be at least MaxBytes, or the largest body could never be read.
func NewReader(budgetBytes int64) *Reader {
	return &Reader{budget: newSemaphore(budgetBytes), buffers: make([]sync.Pool, len(bufferSizes))}
}

// Body is a request body read whole. Its bytes, and the room they hold in
// the budget, are the caller's until Release.
type Body struct {
	bytes  []byte
	reader *Reader
}

// Bytes returns the body. Nothing may use them after Release.
func (b Body) Bytes() []byte { return b.bytes }

// Release gives the body back, once answered: the room it held in the
// budget, and its buffer for the next large body. Call it once.
func (b Body) Release() {
	if b.reader != nil {
		b.reader.release(b.bytes)
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
// answer with. Read guarantees:
//
// Memory. Only bytes received take memory, never bytes declared. A body of
// up to SmallBytes, most reviews, is read into a buffer of its own: one per
// connection at most, so the connection cap bounds them. A larger body
// sends its first KiB (probeBytes) at the pace, then waits in line holding
// only that, and is read one at a time, in order of arrival: up to
// SmallBytes as a small body's, the rest taking room in the budget as its
// bytes arrive. (A body of unknown length holds the SmallBytes it sent
// before it is known to be larger.) Its buffer at most doubles as it fills, so it holds room for at most twice
// what it has sent, and ends at most half as large again as the body. It
// keeps its room until Release. The budget is never exceeded.
//
// Pace. A body is cut, answered 408, when it sends nothing for
// StallTimeout, or when the server has waited for it longer in all than
// StallTimeout plus a second for each MinRate bytes it sent; its room is
// given back at once. Only time the server spends waiting in a read for
// the client counts: never its time in line or waiting for room. And a
// deadline that lapses is the client's only if, when the server checks
// on time, the client sends less than 20 ms of MinRate (or the rest of
// the body) within 20 ms (checkWindow): a lapse while the server was short
// of CPU, or with the bytes already in the socket, is not the client's,
// and reading goes on. A server too starved to check on time checks again,
// for at most StallTimeout more: then a client that sent nothing is cut.
//
// Deadline. Nothing is read past ctx's deadline less OverloadMargin, so
// that the answer can still arrive in time. A large body is refused as
// soon as the line can tell that it cannot be read by then: when the
// bodies waiting ahead of it, and its own bytes, would at the pace the
// line has lately moved (the time from turn to turn, per byte read) take
// it past that point; when it joins the line, or at any turn after, as
// the pace changes (LongQueue). A body still waiting at that point, in line or for
// room, or still being read, is refused then (NoTurn, NoRoom, SlowRead).
// However many bodies wait, one that can be read in time waits its turn.
// A refusal is answered OverloadStatus with a message that says why;
// never 400 or 408, which would blame the client.
//
// Who waits for whom. A body in line waits for the one being read. The
// body being read waits for room held by bodies being answered, which wait
// for nothing Read holds, and give their room back at Release. Only the
// body being read ever waits for room, and it needs at most MaxBytes,
// which the budget always holds: no deadlock.
//
// The connection. Each read sets the connection's read deadline through
// http.ResponseController: the pace's next, or the request's. A body read
// to its end leaves it to net/http, which clears it as it starts its own
// read for the next request (connReader.startBackgroundRead in
// net/http/server.go), so no deadline of Read's can cut ctx while the
// request is answered. A refused body is read to its end and dropped if
// it arrives within drainTime, keeping its connection for the client's
// next review. Any other body not read to its end, cut or refused, sets
// "Connection: close" on w and the read deadline to now: nothing more is
// read from that connection, and net/http closes it once the answer is
// written, after its lingering wait for the client to read it
// (rstAvoidanceDelay).
//
// Errors. A body is answered 413 when it is over MaxBytes (when declared,
// before a byte is read), 408 when cut, OverloadStatus when refused, and
// 400 when it cannot be read at all (a broken chunked encoding, a reset
// connection).
func (rd *Reader) Read(ctx context.Context, w http.ResponseWriter, r *http.Request) (Body, error) {
	if r.ContentLength > MaxBytes {
		return Body{}, rd.stop(w, tooLarge())
	}
	deadline, _ := ctx.Deadline()
	if !deadline.IsZero() {
		deadline = deadline.Add(-OverloadMargin)
	}
	in := newPacedReader(r.Body, http.NewResponseController(w), deadline)
	// The most the body can be: its declared length, which net/http holds
	// it to, or, for a body of unknown length, MaxBytes.
	known := r.ContentLength >= 0
	in.ceiling = r.ContentLength
	if !known {
		in.ceiling = MaxBytes
		in.body = http.MaxBytesReader(w, r.Body, MaxBytes)
	}
	// Every body's first bytes are read at the pace before it may wait in
	// line, so that a client that stalls or trickles is cut here, and never
	// holds a place in line that a review sent whole is waiting for.
	firstBytes := min(in.ceiling, SmallBytes)
	if known && in.ceiling > SmallBytes {
		firstBytes = probeBytes
	}
	small := make([]byte, firstBytes)
	n, err := in.readFull(small)
	small = small[:n]
	switch {
	case !known && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)):
		return Body{bytes: small}, nil
	case errors.Is(err, errPastDeadline):
		return Body{}, rd.refuse(w, &in, SlowRead, r.ContentLength, slowRead(n))
	case err != nil:
		return Body{}, rd.stop(w, rd.readFailure(err))
	case in.ceiling <= SmallBytes:
		return Body{bytes: small}, nil
	}
	// Its first bytes, and more to come: a large body.
	return rd.readLarge(ctx, w, &in, small, known)
}

// readLarge reads a body of more than SmallBytes, of which body holds the
// first bytes, read outside the budget: it waits in line, then reads the
// rest taking room as the bytes arrive. in's deadline is the request's,
// less OverloadMargin.
func (rd *Reader) readLarge(ctx context.Context, w http.ResponseWriter, in *pacedReader, body []byte, known bool) (Body, error) {
	ceiling, declared := in.ceiling, in.ceiling
	if !known {
		declared = -1
	}
	waitCtx, cancel := context.WithCancel(ctx)
	if !in.deadline.IsZero() {
		waitCtx, cancel = context.WithDeadline(ctx, in.deadline)
	}
	defer cancel()

	// A body of unknown length is not judged by what it may be.
	size := ceiling - int64(len(body))
	if !known {
		size = 0
	}
	err := rd.line.join(waitCtx, size, in.deadline)
	var long *errLongQueue
	switch {
	case errors.As(err, &long):
		return Body{}, rd.refuse(w, in, LongQueue, declared, fmt.Sprintf("the %d bytes of large reviews waiting ahead of it, and its own, would take about %s to read, past its deadline", long.ahead, long.wait.Round(time.Millisecond)))
	case err != nil:
		return Body{}, rd.refuse(w, in, NoTurn, declared, "its deadline came while it waited for the large reviews ahead of it to be read")
	}
	whole := false // read to its end: its turn tells the line's pace
	readBeforeTurn := len(body)
	defer func() { rd.line.leave(int64(len(body)-readBeforeTurn), whole) }()

	if cap(body) < SmallBytes {
		// Its first SmallBytes take no room, as a small body's.
		body = append(make([]byte, 0, SmallBytes), body...)
	}
	for {
		if len(body) == cap(body) {
			if int64(len(body)) == ceiling {
				if known {
					whole = true
					return Body{bytes: body, reader: rd}, nil
				}
				// A body of unknown length must end here.
				var probe [1]byte
				n, err := in.Read(probe[:])
				if n == 0 && errors.Is(err, io.EOF) {
					whole = true
					return Body{bytes: body, reader: rd}, nil
				}
				rd.release(body)
				switch {
				case err == nil:
					err = &http.MaxBytesError{Limit: MaxBytes}
				case errors.Is(err, errPastDeadline):
					return Body{}, rd.refuse(w, in, SlowRead, declared, slowRead(len(body)))
				}
				return Body{}, rd.stop(w, rd.readFailure(err))
			}
			// The old buffer is recycled once copied: the room held grows
			// by the difference. (Were both held, the body being read could
			// wait for room that it holds itself.)
			next := nextBufferSize(int64(cap(body)), ceiling)
			if err := rd.budget.acquire(waitCtx, next-heldBytes(body)); err != nil {
				rd.release(body)
				return Body{}, rd.refuse(w, in, NoRoom, declared, "its deadline came while it waited for room among the large reviews being answered")
			}
			grown := append(rd.buffer(next), body...)
			rd.recycle(body)
			body = grown
		}
		// The buffer of a body of known length can be larger than the
		// body; net/http's reader ends at the declared length.
		n, err := in.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		switch {
		case errors.Is(err, io.EOF) && (!known || int64(len(body)) == ceiling):
			whole = true
			return Body{bytes: body, reader: rd}, nil
		case errors.Is(err, errPastDeadline):
			rd.release(body)
			return Body{}, rd.refuse(w, in, SlowRead, declared, slowRead(len(body)))
		case err != nil:
			rd.release(body)
			return Body{}, rd.stop(w, rd.readFailure(err))
		}
	}
}

// readFailure is the answer to a body that could not be read.
func (rd *Reader) readFailure(err error) *Error {
	var cut *cutError
	switch {
	case errors.As(err, new(*http.MaxBytesError)):
		return tooLarge()
	case errors.As(err, &cut):
		if cut.reason == Stalled {
			rd.stalled.Add(1)
		} else {
			rd.tooSlow.Add(1)
		}
		return &Error{http.StatusRequestTimeout, err.Error()}
	default:
		return &Error{http.StatusBadRequest, fmt.Sprintf("reading the request body: %v", err)}
	}
}

func tooLarge() *Error {
	return &Error{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes, the most a review can be: two objects of the apiserver's 3 MiB limit and the envelope", MaxBytes)}
}

// refuse counts a body refused for reason, and answers it: declared is
// its length (-1: unknown), and why completes "this review was not read
// because". The rest of the body is read and dropped if it arrives within
// drainTime, and its connection kept for the client's next review; else
// nothing more is read (stop).
func (rd *Reader) refuse(w http.ResponseWriter, in *pacedReader, reason string, declared int64, why string) *Error {
	rd.refused[slices.Index(refusalReasons[:], reason)].Add(1)
	review := "this review"
	if declared >= 0 {
		review = fmt.Sprintf("this %d-byte review", declared)
	}
	if reason != SlowRead {
		why += fmt.Sprintf(" (large reviews are read one at a time, and at most %d bytes of them are held at once: -max-inflight-bytes)", rd.budget.capacity)
	}
	e := &Error{OverloadStatus, fmt.Sprintf("the webhook is busy: %s was not read because %s; retry the request", review, why)}
	if in.drain(drainTime) {
		return e
	}
	return rd.stop(w, e)
}

func slowRead(received int) string {
	return fmt.Sprintf("its deadline came when %d of its bytes had arrived: its client sent it slowly, or the webhook was short of CPU", received)
}

// stop ends a body not read to its end: nothing more is read from its
// connection, which net/http closes once e is answered.
func (rd *Reader) stop(w http.ResponseWriter, e *Error) *Error {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	return e
}

// Stats is what a Reader holds and has done, for the metrics.
type Stats struct {
	BudgetBytes int64             // the budget of large bodies
	HeldBytes   int64             // of it, held now
	Waiting     int               // large bodies waiting in line, or for room
	Refused     map[string]uint64 // bodies answered OverloadStatus, by reason (RefusalReasons)
	Cut         map[string]uint64 // bodies answered 408: Stalled, TooSlow
}

// Stats returns what rd holds now and has refused and cut so far.
func (rd *Reader) Stats() Stats {
	held, waitingForRoom := rd.budget.state()
	_, waitingInLine := rd.line.state()
	s := Stats{BudgetBytes: rd.budget.capacity, HeldBytes: held, Waiting: waitingForRoom + waitingInLine,
		Refused: map[string]uint64{}, Cut: map[string]uint64{Stalled: rd.stalled.Load(), TooSlow: rd.tooSlow.Load()}}
	for i, reason := range refusalReasons {
		s.Refused[reason] = rd.refused[i].Load()
	}
	return s
}
