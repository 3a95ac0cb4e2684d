package body

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// No test here bounds how long anything takes from above: a loaded
// machine only makes things slower. Where a rule is about time, the test
// checks which rule answered (the code, the reason, what was counted), and
// a lower bound where one holds whatever the load.

// testServer serves a Reader over plain HTTP, as the webhook's routes use
// it: each request's body is read with Read and answered 200 with its
// length, or with the *Error's code and message.
type testServer struct {
	rd   *Reader
	addr string
	// answered, when set, is called with each body read whole before it
	// is released, and its request's context after.
	answered func(b Body, r *http.Request)
}

func newTestServer(t *testing.T, budgetBytes int64) *testServer {
	t.Helper()
	s := &testServer{rd: NewReader(budgetBytes)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout(r))
		defer cancel()
		b, err := s.rd.Read(ctx, w, r)
		if err != nil {
			e := err.(*Error)
			http.Error(w, e.Message, e.Code)
			return
		}
		if s.answered != nil {
			s.answered(b, r)
		}
		b.Release()
		fmt.Fprint(w, len(b.Bytes()))
	}))
	t.Cleanup(srv.Close)
	s.addr = srv.Listener.Addr().String()
	return s
}

// requestTimeout is a request's ?timeout=, as the webhook reads it.
func requestTimeout(r *http.Request) time.Duration {
	d, err := time.ParseDuration(r.URL.Query().Get("timeout"))
	if err != nil {
		return 30 * time.Second
	}
	return d
}

// send opens a connection and writes the headers of a body of length
// bytes (-1: chunked); the caller writes the body, or does not.
func (s *testServer) send(t *testing.T, timeout string, length int) net.Conn {
	t.Helper()
	conn, err := s.dial(timeout, length)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// dial is send for a goroutine other than the test's: it returns the error.
func (s *testServer) dial(timeout string, length int) (net.Conn, error) {
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		return nil, err
	}
	framing := "Content-Length: " + strconv.Itoa(length)
	if length < 0 {
		framing = "Transfer-Encoding: chunked"
	}
	_, err = fmt.Fprintf(conn, "POST /?timeout=%s HTTP/1.1\r\nHost: body\r\n%s\r\n\r\n", timeout, framing)
	return conn, err
}

// answer is what the server answered on a connection.
type answer struct {
	code  int
	body  string
	close bool // Connection: close
}

