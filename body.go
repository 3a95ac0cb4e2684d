package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
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

// bodyReader reads review bodies; readBody says how. It counts what it
// refuses and cuts, for the metrics.
type bodyReader struct {
	budget *limits.Semaphore // bytes of large bodies held, as read and until answered
	turn   *limits.Semaphore // of one: the large body being read

	overloaded       atomic.Uint64 // large bodies refused: no turn or no room in time
	stalled, tooSlow atomic.Uint64 // bodies cut for their pace
}

// newBodyReader reads bodies within a budget of budgetBytes of large ones,
// at least maxBodyBytes (parseFlags checks it).
func newBodyReader(budgetBytes int64) *bodyReader {
	return &bodyReader{budget: limits.NewSemaphore(budgetBytes), turn: limits.NewSemaphore(1)}
}

// readBody reads r's body whole, for a request that must be want, and
// returns it with the room it holds in the budget, to give back with
// release once answered; or a *statusError to answer with. It guarantees:
//
//   - Bytes received, never bytes declared, take memory: a body says how
//     long it is, but only what it sends is held. A body of up to
//     smallBodyBytes, most reviews, is read into a buffer of its own,
//     bounded with the connections (maxConnections), not by the budget. A
//     larger one waits for its turn (one large body is read at a time) and
//     with it takes room in the budget as its bytes arrive, its buffer
//     doubling each time it fills, so it never holds room for more than
//     twice what it has received. Once complete it gives up the turn and
//     keeps its room until answered.
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
//     smaller, so it always fits. TestLargeBodiesDoNotDeadlock drives many
//     large bodies through a budget that fits one.
//   - No wait past the deadline: a large body that finds no turn or no
//     room overloadMargin before ctx's deadline is answered with
//     overloadStatus, in time, and so is one that would be the
//     maxWaitingBodies-th to wait.
func (b *bodyReader) readBody(ctx context.Context, w http.ResponseWriter, r *http.Request, want string) (body []byte, held int64, err error) {
	// A declared length over the cap is refused before reading a byte.
	if r.ContentLength > maxBodyBytes {
		return nil, 0, tooLarge(want)
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
		return complete(body, 0, want)
	case err != nil:
		return nil, 0, b.failed(w, err, want)
	case int64(n) == ceiling && known:
		return complete(body, 0, want)
	}

	// A large body: wait for the turn, then take room as the bytes arrive.
	if _, waiting := b.turn.State(); waiting >= maxWaitingBodies {
		return nil, 0, b.overload(&in, ceiling, "too many large reviews were waiting to be read")
	}
	waitCtx, cancel := waitContext(ctx)
	defer cancel()
	if err := b.turn.Acquire(waitCtx, 1); err != nil {
		return nil, 0, b.overload(&in, ceiling, "it found no turn among the large reviews being read before its deadline")
	}
	defer b.turn.Release(1)
	for {
		if len(body) == cap(body) {
			if int64(len(body)) == ceiling {
				if known {
					return complete(body, held, want)
				}
				// A body of unknown length must end here.
				var probe [1]byte
				n, err := in.Read(probe[:])
				if n == 0 && errors.Is(err, io.EOF) {
					return complete(body, held, want)
				}
				b.release(held)
				if err == nil {
					err = &http.MaxBytesError{Limit: maxBodyBytes}
				}
				return nil, 0, b.failed(w, err, want)
			}
			// The old buffer is garbage once copied: the room held grows
			// by the difference. (Were both held, the turn holder could
			// wait for room that it holds itself.)
			next := nextBufferSize(int64(cap(body)), ceiling)
			if err := b.budget.Acquire(waitCtx, next-held); err != nil {
				b.release(held)
				return nil, 0, b.overload(&in, ceiling, "it found no room among the reviews in flight before its deadline")
			}
			held = next
			grown := make([]byte, len(body), next)
			copy(grown, body)
			body = grown
		}
		n, err := in.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		switch {
		case errors.Is(err, io.EOF) && (!known || int64(len(body)) == ceiling):
			return complete(body, held, want)
		case err != nil:
			b.release(held)
			return nil, 0, b.failed(w, err, want)
		}
	}
}

// nextBufferSize is the size a full buffer of size full grows to, for a
// body of at most ceiling bytes: at most twice full, so that the room held
// stays within twice what has arrived, and the ceiling halved (rounding
// up) as many times as that takes, so that the last growth lands on the
// ceiling exactly. Doubling from smallBodyBytes instead, the 1.1 MB review
// of the benchmarks allocated 3.1 MB and copied 2 MB; this way it
// allocates 2.2 MB and copies 1.1 MB.
func nextBufferSize(full, ceiling int64) int64 {
	next := ceiling
	for next > 2*full {
		next = (next + 1) / 2
	}
	return next
}

// release gives back the room a body held.
func (b *bodyReader) release(held int64) {
	if held > 0 {
		b.budget.Release(held)
	}
}

// complete is a body read to its end: a review, unless it is empty.
func complete(body []byte, held int64, want string) ([]byte, int64, error) {
	if len(body) == 0 {
		return nil, 0, &statusError{http.StatusBadRequest, "request body is empty: expected " + want}
	}
	return body, held, nil
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
