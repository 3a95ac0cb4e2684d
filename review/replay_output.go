package review

// Running a replay and saying what it found: a line per request worth a
// look (every one with -v), or -o json's array, written as the log is
// read, and a summary that names what would now be refused.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"time"
)

const (
	// maxListedRefusals bounds the requests the summary names one by one:
	// each has its line above, or its element in -o json.
	maxListedRefusals = 200

	// maxListedUnreadable bounds the unreadable lines the summary names.
	maxListedUnreadable = 20

	// progressEvery is how often, at most, progress is written to a
	// terminal.
	progressEvery = time.Second

	// replayMemoryBytes is, beside -audit-cache-bytes, the Go runtime's
	// soft memory limit in a replay: the events being replayed (a line is
	// at most maxEventBytes, typically a few KB), the requests waiting for
	// their ResponseComplete, the Namespaces' labels, and the reviews in
	// flight, a few MiB in all. The kernel counts the binary's own pages
	// beside it (bench/README.md measures a million events' peak).
	replayMemoryBytes = 16 << 20
)

// replaySummary is what the summary reports.
type replaySummary struct {
	events, unreadableCount int
	unreadable              []string
	admission               map[string]int // by describe's label
	notReviewed, notSent    int
	agree, disagree         int
	notCompared             int // refused then before the webhooks, or no response: nothing to compare
	// cannotCompare are the writes whose verdict then and now cannot be
	// compared, for what the log does not hold: verdictUnknown of them
	// because the verdict now depends on it (a namespace's labels), the
	// rest for an unknown oldObject.
	cannotCompare, verdictUnknown int
	interrupted                   error
	authorization                 map[string]int // by verdict
	authorizationNotSent          map[string]int // by reason
	refusals                      []string
	refusalCount                  int
	changes                       map[string]int
	oldFound, oldUnknown          int
	oldDropped                    int
	earlierStage                  int
	failed                        bool
	// labelsBy counts the requests a namespace's labels decided, by what
	// decided them (decided.by's first words), other than the labels
	// the log stored.
	labelsBy map[string]int
	// labelsBeforeWrite names the writes of a Namespace after requests
	// whose verdicts its labels from -namespaces decided.
	labelsBeforeWrite []string
}

// replayAuditLogs is `webhook review -audit-log`.
func replayAuditLogs(ctx context.Context, r *reviewer, o options, stdin io.Reader, stdout, stderr io.Writer) error {
	if os.Getenv("GOMEMLIMIT") == "" {
		// What a replay holds is the cache, and a few events: collect
		// before the heap grows to twice the cache (GOGC), so that the
		// process stays within the cache's bytes and replayMemoryBytes.
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(o.auditCacheBytes + replayMemoryBytes))
	}
	p := newReplayer(r, o.auditCacheBytes)
	p.sum.admission, p.sum.authorization, p.sum.authorizationNotSent, p.sum.changes = map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	p.sum.labelsBy = map[string]int{}
	out := &replayOutput{w: stdout, verbose: o.verbose, quiet: o.quiet}
	switch o.output {
	case "json", "yaml":
		out.elements = newElements(stdout, o.output)
	case "junit":
		out.junit = &junitReport{name: "webhook review -audit-log"}
	}
	progress := newReplayProgress(stderr)
	var werr error
	write := func(res replayResult) {
		if werr == nil {
			werr = out.write(res)
		}
	}
	c := newCompleter(func(at logLine, e *auditEvent) {
		res := p.replay(ctx, at, e)
		p.tally(res)
		write(res)
	})
	out.begin()
	readAuditLogs(ctx, o.auditLogs, stdin, func(at logLine, e *auditEvent, err error) {
		progress.event()
		if err != nil {
			p.sum.unreadableCount++
			if len(p.sum.unreadable) < maxListedUnreadable {
				p.sum.unreadable = append(p.sum.unreadable, fmt.Sprintf("%s: %v", at, err))
			}
			write(replayResult{Source: at.String(), Error: err.Error()})
			return
		}
		c.add(at, e)
	}, progress.read)
	if ctx.Err() != nil {
		// Stopped by a signal: what waits for its ResponseComplete is not
		// replayed.
		p.sum.interrupted = context.Cause(ctx)
	} else {
		c.flush()
	}
	progress.done()
	if werr != nil {
		return werr
	}
	if err := out.end(); err != nil {
		return err
	}
	p.writeSummary(stderr, o)
	switch {
	case p.sum.interrupted != nil:
		return &ExitError{Code: exitInterrupted}
	case p.sum.unreadableCount > 0:
		return &ExitError{Code: exitUsage}
	case p.sum.failed:
		return &ExitError{Code: exitRefused}
	case p.sum.cannotCompare > 0:
		return &ExitError{Code: exitUnknown}
	}
	return nil
}

