package main

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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// bodyTestServer serves /validate over plain HTTP with a budget of
// budgetBytes, as run does, and records the most room held at any moment.
type bodyTestServer struct {
	*reviewServer
	m    *metrics
	addr string
	peak atomic.Int64 // the most bytes of the budget held, sampled every millisecond
}

func newBodyTestServer(t *testing.T, budgetBytes int64) *bodyTestServer {
	t.Helper()
	bodies := newBodyReader(budgetBytes)
	m := newMetrics(nil, bodies)
	s := &bodyTestServer{reviewServer: &reviewServer{logger: discardLogger, metrics: m, bodies: bodies}, m: m}
	srv := httptest.NewServer(s.admission("/validate", denyingAdmit, validationAction{}))
	t.Cleanup(srv.Close)
	s.addr = srv.Listener.Addr().String()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if used, _ := s.bodies.budget.State(); used > s.peak.Load() {
				s.peak.Store(used)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return s
}

// send opens a connection and writes the headers of a review of length
// bytes; the caller writes the body, or does not.
func (s *bodyTestServer) send(t *testing.T, query string, length int) net.Conn {
	t.Helper()
	conn, err := s.dial(query, length)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// dial is send for a goroutine other than the test's, which may not stop
// the test: it returns the error.
func (s *bodyTestServer) dial(query string, length int) (net.Conn, error) {
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		return nil, err
	}
	_, err = fmt.Fprintf(conn, "POST /validate%s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", query, length)
	return conn, err
}

// answer reads the server's answer on conn.
func answer(t *testing.T, conn net.Conn) *httptest.ResponseRecorder {
	t.Helper()
	w, err := readAnswer(conn)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// readAnswer is answer for a goroutine other than the test's.
func readAnswer(conn net.Conn) (*httptest.ResponseRecorder, error) {
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	defer resp.Body.Close()
	w := httptest.NewRecorder()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	if resp.Close {
		// ReadResponse takes Connection: close out of the header.
		w.Header().Set("Connection", "close")
	}
	w.WriteHeader(resp.StatusCode)
	if _, err := io.Copy(w, resp.Body); err != nil {
		return nil, fmt.Errorf("reading the answer's body: %w", err)
	}
	return w, nil
}

// largeReview is a review of about size bytes, as a large object makes.
func largeReview(t *testing.T, size int) []byte {
	t.Helper()
	return inflate(t, plumbingReviews(t)["v1-deployment-create"], size, nil, "object")
}

func TestSmallBodyTakesNoRoom(t *testing.T) {
	small := plumbingReviews(t)["v1-deployment-create"]
	large := largeReview(t, 100<<10)
	if len(small) > smallBodyBytes || len(large) <= smallBodyBytes {
		t.Fatalf("the fixtures are %d and %d bytes, want one under and one over %d", len(small), len(large), smallBodyBytes)
	}
	for _, tc := range []struct {
		name     string
		body     []byte
		declared bool
		want     int64
	}{
		{"small", small, true, 0},
		{"small of unknown length", small, false, 0},
		// Room grows with the body and ends at the first buffer size that
		// holds it: 128 KiB for the 100 KiB body, 96 KiB being too small.
		{"large", large, true, 128 << 10},
		// Without a length, the buffer doubles from 16 KiB to the same.
		{"large of unknown length", large, false, 128 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var held int64
			s := &reviewServer{logger: discardLogger, bodies: newBodyReader(maxBodyBytes)}
			admit := func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
				held, _ = s.bodies.budget.State()
				return allowed()
			}
			var rd io.Reader = bytes.NewReader(tc.body)
			if !tc.declared {
				rd = io.MultiReader(rd) // an unknown length, as chunked
			}
			r := httptest.NewRequest(http.MethodPost, "/validate", rd)
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			s.admission("/validate", admit, validationAction{}).ServeHTTP(w, r)
			if w.Code != http.StatusOK || held != tc.want {
				t.Errorf("got HTTP %d holding %d bytes while admitting, want 200 and %d", w.Code, held, tc.want)
			}
			if used, _ := s.bodies.budget.State(); used != 0 {
				t.Errorf("%d bytes still held after the answer", used)
			}
		})
	}
}

