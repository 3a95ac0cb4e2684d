package main

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

	"github.com/example/webhook/limits"
)

const (
	// maxBodyBytes caps what a review may be. The apiserver accepts request
	// bodies up to 3 MiB and a review can carry both object and oldObject,
	// so 2 × 3 MiB plus the envelope fits; anything larger is not from it.
	maxBodyBytes = 7 << 20

	// smallBodyBytes is the body read without the budget: one TLS record,
	// the most one read from the connection returns. testdata/ holds the
	// apiserver's reviews of 2 to 14 KB.
	smallBodyBytes = 16 << 10

	// bodyStallTimeout is how long a body may send nothing. The only pause
	// in a body the apiserver writes from memory is a lost TCP segment,
	// resent after Linux's shortest retransmission timeout, 200 ms; one
	// second allows that twice over.
	bodyStallTimeout = time.Second

	// minBodyRate is the slowest a body may arrive, in bytes per second,
	// counting only the time the server waits for it, with
	// bodyStallTimeout of grace: time the server is busy or short of CPU
	// is not the client's. 1 MiB/s is 8 Mbit/s, a hundredth of a
	// datacenter link: the largest review, 7 MiB, still has 8 s.
	minBodyRate = 1 << 20

	// maxWaitingBodies is how many large bodies may wait for their turn:
	// half the connections, as waiting costs a client nothing but one; the
	// other half stay free for the apiserver's next reviews and the probes.
	maxWaitingBodies = maxConnections / 2

	// overloadMargin is how long before a request's deadline it stops
	// waiting for the byte budget, so that its answer still arrives in
	// time.
	overloadMargin = 250 * time.Millisecond
)

// overloadStatus answers a review that cannot be read before its deadline,
// without Retry-After. The apiserver calls an admission webhook with
// client-go's rest.Request.Do (k8s.io/apiserver/pkg/admission/plugin/
// webhook/validating/dispatcher.go, callHook), which retries a 429 or 5xx
// only with Retry-After (k8s.io/client-go/rest/with_retry.go); without it,
// this Status's message is the error failurePolicy judges, and a retry
// could not be served in the time left anyway. 429, not 503, so that
// apiserver_admission_webhook_rejection_count{rejection_code} tells it from
// the 503 of a webhook it cannot reach. On /authorize the apiserver retries
// a 429 with backoff whatever the headers, and soon finds room.
const overloadStatus = http.StatusTooManyRequests

// bodyBufferSizes are the sizes of a large body's buffer, from over
// smallBodyBytes to maxBodyBytes: smallBodyBytes times a power of two, or
// one and a half times one. A full buffer can double (up to maxBodyBytes),
// so the room held stays within twice what has arrived, and a body's last
// buffer is at most half as large again as the body. Fixed sizes let a
// buffer serve the next large body (bodyReader.buffers).
var bodyBufferSizes = func() []int64 {
	var sizes []int64
	for size := int64(smallBodyBytes); size < maxBodyBytes; size *= 2 {
		sizes = append(sizes, min(size+size/2, maxBodyBytes), min(2*size, maxBodyBytes))
	}
	return slices.Compact(sizes)
}()

// bodyReader reads review bodies; readBody says how. It counts what it
// refuses and cuts, for the metrics.
type bodyReader struct {
	budget *limits.Semaphore // bytes of large bodies held, as read and until answered
	turn   *limits.Semaphore // of one: the large body being read

	// buffers keeps large bodies' buffers once answered, a pool for each
	// of bodyBufferSizes, for the next large body. A new buffer costs the
	// kernel's page faults and the GC's collections as well as its size:
	// taken from here, the 1.1 MB review of the benchmarks costs 16–18 %
	// less CPU served (bench/README.md). A kept buffer is outside the
	// budget until two collections pass without a large body taking it;
	// the soft memory limit (memoryLimitBase) bounds it with the heap.
	buffers []sync.Pool

	overloaded       atomic.Uint64 // large bodies refused: no turn or no room in time
	stalled, tooSlow atomic.Uint64 // bodies cut for their pace
}

// newBodyReader reads bodies within a budget of budgetBytes of large ones,
// at least maxBodyBytes (parseFlags checks it).
func newBodyReader(budgetBytes int64) *bodyReader {
	return &bodyReader{budget: limits.NewSemaphore(budgetBytes), turn: limits.NewSemaphore(1), buffers: make([]sync.Pool, len(bodyBufferSizes))}
}

