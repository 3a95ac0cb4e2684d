package body

import (
	"cmp"
	"container/list"
	"context"
	"slices"
	"sync"
	"time"
)

// line is the large bodies waiting to be read, in order of arrival, and
// the one being read: large bodies are read one at a time, so that only
// the one being read ever waits for room (Read's "who waits for whom").
// It refuses the bodies it cannot read before their deadlines, as soon as
// it can tell: on arrival, and at every turn after.
type line struct {
	mu      sync.Mutex
	busy    bool      // a body is being read
	waiting list.List // of *waiter, oldest first
	bytes   int64     // the waiting bodies' declared sizes, in all
	pace    linePace
}

// waiter is a body in line.
type waiter struct {
	size   int64
	readBy time.Time // its deadline, less OverloadMargin; zero: none
	// turn receives nil at its turn, or an *errLongQueue when the line, at
	// its pace, can no longer read it by readBy.
	turn chan error
}

// errLongQueue is a body the line cannot read in time: at its pace, the
// bodies ahead of it and its own bytes would take it past its deadline.
type errLongQueue struct {
	ahead int64         // bytes waiting ahead of it
	wait  time.Duration // what they and it would take
}

func (e *errLongQueue) Error() string { return "the line is too long" }

// join waits in line for the turn of a body of size bytes to be read by
// readBy, and returns nil at its turn, which it keeps until leave. It
// returns an *errLongQueue at once when the line cannot read it in time,
// and at any turn after, when it turns out so; or ctx's error, when ctx
// ends first.
func (l *line) join(ctx context.Context, size int64, readBy time.Time) error {
	l.mu.Lock()
	now := time.Now()
	if !l.busy {
		if err := l.tooLate(now, l.bytes, size, readBy); err != nil {
			l.mu.Unlock()
			return err
		}
		l.busy = true
		l.pace.turnBegan(now, false)
		l.mu.Unlock()
		return nil
	}
	if err := l.tooLate(now, l.bytes, size, readBy); err != nil {
		l.mu.Unlock()
		return err
	}
	w := &waiter{size: size, readBy: readBy, turn: make(chan error, 1)}
	elem := l.waiting.PushBack(w)
	l.bytes += size
	l.mu.Unlock()

	var err error
	select {
	case err = <-w.turn:
	case <-ctx.Done():
		l.mu.Lock()
		select {
		case err = <-w.turn: // its turn, or its refusal, came just as ctx ended
		default:
			l.waiting.Remove(elem)
			l.bytes -= size
			err = ctx.Err()
		}
		l.mu.Unlock()
	}
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.pace.turnBegan(time.Now(), true)
	l.mu.Unlock()
	return nil
}

// leave ends the turn of the body being read, which read bytesRead and
// was read whole, or not (cut, or refused): the next one that can still be
// read in time begins its turn, and those that cannot are refused.
func (l *line) leave(bytesRead int64, whole bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pace.turnEnded(bytesRead, whole)
	now := time.Now()
	var ahead int64
	var next *waiter
	for e := l.waiting.Front(); e != nil; {
		w := e.Value.(*waiter)
		following := e.Next()
		switch err := l.tooLate(now, ahead, w.size, w.readBy); {
		case err != nil:
			l.waiting.Remove(e)
			l.bytes -= w.size
			w.turn <- err
		case next == nil:
			l.waiting.Remove(e)
			l.bytes -= w.size
			next = w
			ahead += w.size
		default:
			ahead += w.size
		}
		e = following
	}
	if next == nil {
		l.busy = false
		return
	}
	next.turn <- nil
}

// tooLate returns an *errLongQueue when a body of size bytes, behind ahead
// bytes, would be read, at the line's pace, only after readBy.
func (l *line) tooLate(now time.Time, ahead, size int64, readBy time.Time) error {
	if readBy.IsZero() {
		return nil
	}
	wait := l.pace.wait(ahead + size)
	if !now.Add(wait).After(readBy) {
		return nil
	}
	return &errLongQueue{ahead, wait}
}

// state returns whether a body is being read, and how many wait.
func (l *line) state() (busy bool, waiting int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.busy, l.waiting.Len()
}

// linePace is the pace at which the line has lately moved: the time from
// one body's turn to the next's, per byte read in it, whenever the body
// was read whole and the next was waiting. It counts what a turn takes
// (waiting for room, reading) and what passing it on takes (on a busy
// core, the next body's goroutine waits to run). It is the mean over the
// last len(turns) but for the two slowest a byte: a client that sends
// slowly makes a slow turn, not a slow line. A body cut or refused tells
// nothing of the pace: a client that stalls would make every body look
// slow by the byte, and every body refused at once, free to come back at
// once. Until there are four turns, the pace is 0, and nothing is refused
// on its account. Its caller holds line.mu.
type linePace struct {
	began     time.Time // the last turn's
	bytesRead int64     // in the last turn, once it ended
	turns     [16]turn
	next, n   int // where the next turn goes; how many there are
}

// turn is one turn of the line, as linePace keeps it.
type turn struct {
	took  time.Duration // until the next turn began
	bytes int64         // read in it
}

// turnBegan records a turn that began at now, after the body waited in
// line for it (waited) or found the line empty.
func (p *linePace) turnBegan(now time.Time, waited bool) {
	if waited && p.bytesRead > 0 {
		p.turns[p.next] = turn{now.Sub(p.began), p.bytesRead}
		p.next = (p.next + 1) % len(p.turns)
		p.n = min(p.n+1, len(p.turns))
	}
	p.began, p.bytesRead = now, 0
}

// turnEnded records what the last turn read, if it read its body whole.
func (p *linePace) turnEnded(bytesRead int64, whole bool) {
	p.bytesRead = 0
	if whole {
		p.bytesRead = bytesRead
	}
}

// wait is how long bodies of size bytes in all would take to be read at
// the line's pace.
func (p *linePace) wait(size int64) time.Duration {
	if p.n < 4 || size == 0 {
		return 0
	}
	turns := slices.Clone(p.turns[:p.n])
	slices.SortFunc(turns, func(a, b turn) int {
		return cmp.Compare(a.took.Seconds()/float64(a.bytes), b.took.Seconds()/float64(b.bytes))
	})
	var took time.Duration
	var bytes int64
	for _, t := range turns[:len(turns)-2] {
		took += t.took
		bytes += t.bytes
	}
	return time.Duration(float64(took) * float64(size) / float64(bytes))
}