// TestDeclaredButUnsent sends the headers of the largest review and none of
// its body: it takes no room, and is cut after bodyStallTimeout.
func TestDeclaredButUnsent(t *testing.T) {
	t.Parallel()
	s := newBodyTestServer(t, maxBodyBytes)
	start := time.Now()
	conn := s.send(t, "?timeout=30s", maxBodyBytes)
	w := answer(t, conn)
	took := time.Since(start)
	checkCut(t, w, "stopped arriving")
	if took < bodyStallTimeout-50*time.Millisecond || took > bodyStallTimeout+time.Second {
		t.Errorf("cut after %s, want after bodyStallTimeout, %s", took, bodyStallTimeout)
	}
	if p := s.peak.Load(); p != 0 {
		t.Errorf("the body that never came held %d bytes of the budget, want none", p)
	}
	if got := scrape(t, s.m)[`webhook_request_bodies_cut_total{reason="stalled"}`]; got != 1 {
		t.Errorf("bodies cut as stalled: got %v, want 1", got)
	}
}

// TestTrickledBody sends the largest review a byte every 100 ms: it never
// stalls, but is cut for its rate once the grace is over, holding nothing.
func TestTrickledBody(t *testing.T) {
	t.Parallel()
	s := newBodyTestServer(t, maxBodyBytes)
	start := time.Now()
	conn := s.send(t, "?timeout=30s", maxBodyBytes)
	go func() {
		for range 100 {
			if _, err := conn.Write([]byte{' '}); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	w := answer(t, conn)
	took := time.Since(start)
	checkCut(t, w, "slower than")
	if took > bodyStallTimeout+time.Second {
		t.Errorf("cut after %s, want soon after the grace of %s", took, bodyStallTimeout)
	}
	if p := s.peak.Load(); p != 0 {
		t.Errorf("the trickled body held %d bytes of the budget, want none", p)
	}
	if got := scrape(t, s.m)[`webhook_request_bodies_cut_total{reason="too_slow"}`]; got != 1 {
		t.Errorf("bodies cut as too slow: got %v, want 1", got)
	}
}

// TestStalledAfterMostOfTheBody sends all of the largest review but its
// last byte: it holds room for what it sent, then gives it back
// bodyStallTimeout after its last byte.
func TestStalledAfterMostOfTheBody(t *testing.T) {
	t.Parallel()
	s := newBodyTestServer(t, maxBodyBytes)
	conn := s.send(t, "?timeout=30s", maxBodyBytes)
	if _, err := conn.Write(bytes.Repeat([]byte{' '}, maxBodyBytes-1)); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	for used, _ := s.bodies.budget.State(); used != maxBodyBytes; used, _ = s.bodies.budget.State() {
		if time.Since(sent) > 5*time.Second {
			t.Fatalf("the body never held its room: %d bytes held", used)
		}
		time.Sleep(time.Millisecond)
	}
	for used, _ := s.bodies.budget.State(); used != 0; used, _ = s.bodies.budget.State() {
		if time.Since(sent) > bodyStallTimeout+time.Second {
			t.Fatalf("%d bytes still held %s after the last byte, want them back after %s", used, time.Since(sent), bodyStallTimeout)
		}
		time.Sleep(time.Millisecond)
	}
	checkCut(t, answer(t, conn), "stopped arriving")
	if p := s.peak.Load(); p > maxBodyBytes {
		t.Errorf("held %d bytes at the most, more than the body", p)
	}
}

// TestLargeBodiesDoNotDeadlock sends six 3 MB reviews at once through the
// smallest budget allowed, which holds two of them: were each to take room
// as its bytes arrive, all would hold part of their bodies and wait for
// room that only another could free. Every one is answered, with a review.
func TestLargeBodiesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	s := newBodyTestServer(t, maxBodyBytes)
	review := largeReview(t, 2_700_000)
	if buffer := bufferSizeFor(int64(len(review))); 2*buffer > maxBodyBytes || 3*buffer <= maxBodyBytes {
		t.Fatalf("the review's buffer is %d bytes: want a budget of %d to hold two, not three", buffer, maxBodyBytes)
	}
	var wg sync.WaitGroup
	codes := make([]int, 6)
	errs := make([]error, len(codes))
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := s.dial("?timeout=20s", len(review))
			if err != nil {
				errs[i] = err
				return
			}
			defer conn.Close()
			// In pieces, interleaved with the others.
			for rest := review; len(rest) > 0; {
				n := min(len(rest), 256<<10)
				if _, err := conn.Write(rest[:n]); err != nil {
					errs[i] = fmt.Errorf("sending the body: %w", err)
					return
				}
				rest = rest[n:]
				time.Sleep(10 * time.Millisecond)
			}
			w, err := readAnswer(conn)
			if err != nil {
				errs[i] = err
				return
			}
			codes[i] = w.Code
		}()
	}
	wg.Wait()
	for i, code := range codes {
		if errs[i] != nil {
			t.Errorf("review %d: %v, want it answered", i, errs[i])
		} else if code != http.StatusOK {
			t.Errorf("review %d: got HTTP %d, want 200", i, code)
		}
	}
	if p := s.peak.Load(); p > maxBodyBytes {
		t.Errorf("held %d bytes at the most, more than the budget", p)
	}
}

