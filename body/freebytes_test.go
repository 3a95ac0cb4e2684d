package body

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRoomFirstComeFirstServed: a large take that does not fit waits, and
// a smaller one behind it waits too, though it would fit: a stream of
// small bodies cannot starve a large one. Once room is given back, they
// are served in order. The first room given back is enough for the large
// take and not for both, so that the small one, were it served out of
// turn, is seen first: served in turn, it cannot be seen before the
// large one however the goroutines are scheduled.
func TestRoomFirstComeFirstServed(t *testing.T) {
	r := &NewBudget(100 * reserveUnit).free
	if err := r.reserve(context.Background(), 60*reserveUnit); err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 2)
	go func() {
		if r.reserve(context.Background(), 80*reserveUnit) == nil {
			order <- "large"
		}
	}()
	// Waiting counts a take before it has its turn: the large one has it
	// once the turn is held, for nothing else takes it yet.
	waitUntil(func() bool { _, waiting := r.state(); return waiting == 1 && len(r.turn) == 1 })
	go func() {
		if r.reserve(context.Background(), 30*reserveUnit) == nil {
			order <- "small"
		}
	}()
	waitUntil(func() bool { _, waiting := r.state(); return waiting == 2 })
	select {
	case got := <-order:
		t.Fatalf("the %s take was served while 60 of 100 units were held, want both to wait: the small one behind the large", got)
	case <-time.After(50 * time.Millisecond):
	}
	r.release(60 * reserveUnit)
	if first := <-order; first != "large" {
		t.Errorf("served first: %s, want the large take, which came first", first)
	}
	r.release(80 * reserveUnit)
	if second := <-order; second != "small" {
		t.Errorf("served second: %s, want the small take", second)
	}
}

// TestRoomGivesUpAtItsDeadline: a take that finds no room by ctx's end
// fails, takes nothing, and lets the next in.
func TestRoomGivesUpAtItsDeadline(t *testing.T) {
	r := &NewBudget(100 * reserveUnit).free
	if err := r.reserve(context.Background(), 100*reserveUnit); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := r.reserve(ctx, 10*reserveUnit); err == nil {
		t.Fatal("a take with no room before its deadline succeeded, want it to fail")
	}
	r.release(100 * reserveUnit)
	if held, _ := r.state(); held != 0 {
		t.Errorf("%d held after the failed take and the give, want 0", held)
	}
	if err := r.reserve(context.Background(), 100*reserveUnit); err != nil {
		t.Errorf("the next take: %v, want room", err)
	}
}

// behindOneWaiting is a budget of 100 units, all held, and one body of 10
// waiting for room: ahead is its result, once r.release(100*reserveUnit).
func behindOneWaiting(t *testing.T) (r *freeBytes, ahead <-chan error) {
	t.Helper()
	r = &NewBudget(100 * reserveUnit).free
	if err := r.reserve(context.Background(), 100*reserveUnit); err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 1)
	go func() { result <- r.reserve(context.Background(), 10*reserveUnit) }()
	waitUntil(func() bool { _, waiting := r.state(); return waiting == 1 })
	return r, result
}

// TestLongQueueRefusedAtOnce: behind bodies waiting for room, a body that
// could not, at the pace room has come back, have its room before its
// deadline is refused at once; one with the time to wait waits, though
// the wait is most of its time.
func TestLongQueueRefusedAtOnce(t *testing.T) {
	r, ahead := behindOneWaiting(t)
	r.mu.Lock()
	r.pace, r.measured = 10*reserveUnit, time.Now() // a second
	r.mu.Unlock()

	// 20 units at 10 a second: 2 s of waiting.
	short, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	// Had it waited, no room coming back, its deadline would have ended it.
	var long *errLongQueue
	if err := r.reserve(short, 10*reserveUnit); !errors.As(err, &long) {
		t.Fatalf("a body with 1.5 s left behind 2 s of waiting: got %v, want it refused at once as a long queue", err)
	}
	roomy, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	waited := make(chan error, 1)
	go func() { waited <- r.reserve(roomy, 10*reserveUnit) }()
	waitUntil(func() bool { _, waiting := r.state(); return waiting == 2 || len(waited) == 1 })
	r.release(100 * reserveUnit)
	if err := <-ahead; err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Errorf("a body with 3 s left behind 2 s of waiting: got %v, want it to wait for its room", err)
	}
}

