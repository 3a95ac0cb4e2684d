package body

import (
	"bufio"
	"bytes"
	"context"
	"errors"
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

// testServer serves a Budget over plain HTTP, as the webhook's routes use
// it: each request's body is read with Read and answered 200 with its
// length, or with the *Error's code and message.
type testServer struct {
	b    *Budget
	addr string
	// answered, when set, is called with each body read whole before it
	// is released, and its request's context after.
	answered func(b Body, r *http.Request)
}

func newTestServer(t *testing.T, budgetBytes int64) *testServer {
	t.Helper()
	return newTestServerWrapping(t, budgetBytes, nil)
}

// newTestServerWrapping is newTestServer with the ResponseWriter that Read
// is given wrapped by wrap, as a copier's middleware wraps it.
func newTestServerWrapping(t *testing.T, budgetBytes int64, wrap func(http.ResponseWriter) http.ResponseWriter) *testServer {
	t.Helper()
	s := &testServer{b: NewBudget(budgetBytes)}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout(r))
		defer cancel()
		if wrap != nil {
			w = wrap(w)
		}
		body, err := s.b.Read(ctx, w, r)
		if err != nil {
			e := err.(*Error)
			http.Error(w, e.Message, e.Code)
			return
		}
		if s.answered != nil {
			s.answered(body, r)
		}
		body.Release()
		fmt.Fprint(w, len(body.Bytes()))
	}))
	srv.Config.ConnContext = ConnContext
	srv.Start()
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
	if a.code != BusyStatus || !strings.Contains(a.body, "the webhook is busy") || !strings.Contains(a.body, why) || a.close != closed {
		t.Errorf("got HTTP %d %q (Connection: close %v), want %d saying the webhook is busy and %q, Connection: close %v", a.code, a.body, a.close, BusyStatus, why, closed)
	}
}

// checkCounted checks what rd has refused and cut: want maps each reason
// to its count; every other reason is 0.
func checkCounted(t *testing.T, b *Budget, want map[string]uint64) {
	t.Helper()
	s := b.Stats()
	for _, reason := range []string{LongQueue, NoRoom, SlowRead, Stalled, TooSlow} {
		got := s.Refused[reason] + s.Cut[reason]
		if got != want[reason] {
			t.Errorf("bodies refused or cut as %s: got %d, want %d", reason, got, want[reason])
		}
	}
}

func held(b *Budget) int64 {
	used, _ := b.free.state()
	return used
}

// neverHolds fails the test if b holds any room before done is closed.
func neverHolds(t *testing.T, b *Budget, done <-chan struct{}) {
	t.Helper()
	for {
		if used := held(b); used != 0 {
			t.Errorf("the body held %d bytes of the budget, want none", used)
			return
		}
		select {
		case <-done:
			return
		case <-time.After(time.Millisecond):
		}
	}
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
		name string
		body []byte
		want int64
	}{
		{"small", small, 0},
		// Room for the first buffer size that holds it: 128 KiB for the
		// 100 KiB body, 96 KiB being too small.
		{"large", large, 128 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, MaxBytes)
			var holding int64 = -1
			s.answered = func(Body, *http.Request) { holding = held(s.b) }
			a := s.post(t, "10s", tc.body)
			if a.code != http.StatusOK || a.body != strconv.Itoa(len(tc.body)) || holding != tc.want {
				t.Errorf("got HTTP %d %q, holding %d bytes once read; want 200 %d, holding %d", a.code, a.body, holding, len(tc.body), tc.want)
			}
			if used := held(s.b); used != 0 {
				t.Errorf("%d bytes still held after Release", used)
			}
		})
	}
}

// TestDeclaredButUnsent sends the headers of the largest body and none of
// it: it takes no room, and is refused when its deadline comes, not cut:
// holding nothing but its connection, it is as like a client starved of
// CPU as a slowloris.
func TestDeclaredButUnsent(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, MaxBytes)
	start := time.Now()
	answered := make(chan struct{})
	go neverHolds(t, s.b, answered)
	a := readAnswer(t, s.send(t, "2s", MaxBytes))
	close(answered)
	checkRefused(t, a, "its deadline came when 0 of its bytes had arrived", true)
	if took := time.Since(start); took < 2*time.Second-AnswerMargin {
		t.Errorf("refused after %s, before its deadline less AnswerMargin", took)
	}
	checkCounted(t, s.b, map[string]uint64{SlowRead: 1})
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

// TestTrickledBody sends the largest body a byte every 100 ms: holding no
// room, it is read until its deadline, then refused, never cut.
func TestTrickledBody(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, MaxBytes)
	conn := s.send(t, "2s", MaxBytes)
	answered := make(chan struct{})
	go neverHolds(t, s.b, answered)
	go trickle(conn)
	a := readAnswer(t, conn)
	close(answered)
	checkRefused(t, a, "its deadline came when", true)
	checkCounted(t, s.b, map[string]uint64{SlowRead: 1})
}

