package body

import (
	"container/list"
	"context"
	"sync"
)

// semaphore is a weighted semaphore that lets waiters in first come, first
// served: one that does not fit waits, and those behind it wait too, so
// that a large body is not starved by a stream of small ones. A Reader
// uses one as its byte budget, and one of capacity 1 to read large bodies
// one at a time. It is golang.org/x/sync/semaphore's Weighted, which the
// root module may not depend on, cut down to what Read uses.
type semaphore struct {
	capacity int64

	mu      sync.Mutex
	used    int64
	peak    int64     // the most units used at once: what tests hold the budget to
	waiters list.List // of *semaphoreWaiter, oldest first
}

type semaphoreWaiter struct {
	n     int64
	ready chan struct{} // closed when the units are granted
}

func newSemaphore(capacity int64) *semaphore {
	return &semaphore{capacity: capacity}
}

// acquire takes n units, waiting while they do not fit, until ctx ends. n
// must not exceed the capacity: such a request would wait forever, so the
// caller refuses it first.
func (b *semaphore) acquire(ctx context.Context, n int64) error {
	b.mu.Lock()
	if b.used+n <= b.capacity && b.waiters.Len() == 0 {
		b.used += n
		b.peak = max(b.peak, b.used)
		b.mu.Unlock()
		return nil
	}
	w := &semaphoreWaiter{n: n, ready: make(chan struct{})}
	elem := b.waiters.PushBack(w)
	b.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		select {
		case <-w.ready:
			// Granted just as ctx ended: keep the units, as the caller
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

// release gives back n units taken by acquire.
func (b *semaphore) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.grantLocked()
	b.mu.Unlock()
}

// grantLocked lets in the waiters at the front that now fit, in order.
func (b *semaphore) grantLocked() {
	for {
		front := b.waiters.Front()
		if front == nil {
			return
		}
		w := front.Value.(*semaphoreWaiter)
		if b.used+w.n > b.capacity {
			return
		}
		b.used += w.n
		b.peak = max(b.peak, b.used)
		b.waiters.Remove(front)
		close(w.ready)
	}
}

// state returns the units in use and the number of requests waiting.
func (b *semaphore) state() (used int64, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.waiters.Len()
}