// TestOldPaceRefusesNone: a pace measured longer than paceKept ago, of a
// line since gone (a hostile body cut after it stalled, while another
// waited), refuses no body at once: the line it would judge may move in
// milliseconds.
func TestOldPaceRefusesNone(t *testing.T) {
	r, ahead := behindOneWaiting(t)
	r.mu.Lock()
	r.pace, r.measured = 10*reserveUnit, time.Now().Add(-paceKept-time.Second)
	r.mu.Unlock()

	// 20 units at the old pace, 10 a second, would be 2 s of waiting; the
	// line moves at once.
	time.AfterFunc(20*time.Millisecond, func() { r.release(100 * reserveUnit) })
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if err := r.reserve(ctx, 10*reserveUnit); err != nil {
		t.Errorf("behind a line judged by a pace of %s ago: got %v, want its room once the line moved", paceKept+time.Second, err)
	}
	if err := <-ahead; err != nil {
		t.Fatal(err)
	}
}

// TestOldPaceNotRevivedByAnEarlierLine: the second of waiting that lets
// an old pace refuse at once is the line's own: waiting left over from an
// earlier line, which measured nothing, does not make a line a few
// milliseconds old a stuck one. (Counted with it, a line that moved 20 ms
// later was refused as a 2.2 s wait; helper-29.)
func TestOldPaceNotRevivedByAnEarlierLine(t *testing.T) {
	r, ahead := behindOneWaiting(t)
	r.mu.Lock()
	r.pace, r.measured = 10*reserveUnit, time.Now().Add(-paceKept-2*time.Second)
	r.waited = 900 * time.Millisecond                       // an earlier line's, under a second: no pace measured of it
	r.waitedSince = time.Now().Add(-150 * time.Millisecond) // this line waits a moment
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	time.AfterFunc(20*time.Millisecond, func() { r.release(100 * reserveUnit) })
	var long *errLongQueue
	if err := r.reserve(ctx, 10*reserveUnit); errors.As(err, &long) {
		t.Errorf("behind a line a moment old, judged by a pace of %s ago and an earlier line's waiting: refused at once: %v", paceKept+2*time.Second, err)
	}
	if err := <-ahead; err != nil {
		t.Fatal(err)
	}
}