// TestStarvedClientIsNotCut: a small body that pauses longer than
// StallTimeout, as a client starved of CPU does, is read whole by its
// deadline.
func TestStarvedClientIsNotCut(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, MaxBytes)
	body := bytes.Repeat([]byte{'s'}, 5000)
	conn := s.send(t, "10s", len(body))
	if _, err := conn.Write(body[:100]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(StallTimeout + time.Second)
	if _, err := conn.Write(body[100:]); err != nil {
		t.Fatalf("the rest of the body after a pause of %s: %v, want it read", StallTimeout+time.Second, err)
	}
	if a := readAnswer(t, conn); a.code != http.StatusOK || a.body != strconv.Itoa(len(body)) {
		t.Errorf("got HTTP %d %q, want 200 %d", a.code, a.body, len(body))
	}
	checkCounted(t, s.b, nil)
}

// TestStalledAfterMostOfTheBody sends all of the largest body but its
// last byte: it holds room for all of it, is cut as stalled, and gives its
// room back.
func TestStalledAfterMostOfTheBody(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, MaxBytes)
	conn := s.send(t, "30s", MaxBytes)
	if _, err := conn.Write(bytes.Repeat([]byte{' '}, MaxBytes-1)); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	waitUntil(func() bool { return held(s.b) == MaxBytes })
	checkCut(t, readAnswer(t, conn), "stopped arriving")
	if took := time.Since(sent); took < StallTimeout {
		t.Errorf("cut %s after its last byte was sent, before StallTimeout (%s)", took, StallTimeout)
	}
	if used := held(s.b); used != 0 {
		t.Errorf("%d bytes still held after the cut, want them all given back", used)
	}
	checkCounted(t, s.b, map[string]uint64{Stalled: 1})
}

// TestClockWhateverWrapsTheWriter: a ResponseWriter wrapped without
// Unwrap, as a logging middleware wraps it, hides the connection from
// http.ResponseController; the body's clock holds all the same: a small
// body that stalls is refused at its deadline, and a large one that stalls
// holding room is cut.
func TestClockWhateverWrapsTheWriter(t *testing.T) {
	s := newTestServerWrapping(t, MaxBytes, func(w http.ResponseWriter) http.ResponseWriter { return loggingWriter{w} })
	t.Run("small, by its deadline", func(t *testing.T) {
		conn := s.send(t, "2s", 5000)
		if _, err := conn.Write([]byte{'{'}); err != nil {
			t.Fatal(err)
		}
		checkRefused(t, readAnswer(t, conn), "its deadline came when 1 of its bytes", true)
	})
	t.Run("large, holding room", func(t *testing.T) {
		conn := s.send(t, "30s", 100<<10)
		if _, err := conn.Write(bytes.Repeat([]byte{' '}, 50<<10)); err != nil {
			t.Fatal(err)
		}
		checkCut(t, readAnswer(t, conn), "stopped arriving")
	})
	checkCounted(t, s.b, map[string]uint64{SlowRead: 1, Stalled: 1})
}

// loggingWriter wraps a ResponseWriter as middleware often does: with no
// Unwrap method.
type loggingWriter struct{ http.ResponseWriter }

// TestLargeBodiesDoNotDeadlock sends six 2.7 MB bodies at once, in
// interleaved pieces, through the smallest budget allowed, which holds two
// of them: were each to take room as its bytes arrive, all would hold part
// of their bodies and wait for room that only another could free. Each
// takes all it needs at once: every one is read whole, and the budget is
// never exceeded.
func TestLargeBodiesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, MaxBytes)
	const size = 2_700_000
	if buffer := bufferSize(size); 2*buffer > MaxBytes || 3*buffer <= MaxBytes {
		t.Fatalf("the body's buffer is %d bytes: want a budget of %d to hold two, not three", buffer, MaxBytes)
	}
	body := bytes.Repeat([]byte{'b'}, size)
	answers := make([]answer, 6)
	errs := make([]error, len(answers))
	var wg sync.WaitGroup
	done := make(chan struct{})
	go func() {
		for {
			if used := held(s.b); used > MaxBytes {
				t.Errorf("held %d bytes, more than the budget", used)
			}
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	defer close(done)
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
}

// TestNoRoomByItsDeadline: a large body that finds no room before its
// deadline, less AnswerMargin, is refused then, not sooner, and keeps
// nothing; once there is room, the next is read.
func TestNoRoomByItsDeadline(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, MaxBytes)
	body := bytes.Repeat([]byte{'b'}, 100<<10)
	// Room for a buffer of 64 KiB, not of the body's 128 KiB.
	const taken = MaxBytes - 64<<10
	if err := s.b.free.reserve(context.Background(), taken); err != nil {
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
	if took := time.Since(start); took < time.Second-AnswerMargin {
		t.Errorf("refused after %s, before its deadline less AnswerMargin", took)
	}
	checkCounted(t, s.b, map[string]uint64{NoRoom: 1})
	if used := held(s.b); used != taken {
		t.Errorf("%d bytes held after the refusal, want the %d taken before it: the refused body keeps none", used, taken)
	}
	s.b.free.release(taken)
	if a := s.post(t, "10s", body); a.code != http.StatusOK {
		t.Errorf("once there is room: got HTTP %d %q, want 200", a.code, a.body)
	}
}

// TestGoneWhileWaitingIsNotNoRoom: a large body whose request ends while
// it waits for room, as when its client goes away, is not counted as
// refused for want of room, and its answer does not say it was.
func TestGoneWhileWaitingIsNotNoRoom(t *testing.T) {
	t.Parallel()
	b := NewBudget(MaxBytes)
	// Room for a buffer of 64 KiB, not of the body's 128 KiB.
	if err := b.free.reserve(context.Background(), MaxBytes-64<<10); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(bytes.Repeat([]byte{'b'}, 100<<10)))
	read := make(chan error, 1)
	go func() {
		_, err := b.Read(ctx, httptest.NewRecorder(), r)
		read <- err
	}()
	waitUntil(func() bool { _, waiting := b.free.state(); return waiting == 1 })
	cancel()
	var e *Error
	if err := <-read; !errors.As(err, &e) || e.Code != http.StatusBadRequest || strings.Contains(e.Message, "busy") {
		t.Errorf("got %v, want 400 saying the request ended", err)
	}
	checkCounted(t, b, nil)
}

