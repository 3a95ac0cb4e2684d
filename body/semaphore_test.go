package body

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// acquireAsync runs acquire in the background; its result arrives on the
// channel.
func acquireAsync(b *semaphore, ctx context.Context, n int64) <-chan error {
	done := make(chan error, 1)
	go func() { done <- b.acquire(ctx, n) }()
	return done
}

func waitWaiting(t *testing.T, b *semaphore, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, waiting := b.state(); waiting == want {
			return
		}
		if time.Now().After(deadline) {
			_, waiting := b.state()
			t.Fatalf("got %d requests waiting, want %d", waiting, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func notYet(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) while it should wait", what, err)
	case <-time.After(20 * time.Millisecond):
	}
}

func TestSemaphoreWaitsInOrder(t *testing.T) {
	ctx := context.Background()
	b := newSemaphore(10)
	if err := b.acquire(ctx, 6); err != nil {
		t.Fatal(err)
	}
	// 6 in use: a request for 8 waits, and one for 2 that would fit waits
	// behind it, so a large review is never starved by small ones.
	large := acquireAsync(b, ctx, 8)
	waitWaiting(t, b, 1)
	small := acquireAsync(b, ctx, 2)
	waitWaiting(t, b, 2)
	notYet(t, large, "the large acquire")
	notYet(t, small, "the small acquire behind it")

	b.release(6)
	if err := <-large; err != nil {
		t.Fatalf("large: %v", err)
	}
	if err := <-small; err != nil {
		t.Fatalf("small: %v", err)
	}
	if used, waiting := b.state(); used != 10 || waiting != 0 {
		t.Errorf("got %d used, %d waiting; want 10 and 0", used, waiting)
	}
	b.release(8)
	b.release(2)
	if used, _ := b.state(); used != 0 {
		t.Errorf("got %d used after every release, want 0", used)
	}
}

func TestSemaphoreDeadline(t *testing.T) {
	b := newSemaphore(10)
	if err := b.acquire(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := b.acquire(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the deadline", err)
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Errorf("gave up after %s, before the deadline", took)
	}
	if _, waiting := b.state(); waiting != 0 {
		t.Errorf("got %d waiting after the deadline, want 0", waiting)
	}

	// A waiter at the front that gives up lets in the ones behind it that
	// fit.
	b.release(10)
	if err := b.acquire(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	gaveUp, giveUp := context.WithCancel(context.Background())
	front := acquireAsync(b, gaveUp, 8)
	waitWaiting(t, b, 1)
	behind := acquireAsync(b, context.Background(), 5)
	waitWaiting(t, b, 2)
	notYet(t, behind, "the acquire behind a waiter")
	giveUp()
	if err := <-front; !errors.Is(err, context.Canceled) {
		t.Errorf("front: got %v, want canceled", err)
	}
	if err := <-behind; err != nil {
		t.Errorf("behind: got %v once the front gave up, want the bytes", err)
	}
}

// TestSemaphoreNeverOverspends hammers the semaphore from many goroutines
// and checks the bytes held never exceed the capacity (run with -race).
func TestSemaphoreNeverOverspends(t *testing.T) {
	const capacity = 100
	b := newSemaphore(capacity)
	var held, peak atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				n := int64((g*7+i*13)%capacity + 1)
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%3)*time.Millisecond)
				if i%3 == 0 {
					ctx = context.Background()
				}
				if err := b.acquire(ctx, n); err != nil {
					cancel()
					continue
				}
				now := held.Add(n)
				for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
				}
				held.Add(-n)
				b.release(n)
				cancel()
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > capacity || p == 0 {
		t.Errorf("peak bytes held %d, want between 1 and %d", p, capacity)
	}
	if used, waiting := b.state(); used != 0 || waiting != 0 {
		t.Errorf("got %d used, %d waiting at the end, want 0 and 0", used, waiting)
	}
}