// tally counts one result in the summary.
func (p *replayer) tally(res replayResult) {
	s := &p.sum
	s.events++
	if res.Stage != "" {
		s.earlierStage++
	}
	if a := res.Admission; a != nil {
		if len(a.Webhooks) == 0 && p.hooks != nil {
			s.notSent++
		} else {
			_, label := describe(*a)
			s.admission[label]++
		}
	}
	if az := res.Authorization; az != nil {
		if az.NotSent != "" {
			s.authorizationNotSent[az.NotSent]++
		} else {
			s.authorization[az.Verdict]++
		}
	}
	for _, c := range res.Changes {
		s.changes[c]++
		if refusing(c) {
			s.failed = true
		}
	}
	if res.Admission != nil && res.Admission.Verdict == "error" {
		s.failed = true
	}
	if res.Authorization != nil && res.Authorization.Verdict == "error" {
		s.failed = true
	}
	if az := res.CreateAuthorization; az != nil {
		s.authorization[az.Verdict]++
		s.failed = s.failed || az.Verdict == "error"
	}
	if slices.Contains(res.Changes, changeRefused) || slices.Contains(res.Changes, changeAuthzRefused) || slices.Contains(res.Changes, changeErrors) {
		s.refusalCount++
		if len(s.refusals) < maxListedRefusals {
			s.refusals = append(s.refusals, refusalLine(res))
		}
	}
}

// refusalLine names a request that would now be refused, and why.
func refusalLine(res replayResult) string {
	var why []string
	if slices.Contains(res.Changes, changeRefused) && res.Admission.Validate != nil {
		why = append(why, "admission: "+res.Admission.Validate.Message)
	}
	if slices.Contains(res.Changes, changeErrors) {
		why = append(why, "admission: the webhook errors: "+res.Admission.Error)
	}
	if slices.Contains(res.Changes, changeAuthzRefused) {
		for _, az := range []*authorizationResult{res.Authorization, res.CreateAuthorization} {
			if az != nil && az.Verdict == "denied" {
				why = append(why, "authorization: "+cmpOr(az.Reason, "denied"))
			}
		}
	}
	return fmt.Sprintf("%s %s: %s", res.Source, requestWords(res), strings.Join(why, "; "))
}

// requestWords says who did what: "alice create deployments shop/web".
func requestWords(res replayResult) string {
	what := res.Path
	if res.Resource != "" {
		what = res.Resource
		if res.Subresource != "" {
			what += "/" + res.Subresource
		}
		switch {
		case res.Name != "":
			what += " " + qualified(res.Namespace, res.Name)
		case res.Namespace != "":
			what += " in " + res.Namespace
		}
	}
	user := cmpOr(res.User, "(no user)")
	if res.ImpersonatedBy != "" {
		user += " (impersonated by " + res.ImpersonatedBy + ")"
	}
	dry := ""
	if res.DryRun {
		dry = " (dry run)"
	}
	return fmt.Sprintf("%s %s %s%s", user, res.Verb, what, dry)
}

// replayOutput writes results as they come: text lines, or the elements
// of one array (json, yaml); or a JUnit report at the end.
type replayOutput struct {
	w              io.Writer
	verbose, quiet bool
	elements       *elements
	junit          *junitReport
	written        int
}

func (o *replayOutput) begin() {
	if o.elements != nil {
		o.elements.begin()
	}
}