// TestWaitsHoweverManyWait: with more large bodies waiting for room than
// the half of the connection cap a count bound once allowed, a body whose
// deadline leaves time waits, and every one is read.
func TestWaitsHoweverManyWait(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, MaxBytes)
	if err := s.b.free.reserve(context.Background(), MaxBytes); err != nil {
		t.Fatal(err)
	}
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
	waitUntil(func() bool { return s.b.Stats().Waiting == waiting })
	s.b.free.release(MaxBytes)
	wg.Wait()
	for i, a := range answers {
		if errs[i] != nil || a.code != http.StatusOK {
			t.Fatalf("body %d of %d waiting: got HTTP %d %q (%v), want 200", i, waiting, a.code, a.body, errs[i])
		}
	}
	if got := s.b.Stats().Waited; got != waiting {
		t.Errorf("Stats().Waited: got %d, want %d: each found the room taken", got, waiting)
	}
	checkCounted(t, s.b, nil)
}

// TestSlowReadIsNotTheClientsFault: a body whose deadline, less
// AnswerMargin, comes while it is read, before its pace is spent, is
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
			checkCounted(t, s.b, map[string]uint64{SlowRead: 1})
			if used := held(s.b); used != 0 {
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

// TestLengthChecked: a body that declares more than MaxBytes, or no length
// at all, is refused before a byte is read, saying why, and closes its
// connection.
func TestLengthChecked(t *testing.T) {
	for _, tc := range []struct {
		name   string
		length int
		code   int
		says   string
	}{
		{"too large", MaxBytes + 1, http.StatusRequestEntityTooLarge, strconv.Itoa(MaxBytes)},
		{"chunked", -1, http.StatusLengthRequired, "Content-Length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, MaxBytes)
			a := readAnswer(t, s.send(t, "30s", tc.length))
			if a.code != tc.code || !strings.Contains(a.body, tc.says) || !a.close {
				t.Errorf("got HTTP %d %q (Connection: close %v), want %d saying %q, closing the connection", a.code, a.body, a.close, tc.code, tc.says)
			}
		})
	}
}

// TestBufferSize: a body's buffer is the smallest of bufferSizes that holds
// it, at most half as large again, so a body holds little room it does not
// use.
func TestBufferSize(t *testing.T) {
	if first, last := bufferSizes[0], bufferSizes[len(bufferSizes)-1]; first <= MaxSmallBodyBytes || last != MaxBytes {
		t.Fatalf("bufferSizes run from %d to %d, want from over %d to %d", first, last, MaxSmallBodyBytes, MaxBytes)
	}
	for _, n := range []int64{MaxSmallBodyBytes + 1, 2 * MaxSmallBodyBytes, 2*MaxSmallBodyBytes + 1, 100 << 10, 1_100_000, 3 << 20, 3<<20 + 1, 6<<20 + 1, MaxBytes} {
		size := bufferSize(n)
		if i := slices.Index(bufferSizes, size); i < 0 || size < n || (i > 0 && bufferSizes[i-1] >= n) || size > n+n/2 {
			t.Errorf("bufferSize(%d) = %d, want the smallest of bufferSizes that holds it, at most %d", n, size, n+n/2)
		}
	}
}

// TestBufferIsKept: a buffer released is the next one of its size. The
// race detector makes sync.Pool drop a quarter of what it is given, so
// this tries a few times.
func TestBufferIsKept(t *testing.T) {
	b := NewBudget(MaxBytes)
	for _, size := range bufferSizes {
		kept := false
		for range 20 {
			if err := b.free.reserve(context.Background(), size); err != nil {
				t.Fatal(err)
			}
			buf := b.buffer(size)[:1]
			b.release(buf)
			if again := b.buffer(size)[:1]; &again[0] == &buf[0] {
				kept = true
				break
			}
		}
		if !kept {
			t.Errorf("a buffer of %d bytes recycled was never the next one of its size", size)
		}
	}
}
