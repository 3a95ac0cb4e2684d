package body

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// errPastDeadline is a body not read by its deadline, too late to answer.
var errPastDeadline = errors.New("the request body was not read before its deadline")

// cutError is a body cut for its pace: reason is Stalled or TooSlow.
type cutError struct{ reason string }

func (e *cutError) Error() string {
	if e.reason == Stalled {
		return fmt.Sprintf("the request body stopped arriving: no byte for %s", StallTimeout)
	}
	return fmt.Sprintf("the request body arrived slower than %d KiB/s", MinRate>>10)
}

// pacedReader reads a body by its deadline and, once paced, held to
// StallTimeout and MinRate, counting only its waiting in Read: time between
// reads is the server's. Used by value, it costs a small body no
// allocation.
type pacedReader struct {
	body     io.Reader // the request's body, or a reader wrapping it
	conn     net.Conn  // the request's HTTP/1 connection (ConnContext); nil: w's
	w        *http.ResponseController
	deadline time.Time     // nothing is read past it; zero: none
	length   int64         // the body's, declared
	paced    bool          // held to StallTimeout and MinRate: it holds room
	waited   time.Duration // in Read, so far, once paced
	received int64
}

// setReadDeadline sets the read deadline of the request's connection, or,
// without one from ConnContext, of w's; without either (a recorder, a
// request served in process) there is nothing to set.
func (c *pacedReader) setReadDeadline(t time.Time) error {
	if c.conn != nil {
		return c.conn.SetReadDeadline(t)
	}
	if err := c.w.SetReadDeadline(t); !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// Read reads into p, waiting at most until the body is out of time
// (errPastDeadline) or, paced, until its client is, its body then cut for
// reason.
func (c *pacedReader) Read(p []byte) (int, error) {
	if !c.paced {
		return c.readBy(p, c.deadline)
	}
	wait, reason := StallTimeout, Stalled
	if left := StallTimeout + time.Duration(c.received)*time.Second/MinRate - c.waited; left < wait {
		wait, reason = left, TooSlow
	}
	n, err := c.readBy(p, time.Now().Add(wait))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return n, err
	} else if n == 0 {
		return 0, &cutError{reason}
	}
	return n, nil
}

// readBy reads into p, waiting until due at the latest, or until the
// body's deadline (errPastDeadline), whichever comes first.
func (c *pacedReader) readBy(p []byte, due time.Time) (int, error) {
	pastDeadline := false
	if !c.deadline.IsZero() && !due.Before(c.deadline) {
		due, pastDeadline = c.deadline, true
	}
	if err := c.setReadDeadline(due); err != nil {
		return 0, err
	}
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
