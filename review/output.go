package review

// Writing the verdicts as they come: a line each and a summary, or -o
// json's array; and -v's diffs.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

// writer writes the results of a review of manifests, in order, and the
// exit status they make: a line each (text), or the elements of one array
// (json, yaml), or a JUnit report at the end (junit); the summary goes to
// stderr in every format.
type writer struct {
	w, stderr io.Writer
	o         options
	op        admissionv1.Operation
	elements  *elements    // json and yaml
	junit     *junitReport // junit
	progress  *progress    // on a terminal
	input     *inputs      // for progress: how much there is to read

	written    int // results counted as reviewed
	shown      int // results written out
	counts     map[string]int
	unreadable bool // a document could not be read
	failed     bool // an object is denied, errors, …
	unknown    bool // a verdict is not known
	empties    int
	skipped    int // documents -skip-kind left out
	readBytes  int64
}

func newWriter(stdout, stderr io.Writer, o options, op admissionv1.Operation, in *inputs) *writer {
	w := &writer{w: stdout, stderr: stderr, o: o, op: op, counts: map[string]int{}, input: in, progress: newProgress(stderr)}
	switch o.output {
	case "json", "yaml":
		w.elements = newElements(stdout, o.output)
	case "junit":
		w.junit = &junitReport{name: "webhook review"}
	}
	return w
}

// begin writes what comes before the first result: the request's
// operation and user, on stderr as the summary.
func (w *writer) begin() {
	if w.elements != nil {
		w.elements.begin()
	}
	what := string(w.op)
	if w.o.subresource != "" {
		what += " " + w.o.subresource
	}
	if w.op == admissionv1.Connect && w.o.connectQuery != "" {
		what += "?" + w.o.connectQuery
	}
	fmt.Fprintf(w.stderr, "%s as user %s, groups %s\n", what, w.o.user, strings.Join(w.o.groups, ", "))
}

// empty says that a file or a List holds no object.
func (w *writer) empty(source, what string) {
	w.empties++
	if w.o.output == "text" && !w.o.quiet {
		fmt.Fprintf(w.w, "%s: no object: %s\n", source, what)
	}
}

// failing reports whether a result is one -q writes: one that is not
// admitted, or cannot be read.
func failing(r result) bool {
	return r.failed() || r.unreadable || r.Verdict == "unknown"
}

