// Command summary reads `go test -json` and prints what a reader of `make
// e2e` needs: a line for each test as it ends, the reason of each skip
// (what the policy lacks, or the apiserver's version), and the whole
// output of each failure; then a count, the skips again, and the failures
// by name (a test whose subtest failed counted once, as the subtest). It exits 1
// when a test or a package failed, or when nothing ran.
//
//	go test -json ./... | go run ./summary
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

func main() {
	os.Exit(summarize(os.Stdin, os.Stdout))
}

// summarize prints the summary of the events in r to w and returns the
// exit status.
func summarize(r io.Reader, w io.Writer) int {
	output := map[string][]string{} // by package and test, what it printed
	var skipped, failedTests []string
	counts := map[string]int{}
	failed, seen := false, false
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20) // a failure's output holds the apiserver's whole log
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(w, sc.Text()) // not an event: go test's own words
			continue
		}
		seen = true
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output", "build-output":
			if e.Test == "" {
				fmt.Fprint(w, e.Output)
			} else if !strings.HasPrefix(e.Output, "=== ") {
				output[key] = append(output[key], e.Output)
			}
		case "pass", "skip", "fail":
			if e.Test == "" {
				if e.Action == "fail" {
					failed = true
				}
				continue // go test printed its ok or FAIL line as output
			}
			counts[e.Action]++
			fmt.Fprintf(w, "--- %s: %s (%.1fs)\n", strings.ToUpper(e.Action), e.Test, e.Elapsed)
			lines := output[key]
			delete(output, key)
			switch e.Action {
			case "fail":
				failed = true
				failedTests = append(failedTests, e.Test)
				for _, l := range lines {
					fmt.Fprint(w, l)
				}
			case "skip":
				reason := strings.TrimSpace(strings.Join(withoutResults(lines), ""))
				fmt.Fprintf(w, "    %s\n", reason)
				skipped = append(skipped, e.Test+": "+reason)
			}
		case "build-fail":
			failed = true
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(w, "summary: reading go test -json: %v\n", err)
		return 1
	}
	// A test fails when a subtest of it does: the subtests say where.
	var failures []string
	for _, name := range failedTests {
		if !slices.ContainsFunc(failedTests, func(other string) bool { return strings.HasPrefix(other, name+"/") }) {
			failures = append(failures, name)
		}
	}
	fmt.Fprintf(w, "\n%d passed, %d skipped, %d failed\n", counts["pass"], counts["skip"], len(failures))
	for _, s := range skipped {
		fmt.Fprintf(w, "  skipped %s\n", s)
	}
	for _, name := range failures {
		fmt.Fprintf(w, "  failed %s (its output is above)\n", name)
	}
	if !seen {
		fmt.Fprintln(w, "summary: no test ran")
		return 1
	}
	if failed {
		return 1
	}
	return 0
}

// withoutResults drops go test's own lines ("--- SKIP: …") from a test's
// output, leaving what the test said.
func withoutResults(lines []string) []string {
	var out []string
	for _, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), "--- ") {
			out = append(out, l)
		}
	}
	return out
}