func readAnswer(t *testing.T, conn net.Conn) answer {
	t.Helper()
	a, err := tryReadAnswer(conn)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// tryReadAnswer is readAnswer for a goroutine other than the test's. It
// waits long enough for any deadline a test sets.
func tryReadAnswer(conn net.Conn) (answer, error) {
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return answer{}, fmt.Errorf("reading the answer: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, fmt.Errorf("reading the answer's body: %w", err)
	}
	return answer{resp.StatusCode, strings.TrimSpace(string(b)), resp.Close}, nil
}

// post sends body whole and returns the answer.
func (s *testServer) post(t *testing.T, timeout string, body []byte) answer {
	t.Helper()
	conn := s.send(t, timeout, len(body))
	if _, err := conn.Write(body); err != nil {
		t.Fatal(err)
	}
	return readAnswer(t, conn)
}

// checkCut checks the answer to a body cut for its pace: 408 saying why,
// and the connection closed.
func checkCut(t *testing.T, a answer, why string) {
	t.Helper()
	if a.code != http.StatusRequestTimeout || !strings.Contains(a.body, why) || !a.close {
		t.Errorf("got HTTP %d %q (Connection: close %v), want 408 saying %q, and the connection closed", a.code, a.body, a.close, why)
	}
}

// checkRefused checks the answer to a body refused for overload: 429
// saying why, and the connection closed, or not.
func checkRefused(t *testing.T, a answer, why string, closed bool) {
	t.Helper()
	if a.code != OverloadStatus || !strings.Contains(a.body, "the webhook is busy") || !strings.Contains(a.body, why) || a.close != closed {
		t.Errorf("got HTTP %d %q (Connection: close %v), want %d saying the webhook is busy and %q, Connection: close %v", a.code, a.body, a.close, OverloadStatus, why, closed)
	}
}

// checkCounted checks what rd has refused and cut: want maps each reason
// to its count; every other reason is 0.
func checkCounted(t *testing.T, rd *Reader, want map[string]uint64) {
	t.Helper()
	s := rd.Stats()
	for _, reason := range append(slices.Clone(RefusalReasons), Stalled, TooSlow) {
		got := s.Refused[reason] + s.Cut[reason]
		if got != want[reason] {
			t.Errorf("bodies refused or cut as %s: got %d, want %d", reason, got, want[reason])
		}
	}
}

// holdLine makes a body being read, which holds the line until the
// returned func is called.
func holdLine(t *testing.T, rd *Reader) (leave func()) {
	t.Helper()
	if err := rd.line.join(context.Background(), 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	return func() { rd.line.leave(0, false) }
}

func inLine(rd *Reader) int {
	_, n := rd.line.state()
	return n
}

func held(rd *Reader) int64 {
	used, _ := rd.budget.state()
	return used
}

// waitUntil polls cond until it holds. It has no deadline of its own: a
// loaded machine makes it wait longer, and a broken rule makes the test
// time out.
func waitUntil(cond func() bool) {
	for !cond() {
		time.Sleep(time.Millisecond)
	}
}

func TestSmallBodyTakesNoRoom(t *testing.T) {
	small := bytes.Repeat([]byte("s"), 5000)
	large := bytes.Repeat([]byte("l"), 100<<10)
	for _, tc := range []struct {
		name    string
		body    []byte
		chunked bool
		want    int64
	}{
		{"small", small, false, 0},
		{"small of unknown length", small, true, 0},
		// Room grows with the body and ends at the first buffer size that
		// holds it: 128 KiB for the 100 KiB body, 96 KiB being too small.
		{"large", large, false, 128 << 10},
		// Without a length, the buffer doubles from 16 KiB to the same.
		{"large of unknown length", large, true, 128 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, MaxBytes)
			var holding int64 = -1
			s.answered = func(Body, *http.Request) { holding = held(s.rd) }
			var a answer
			if tc.chunked {
				conn := s.send(t, "10s", -1)
				fmt.Fprintf(conn, "%x\r\n%s\r\n0\r\n\r\n", len(tc.body), tc.body)
				a = readAnswer(t, conn)
			} else {
				a = s.post(t, "10s", tc.body)
			}
			if a.code != http.StatusOK || a.body != strconv.Itoa(len(tc.body)) || holding != tc.want {
				t.Errorf("got HTTP %d %q, holding %d bytes once read; want 200 %d, holding %d", a.code, a.body, holding, len(tc.body), tc.want)
			}
			if used := held(s.rd); used != 0 {
				t.Errorf("%d bytes still held after Release", used)
			}
		})
	}
}

// TestDeclaredButUnsent sends the headers of the largest body and none of
// it: it takes no room, and is cut as stalled, no sooner than
// StallTimeout.
func TestDeclaredButUnsent(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, MaxBytes)
	start := time.Now()
	a := readAnswer(t, s.send(t, "30s", MaxBytes))
	checkCut(t, a, "stopped arriving")
	if took := time.Since(start); took < StallTimeout {
		t.Errorf("cut after %s, before StallTimeout (%s)", took, StallTimeout)
	}
	if p := s.rd.budget.peak; p != 0 {
		t.Errorf("the body that never came held %d bytes of the budget, want none", p)
	}
	checkCounted(t, s.rd, map[string]uint64{Stalled: 1})
}

