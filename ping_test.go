package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/example/webhook/limits"
	"github.com/example/webhook/part"
)

// TestPingWaitsForParts: /ping fails with a part's NotReady error, saying
// it, while the part is not ready, and answers pong once it is: a replica
// whose part cannot serve yet (a view of the cluster not synced) gets no
// traffic, and is not restarted: /livez answers.
func TestPingWaitsForParts(t *testing.T) {
	t.Chdir(t.TempDir())
	cfg, err := parseServerFlags([]string{"-listen", "127.0.0.1:0"}, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	var ready atomic.Bool
	cfg.parts = append(cfg.parts, part.Part{Name: "slow", NotReady: func() error {
		if ready.Load() {
			return nil
		}
		return errors.New("the slow part is not ready")
	}})
	srv, err := newServer(cfg, discardLogger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.serve(ctx) }()
	client := clientTrusting(t, filepath.Join("tls", "ca.crt"))
	ping := func() (int, string) {
		resp, err := client.Get("https://" + srv.listener.Addr().String() + "/ping")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		code, body := ping()
		if code == http.StatusServiceUnavailable {
			if !strings.Contains(body, "the slow part is not ready") {
				t.Errorf("got %s, want the part's reason", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %d %s, want 503 while the part is not ready", code, body)
		}
	}
	// Alive all the while: kubelet restarts no replica that only waits.
	resp, err := client.Get("https://" + srv.listener.Addr().String() + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/livez while the part is not ready: got %d, want 200", resp.StatusCode)
	}
	ready.Store(true)
	if code, body := ping(); code != http.StatusOK || body != "pong" {
		t.Errorf("once the part is ready: got %d %q, want 200 pong", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestProbeGetsInPastHeldPlaces: the Deployment's readiness probe is GET
// /ping on the metrics port, a port of 16 places. Two other Pods (two
// addresses) that take all 16, and take each back as soon as it is
// closed, sending nothing or asking for /ping themselves, must not make
// the kubelet's probe (from a third address) miss its 5 s timeoutSeconds:
// three misses and the replica is unready, and with every replica
// unready, failurePolicy: Fail refuses every write the rules send. Before
// metricsReadTimeout, a connection that sent nothing held its place for
// 120 s, one kept alive for ever, and every probe timed out.
func TestProbeGetsInPastHeldPlaces(t *testing.T) {
	for _, sends := range []string{"", "GET /ping HTTP/1.1\r\nHost: webhook\r\n\r\n"} {
		name := map[bool]string{true: "sending nothing", false: "asking"}[sends == ""]
		t.Run(name, func(t *testing.T) {
			t.Chdir(t.TempDir())
			cfg, err := parseServerFlags([]string{"-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0"}, testEnv)
			if err != nil {
				t.Fatal(err)
			}
			srv, err := newServer(cfg, discardLogger)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.serve(ctx) }()
			addr := srv.metricsLn.Addr().String()

			var holders sync.WaitGroup
			defer holders.Wait()
			defer cancel()
			for _, from := range []struct {
				ip string
				n  int
			}{{"127.0.0.2", 12}, {"127.0.0.3", 4}} {
				for range from.n {
					holders.Go(func() {
						d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from.ip)}}
						for ctx.Err() == nil { // take the place back at once
							c, err := d.DialContext(ctx, "tcp", addr)
							if err != nil {
								continue
							}
							stop := context.AfterFunc(ctx, func() { c.Close() })
							io.WriteString(c, sends)
							io.Copy(io.Discard, c) // until the server closes it
							stop()
							c.Close()
						}
					})
				}
			}
			for deadline := time.Now().Add(5 * time.Second); srv.metricsLn.(*limits.Listener).Stats().Open < maxMetricsConnections; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the holders took %d places, want all %d", srv.metricsLn.(*limits.Listener).Stats().Open, maxMetricsConnections)
				}
			}

			// The kubelet's probe: a connection of its own each time, and
			// the Deployment's timeoutSeconds.
			probe := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for i := range 3 { // failureThreshold
				start := time.Now()
				resp, err := probe.Get("http://" + addr + "/ping")
				if err != nil {
					t.Errorf("probe %d: %v, after %s: three such and the replica is unready", i+1, err, time.Since(start).Round(time.Millisecond))
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("probe %d: got %d, want 200", i+1, resp.StatusCode)
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
}
