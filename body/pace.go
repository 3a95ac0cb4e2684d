package body

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// checkWindow is how long a client whose pace lapsed has to show it still
// sends checkBytes, MinRate's worth: long enough for a loaded core to read
// bytes on their way, short against StallTimeout.
const (
	checkWindow = 20 * time.Millisecond
	checkBytes  = MinRate * int64(checkWindow) / int64(time.Second)
)

// errPastDeadline is a body not read by its deadline (the request's, less
// AnswerMargin): the server can no longer answer it in time.
var errPastDeadline = errors.New("the request body was not read before its deadline")

// cutError is a body cut for its pace: reason is Stalled or TooSlow.
type cutError struct{ reason string }

func (e *cutError) Error() string {
	if e.reason == Stalled {
		return fmt.Sprintf("the request body stopped arriving: no byte for %s", StallTimeout)
	}
	return fmt.Sprintf("the request body arrived slower than %d KiB/s", MinRate>>10)
}

// pacedReader reads a body held to StallTimeout and MinRate, counting only
// its waiting in Read: time between reads is the server's. Used by value,
// it costs a small body no allocation.
type pacedReader struct {
	body     io.Reader // the request's body, or a reader wrapping it
	conn     *http.ResponseController
	deadline time.Time     // nothing is read past it; zero: none
	length   int64         // the body's, declared
	waited   time.Duration // in Read, so far
	received int64
}

// Read reads into p, waiting at most until the client is out of time, or
// the body out of time (errPastDeadline). When the client's time lapses,
// check decides whose the lapse was.
func (c *pacedReader) Read(p []byte) (int, error) {
	wait, reason := StallTimeout, Stalled
	if left := StallTimeout + time.Duration(c.received)*time.Second/MinRate - c.waited; left < wait {
		wait, reason = left, TooSlow
	}
	if wait <= 0 {
		return c.check(p, reason)
	}
	n, err := c.readBy(p, time.Now().Add(wait))
	switch {
	case !errors.Is(err, os.ErrDeadlineExceeded):
		return n, err
	case n > 0:
		return n, nil
	default:
		return c.check(p, reason)
	}
}

// check decides whose a lapsed pace was: the client's, cut for reason, if
// it sends less than checkBytes (or the rest, or enough to fill p) within
// checkWindow. A read the server made late, short of CPU, fails without
// looking at the socket, so it is no evidence: check looks again over
// twice the window, until it looks on time, or the body's deadline ends it.
func (c *pacedReader) check(p []byte, reason string) (int, error) {
	need := int(min(checkBytes, c.length-c.received, int64(len(p))))
	got := 0
	window := checkWindow
	due := time.Now().Add(window)
	for {
		n, err := c.readBy(p[got:], due)
		got += n
		switch {
		case got >= need:
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = nil
			}
			return got, err
		case err == nil:
			continue
		case !errors.Is(err, os.ErrDeadlineExceeded):
			return got, err // io.EOF included: the body is whole
		case time.Since(due) > window: // noticed late, being short of CPU
			window *= 2
			due = time.Now().Add(window)
		default:
			return got, &cutError{reason}
		}
	}
}

// readBy reads into p, waiting until due at the latest, or until the
// body's deadline (errPastDeadline), whichever comes first.
func (c *pacedReader) readBy(p []byte, due time.Time) (int, error) {
	pastDeadline := false
	if !c.deadline.IsZero() && !due.Before(c.deadline) {
		due, pastDeadline = c.deadline, true
	}
	// Not every writer has a connection (tests' recorders): then the
	// server's own ReadTimeout is the only clock.
	_ = c.conn.SetReadDeadline(due)
	start := time.Now()
	n, err := c.body.Read(p)
	c.waited += time.Since(start)
	c.received += int64(n)
	if pastDeadline && errors.Is(err, os.ErrDeadlineExceeded) {
		return n, errPastDeadline
	}
	return n, err
}

// readFull fills p, or fails.
func (c *pacedReader) readFull(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := c.Read(p[n:])
		if n += m; err != nil && !(n == len(p) && errors.Is(err, io.EOF)) {
			return n, err
		}
	}
	return n, nil
}
