package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/example/webhook/limits"
)

// How a review's body is read. The apiserver writes a review from memory
// the moment it has sent the headers, so a body that pauses or trickles is
// not the apiserver's, and must not hold the budget with bytes it never
// sends. A body of up to smallBodyBytes, most reviews (testdata/ holds the
// apiserver's of 2 to 14 KB), is read into a buffer of its own, bounded
// with the connections (maxConnections), not by the budget. A larger one
// then waits for its turn (one large body is read at a time) and with it
// takes room in the byte budget as its bytes arrive, its buffer doubling
// each time it fills, so it never holds room for more than twice what it
// has received. Once complete it gives up the turn and keeps its room
// until it is answered.
//
// Why this cannot deadlock: only one request ever waits for room, the
// holder of the turn, and it waits only for requests that are decoding and
// answering, which wait for nothing and give their room back when
// answered. The rest hold no room while they wait: small bodies take none,
// and large ones wait for the turn before they take any. The turn holder
// needs at most maxBodyBytes, and the budget is never smaller
// (parseFlags), so it always fits. TestLargeBodiesDoNotDeadlock drives many
// large bodies at once through a budget that fits one.
//
// Every read is held to limits.BodyClock, which cuts a body that stalls or
// trickles (bodyStallTimeout, minBodyRate), and its room is given back.
const (
	// smallBodyBytes is the body read without the budget: one TLS record,
	// the most one read from the connection returns.
	smallBodyBytes = 16 << 10

	// bodyStallTimeout is how long a body may send nothing. The only pause
	// in a body the apiserver writes from memory is a lost TCP segment,
	// resent after Linux's shortest retransmission timeout, 200 ms; one
	// second allows that twice over.
	bodyStallTimeout = time.Second

	// minBodyRate is the slowest a body may arrive, in bytes per second,
	// counting only the time the server waits for it, with
	// bodyStallTimeout of grace: time the server is busy or short of CPU
	// is not the client's (e2e TestMemoryUnderBurst on a loaded 2-core
	// machine saw a wall-clock floor cut the apiserver's review). 1 MiB/s is
	// 8 Mbit/s, a hundredth of a datacenter link: the largest review, 7 MiB,
	// still has 8 s.
	minBodyRate = 1 << 20

	// maxWaitingBodies is how many large bodies may wait for their turn:
	// half the connections, as waiting costs a client nothing but one; the
	// other half stay free for the apiserver's next reviews and the probes.
	maxWaitingBodies = maxConnections / 2
)

// bodyOutcome is what reading a body came to: the body and the room it
// holds in the budget until answered, or the answer to give instead.
type bodyOutcome struct {
	body []byte
	held int64
	fail *outcome
}

// readBody reads the body of r (see above); want is what it must be.
func (s *reviewServer) readBody(ctx context.Context, w http.ResponseWriter, r *http.Request, clock *limits.BodyClock, want string) bodyOutcome {
	// The most the body can be: its declared length, which net/http holds
	// it to, or, for a body of unknown length, maxBodyBytes.
	known := r.ContentLength >= 0
	ceiling := r.ContentLength
	if !known {
		ceiling = maxBodyBytes
		clock.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	}
	body := make([]byte, min(ceiling, smallBodyBytes))
	n, err := clock.ReadFull(body)
	body = body[:n]
	switch {
	case !known && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)):
		return s.complete(body, 0, want)
	case err != nil:
		return bodyFailed(err, want)
	case int64(n) == ceiling && known:
		return s.complete(body, 0, want)
	case s.budget == nil:
		return s.readRest(clock, body, ceiling, known, context.Background(), want)
	}

	// A large body: wait for the turn, then take room as the bytes arrive.
	if _, waiting := s.turn.State(); waiting >= maxWaitingBodies {
		return s.overloaded(clock, ceiling, "too many large reviews were waiting to be read")
	}
	waitCtx, cancel := waitContext(ctx)
	defer cancel()
	if err := s.turn.Acquire(waitCtx, 1); err != nil {
		return s.overloaded(clock, ceiling, "it found no turn among the large reviews being read before its deadline")
	}
	defer s.turn.Release(1)
	return s.readRest(clock, body, ceiling, known, waitCtx, want)
}

