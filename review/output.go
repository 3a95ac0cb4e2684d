package review

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
)

// write prints the results: -o json, an array of them; text, a line each
// and a summary.
func write(w io.Writer, o options, op admissionv1.Operation, results []result) error {
	if o.output == "json" {
		if results == nil {
			results = []result{}
		}
		out, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", out)
		return err
	}
	fmt.Fprintf(w, "%s as user %s, groups %s\n", op, o.user, strings.Join(o.groups, ", "))
	counts := map[string]int{}
	for _, r := range results {
		line, label := describe(r)
		counts[label]++
		fmt.Fprintf(w, "%s: %s\n", r.Source, line)
		for _, n := range r.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		if o.verbose && r.Mutate != nil && string(r.Mutate.Patch) != "[]" {
			context := diffContext
			if r.Kind == "Secret" {
				context = 0 // a line beside a change may be its data
			}
			for _, l := range diffLines(r.before, r.after, context) {
				fmt.Fprintf(w, "  %s\n", l)
			}
		}
	}
	var parts []string
	for _, label := range []string{"admitted", "patched", "warned", "allowed", "no-opinion", "denied", "not idempotent", "differs on dry run", "error"} {
		if counts[label] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[label], label))
		}
	}
	_, err := fmt.Fprintf(w, "%d reviewed: %s\n", len(results), strings.Join(parts, ", "))
	return err
}

// describe is a result's line, and the word it is counted under.
func describe(r result) (line, label string) {
	what := r.Kind
	if name := qualified(r.Namespace, r.Name); name != "" {
		what += " " + name
	}
	if what != "" {
		what += ": "
	}
	switch {
	case r.Verdict == "error":
		return what + "error: " + r.Error, "error"
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

// diffContext is how many unchanged lines -v shows around each change, as
// diff -U2 does: enough to say where a line was added.
const diffContext = 2

// diffLines is a line diff of two JSON documents, indented: "-" lines the
// patch removed, "+" lines it added, as diff -u shows them, each change
// with up to context unchanged lines around it, and "  ..." where
// unchanged lines are left out between them.
func diffLines(before, after json.RawMessage, context int) []string {
	a, b := indentLines(before), indentLines(after)
	// The longest common subsequence, by dynamic programming: objects are
	// small.
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var all []string // every line, marked
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			all = append(all, "  "+a[i])
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			all = append(all, "- "+a[i]) // what was, before what is, as diff -u
			i++
		default:
			all = append(all, "+ "+b[j])
			j++
		}
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

func indentLines(doc json.RawMessage) []string {
	var v any
	if json.Unmarshal(doc, &v) != nil {
		return nil
	}
	out, _ := json.MarshalIndent(v, "", "  ")
	return strings.Split(string(out), "\n")
}