func (o *replayOutput) end() error {
	switch {
	case o.elements != nil:
		return o.elements.end()
	case o.junit != nil:
		return o.junit.write(o.w)
	}
	return nil
}

// failingRequest reports whether a result is one -q writes: a line that
// could not be read, a change, or an error.
func failingRequest(res replayResult) bool {
	return res.Error != "" || len(res.Changes) > 0 || (res.Admission != nil && res.Admission.Verdict == "error") ||
		(res.Authorization != nil && res.Authorization.Verdict == "error")
}

func (o *replayOutput) write(res replayResult) error {
	if o.quiet && !failingRequest(res) {
		return nil
	}
	if o.elements != nil {
		return o.elements.addIndented(res, false)
	}
	if !o.verbose && !worthALine(res) {
		return nil
	}
	o.written++
	if o.junit != nil {
		line := res.Error
		if line == "" {
			line = requestWords(res) + ": " + strings.Join(verdictWords(res), "; ")
		}
		outcome := ""
		switch {
		case res.Error != "" || (res.Admission != nil && res.Admission.Verdict == "error"):
			outcome = "error"
		case slices.ContainsFunc(res.Changes, refusing):
			outcome = "failure"
		case slices.Contains(res.Changes, changeNotKnown):
			outcome = "skipped"
		}
		var changes []string
		for _, c := range res.Changes {
			changes = append(changes, changeWords(c, res))
		}
		o.junit.addCase(res.Source, line, strings.Join(res.Changes, ","), outcome, strings.Join(changes, "\n"))
		return nil
	}
	var b strings.Builder
	if res.Error != "" {
		fmt.Fprintf(&b, "%s: error: %s\n", res.Source, res.Error)
		_, err := io.WriteString(o.w, b.String())
		return err
	}
	fmt.Fprintf(&b, "%s: %s: %s\n", res.Source, requestWords(res), strings.Join(verdictWords(res), "; "))
	for _, c := range res.Changes {
		fmt.Fprintf(&b, "  %s\n", changeWords(c, res))
	}
	if res.Object != "" {
		fmt.Fprintf(&b, "  note: object: %s\n", res.Object)
	}
	if res.OldObject != "" && res.Admission != nil {
		old := res.OldObject
		if !strings.HasPrefix(old, "unknown") {
			old = "as stored at " + old
		}
		fmt.Fprintf(&b, "  note: oldObject: %s\n", old)
	}
	if res.NamespaceLabels != "" && res.Admission != nil {
		fmt.Fprintf(&b, "  note: namespace labels: %s\n", res.NamespaceLabels)
	}
	if a := res.Admission; a != nil {
		for _, n := range a.Notes {
			fmt.Fprintf(&b, "  note: %s\n", n)
		}
		if o.verbose && a.Mutate != nil {
			var ops []struct{ Op, Path, From string }
			_ = json.Unmarshal(a.Mutate.Patch, &ops)
			for _, op := range ops {
				from := ""
				if op.From != "" {
					from = " from " + op.From
				}
				fmt.Fprintf(&b, "  patch: %s %s%s (value not shown)\n", op.Op, op.Path, from)
			}
		}
	}
	if res.Stage != "" {
		fmt.Fprintf(&b, "  note: the log has no ResponseComplete event of this request: replayed from its %s\n", res.Stage)
	}
	_, err := io.WriteString(o.w, b.String())
	return err
}

// worthALine reports whether a result has something to say without -v: an
// unreadable line, a write the webhook is sent or that could not be
// reviewed, an opinion of /authorize, or a change.
func worthALine(res replayResult) bool {
	a, az := res.Admission, res.Authorization
	return res.Error != "" || res.NotReviewed != "" || len(res.Changes) > 0 ||
		(a != nil && (len(a.Webhooks) > 0 || a.Verdict != "admitted" || a.Mutate != nil || a.Validate != nil)) ||
		(az != nil && (az.Verdict == "denied" || az.Verdict == "allowed" || az.Verdict == "error")) ||
		(res.CreateAuthorization != nil && res.CreateAuthorization.Verdict != "no-opinion")
}