// trickle writes a byte to conn every 100 ms, for at most 30 s, until
// conn is closed.
func trickle(conn net.Conn) {
	for range 300 {
		if _, err := conn.Write([]byte{' '}); err != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTrickledBody sends the largest body a byte every 100 ms: it never
// stalls, but is cut for its rate once its grace is spent, holding nothing.
func TestTrickledBody(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, MaxBytes)
	conn := s.send(t, "30s", MaxBytes)
	start := time.Now()
	go trickle(conn)
	checkCut(t, readAnswer(t, conn), "slower than")
	if took := time.Since(start); took < StallTimeout {
		t.Errorf("cut after %s, before its grace of %s was spent", took, StallTimeout)
	}
	if p := s.rd.budget.peak; p != 0 {
		t.Errorf("the trickled body held %d bytes of the budget, want none", p)
	}
	checkCounted(t, s.rd, map[string]uint64{TooSlow: 1})
}

// TestSlowClientKeepsNoPlaceInLine: a body that declares the most and
// sends nothing, or trickles, is cut before it joins the line, so that it
// never holds the turn a review sent whole is waiting for.
func TestSlowClientKeepsNoPlaceInLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		trickle bool
		cut     string
	}{
		{"sends nothing", false, Stalled},
		{"a byte every 100 ms", true, TooSlow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newTestServer(t, MaxBytes)
			conn := s.send(t, "30s", MaxBytes)
			if tc.trickle {
				go trickle(conn)
			}
			answered := make(chan answer, 1)
			go func() {
				a, _ := tryReadAnswer(conn)
				answered <- a
			}()
			for {
				if busy, waiting := s.rd.line.state(); busy || waiting > 0 {
					t.Fatalf("the slow body joined the line (being read: %v, waiting: %d)", busy, waiting)
				}
				select {
				case a := <-answered:
					checkCut(t, a, "")
					checkCounted(t, s.rd, map[string]uint64{tc.cut: 1})
					return
				case <-time.After(time.Millisecond):
				}
			}
		})
	}
}

// TestStalledAfterMostOfTheBody sends all of the largest body but its
// last byte: it holds room for what it sent, is cut as stalled, and gives
// its room back.
func TestStalledAfterMostOfTheBody(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, MaxBytes)
	conn := s.send(t, "30s", MaxBytes)
	if _, err := conn.Write(bytes.Repeat([]byte{' '}, MaxBytes-1)); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	checkCut(t, readAnswer(t, conn), "stopped arriving")
	if took := time.Since(sent); took < StallTimeout {
		t.Errorf("cut %s after its last byte was sent, before StallTimeout (%s)", took, StallTimeout)
	}
	if p := s.rd.budget.peak; p != MaxBytes {
		t.Errorf("held %d bytes at the most, want %d: room for all it sent", p, MaxBytes)
	}
	if used := held(s.rd); used != 0 {
		t.Errorf("%d bytes still held after the cut, want them all given back", used)
	}
	checkCounted(t, s.rd, map[string]uint64{Stalled: 1})
}

// TestLargeBodiesDoNotDeadlock sends six 2.7 MB bodies at once, in
// interleaved pieces, through the smallest budget allowed, which holds two
// of them: were each to take room as its bytes arrive, all would hold part
// of their bodies and wait for room that only another could free. Every
// one is read whole.
func TestLargeBodiesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, MaxBytes)
	const size = 2_700_000
	if buffer := bufferSizeFor(size); 2*buffer > MaxBytes || 3*buffer <= MaxBytes {
		t.Fatalf("the body's buffer is %d bytes: want a budget of %d to hold two, not three", buffer, MaxBytes)
	}
	body := bytes.Repeat([]byte{'b'}, size)
	answers := make([]answer, 6)
	errs := make([]error, len(answers))
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			conn, err := s.dial("60s", size)
			if err != nil {
				errs[i] = err
				return
			}
			defer conn.Close()
			for rest := body; len(rest) > 0; {
				n := min(len(rest), 256<<10)
				if _, err := conn.Write(rest[:n]); err != nil {
					errs[i] = fmt.Errorf("sending the body: %w", err)
					return
				}
				rest = rest[n:]
				time.Sleep(10 * time.Millisecond)
			}
			answers[i], errs[i] = tryReadAnswer(conn)
		})
	}
	wg.Wait()
	for i, a := range answers {
		if errs[i] != nil || a.code != http.StatusOK {
			t.Errorf("body %d: got HTTP %d %q (%v), want 200", i, a.code, a.body, errs[i])
		}
	}
	if p := s.rd.budget.peak; p > MaxBytes {
		t.Errorf("held %d bytes at the most, more than the budget", p)
	}
}

