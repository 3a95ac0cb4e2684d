package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
