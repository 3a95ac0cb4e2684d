package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/example/webhook/body"
)

// TestBodyRefusalIsAStatus: a body the webhook does not read whole is
// answered, as every request without a review is, with a metav1.Status
// of its code and the reason the apiserver's clients switch on, closing
// the connection, and counted by reason. (Package body's tests hold each
// rule; this is how the routes answer them.)
func TestBodyRefusalIsAStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		timeout    string
		length     int // the body's, declared
		send       int // bytes of it sent, then nothing
		wantCode   int
		wantReason metav1.StatusReason
		wantSeries string
	}{
		// Its deadline, less the margin, comes while it is read: overload.
		{"not read in time", "500ms", 10 << 10, 5 << 10, body.BusyStatus, metav1.StatusReasonTooManyRequests, `webhook_overload_refusals_total{reason="slow_read"}`},
		// Holding room in the budget, its client stops sending: cut.
		{"stalled", "30s", 100 << 10, 50 << 10, http.StatusRequestTimeout, metav1.StatusReasonTimeout, `webhook_request_bodies_cut_total{reason="stalled"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reviews := newTestReviews(discardLogger)
			srv := httptest.NewServer(reviews.admissionRoute("/validate", denyingAdmit, nil))
			defer srv.Close()
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /validate?timeout=%s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", tc.timeout, tc.length, bytes.Repeat([]byte{' '}, tc.send))
			w := readAnswer(t, conn)
			checkStatusBody(t, w, tc.wantCode, tc.wantReason)
			if w.Header().Get("Connection") != "close" {
				t.Errorf("got Connection %q, want close: the rest of the body is not read", w.Header().Get("Connection"))
			}
			got := scrape(t, reviews.metrics)
			if code := fmt.Sprintf(`webhook_requests_total{webhook="/validate",code="%d"}`, tc.wantCode); got[code] != 1 || got[tc.wantSeries] != 1 {
				t.Errorf("%s = %v and %s = %v, want 1 and 1", code, got[code], tc.wantSeries, got[tc.wantSeries])
			}
		})
	}
}

// readAnswer reads the server's answer on conn into a recorder, the
// Connection header included.
func readAnswer(t *testing.T, conn net.Conn) *httptest.ResponseRecorder {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
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
		t.Fatalf("reading the answer's body: %v", err)
	}
	return w
}

// TestRefusalsAreSummedUp: the log says how many bodies were refused and
// cut since its last line, by reason, in one line, and nothing when there
// were none.
func TestRefusalsAreSummedUp(t *testing.T) {
	// Each tick reads the next of stats; once it is closed, the last
	// again, as a budget with nothing new: a tick may still come between
	// the last one and stop.
	stats := make(chan body.Stats)
	var latest body.Stats
	next := func() body.Stats {
		if s, ok := <-stats; ok {
			latest = s
		}
		return latest
	}
	var logs syncBuffer
	stop := logRefusals(slog.New(slog.NewTextHandler(&logs, nil)), next, time.Millisecond)
	stats <- body.Stats{} // the start
	stats <- body.Stats{} // nothing since
	stats <- body.Stats{Refused: map[string]uint64{body.SlowRead: 3, body.NoRoom: 1}, Cut: map[string]uint64{body.Stalled: 2}}
	stats <- body.Stats{Refused: map[string]uint64{body.SlowRead: 4, body.NoRoom: 1}, Cut: map[string]uint64{body.Stalled: 2}}
	stats <- body.Stats{Refused: map[string]uint64{body.SlowRead: 4, body.NoRoom: 1}, Cut: map[string]uint64{body.Stalled: 2}} // the last line is written
	close(stats)
	stop()
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	want := []string{
		"refused_429.no_room=1 refused_429.slow_read=3 cut_408.stalled=2",
		"refused_429.slow_read=1 in=",
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), logs.String())
	}
	for i, l := range lines {
		if !strings.Contains(l, "review bodies refused or cut") || !strings.Contains(l, want[i]) {
			t.Errorf("line %d: got %q, want it to say %q", i, l, want[i])
		}
	}
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
	h := s.admissionRoute("/validate", func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if want, ok := objects[string(req.UID)]; !ok || !bytes.Equal(req.Object.Raw, want) {
			t.Errorf("review %s: the policy saw an object of %d bytes, want %d bytes of its own", req.UID, len(req.Object.Raw), len(want))
		}
		return allowed()
	}, nil)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for _, review := range reviews {
				checkReview(t, "/validate", decodeReviewIn(t, review), post(h, "/validate", review))
			}
		})
	}
	wg.Wait()
	if held := s.bodyBudget.Stats().HeldBytes; held != 0 {
		t.Errorf("%d bytes still held after the answers", held)
	}
}
