package review

// Reviewing the objects of the input as they are read, on every CPU, and
// writing each verdict in the input's order as soon as it and those before
// it are done, so that a large List's first verdict comes before its last
// object is read, in memory bounded by the largest object and what is
// read ahead of the verdict written (maxAheadBytes).

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
)

const (
	// maxAheadBytes bounds the text of the units read ahead of the one the
	// writer waits for, and so what they hold once reviewed: while one
	// large object is reviewed the other workers go on with the small ones
	// after it. One unit larger than the bound is still read, alone.
	maxAheadBytes = 8 << 20

	// maxAheadUnits bounds their number, for inputs of many tiny units.
	maxAheadUnits = 4096
)

// window is how much of the input is read ahead of what was written:
// units and their bytes.
type window struct {
	mu    sync.Mutex
	cond  *sync.Cond
	bytes int64
	units int
}

func newWindow() *window {
	w := &window{}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// take waits until n more bytes fit, or nothing is held.
func (w *window) take(n int64) {
	w.mu.Lock()
	for w.units > 0 && (w.bytes+n > maxAheadBytes || w.units >= maxAheadUnits) {
		w.cond.Wait()
	}
	w.bytes += n
	w.units++
	w.mu.Unlock()
}

// give gives n bytes back.
func (w *window) give(n int64) {
	w.mu.Lock()
	w.bytes -= n
	w.units--
	w.mu.Unlock()
	w.cond.Signal()
}

// reviewedUnit is what came of one unit: its verdicts, and what could not
// be read; or that it holds nothing.
type reviewedUnit struct {
	results []result
	empty   string
	source  string
}

// run reviews every object of in and writes what the apiserver would do
// with each. It stops when ctx is done, writing what was done before.
func (r *reviewer) run(ctx context.Context, in *inputs, stdout, stderr io.Writer) error {
	w := newWriter(stdout, stderr, r.o, r.op, in)
	workers := runtime.GOMAXPROCS(0)
	type job struct {
		u    unit
		done chan reviewedUnit
	}
	work := make(chan job, maxAheadUnits)
	ordered := make(chan job, maxAheadUnits)
	ahead := newWindow()
	for range workers {
		go func() {
			for j := range work {
				j.done <- r.reviewUnit(ctx, j.u)
			}
		}()
	}
	var readErr error
	go func() {
		defer close(ordered)
		defer close(work)
		readErr = in.each(func(u unit) {
			ahead.take(int64(len(u.raw)))
			j := job{u: u, done: make(chan reviewedUnit, 1)}
			ordered <- j
			work <- j
		}, func() bool { return ctx.Err() != nil })
	}()
	w.begin()
	for j := range ordered {
		out := <-j.done
		ahead.give(int64(len(j.u.raw)))
		if ctx.Err() != nil {
			continue // interrupted: what is done after the signal is not said
		}
		if out.empty != "" {
			w.empty(out.source, out.empty)
		}
		read := len(j.u.raw)
		for _, res := range out.results {
			if err := w.write(res, read); err != nil {
				return err
			}
			read = 0
		}
	}
	if readErr != nil {
		return usageError("%v", readErr)
	}
	return w.end(ctx)
}

// reviewUnit reads a unit and reviews what it holds.
func (r *reviewer) reviewUnit(ctx context.Context, u unit) reviewedUnit {
	out := reviewedUnit{source: u.source, empty: u.empty}
	if ctx.Err() != nil {
		return out
	}
	objs, bad, empty := parseUnitOrEmpty(u)
	out.empty = empty
	for _, b := range bad {
		out.results = append(out.results, result{Source: b.source, Verdict: "error", Error: b.err.Error(), unreadable: true})
	}
	for i := range objs {
		out.results = append(out.results, r.review(ctx, &objs[i]))
	}
	if len(bad) > 0 && len(objs) > 0 {
		// A List read whole: its items in order, whatever could not be
		// read among them.
		sortBySource(out.results)
	}
	return out
}

// sortBySource orders the results of a List's items by their index.
func sortBySource(results []result) {
	index := func(s string) int {
		var n int
		for i := len(s) - 1; i >= 0; i-- {
			if s[i] == '[' {
				fmt.Sscanf(s[i:], "[%d]", &n)
				return n
			}
		}
		return 0
	}
	for i := 1; i < len(results); i++ {
		for j := i; j > 0 && index(results[j].Source) < index(results[j-1].Source); j-- {
			results[j], results[j-1] = results[j-1], results[j]
		}
	}
}
