package limits

import (
	"container/list"
	"context"
	"sync"
)

// Semaphore is a weighted semaphore that lets waiters in first come, first
// served: one that does not fit waits, and those behind it wait too, so
// that a large request is not starved by a stream of small ones. The root
// package uses one as its byte budget and one of capacity 1 as the turn of
// large bodies. It is golang.org/x/sync/semaphore's Weighted, which the
// root module may not depend on, cut down to what the webhook uses.
type Semaphore struct {
	capacity int64

	mu      sync.Mutex
	used    int64
	waiters list.List // of *semaphoreWaiter, oldest first
}

type semaphoreWaiter struct {
	n     int64
	ready chan struct{} // closed when the units are granted
}

// NewSemaphore returns a semaphore of capacity units.
func NewSemaphore(capacity int64) *Semaphore {
	return &Semaphore{capacity: capacity}
}

// Capacity returns the semaphore's capacity.
func (b *Semaphore) Capacity() int64 { return b.capacity }

// Acquire takes n units, waiting while they do not fit, until ctx ends. n
// must not exceed the capacity: such a request would wait forever, so the
// caller refuses it first.
func (b *Semaphore) Acquire(ctx context.Context, n int64) error {
	b.mu.Lock()
	if b.used+n <= b.capacity && b.waiters.Len() == 0 {
		b.used += n
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

// Release gives back n units taken by Acquire.
func (b *Semaphore) Release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.grantLocked()
	b.mu.Unlock()
}

// grantLocked lets in the waiters at the front that now fit, in order.
func (b *Semaphore) grantLocked() {
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
		b.waiters.Remove(front)
		close(w.ready)
	}
}

// State returns the units in use and the number of requests waiting.
func (b *Semaphore) State() (used int64, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.waiters.Len()
}
