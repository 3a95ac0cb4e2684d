package main

import (
	"container/list"
	"context"
	"sync"
)

// byteBudget bounds the bytes of the reviews being read and decoded at
// once, and so the memory they take: decoding a review costs a few times
// its size, and the apiserver sends reviews of up to two 3 MiB objects.
// A request takes its bytes before its body is read and gives them back
// once it is answered; one that does not fit waits, first come first
// served, so that a large review is not starved by a stream of small ones.
// It is golang.org/x/sync/semaphore's Weighted, which the root module may
// not depend on, cut down to what the webhook uses.
type byteBudget struct {
	capacity int64

	mu      sync.Mutex
	used    int64
	waiters list.List // of *budgetWaiter, oldest first
}

type budgetWaiter struct {
	n     int64
	ready chan struct{} // closed when the bytes are granted
}

func newByteBudget(capacity int64) *byteBudget {
	return &byteBudget{capacity: capacity}
}

// tryAcquire takes n bytes if they fit now and nobody is waiting, and
// reports whether it did. It is acquire without the wait, for the common
// case where there is room: the caller then need not make a context for
// waiting, which costs seven allocations per review.
func (b *byteBudget) tryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n <= b.capacity && b.waiters.Len() == 0 {
		b.used += n
		return true
	}
	return false
}

// acquire takes n bytes, waiting while they do not fit, until ctx ends. n
// must not exceed the capacity: such a request would wait forever, so the
// caller refuses it first.
func (b *byteBudget) acquire(ctx context.Context, n int64) error {
	b.mu.Lock()
	if b.used+n <= b.capacity && b.waiters.Len() == 0 {
		b.used += n
		b.mu.Unlock()
		return nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	elem := b.waiters.PushBack(w)
	b.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		select {
		case <-w.ready:
			// Granted just as ctx ended: keep the bytes, as the caller
			// may still be in time.
			b.mu.Unlock()
			return nil
		default:
		}
		isFront := b.waiters.Front() == elem
		b.waiters.Remove(elem)
		// The first waiter leaving may let the next ones in.
		if isFront {
			b.grantLocked()
		}
		b.mu.Unlock()
		return ctx.Err()
	}
}

// release gives back n bytes taken by acquire.
func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.grantLocked()
	b.mu.Unlock()
}

// grantLocked lets in the waiters at the front that now fit, in order.
func (b *byteBudget) grantLocked() {
	for {
		front := b.waiters.Front()
		if front == nil {
			return
		}
		w := front.Value.(*budgetWaiter)
		if b.used+w.n > b.capacity {
			return
		}
		b.used += w.n
		b.waiters.Remove(front)
		close(w.ready)
	}
}

// state returns the bytes in use and the number of requests waiting, for
// the metrics.
func (b *byteBudget) state() (used int64, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.waiters.Len()
}