// TestNoRoomByItsDeadline: a large body that finds no room before its
// deadline, less OverloadMargin, is refused then, not sooner, and keeps
// nothing; once there is room, the next is read.
func TestNoRoomByItsDeadline(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, MaxBytes)
	body := bytes.Repeat([]byte{'b'}, 100<<10)
	// Room for the body's buffer to grow to 64 KiB, not to 128 KiB.
	const taken = MaxBytes - 64<<10
	if err := s.rd.budget.acquire(context.Background(), taken); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a := s.post(t, "1s", body)
	// Its deadline, less the margin, has come: there is no time to read the
	// rest.
	checkRefused(t, a, "room", true)
	if !strings.Contains(a.body, "-max-inflight-bytes") {
		t.Errorf("got %q, want it to name the flag that sets the budget", a.body)
	}
	if took := time.Since(start); took < time.Second-OverloadMargin {
		t.Errorf("refused after %s, before its deadline less OverloadMargin", took)
	}
	checkCounted(t, s.rd, map[string]uint64{NoRoom: 1})
	if used := held(s.rd); used != taken {
		t.Errorf("%d bytes held after the refusal, want the %d taken before it: the refused body keeps none", used, taken)
	}
	s.rd.budget.release(taken)
	if a := s.post(t, "10s", body); a.code != http.StatusOK {
		t.Errorf("once there is room: got HTTP %d %q, want 200", a.code, a.body)
	}
}

// TestWaitsHoweverManyWait: with more large bodies waiting in line than
// the half of the connection cap a count bound once allowed, a body that
// can be read before its deadline waits its turn, and every one is read.
func TestWaitsHoweverManyWait(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, MaxBytes)
	leave := holdLine(t, s.rd)
	const waiting = 200
	body := bytes.Repeat([]byte{'w'}, 20<<10)
	answers := make([]answer, waiting)
	errs := make([]error, waiting)
	var wg sync.WaitGroup
	for i := range waiting {
		wg.Go(func() {
			conn, err := s.dial("60s", len(body))
			if err == nil {
				_, err = conn.Write(body)
			}
			if err == nil {
				answers[i], err = tryReadAnswer(conn)
				conn.Close()
			}
			errs[i] = err
		})
	}
	// Until each is in line, or was refused.
	waitUntil(func() bool {
		return uint64(inLine(s.rd))+s.rd.Stats().Refused[NoTurn]+s.rd.Stats().Refused[LongQueue] == waiting
	})
	leave()
	wg.Wait()
	for i, a := range answers {
		if errs[i] != nil || a.code != http.StatusOK {
			t.Fatalf("body %d of %d waiting: got HTTP %d %q (%v), want 200", i, waiting, a.code, a.body, errs[i])
		}
	}
	checkCounted(t, s.rd, nil)
}

