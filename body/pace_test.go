package body

import (
	"errors"
	"net/http"
	"os"
	"testing"
	"time"
)

// scriptedConn is a connection whose reads follow a script, for what a
// real socket shows only by chance: a read deadline that lapsed while the
// bytes were there, or that the server noticed late. It is both the
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

// lapsed fails at once with the deadline's error, as a read whose deadline
// passed before it reached the socket does (internal/poll's prepareRead):
// the server was descheduled past it, with the bytes in the socket.
func lapsed(*scriptedConn, []byte) (int, error) { return 0, os.ErrDeadlineExceeded }

// noticedLate fails with the deadline's error well after the deadline, as
// a read does on a server short of CPU.
func noticedLate(c *scriptedConn, _ []byte) (int, error) {
	time.Sleep(time.Until(c.deadline.Add(2 * checkWindow)))
	return 0, os.ErrDeadlineExceeded
}

// noticedLateBy returns a step that fails with the deadline's error late
// after the deadline, as a read does on a server starved for that long.
func noticedLateBy(late time.Duration) func(*scriptedConn, []byte) (int, error) {
	return func(c *scriptedConn, _ []byte) (int, error) {
		time.Sleep(time.Until(c.deadline.Add(late)))
		return 0, os.ErrDeadlineExceeded
	}
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

// TestLapseIsTheClientsOnlyIfItIsBehind: when a pace deadline lapses, the
// client is cut only if, with the server ready and on time, it does not
// keep its pace within checkWindow; bytes already in the socket, or a
// deadline noticed late, are the server's, and reading goes on.
func TestLapseIsTheClientsOnlyIfItIsBehind(t *testing.T) {
	for _, tc := range []struct {
		name    string
		steps   []func(*scriptedConn, []byte) (int, error)
		left    int64 // bytes of the body still to come
		wantN   int
		wantCut string // "": not cut
	}{
		{"bytes in the socket", []func(*scriptedConn, []byte) (int, error){lapsed, sends(32 << 10)}, MaxBytes, 32 << 10, ""},
		{"noticed late", []func(*scriptedConn, []byte) (int, error){lapsed, noticedLate, sends(32 << 10)}, MaxBytes, 32 << 10, ""},
		{"the rest of the body, under checkBytes", []func(*scriptedConn, []byte) (int, error){lapsed, sends(10)}, 10, 10, ""},
		{"nothing", []func(*scriptedConn, []byte) (int, error){lapsed, nothingBy}, MaxBytes, 0, Stalled},
		// A server starved for good still cuts, once its window has
		// outgrown how late it runs, a client that sends nothing: hostile
		// bodies are cut under load too.
		{"nothing, noticed late every time", []func(*scriptedConn, []byte) (int, error){lapsed, noticedLate}, MaxBytes, 0, Stalled},
		// Starved for longer than StallTimeout in all, with the bytes there.
		{"noticed late for over a second", []func(*scriptedConn, []byte) (int, error){lapsed, noticedLateBy(300 * time.Millisecond), noticedLateBy(300 * time.Millisecond), noticedLateBy(300 * time.Millisecond), noticedLateBy(300 * time.Millisecond), sends(32 << 10)}, MaxBytes, 32 << 10, ""},
		// A byte in the check is not the pace: a client cannot trickle
		// through the checks.
		{"a byte", []func(*scriptedConn, []byte) (int, error){lapsed, sends(1), nothingBy}, MaxBytes, 1, Stalled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := &scriptedConn{steps: tc.steps}
			// A deadline, so that a check that never ends fails the test
			// rather than hang it.
			in := pacedReader{body: conn, conn: http.NewResponseController(conn), deadline: time.Now().Add(10 * StallTimeout)}
			in.length = tc.left
			n, err := in.Read(make([]byte, 64<<10))
			var cut *cutError
			switch {
			case tc.wantCut == "" && (n != tc.wantN || err != nil):
				t.Errorf("got %d bytes and %v, want %d and no error: the lapse was not the client's", n, err, tc.wantN)
			case tc.wantCut != "" && (n != tc.wantN || !errors.As(err, &cut) || cut.reason != tc.wantCut):
				t.Errorf("got %d bytes and %v, want %d and the body cut as %s", n, err, tc.wantN, tc.wantCut)
			}
		})
	}
}

// TestSpentGraceIsChecked: once a body's grace is spent, each read is a
// check: a client that keeps pace is read on, one that does not is cut
// for its rate.
func TestSpentGraceIsChecked(t *testing.T) {
	for _, tc := range []struct {
		name    string
		steps   []func(*scriptedConn, []byte) (int, error)
		wantCut bool
	}{
		{"keeping pace", []func(*scriptedConn, []byte) (int, error){sends(32 << 10)}, false},
		{"trickling", []func(*scriptedConn, []byte) (int, error){sends(1), nothingBy}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := &scriptedConn{steps: tc.steps}
			in := pacedReader{body: conn, conn: http.NewResponseController(conn), deadline: time.Time{}}
			in.length, in.waited = MaxBytes, 2*StallTimeout // the grace, and more, spent
			_, err := in.Read(make([]byte, 64<<10))
			var cut *cutError
			if got := errors.As(err, &cut) && cut.reason == TooSlow; got != tc.wantCut {
				t.Errorf("got %v, want cut for its rate: %v", err, tc.wantCut)
			}
		})
	}
}