// verdictWords are what the policy decides now, beside what happened then.
func verdictWords(res replayResult) []string {
	var words []string
	t := res.Then
	if a := res.Admission; a != nil {
		bare := *a
		bare.Kind, bare.Namespace, bare.Name = "", "", ""
		line, _ := describe(bare)
		if line == "admitted" && slices.ContainsFunc(a.Notes, func(n string) bool { return strings.HasPrefix(n, "no webhook of -config matches it") }) {
			line = "not sent to the webhook"
		}
		words = append(words, line+thenAdmissionWords(t))
	}
	if res.NotReviewed != "" {
		words = append(words, "not reviewed: "+res.NotReviewed+thenAdmissionWords(t))
	}
	if az := res.Authorization; az != nil {
		switch {
		case az.NotSent != "":
			if len(words) == 0 {
				words = append(words, "authorization not sent: "+az.NotSent)
			}
		case az.Error != "":
			words = append(words, "authorization error: "+az.Error)
		default:
			w := "authorization " + az.Verdict
			if az.Reason != "" {
				w += ": " + az.Reason
			}
			if t.Authorization != "" {
				w += " (then " + t.Authorization + ")"
			}
			words = append(words, w)
		}
	}
	if az := res.CreateAuthorization; az != nil {
		w := "authorization of the create it made " + az.Verdict
		if az.Reason != "" {
			w += ": " + az.Reason
		}
		words = append(words, w)
	}
	return words
}

func thenAdmissionWords(t *thenResult) string {
	switch t.Admission {
	case "admitted":
		s := fmt.Sprintf(" (then %d", t.Code)
		if len(t.PatchedBy) > 0 {
			s += ", patched by " + strings.Join(t.PatchedBy, ", ")
		}
		for k, v := range t.AuditAnnotations {
			s += fmt.Sprintf(", audit annotation %s: %s", k, v)
		}
		return s + ")"
	case "denied":
		if t.Message != "" {
			return fmt.Sprintf(" (then %d, denied by %s: %s)", t.Code, t.DeniedBy, t.Message)
		}
		return fmt.Sprintf(" (then %d, denied by %s)", t.Code, t.DeniedBy)
	case "failed":
		return fmt.Sprintf(" (then %d, the call to %s failed)", t.Code, t.DeniedBy)
	case "refused":
		return fmt.Sprintf(" (then %d, refused %s)", t.Code, t.Reason)
	}
	return " (then: no response in the log)"
}

// changeWords says a change on its own line.
func changeWords(c string, res replayResult) string {
	switch c {
	case changeRefused:
		return "WOULD NOW BE REFUSED: admitted then, denied now"
	case changeErrors:
		return "WOULD NOW BE REFUSED under failurePolicy Fail: admitted then, the webhook errors now"
	case changeAuthzRefused:
		return "WOULD NOW BE REFUSED: authorized then, /authorize denies it now"
	case changeAdmitted:
		return "would now be admitted: denied then by " + res.Then.DeniedBy
	case changeMessage:
		return "denied then and now, with another message"
	case changePatched:
		return "patched now, not then"
	case changeUnpatched:
		return "patched then, not now"
	case changeAuthzAllowed:
		return "would now be allowed by /authorize: refused then"
	case changeNotIdempotentNow:
		return "not idempotent: /mutate patches its own result again"
	}
	return c
}