// readRest reads the rest of a large body, doubling its buffer each time
// it fills; room for each new buffer is taken before it is made.
func (s *reviewServer) readRest(clock *limits.BodyClock, body []byte, ceiling int64, known bool, waitCtx context.Context, want string) bodyOutcome {
	var held int64
	for {
		if len(body) == cap(body) {
			if int64(len(body)) == ceiling {
				if known {
					return s.complete(body, held, want)
				}
				// A body of unknown length must end here.
				var probe [1]byte
				n, err := clock.Read(probe[:])
				if n == 0 && errors.Is(err, io.EOF) {
					return s.complete(body, held, want)
				}
				s.giveBack(held)
				if err == nil {
					err = &http.MaxBytesError{Limit: maxBodyBytes}
				}
				return bodyFailed(err, want)
			}
			// The old buffer is garbage once copied: the room held grows
			// by the difference. (Were both held, the turn holder could
			// wait for room that it holds itself.)
			next := min(2*int64(cap(body)), ceiling)
			if s.budget != nil {
				if err := s.budget.Acquire(waitCtx, next-held); err != nil {
					s.giveBack(held)
					return s.overloaded(clock, ceiling, "it found no room among the reviews in flight before its deadline")
				}
				held = next
			}
			grown := make([]byte, len(body), next)
			copy(grown, body)
			body = grown
		}
		n, err := clock.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		switch {
		case errors.Is(err, io.EOF) && !known:
			return s.complete(body, held, want)
		case errors.Is(err, io.EOF) && int64(len(body)) == ceiling:
			return s.complete(body, held, want)
		case err != nil:
			s.giveBack(held)
			return bodyFailed(err, want)
		}
	}
}

// complete is a body read to its end.
func (s *reviewServer) complete(body []byte, held int64, want string) bodyOutcome {
	if len(body) == 0 {
		s.giveBack(held)
		o := failed(http.StatusBadRequest, "request body is empty: expected "+want)
		return bodyOutcome{fail: &o}
	}
	return bodyOutcome{body: body, held: held}
}

func (s *reviewServer) giveBack(held int64) {
	if held > 0 {
		s.budget.Release(held)
	}
}

// waitContext is ctx ending overloadMargin before its deadline, so that a
// request that waits in line until then can still be answered in time.
func waitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if deadline, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, deadline.Add(-overloadMargin))
	}
	return context.WithCancel(ctx)
}

// bodyFailed answers a body that could not be read.
func bodyFailed(err error, want string) bodyOutcome {
	var o outcome
	var cut *limits.CutError
	switch {
	case errors.As(err, new(*http.MaxBytesError)):
		o = failed(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes, the most %s can be", maxBodyBytes, want))
	case errors.As(err, &cut):
		o = failed(http.StatusRequestTimeout, err.Error())
		o.cut = cut.Reason
	default:
		o = failed(http.StatusBadRequest, fmt.Sprintf("reading the request body: %v", err))
	}
	return bodyOutcome{fail: &o}
}

// overloaded answers a large review that cannot be read before its
// deadline with overloadStatus and a message that says what to change. why
// completes "this review was refused because".
func (s *reviewServer) overloaded(clock *limits.BodyClock, ceiling int64, why string) bodyOutcome {
	s.metrics.budgetRejection()
	// Read the rest of the body, still on the clock, so that the client is
	// done sending before it reads the answer: closing on unread data
	// could reset the connection under the answer.
	var scratch [4 << 10]byte
	for clock.Received() < ceiling {
		if _, err := clock.Read(scratch[:]); err != nil {
			break
		}
	}
	o := failed(overloadStatus, fmt.Sprintf("the webhook is busy: this %d-byte review was not read because %s (large reviews are read one at a time, at most %d bytes of them at once: -max-inflight-bytes); retry the request", ceiling, why, s.budget.Capacity()))
	return bodyOutcome{fail: &o}
}