// readBody reads r's body whole, for a request that must be want, and
// returns it, to give back with release once answered; or a *statusError
// to answer with. It guarantees:
//
//   - Bytes received, never bytes declared, take memory: a body says how
//     long it is, but only what it sends is held. A body of up to
//     smallBodyBytes, most reviews, is read into a buffer of its own,
//     bounded with the connections (maxConnections), not by the budget. A
//     larger one waits for its turn (one large body is read at a time) and
//     with it takes room in the budget as its bytes arrive: its buffer's
//     size, which at most doubles each time it fills (nextBufferSize), so
//     it never holds room for more than twice what it has received, and
//     ends at most half as large again as the body. Once complete it gives
//     up the turn and keeps its room until answered.
//   - No body holds anything while it waits for the client: each read is
//     held to limits.MinRateReader, which cuts a body that stalls
//     (bodyStallTimeout) or trickles (minBodyRate) with 408 and closes the
//     connection, and its room is given back at once.
//   - No deadlock: only one request ever waits for room, the holder of the
//     turn, and it waits only for requests that are decoding and
//     answering, which wait for nothing and give their room back when
//     answered. The rest hold no room while they wait: small bodies take
//     none, and large ones wait for the turn before they take any. The
//     turn holder needs at most maxBodyBytes, and the budget is never
//     smaller, so it always fits. TestLargeBodiesDoNotDeadlock drives six
//     large bodies through a budget that holds two.
//   - No wait past the deadline: a large body that finds no turn or no
//     room overloadMargin before ctx's deadline is answered with
//     overloadStatus, in time, and so is one that would be the
//     maxWaitingBodies-th to wait.
func (b *bodyReader) readBody(ctx context.Context, w http.ResponseWriter, r *http.Request, want string) (body []byte, err error) {
	// A declared length over the cap is refused before reading a byte.
	if r.ContentLength > maxBodyBytes {
		return nil, tooLarge(want)
	}
	deadline, _ := ctx.Deadline()
	in := limits.NewMinRateReader(r, http.NewResponseController(w), deadline, bodyStallTimeout, minBodyRate)
	// The most the body can be: its declared length, which net/http holds
	// it to, or, for a body of unknown length, maxBodyBytes.
	known := r.ContentLength >= 0
	ceiling := r.ContentLength
	if !known {
		ceiling = maxBodyBytes
		in.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	}
	body = make([]byte, min(ceiling, smallBodyBytes))
	n, err := in.ReadFull(body)
	body = body[:n]
	switch {
	case !known && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)):
		return complete(body, want)
	case err != nil:
		return nil, b.failed(w, err, want)
	case int64(n) == ceiling && known:
		return complete(body, want)
	}

	// A large body: wait for the turn, then take room as the bytes arrive.
	if _, waiting := b.turn.State(); waiting >= maxWaitingBodies {
		return nil, b.overload(&in, ceiling, "too many large reviews were waiting to be read")
	}
	waitCtx, cancel := waitContext(ctx)
	defer cancel()
	if err := b.turn.Acquire(waitCtx, 1); err != nil {
		return nil, b.overload(&in, ceiling, "it found no turn among the large reviews being read before its deadline")
	}
	defer b.turn.Release(1)
	for {
		if len(body) == cap(body) {
			if int64(len(body)) == ceiling {
				if known {
					return complete(body, want)
				}
				// A body of unknown length must end here.
				var probe [1]byte
				n, err := in.Read(probe[:])
				if n == 0 && errors.Is(err, io.EOF) {
					return complete(body, want)
				}
				b.release(body)
				if err == nil {
					err = &http.MaxBytesError{Limit: maxBodyBytes}
				}
				return nil, b.failed(w, err, want)
			}
			// The old buffer is kept for another body once copied: the
			// room held grows by the difference. (Were both held, the
			// turn holder could wait for room that it holds itself.)
			next := nextBufferSize(int64(cap(body)), ceiling)
			if err := b.budget.Acquire(waitCtx, next-room(body)); err != nil {
				b.release(body)
				return nil, b.overload(&in, ceiling, "it found no room among the reviews in flight before its deadline")
			}
			grown := append(b.buffer(next), body...)
			b.keep(body)
			body = grown
		}
		// The buffer of a body of known length can be larger than the
		// body; net/http's reader ends at the declared length.
		n, err := in.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		switch {
		case errors.Is(err, io.EOF) && (!known || int64(len(body)) == ceiling):
			return complete(body, want)
		case err != nil:
			b.release(body)
			return nil, b.failed(w, err, want)
		}
	}
}