// TestLargeReviewOverload: a large review that finds no room before its
// deadline, or too many ahead of it, is answered with overloadStatus and a
// message naming the budget, before its deadline.
func TestLargeReviewOverload(t *testing.T) {
	t.Parallel()
	body := largeReview(t, 100<<10)
	t.Run("no room", func(t *testing.T) {
		s := newBodyTestServer(t, maxBodyBytes)
		// Room for the body's buffer to grow to 64 KiB, not to 128 KiB.
		const taken = maxBodyBytes - 64<<10
		if err := s.bodies.budget.Acquire(context.Background(), taken); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		conn := s.send(t, "?timeout=1s", len(body))
		conn.Write(body)
		w := answer(t, conn)
		took := time.Since(start)
		checkOverload(t, w, "no room")
		if took < time.Second-overloadMargin-50*time.Millisecond || took > time.Second {
			t.Errorf("answered after %s, want a little before the 1s deadline (%s before it)", took, overloadMargin)
		}
		if got := scrape(t, s.m)["webhook_inflight_rejected_total"]; got != 1 {
			t.Errorf("webhook_inflight_rejected_total = %v, want 1", got)
		}
		if used, _ := s.bodies.budget.State(); used != taken {
			t.Errorf("%d bytes held after the refusal, want the %d taken before it: the refused body keeps its room", used, taken)
		}
		// Once there is room, a large review is served.
		s.bodies.budget.Release(taken)
		conn = s.send(t, "?timeout=5s", len(body))
		conn.Write(body)
		checkReview(t, "/validate", decodeReviewIn(t, body), answer(t, conn))
	})
	t.Run("too many waiting", func(t *testing.T) {
		s := newBodyTestServer(t, maxBodyBytes)
		if err := s.bodies.turn.Acquire(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range maxWaitingBodies {
			wg.Add(1)
			go func() { defer wg.Done(); _ = s.bodies.turn.Acquire(ctx, 1) }()
		}
		defer func() { cancel(); wg.Wait() }()
		for _, waiting := s.bodies.turn.State(); waiting < maxWaitingBodies; _, waiting = s.bodies.turn.State() {
			time.Sleep(time.Millisecond)
		}
		start := time.Now()
		conn := s.send(t, "?timeout=10s", len(body))
		conn.Write(body)
		checkOverload(t, answer(t, conn), "too many large reviews")
		if took := time.Since(start); took > time.Second {
			t.Errorf("answered after %s, want at once", took)
		}
	})
}

func checkOverload(t *testing.T, w *httptest.ResponseRecorder, why string) {
	t.Helper()
	s := checkStatusBody(t, w, overloadStatus, metav1.StatusReasonTooManyRequests)
	for _, want := range []string{"busy", "-max-inflight-bytes", why} {
		if !strings.Contains(s.Message, want) {
			t.Errorf("got message %q, want it to mention %q", s.Message, want)
		}
	}
}

// checkCut checks the answer to a body cut by the clock: 408 with a
// Status that says why, and the connection closed.
func checkCut(t *testing.T, w *httptest.ResponseRecorder, why string) {
	t.Helper()
	s := checkStatusBody(t, w, http.StatusRequestTimeout, metav1.StatusReasonTimeout)
	if !strings.Contains(s.Message, why) {
		t.Errorf("got message %q, want it to say %q", s.Message, why)
	}
	if w.Header().Get("Connection") != "close" {
		t.Errorf("got Connection %q, want close: nothing more is read from a client that stopped", w.Header().Get("Connection"))
	}
}

// TestNextBufferSize: a large body's buffer grows from smallBodyBytes
// through bodyBufferSizes, each step at most doubling it (so the room held
// is at most twice what has arrived), to a buffer that holds the ceiling
// and is at most half as large again (so a body holds little room it does
// not use).
func TestNextBufferSize(t *testing.T) {
	if first, last := bodyBufferSizes[0], bodyBufferSizes[len(bodyBufferSizes)-1]; first <= smallBodyBytes || last != maxBodyBytes {
		t.Fatalf("bodyBufferSizes run from %d to %d, want from over %d to %d", first, last, smallBodyBytes, maxBodyBytes)
	}
	for _, ceiling := range []int64{smallBodyBytes + 1, 2 * smallBodyBytes, 2*smallBodyBytes + 1, 100 << 10, 1_100_000, 3 << 20, 3<<20 + 1, 6<<20 + 1, maxBodyBytes} {
		size := int64(smallBodyBytes)
		var steps []int64
		for size < ceiling {
			next := nextBufferSize(size, ceiling)
			if next <= size || next > 2*size || !slices.Contains(bodyBufferSizes, next) {
				t.Fatalf("ceiling %d: a full buffer of %d grows to %d; want one of bodyBufferSizes over %d and at most %d", ceiling, size, next, size, 2*size)
			}
			size = next
			steps = append(steps, next)
		}
		if size > ceiling+ceiling/2 {
			t.Errorf("ceiling %d: the buffer ends at %d (steps %v), more than half as large again", ceiling, size, steps)
		}
	}
}

// TestTooLargeGivesBackItsRoom: a body of unknown length that goes past
// maxBodyBytes is refused once its buffer is full, and gives back all the
// room it took.
func TestTooLargeGivesBackItsRoom(t *testing.T) {
	s := &reviewServer{logger: discardLogger, bodies: newBodyReader(maxBodyBytes)}
	huge := io.MultiReader(bytes.NewReader(bytes.Repeat([]byte(" "), maxBodyBytes+1))) // an unknown length, as chunked
	r := httptest.NewRequest(http.MethodPost, "/validate", huge)
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	s.admission("/validate", denyingAdmit, validationAction{}).ServeHTTP(w, r)
	checkStatusBody(t, w, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge)
	if used, _ := s.bodies.budget.State(); used != 0 {
		t.Errorf("%d bytes still held after the refusal", used)
	}
}

// TestBufferIsKept: a buffer given back is the next one of its size. The
// race detector makes sync.Pool drop a quarter of what it is given, so
// this tries a few times.
func TestBufferIsKept(t *testing.T) {
	b := newBodyReader(maxBodyBytes)
	for _, size := range bodyBufferSizes {
		kept := false
		for range 20 {
			buf := b.buffer(size)[:1]
			b.keep(buf)
			if again := b.buffer(size)[:1]; &again[0] == &buf[0] {
				kept = true
				break
			}
		}
		if !kept {
			t.Errorf("a buffer of %d bytes given back was never the next one of its size", size)
		}
	}
}

// bufferSizeFor is the buffer a large body of length bytes ends in.
func bufferSizeFor(length int64) int64 {
	size := int64(smallBodyBytes)
	for size < length {
		size = nextBufferSize(size, length)
	}
	return size
}

// TestKeptBuffers: a large body's buffer serves another once answered, and
// what the last body left in it past the new one's end never reaches the
// new review. Bodies that share buffer sizes are sent longest first and
// then shortest first, from a few clients at once, and each review must be
// decoded to its own uid and object (go test -race sees a buffer given to
// a body while another still uses it).
func TestKeptBuffers(t *testing.T) {
	sizes := []int{
		1_400_000, 1_200_000, 1_100_000, 900_000, 600_000, 100_000, 40_000,
		40_000, 100_000, 600_000, 900_000, 1_100_000, 1_200_000, 1_400_000,
	}
	var reviews [][]byte
	objects := map[string][]byte{} // by uid
	for i, size := range sizes {
		review := inflate(t, plumbingReviews(t)["v1-deployment-create"], size, func(req map[string]any) {
			req["uid"] = fmt.Sprintf("uid-%d", i)
		}, "object")
		reviews = append(reviews, review)
		objects[fmt.Sprintf("uid-%d", i)] = decodeReviewIn(t, review).Request.Object
	}
	s := newTestReviews(discardLogger)
	h := s.admission("/validate", func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if want, ok := objects[string(req.UID)]; !ok || !bytes.Equal(req.Object.Raw, want) {
			t.Errorf("review %s: the policy saw an object of %d bytes, want %d bytes of its own", req.UID, len(req.Object.Raw), len(want))
		}
		return allowed()
	}, validationAction{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for _, review := range reviews {
				checkReview(t, "/validate", decodeReviewIn(t, review), post(h, "/validate", review))
			}
		})
	}
	wg.Wait()
	if used, _ := s.bodies.budget.State(); used != 0 {
		t.Errorf("%d bytes still held after the answers", used)
	}
}
