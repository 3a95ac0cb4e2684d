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
// that sends nothing for stall, or arrives slower than minRate bytes a
// second on average from its start after stall of grace, is cut with a
// *CutError at once, rather than holding what its reader holds until the
// server's ReadTimeout. Time the server makes the body wait (Paused) is
// not the client's. It is used by value, on the stack: a small body's
// path makes no allocation for it.
type BodyClock struct {
	// Body is what is read: the request's body, or a reader wrapping it.
	Body     io.Reader
	rc       *http.ResponseController
	stall    time.Duration
	minRate  int64
	deadline time.Time // the request's own
	start    time.Time // when reading began, moved on by time spent waiting
	lastByte time.Time
	received int64
}

// NewBodyClock starts the clock of r's body, whose connection rc sets
// read deadlines on; no read goes past deadline, which cuts nothing.
func NewBodyClock(r *http.Request, rc *http.ResponseController, deadline time.Time, stall time.Duration, minRate int64) BodyClock {
	now := time.Now()
	return BodyClock{Body: r.Body, rc: rc, stall: stall, minRate: minRate, deadline: deadline, start: now, lastByte: now}
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

// Paused moves the clock on by time the server made the body wait.
func (c *BodyClock) Paused(d time.Duration) {
	c.start = c.start.Add(d)
	c.lastByte = c.lastByte.Add(d)
}

// Received returns the bytes read so far.
func (c *BodyClock) Received() int64 { return c.received }

// Read reads into p, at most until the next byte is due.
func (c *BodyClock) Read(p []byte) (int, error) {
	due, reason := c.lastByte.Add(c.stall), "stalled"
	if slow := c.start.Add(c.stall + time.Duration(c.received)*time.Second/time.Duration(c.minRate)); slow.Before(due) {
		due, reason = slow, "too_slow"
	}
	if c.deadline.Before(due) {
		due, reason = c.deadline, ""
	}
	// Not every writer has a connection (tests' recorders): then the
	// server's own ReadTimeout is the only clock.
	_ = c.rc.SetReadDeadline(due)
	n, err := c.Body.Read(p)
	if n > 0 {
		c.received += int64(n)
		c.lastByte = time.Now()
	}
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