// writeSummary writes the summary.
func (p *replayer) writeSummary(w io.Writer, o options) {
	s := &p.sum
	fmt.Fprintf(w, "replayed %d requests from %s\n", s.events, strings.Join(o.auditLogs, ", "))
	if s.interrupted != nil {
		fmt.Fprintf(w, "interrupted (%v): the rest of the log was not read, nor the requests still waiting for their ResponseComplete\n", s.interrupted)
	}
	reviewed := 0
	for _, n := range s.admission {
		reviewed += n
	}
	fmt.Fprintf(w, "admission: %d reviewed%s; %d not reviewed; %d not sent to the webhook\n", reviewed, counted(s.admission,
		"admitted", "patched", "warned", "denied", "not idempotent", "error"), s.notReviewed, s.notSent)
	fmt.Fprintf(w, "  agrees with the log on %d, differs on %d; %d cannot be compared (%d whose verdict now depends on what the log does not hold, %d whose oldObject it does not hold); %d not compared (refused then before or beside the webhook, or no response)\n",
		s.agree, s.disagree, s.cannotCompare, s.verdictUnknown, s.cannotCompare-s.verdictUnknown, s.notCompared)
	fmt.Fprintf(w, "  oldObject: %d found in the log, %d not in it, %d dropped from the cache\n", s.oldFound, s.oldUnknown, s.oldDropped)
	if len(s.labelsBy) > 0 {
		fmt.Fprintf(w, "  namespaceSelectors that read labels the log did not store: %d decided by the log's evidence of the call, %d by -namespaces\n", s.labelsBy["the log's evidence"], s.labelsBy["-namespaces"])
	}
	for _, l := range s.labelsBeforeWrite {
		fmt.Fprintf(w, "  note: %s\n", l)
	}
	sent := 0
	for _, n := range s.authorization {
		sent += n
	}
	notSent := 0
	var reasons []string
	for reason, n := range s.authorizationNotSent {
		notSent += n
		reasons = append(reasons, fmt.Sprintf("%d %s", n, reason))
	}
	sort.Strings(reasons)
	fmt.Fprintf(w, "authorization: %d SubjectAccessReviews%s; %d not sent", sent, counted(s.authorization, "allowed", "no-opinion", "denied", "error"), notSent)
	if len(reasons) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(reasons, "; "))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "would now be refused, admitted then: %d\n", s.refusalCount)
	for _, r := range s.refusals {
		fmt.Fprintf(w, "  %s\n", r)
	}
	if s.refusalCount > len(s.refusals) {
		fmt.Fprintf(w, "  and %d more: see their lines\n", s.refusalCount-len(s.refusals))
	}
	var others []string
	for _, c := range []string{changeAdmitted, changeMessage, changePatched, changeUnpatched, changeAuthzAllowed, changeNotIdempotentNow} {
		if s.changes[c] > 0 {
			others = append(others, fmt.Sprintf("%d %s", s.changes[c], c))
		}
	}
	if len(others) > 0 {
		fmt.Fprintf(w, "other changes: %s\n", strings.Join(others, ", "))
	}
	fmt.Fprintf(w, "stored versions: %d kept (%.1f MiB of -audit-cache-bytes %d), %d dropped\n", p.versions.len(), float64(p.versions.bytes)/(1<<20), p.versions.maxBytes, p.versions.droppedCount)
	if s.earlierStage > 0 {
		fmt.Fprintf(w, "%d requests replayed from an earlier stage than ResponseComplete, the last the log has\n", s.earlierStage)
	}
	if s.unreadableCount > 0 {
		fmt.Fprintf(w, "%s could not be read:\n", count(s.unreadableCount, "line"))
		for _, u := range s.unreadable {
			fmt.Fprintf(w, "  %s\n", u)
		}
	}
}

// counted is ": 3 admitted, 1 denied" for the labels with a count.
func counted(counts map[string]int, labels ...string) string {
	var parts []string
	for _, l := range labels {
		if counts[l] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[l], l))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ")
}

// replayProgress is how far a replay has read, for a terminal.
type replayProgress struct {
	*progress
	events int
	bytes  int64
}

func newReplayProgress(stderr io.Writer) *replayProgress {
	return &replayProgress{progress: newProgress(stderr)}
}

func (p *replayProgress) read(n int) { p.bytes += int64(n) + 1 }

func (p *replayProgress) event() {
	p.events++
	if p.events%1024 != 0 {
		return
	}
	p.show(func() string {
		rate := float64(p.events) / time.Since(p.start).Seconds()
		return fmt.Sprintf("replaying: %d lines, %.1f MiB read, %.0f lines/s", p.events, float64(p.bytes)/(1<<20), rate)
	})
}