// TestLongQueue: a large body that the bodies waiting ahead of it would,
// at the line's pace, keep from being read before its deadline is refused
// as it joins the line, without waiting in it; one whose deadline leaves time
// waits, however long the line.
func TestLongQueue(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte{'q'}, 100<<10)
	for _, tc := range []struct {
		timeout string
		ahead   int64   // bytes waiting ahead
		pace    float64 // seconds a byte
		refused bool
	}{
		// 2 MiB ahead at a microsecond a byte: about 2.2 s, past 1 s less
		// the margin.
		{"1s", 2 << 20, 1e-6, true},
		// The same line, with 10 s to wait.
		{"10s", 2 << 20, 1e-6, false},
		// A line of any length that has not been seen to move (no pace
		// yet) refuses nothing on arrival.
		{"1s", 1 << 40, 0, false},
	} {
		t.Run(fmt.Sprintf("%s, %d bytes ahead at %g s a byte", tc.timeout, tc.ahead, tc.pace), func(t *testing.T) {
			s := newTestServer(t, MaxBytes)
			setPace(&s.rd.line, tc.pace)
			// The line does not move until the test lets it: a body being
			// read, and one of tc.ahead bytes waiting, which leaves at
			// once when its turn comes.
			leave := holdLine(t, s.rd)
			aheadDone := make(chan error, 1)
			go func() {
				err := s.rd.line.join(context.Background(), tc.ahead, time.Time{})
				if err == nil {
					s.rd.line.leave(0, false)
				}
				aheadDone <- err
			}()
			waitUntil(func() bool { return inLine(s.rd) == 1 })
			conn := s.send(t, tc.timeout, len(body))
			if _, err := conn.Write(body); err != nil {
				t.Fatal(err)
			}
			if !tc.refused {
				waitUntil(func() bool { return inLine(s.rd) == 2 })
				leave()
			}
			a := readAnswer(t, conn)
			if tc.refused {
				// Sent whole, its rest is dropped and its connection kept,
				// for the client's next review.
				checkRefused(t, a, "waiting ahead of it", false)
				checkCounted(t, s.rd, map[string]uint64{LongQueue: 1})
				leave()
				fmt.Fprintf(conn, "POST /?timeout=10s HTTP/1.1\r\nHost: body\r\nContent-Length: 5000\r\n\r\n%s", bytes.Repeat([]byte{'n'}, 5000))
				if next := readAnswer(t, conn); next.code != http.StatusOK {
					t.Errorf("the next review on its connection: got HTTP %d %q, want 200", next.code, next.body)
				}
			} else {
				if a.code != http.StatusOK {
					t.Errorf("got HTTP %d %q, want 200", a.code, a.body)
				}
				checkCounted(t, s.rd, nil)
			}
			if err := <-aheadDone; err != nil {
				t.Errorf("the body ahead: %v", err)
			}
		})
	}
}

// TestNoTurnByItsDeadline: a large body still waiting in line at its
// deadline, less OverloadMargin, is refused then, not sooner.
func TestNoTurnByItsDeadline(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, MaxBytes)
	defer holdLine(t, s.rd)()
	start := time.Now()
	a := s.post(t, "1s", bytes.Repeat([]byte{'t'}, 100<<10))
	checkRefused(t, a, "waited for the large reviews ahead of it", true)
	if took := time.Since(start); took < time.Second-OverloadMargin {
		t.Errorf("refused after %s, before its deadline less OverloadMargin", took)
	}
	checkCounted(t, s.rd, map[string]uint64{NoTurn: 1})
}

// TestTooLateInLine: a large body that the line, its pace turning out
// slower while the body waits, can no longer read before its deadline
// less the margin is refused at the next turn, not at its deadline, and
// without taking room in the budget.
func TestTooLateInLine(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, MaxBytes)
	leave := holdLine(t, s.rd)
	conn := s.send(t, "10s", 100<<10)
	if _, err := conn.Write(bytes.Repeat([]byte{'l'}, 100<<10)); err != nil {
		t.Fatal(err)
	}
	waitUntil(func() bool { return inLine(s.rd) == 1 })
	// Now the line turns out slow: 100 KiB takes 100 s to read.
	setPace(&s.rd.line, 1e-3)
	leave()
	checkRefused(t, readAnswer(t, conn), "would take about", false)
	checkCounted(t, s.rd, map[string]uint64{LongQueue: 1})
	if p := s.rd.budget.peak; p != 0 {
		t.Errorf("the body refused in line held %d bytes of the budget, want none: it is not read", p)
	}
}