// TestLongQueueCountsOnlyWhatIsLacking: the wait a body is judged by is
// for the room the line lacks, not all it wants: room free now, and what
// the first in line has taken, come back to no one. (Counting all it
// wants, a body with 3 s left behind a line lacking 15 units, 1.5 s at
// the pace, was refused as a 9.5 s wait; helper-29.)
func TestLongQueueCountsOnlyWhatIsLacking(t *testing.T) {
	r := &NewBudget(100 * reserveUnit).free
	for range 2 { // two bodies being answered, 10 units each: 80 free
		if err := r.reserve(context.Background(), 10*reserveUnit); err != nil {
			t.Fatal(err)
		}
	}
	first := make(chan error, 1)
	go func() { first <- r.reserve(context.Background(), 85*reserveUnit) }() // lacks 5
	waitUntil(func() bool { _, waiting := r.state(); return waiting == 1 })
	r.mu.Lock()
	r.pace, r.measured = 10*reserveUnit, time.Now() // 10 units a second, lately
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	time.AfterFunc(100*time.Millisecond, func() { r.release(20 * reserveUnit) })
	var long *errLongQueue
	if err := r.reserve(ctx, 10*reserveUnit); errors.As(err, &long) {
		t.Errorf("behind a line lacking 5 units and lacking 10 itself, 1.5 s at the pace, with 3 s left: refused at once: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// TestOldPaceOfAStuckLine: a pace measured longer than paceKept ago still
// refuses at once while bodies have waited a second or more since with
// no room coming back, which measures nothing new: that line is the one
// a long queue is refused for.
func TestOldPaceOfAStuckLine(t *testing.T) {
	r, ahead := behindOneWaiting(t)
	r.mu.Lock()
	r.pace, r.measured = 10*reserveUnit, time.Now().Add(-paceKept-time.Second)
	r.waitedSince = time.Now().Add(-2 * time.Second) // waiting for 2 s, nothing back
	r.lineSince = r.waitedSince
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var long *errLongQueue
	if err := r.reserve(ctx, 10*reserveUnit); !errors.As(err, &long) {
		t.Errorf("behind a line stuck for 2 s, judged by a pace of %s ago: got %v, want it refused at once as a long queue", paceKept+time.Second, err)
	}
	r.release(100 * reserveUnit)
	if err := <-ahead; err != nil {
		t.Fatal(err)
	}
}

// TestPaceIsOfTheLine: the pace that refuses a body at once is measured
// only while bodies wait: room held for a second that no body waited for
// is not a slow line. (With the pace measured from the last time the line
// was empty, 128 connections of 1 MB reviews, which the webhook answers in
// time, were refused at four in five.)
func TestPaceIsOfTheLine(t *testing.T) {
	r := &NewBudget(2 * reserveUnit).free
	if err := r.reserve(context.Background(), 2*reserveUnit); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // held, and none waiting
	second := make(chan error, 1)
	go func() { second <- r.reserve(context.Background(), 2*reserveUnit) }()
	waitUntil(func() bool { _, waiting := r.state(); return waiting == 1 })
	r.release(2 * reserveUnit) // the line moves at once
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	third := make(chan error, 1)
	go func() { third <- r.reserve(context.Background(), 2*reserveUnit) }()
	waitUntil(func() bool { _, waiting := r.state(); return waiting == 1 })
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var long *errLongQueue
	if err := r.reserve(short, reserveUnit); errors.As(err, &long) {
		t.Errorf("behind a line that has not waited a second: got %v, want it to wait, not a long queue", err)
	}
	r.release(2 * reserveUnit)
	if err := <-third; err != nil {
		t.Fatal(err)
	}
}

// TestOneSlowSecondRefusesNone: a body is refused at once only when
// neither of the last two seconds' paces could give it its room in time,
// so that one slow second (a collection, a neighbour's burst) does not
// refuse a line the webhook serves in time. (Judged by the last second
// alone, 192 connections of 2 MB reviews with 10 s deadlines, served in
// at most 6.2 s, had 53 of about 700 refused.)
func TestOneSlowSecondRefusesNone(t *testing.T) {
	r := &NewBudget(1000 * reserveUnit).free
	if err := r.reserve(context.Background(), 1000*reserveUnit); err != nil {
		t.Fatal(err)
	}
	second := func(units int64) { // a whole second of waiting in which units came back
		r.mu.Lock()
		r.wanted, r.waitedSince = 100*reserveUnit, time.Now().Add(-time.Second)
		r.mu.Unlock()
		r.release(units * reserveUnit)
	}
	second(100) // 100 units a second
	second(10)  // then a slow second: 10

	// 100 units ahead and 10 of its own: 1.1 s at the fast pace, 11 s at
	// the slow one.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := r.reserve(ctx, 10*reserveUnit); err != nil {
		t.Errorf("behind 1.1 s of waiting at the pace of the second before, with 3 s left: got %v, want its room", err)
	}

	second(10) // two slow seconds: the line is slow
	// and lacks all it wants: none is free, as in a line that took it.
	for len(r.tokens) > 0 {
		<-r.tokens
	}
	var long *errLongQueue
	if err := r.reserve(ctx, 10*reserveUnit); !errors.As(err, &long) {
		t.Errorf("behind 11 s of waiting at the last two seconds' pace, with 3 s left: got %v, want it refused at once as a long queue", err)
	}
}
