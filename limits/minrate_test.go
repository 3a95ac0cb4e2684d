package limits

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestMinRateReader sends a body that stops, and one that trickles a byte
// every 20 ms: each is cut, for its own reason, soon after the stall
// timeout.
func TestMinRateReader(t *testing.T) {
	const stall = 200 * time.Millisecond
	for _, tc := range []struct {
		name, reason, message string
		trickle               bool
	}{
		{"stalled", "stalled", "the request body stopped arriving: no byte for 200ms", false},
		{"too slow", "too_slow", "the request body arrived slower than 1024 KiB/s", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan error, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				clock := NewMinRateReader(r, http.NewResponseController(w), time.Now().Add(time.Minute), stall, 1<<20)
				_, err := clock.ReadFull(make([]byte, 1000))
				got <- err
			}))
			defer srv.Close()
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: limits\r\nContent-Length: 1000\r\n\r\n")
			if tc.trickle {
				go func() {
					for range 100 {
						if _, err := conn.Write([]byte{' '}); err != nil {
							return
						}
						time.Sleep(20 * time.Millisecond)
					}
				}()
			}
			start := time.Now()
			var cut *SlowBodyError
			select {
			case err := <-got:
				if !errors.As(err, &cut) || cut.Reason != tc.reason || err.Error() != tc.message {
					t.Fatalf("got %v, want a SlowBodyError %q: %q", err, tc.reason, tc.message)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the body was never cut")
			}
			if took := time.Since(start); took < stall-50*time.Millisecond || took > stall+time.Second {
				t.Errorf("cut after %s, want soon after %s", took, stall)
			}
		})
	}
}
