package body

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// checkWindow is how long the server gives a client whose pace deadline
// lapsed to show that it is still sending, at MinRate, before cutting
// its body: long enough for bytes a client is sending to arrive and for
// the server to read them on a loaded core, short against StallTimeout.
const checkWindow = 20 * time.Millisecond

// checkBytes is what a client must send within checkWindow: MinRate's
// worth of it.
const checkBytes = MinRate * int64(checkWindow) / int64(time.Second)

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
// the time it waits in Read for the client: time between reads (the
// server waiting in line or for room, decoding, or short of CPU, while the
// client's bytes queue in the socket) is the server's. It is used by
// value, on the stack: a small body's read makes no allocation for it.
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

// check decides whose a lapsed pace deadline was: the client's, and its
// body is cut for reason, only if, with the server ready, it sends less
// than checkBytes (or the rest of its body, or enough to fill p) within
// checkWindow. A check the server made late, short of CPU, is no evidence:
// a read whose deadline passed before it ran fails without looking at the
// socket, where the bytes may be. It checks again over twice the window,
// until it looks in time: the window outgrows how late a starved server
// runs, and the body's deadline ends it all. A client that keeps its pace
// is never cut here; one that does not is cut once the server has looked
// on time.
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
