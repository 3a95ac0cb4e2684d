package body

import (
	"errors"
	"net/http"
	"os"
	"testing"
	"time"
)

// scriptedConn is a connection whose reads follow a script: both the
// ResponseWriter whose read deadline a pacedReader sets and the body it
// reads. Its last step repeats.
type scriptedConn struct {
	deadline time.Time
	steps    []func(c *scriptedConn, p []byte) (int, error)
	reads    int
}

func (c *scriptedConn) Header() http.Header               { return http.Header{} }
func (c *scriptedConn) Write(p []byte) (int, error)       { return len(p), nil }
func (c *scriptedConn) WriteHeader(int)                   {}
func (c *scriptedConn) SetReadDeadline(t time.Time) error { c.deadline = t; return nil }
func (c *scriptedConn) Read(p []byte) (int, error) {
	step := c.steps[min(c.reads, len(c.steps)-1)]
	c.reads++
	return step(c, p)
}

// nothingBy fails with the deadline's error at the deadline: nothing came.
func nothingBy(c *scriptedConn, _ []byte) (int, error) {
	time.Sleep(time.Until(c.deadline))
	return 0, os.ErrDeadlineExceeded
}

// sends returns a step that reads n bytes at once.
func sends(n int) func(*scriptedConn, []byte) (int, error) {
	return func(_ *scriptedConn, p []byte) (int, error) { return min(n, len(p)), nil }
}

// TestSpentGraceIsCut: a body may make the server wait StallTimeout plus
// a second for each MinRate bytes it sent: within that, it is read on;
// past it, the next read that finds nothing cuts it for its rate.
func TestSpentGraceIsCut(t *testing.T) {
	for _, tc := range []struct {
		name     string
		received int64
		steps    []func(*scriptedConn, []byte) (int, error)
		wantCut  bool
	}{
		{"keeping pace", 6 * MinRate, []func(*scriptedConn, []byte) (int, error){sends(32 << 10)}, false},
		{"trickling", 0, []func(*scriptedConn, []byte) (int, error){nothingBy}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := &scriptedConn{steps: tc.steps}
			in := pacedReader{body: conn, w: http.NewResponseController(conn), deadline: time.Time{}, paced: true}
			in.length, in.received, in.waited = MaxBytes, tc.received, 2*StallTimeout
			_, err := in.Read(make([]byte, 64<<10))
			var cut *cutError
			if got := errors.As(err, &cut) && cut.reason == TooSlow; got != tc.wantCut {
				t.Errorf("got %v, want cut for its rate: %v", err, tc.wantCut)
			}
		})
	}
}