// nextBufferSize is the size a full buffer of size full grows to, for a
// body of at most ceiling bytes: the smallest of bodyBufferSizes that
// holds the ceiling, unless that is more than twice full; then the largest
// that is not.
func nextBufferSize(full, ceiling int64) int64 {
	next := full
	for _, size := range bodyBufferSizes {
		if size > 2*full {
			break
		}
		next = size
		if size >= ceiling {
			break
		}
	}
	return next
}

// room is what a body's buffer holds of the budget: all of it, for a
// large body's; a small body's buffer takes none.
func room(body []byte) int64 {
	if cap(body) > smallBodyBytes {
		return int64(cap(body))
	}
	return 0
}

// buffer is an empty buffer of size, one of bodyBufferSizes: a kept one
// if there is one. Its old bytes, which may be another review's Secret,
// are past its length: a body is only ever appended to or read into, so
// each of its bytes is written before it is read, and nothing may reslice
// a body past its length.
func (b *bodyReader) buffer(size int64) []byte {
	if kept, ok := b.buffers[slices.Index(bodyBufferSizes, size)].Get().(*[]byte); ok {
		return (*kept)[:0]
	}
	return make([]byte, 0, size)
}

// keep keeps a large body's buffer for the next one: nothing may use it
// after. A small body's is left to the GC.
func (b *bodyReader) keep(body []byte) {
	if room(body) > 0 {
		body = body[:0]
		b.buffers[slices.Index(bodyBufferSizes, int64(cap(body)))].Put(&body)
	}
}

// release gives back a body once answered: the room it held, and its
// buffer for the next large body. Nothing may use body after; nothing
// decoded from it does, as the UniversalDeserializer's decoders copy what
// they keep, whatever the body's format: every string, and every byte
// slice (runtime.RawExtension's UnmarshalJSON and UnmarshalCBOR in
// k8s.io/apimachinery/pkg/runtime/extension.go append to their own; the
// generated protobuf code does the same).
func (b *bodyReader) release(body []byte) {
	if held := room(body); held > 0 {
		b.budget.Release(held)
		b.keep(body)
	}
}

// complete is a body read to its end: a review, unless it is empty.
func complete(body []byte, want string) ([]byte, error) {
	if len(body) == 0 {
		return nil, &statusError{http.StatusBadRequest, "request body is empty: expected " + want}
	}
	return body, nil
}

// waitContext is ctx ending overloadMargin before its deadline, so that a
// request that waits in line until then can still be answered in time.
func waitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if deadline, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, deadline.Add(-overloadMargin))
	}
	return context.WithCancel(ctx)
}

func tooLarge(want string) *statusError {
	return &statusError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes, the most %s can be", maxBodyBytes, want)}
}

// failed is the answer to a body that could not be read. A body cut for its
// pace closes its connection: its client has stopped sending, and nothing
// more will be read from it.
func (b *bodyReader) failed(w http.ResponseWriter, err error, want string) *statusError {
	var slow *limits.SlowBodyError
	switch {
	case errors.As(err, new(*http.MaxBytesError)):
		return tooLarge(want)
	case errors.As(err, &slow):
		w.Header().Set("Connection", "close")
		if slow.Reason == "stalled" {
			b.stalled.Add(1)
		} else {
			b.tooSlow.Add(1)
		}
		return &statusError{http.StatusRequestTimeout, err.Error()}
	default:
		return &statusError{http.StatusBadRequest, fmt.Sprintf("reading the request body: %v", err)}
	}
}

// overload answers a large review that cannot be read before its deadline
// with overloadStatus and a message that says what to change. why
// completes "this review was refused because".
func (b *bodyReader) overload(in *limits.MinRateReader, ceiling int64, why string) *statusError {
	b.overloaded.Add(1)
	// Read the rest of the body, still held to its pace, so that the client
	// is done sending before it reads the answer: closing on unread data
	// could reset the connection under the answer.
	var scratch [4 << 10]byte
	for in.Received() < ceiling {
		if _, err := in.Read(scratch[:]); err != nil {
			break
		}
	}
	return &statusError{overloadStatus, fmt.Sprintf("the webhook is busy: this %d-byte review was not read because %s (large reviews are read one at a time, at most %d bytes of them at once: -max-inflight-bytes); retry the request", ceiling, why, b.budget.Capacity())}
}
