package limits

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// MinRateReader reads a request body that must keep a minimum rate: a body
// that makes its reader wait stall for a byte, or wait longer in all than
// stall plus what minRate bytes a second allows for the bytes it has sent,
// is cut with a *SlowBodyError at once, rather than holding what its reader
// holds until the server's ReadTimeout. Only time spent in Read, waiting
// for the client, counts: time between reads (the server waiting for its
// turn or for room, decoding, or short of CPU, while the client's bytes
// queue in the socket) is the server's, not the client's. It is used by
// value, on the stack: a small body's path makes no allocation for it.
type MinRateReader struct {
	// Body is what is read: the request's body, or a reader wrapping it.
	Body     io.Reader
	rc       *http.ResponseController
	stall    time.Duration
	minRate  int64
	deadline time.Time     // the request's own
	waited   time.Duration // in Read, so far
	received int64
}

// NewMinRateReader reads r's body, whose connection rc sets
// read deadlines on; no read goes past deadline, which cuts nothing.
func NewMinRateReader(r *http.Request, rc *http.ResponseController, deadline time.Time, stall time.Duration, minRate int64) MinRateReader {
	return MinRateReader{Body: r.Body, rc: rc, stall: stall, minRate: minRate, deadline: deadline}
}

// SlowBodyError is the error of a body cut for its pace: Reason is "stalled"
// or "too_slow".
type SlowBodyError struct {
	Reason  string
	stall   time.Duration
	minRate int64
}

func (e *SlowBodyError) Error() string {
	if e.Reason == "stalled" {
		return fmt.Sprintf("the request body stopped arriving: no byte for %s", e.stall)
	}
	return fmt.Sprintf("the request body arrived slower than %d KiB/s", e.minRate>>10)
}

// Received returns the bytes read so far.
func (c *MinRateReader) Received() int64 { return c.received }

// Read reads into p, waiting at most until the client is out of time.
func (c *MinRateReader) Read(p []byte) (int, error) {
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
		return n, &SlowBodyError{Reason: reason, stall: c.stall, minRate: c.minRate}
	}
	return n, err
}

// ReadFull fills p, or fails.
func (c *MinRateReader) ReadFull(p []byte) (int, error) {
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