// TestSlowReadIsNotTheClientsFault: a body whose deadline, less
// OverloadMargin, comes while it is read, before its pace is spent, is
// refused as overload: not 400 or 408, which would blame a client that
// kept its pace. Small bodies and large alike.
func TestSlowReadIsNotTheClientsFault(t *testing.T) {
	t.Parallel()
	for _, size := range []int{10 << 10, 100 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			t.Parallel()
			s := newTestServer(t, MaxBytes)
			conn := s.send(t, "500ms", size)
			// Half the body, then a pause: the request's deadline less the
			// margin, 250 ms from its start, comes before StallTimeout.
			if _, err := conn.Write(bytes.Repeat([]byte{'h'}, size/2)); err != nil {
				t.Fatal(err)
			}
			checkRefused(t, readAnswer(t, conn), "its deadline came when", true)
			checkCounted(t, s.rd, map[string]uint64{SlowRead: 1})
			if used := held(s.rd); used != 0 {
				t.Errorf("%d bytes still held after the refusal", used)
			}
		})
	}
}

// TestContextOutlivesTheReadDeadlines: once a body is read, no read
// deadline Read set can end the request's context, however long it is
// answered for (net/http's own read for the next request would otherwise
// fail at it and cancel the context).
func TestContextOutlivesTheReadDeadlines(t *testing.T) {
	t.Parallel()
	for _, size := range []int{5000, 100 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			t.Parallel()
			s := newTestServer(t, MaxBytes)
			var canceled error
			s.answered = func(_ Body, r *http.Request) {
				time.Sleep(StallTimeout + StallTimeout/2)
				canceled = r.Context().Err()
			}
			if a := s.post(t, "10s", bytes.Repeat([]byte{'c'}, size)); a.code != http.StatusOK || canceled != nil {
				t.Errorf("got HTTP %d %q, the context %v after 1.5 × StallTimeout; want 200 and the context alive", a.code, a.body, canceled)
			}
		})
	}
}

// TestTooLargeGivesBackItsRoom: a body of unknown length that goes past
// MaxBytes is refused once its buffer is full, and gives back all the room
// it took; one that declares more is refused before a byte is read.
func TestTooLargeGivesBackItsRoom(t *testing.T) {
	s := newTestServer(t, MaxBytes)
	conn := s.send(t, "30s", -1)
	go func() {
		chunk := bytes.Repeat([]byte{' '}, 1<<20)
		for range 8 {
			if _, err := fmt.Fprintf(conn, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
				return
			}
		}
	}()
	a := readAnswer(t, conn)
	if a.code != http.StatusRequestEntityTooLarge || !strings.Contains(a.body, strconv.Itoa(MaxBytes)) || !a.close {
		t.Errorf("chunked: got HTTP %d %q (Connection: close %v), want 413 naming %d, closing the connection", a.code, a.body, a.close, MaxBytes)
	}
	if used := held(s.rd); used != 0 {
		t.Errorf("%d bytes still held after the refusal", used)
	}
	if a := readAnswer(t, s.send(t, "30s", MaxBytes+1)); a.code != http.StatusRequestEntityTooLarge {
		t.Errorf("declared: got HTTP %d %q, want 413", a.code, a.body)
	}
}

// TestNextBufferSize: a large body's buffer grows from SmallBytes through
// bufferSizes, each step at most doubling it (so the room held is at most
// twice what has arrived), to a buffer that holds the ceiling and is at
// most half as large again (so a body holds little room it does not use).
func TestNextBufferSize(t *testing.T) {
	if first, last := bufferSizes[0], bufferSizes[len(bufferSizes)-1]; first <= SmallBytes || last != MaxBytes {
		t.Fatalf("bufferSizes run from %d to %d, want from over %d to %d", first, last, SmallBytes, MaxBytes)
	}
	for _, ceiling := range []int64{SmallBytes + 1, 2 * SmallBytes, 2*SmallBytes + 1, 100 << 10, 1_100_000, 3 << 20, 3<<20 + 1, 6<<20 + 1, MaxBytes} {
		size := int64(SmallBytes)
		var steps []int64
		for size < ceiling {
			next := nextBufferSize(size, ceiling)
			if next <= size || next > 2*size || !slices.Contains(bufferSizes, next) {
				t.Fatalf("ceiling %d: a full buffer of %d grows to %d; want one of bufferSizes over %d and at most %d", ceiling, size, next, size, 2*size)
			}
			size = next
			steps = append(steps, next)
		}
		if size > ceiling+ceiling/2 {
			t.Errorf("ceiling %d: the buffer ends at %d (steps %v), more than half as large again", ceiling, size, steps)
		}
	}
}

