package limits

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// BodyClock reads a request body and holds every read to a clock: a body
// that makes its reader wait stall for a byte, or wait longer in all than
// stall plus what minRate bytes a second allows for the bytes it has sent,
// is cut with a *CutError at once, rather than holding what its reader
// holds until the server's ReadTimeout. Only time spent in Read, waiting
// for the client, counts: time between reads (the server waiting for its
// turn or for room, decoding, or short of CPU, while the client's bytes
// queue in the socket) is the server's, not the client's. It is used by
// value, on the stack: a small body's path makes no allocation for it.
type BodyClock struct {
	// Body is what is read: the request's body, or a reader wrapping it.
	Body     io.Reader
	rc       *http.ResponseController
	stall    time.Duration
	minRate  int64
	deadline time.Time     // the request's own
	waited   time.Duration // in Read, so far
	received int64
}

// NewBodyClock starts the clock of r's body, whose connection rc sets
// read deadlines on; no read goes past deadline, which cuts nothing.
func NewBodyClock(r *http.Request, rc *http.ResponseController, deadline time.Time, stall time.Duration, minRate int64) BodyClock {
	return BodyClock{Body: r.Body, rc: rc, stall: stall, minRate: minRate, deadline: deadline}
}

// CutError is the error of a body cut by the clock: Reason is "stalled"
// or "too_slow".
type CutError struct {
	Reason  string
	stall   time.Duration
	minRate int64
}

func (e *CutError) Error() string {
	if e.Reason == "stalled" {
		return fmt.Sprintf("the request body stopped arriving: no byte for %s", e.stall)
	}
	return fmt.Sprintf("the request body arrived slower than %d KiB/s", e.minRate>>10)
}

// Received returns the bytes read so far.
func (c *BodyClock) Received() int64 { return c.received }

// Read reads into p, waiting at most until the client is out of time.
func (c *BodyClock) Read(p []byte) (int, error) {
	now := time.Now()
	wait, reason := c.stall, "stalled"
	if left := c.stall + time.Duration(c.received)*time.Second/time.Duration(c.minRate) - c.waited; left < wait {
		wait, reason = left, "too_slow"
	}
	due := now.Add(wait)
	if c.deadline.Before(due) {
		due, reason = c.deadline, ""
	}
	// Not every writer has a connection (tests' recorders): then the
	// server's own ReadTimeout is the only clock.
	_ = c.rc.SetReadDeadline(due)
	n, err := c.Body.Read(p)
	c.waited += time.Since(now)
	c.received += int64(n)
	if err != nil && reason != "" && errors.Is(err, os.ErrDeadlineExceeded) {
		return n, &CutError{Reason: reason, stall: c.stall, minRate: c.minRate}
	}
	return n, err
}

// ReadFull fills p, or fails.
func (c *BodyClock) ReadFull(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := c.Read(p[n:])
		n += m
		if err != nil && !(n == len(p) && errors.Is(err, io.EOF)) {
			return n, err
		}
	}
	return n, nil
}