// write writes one result.
func (w *writer) write(r result, readBytes int) error {
	w.readBytes += int64(readBytes)
	line, label := describe(r)
	if r.Verdict == "skipped" {
		w.skipped++
	} else {
		w.written++
		w.counts[label]++
	}
	w.progress.show(w.progressLine)
	w.unreadable = w.unreadable || r.unreadable
	w.failed = w.failed || (r.failed() && !r.unreadable)
	w.unknown = w.unknown || r.Verdict == "unknown"
	if w.o.quiet && !failing(r) {
		return nil
	}
	w.shown++
	switch {
	case w.elements != nil:
		return w.elements.add(r)
	case w.junit != nil:
		w.junit.add(r.Source, line, label, r)
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n", r.Source, line)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	if w.o.verbose && r.Mutate != nil && string(r.Mutate.Patch) != "[]" {
		context := diffContext
		if r.Kind == "Secret" {
			context = 0 // a line beside a change may be its data
		}
		for _, l := range diffLines(r.before, r.after, context) {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	_, err := io.WriteString(w.w, b.String())
	return err
}

// progressLine is how far the review has come, for a terminal.
func (w *writer) progressLine() string {
	line := fmt.Sprintf("reviewing: %d objects, %.1f MiB", w.written+w.skipped, float64(w.readBytes)/(1<<20))
	if w.input != nil && w.input.bytes > 0 {
		line += fmt.Sprintf(" of %.1f MiB (%.0f %%)", float64(w.input.bytes)/(1<<20), 100*float64(w.readBytes)/float64(w.input.bytes))
	}
	return line + fmt.Sprintf(", %.0f objects/s", float64(w.written+w.skipped)/time.Since(w.progress.start).Seconds())
}

// end writes what closes the output and the summary, on stderr, and
// returns the exit status the results make: 2 when a document could not
// be read, 1 when one is refused, 3 when nothing was reviewed or a
// verdict is not known; 130 when ctx was cancelled, by a signal, before
// the end.
func (w *writer) end(ctx context.Context) error {
	w.progress.done()
	interrupted := ctx.Err() != nil
	switch {
	case w.elements != nil:
		if err := w.elements.end(); err != nil {
			return err
		}
	case w.junit != nil:
		if err := w.junit.write(w.w); err != nil {
			return err
		}
	}
	summary := w.stderr
	skipped := ""
	if n := w.skipped + len(w.input.skippedFiles); n > 0 {
		skipped = fmt.Sprintf("; skipped: %s by -skip-file, %s by -skip-kind", count(len(w.input.skippedFiles), "file"), count(w.skipped, "document"))
	}
	switch {
	case interrupted:
		fmt.Fprintf(summary, "interrupted (%v): %d reviewed before it; the rest of the input was not read\n", context.Cause(ctx), w.written)
	case w.written == 0:
		fmt.Fprintf(summary, "0 reviewed: the input holds no object to review%s\n", skipped)
	}
	var parts []string
	for _, label := range []string{"admitted", "patched", "warned", "allowed", "no-opinion", "denied", "not idempotent", "differs on dry run", "unknown", "error"} {
		if w.counts[label] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", w.counts[label], label))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(summary, "%d reviewed: %s%s\n", w.written, strings.Join(parts, ", "), skipped)
	}
	if w.o.quiet && w.shown < w.written+w.skipped {
		fmt.Fprintf(summary, "-q: %d written, %d that pass left out\n", w.shown, w.written+w.skipped-w.shown)
	}
	switch {
	case interrupted:
		return &ExitError{Code: exitInterrupted}
	case w.unreadable:
		return &ExitError{Code: exitUsage}
	case w.failed:
		return &ExitError{Code: exitRefused}
	case w.written == 0 || w.unknown:
		return &ExitError{Code: exitUnknown}
	}
	return nil
}

// describe is a result's line, and the word it is counted under.
func describe(r result) (line, label string) {
	what := r.Kind
	if r.Name != "" {
		what += " " + qualified(r.Namespace, r.Name)
	}
	if r.Subresource != "" {
		what += ", " + r.Subresource
	}
	if what != "" {
		what += ": "
	}
	switch {
	case r.Verdict == "error":
		return what + "error: " + r.Error, "error"
	case r.Verdict == "skipped":
		return what + "skipped: " + r.Reason, "skipped"
	case r.Verdict == "unknown":
		return what + "unknown: " + r.Unknown, "unknown"
	case r.Kind == "SubjectAccessReview":
		if r.Reason != "" {
			return what + r.Verdict + ": " + r.Reason, r.Verdict
		}
		return what + r.Verdict, r.Verdict
	case r.Verdict == "denied":
		return what + "denied: " + r.Validate.Message, "denied"
	}
	var words []string
	label = "admitted"
	if r.Mutate != nil && string(r.Mutate.Patch) != "[]" {
		var ops []json.RawMessage
		_ = json.Unmarshal(r.Mutate.Patch, &ops)
		noun := "operations"
		if len(ops) == 1 {
			noun = "operation"
		}
		words = append(words, fmt.Sprintf("patched (%d %s)", len(ops), noun))
		label = "patched"
	}
	var warnings []string
	if r.Mutate != nil {
		warnings = append(warnings, r.Mutate.Warnings...)
	}
	if r.Validate != nil {
		warnings = append(warnings, r.Validate.Warnings...)
	}
	if len(warnings) > 0 {
		words = append(words, "warned: "+strings.Join(warnings, "; "))
		label = "warned"
	}
	if len(words) == 0 {
		words = []string{"admitted"}
	}
	if r.Mutate != nil && !r.Mutate.Idempotent {
		words = append(words, "not idempotent: /mutate patches its own result again")
		label = "not idempotent"
	}
	if r.DryRunSame != nil && !*r.DryRunSame {
		words = append(words, "differs on dry run: dryRun: true gets another answer")
		label = "differs on dry run"
	}
	return what + strings.Join(words, "; "), label
}

const (
	// diffContext is how many unchanged lines -v shows around each
	// change, as diff -U2 does: enough to say where a line was added.
	diffContext = 2

	// maxDiffEdits bounds the lines -v's diff adds and removes: it finds
	// them in memory that grows as their square (Myers' algorithm keeps a
	// row per edit), 4 MiB at this bound, however large the object. A
	// patch that changes more is not shown as a diff; -o json has it.
	maxDiffEdits = 1000
)

// diffLines is a line diff of two JSON documents, indented: "-" lines the
// patch removed, "+" lines it added, as diff -u shows them, each change
// with up to context unchanged lines around it, and "  ..." where
// unchanged lines are left out between them.
func diffLines(before, after json.RawMessage, context int) []string {
	a, b := indentLines(before), indentLines(after)
	all, ok := editScript(a, b)
	if !ok {
		return []string{fmt.Sprintf("(the patch changes more than %d lines: not shown; -o json has it)", maxDiffEdits)}
	}
	shown := make([]bool, len(all))
	for k, line := range all {
		if line[0] != ' ' {
			for c := max(0, k-context); c <= min(len(all)-1, k+context); c++ {
				shown[c] = true
			}
		}
	}
	var out []string
	for k, line := range all {
		switch {
		case shown[k]:
			out = append(out, line)
		case len(out) > 0 && k+1 < len(all) && shown[k+1]:
			out = append(out, "  ...")
		}
	}
	return out
}

// editScript is every line of a and b, marked "  " when in both, "- "
// when only in a and "+ " when only in b, the removed before the added as
// diff -u has them: a shortest edit script, by Myers' algorithm ("An
// O(ND) Difference Algorithm", 1986), after the lines a and b begin and
// end with alike. It reports false when more than maxDiffEdits lines
// differ.
func editScript(a, b []string) ([]string, bool) {
	prefix := 0
	for prefix < len(a) && prefix < len(b) && a[prefix] == b[prefix] {
		prefix++
	}
	suffix := 0
	for suffix < len(a)-prefix && suffix < len(b)-prefix && a[len(a)-1-suffix] == b[len(b)-1-suffix] {
		suffix++
	}
	var all []string
	for _, l := range a[:prefix] {
		all = append(all, "  "+l)
	}
	middle, ok := myers(a[prefix:len(a)-suffix], b[prefix:len(b)-suffix])
	if !ok {
		return nil, false
	}
	all = append(all, middle...)
	for _, l := range a[len(a)-suffix:] {
		all = append(all, "  "+l)
	}
	return all, true
}

// myers is editScript of a and b without their common ends.
func myers(a, b []string) ([]string, bool) {
	n, m := len(a), len(b)
	offset := n + m + 1
	// trace[d] is the furthest x reached on each diagonal k in [-d, d]
	// after d edits, at trace[d][k+d].
	var trace [][]int32
	v := make([]int32, 2*offset+1) // furthest x on diagonal k, at v[k+offset]
	found := -1
	for d := 0; d <= n+m && d <= maxDiffEdits; d++ {
		for k := -d; k <= d; k += 2 {
			var x int32
			if k == -d || (k != d && v[k-1+offset] < v[k+1+offset]) {
				x = v[k+1+offset] // down: an added line
			} else {
				x = v[k-1+offset] + 1 // right: a removed line
			}
			y := x - int32(k)
			for int(x) < n && int(y) < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[k+offset] = x
			if int(x) >= n && int(y) >= m {
				found = d
			}
		}
		row := make([]int32, 2*d+1)
		for k := -d; k <= d; k++ {
			row[k+d] = v[k+offset]
		}
		trace = append(trace, row)
		if found >= 0 {
			break
		}
	}
	if found < 0 {
		return nil, false
	}
	// Walk back from the end: at each edit, the alike lines after it, then
	// the edit, from the point the step before reached.
	var rev []string
	x, y := int32(n), int32(m)
	for d := found; d > 0; d-- {
		prev := trace[d-1] // after d-1 edits, diagonals -(d-1) to d-1
		at := func(k int) int32 { return prev[k+d-1] }
		k := int(x - y)
		prevK := k - 1
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			prevK = k + 1
		}
		prevX := at(prevK)
		prevY := prevX - int32(prevK)
		for x > prevX && y > prevY {
			x, y = x-1, y-1
			rev = append(rev, "  "+a[x])
		}
		if x == prevX {
			rev = append(rev, "+ "+b[prevY]) // down: b's line added
		} else {
			rev = append(rev, "- "+a[prevX]) // right: a's line removed
		}
		x, y = prevX, prevY
	}
	for x > 0 && y > 0 {
		x, y = x-1, y-1
		rev = append(rev, "  "+a[x])
	}
	out := make([]string, 0, len(rev))
	for i := len(rev) - 1; i >= 0; i-- {
		out = append(out, rev[i])
	}
	return removedFirst(out), true
}

// removedFirst moves, in each run of changed lines, the removed lines
// before the added ones, as diff -u writes them.
func removedFirst(lines []string) []string {
	for i := 0; i < len(lines); {
		if lines[i][0] == ' ' {
			i++
			continue
		}
		j := i
		for j < len(lines) && lines[j][0] != ' ' {
			j++
		}
		var removed, added []string
		for _, l := range lines[i:j] {
			if l[0] == '-' {
				removed = append(removed, l)
			} else {
				added = append(added, l)
			}
		}
		copy(lines[i:], append(removed, added...))
		i = j
	}
	return lines
}

func indentLines(doc json.RawMessage) []string {
	var v any
	if json.Unmarshal(doc, &v) != nil {
		return nil
	}
	out, _ := json.MarshalIndent(v, "", "  ")
	return strings.Split(string(out), "\n")
}