// bufferSizeFor is the buffer a large body of length bytes ends in.
func bufferSizeFor(length int64) int64 {
	size := int64(SmallBytes)
	for size < length {
		size = nextBufferSize(size, length)
	}
	return size
}

// TestBufferIsKept: a buffer recycled is the next one of its size. The
// race detector makes sync.Pool drop a quarter of what it is given, so
// this tries a few times.
func TestBufferIsKept(t *testing.T) {
	rd := NewReader(MaxBytes)
	for _, size := range bufferSizes {
		kept := false
		for range 20 {
			buf := rd.buffer(size)[:1]
			rd.recycle(buf)
			if again := rd.buffer(size)[:1]; &again[0] == &buf[0] {
				kept = true
				break
			}
		}
		if !kept {
			t.Errorf("a buffer of %d bytes recycled was never the next one of its size", size)
		}
	}
}

// TestLinePace: the line's pace is the time from one turn to the next
// that was waiting, per byte read, over its last turns, and what it makes
// a line of bytes wait; a slow turn or two do not make it, nor does the
// line standing empty, nor bodies cut or refused (a client that stalls
// would make every body look slow, and be refused, free to come back, at
// once).
func TestLinePace(t *testing.T) {
	var p linePace
	if got := p.wait(1 << 30); got != 0 {
		t.Errorf("before any turn: a line of 1 GiB waits %s, want 0: nothing says it will wait", got)
	}
	now := time.Now()
	turns := func(n int, each time.Duration, waited bool) {
		for range n {
			p.turnBegan(now, waited)
			p.turnEnded(1<<20, true)
			now = now.Add(each)
		}
	}
	turns(14, time.Second, true) // a MiB a second
	turns(1, time.Minute, true)
	turns(1, time.Hour, true)
	turns(1, time.Second, true) // records the hour
	if got := p.wait(2 << 20); got < 1990*time.Millisecond || got > 2010*time.Millisecond {
		t.Errorf("after turns of a MiB a second, and two slow ones: 2 MiB wait %s, want 2s", got)
	}
	turns(16, time.Hour, false) // the line stood empty between them
	if got := p.wait(2 << 20); got < 1990*time.Millisecond || got > 2010*time.Millisecond {
		t.Errorf("after turns that found the line empty: 2 MiB wait %s, want still 2s", got)
	}
	p.turnBegan(now, false)
	p.turnEnded(10, false)
	for range 16 { // bodies cut after an hour of a few bytes each
		now = now.Add(time.Hour)
		p.turnBegan(now, true)
		p.turnEnded(10, false)
	}
	if got := p.wait(2 << 20); got < 1990*time.Millisecond || got > 2010*time.Millisecond {
		t.Errorf("after turns of bodies not read whole: 2 MiB wait %s, want still 2s", got)
	}
	turns(17, 0, true)
	if got := p.wait(2 << 20); got != 0 {
		t.Errorf("after turns that followed each other at once: 2 MiB wait %s, want 0", got)
	}
}

// setPace makes the line's pace, as lately measured, perByte seconds a
// byte.
func setPace(l *line, perByte float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := &l.pace
	now := time.Now()
	for range len(p.turns) + 1 {
		p.turnBegan(now, true)
		p.turnEnded(1<<20, true)
		now = now.Add(time.Duration(perByte * float64(time.Second) * (1 << 20)))
	}
	p.turnBegan(now, false) // and the line stood empty since
}
