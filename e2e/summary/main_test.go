package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	tests := []struct {
		name     string
		events   string
		status   int
		contains []string
		omits    []string
	}{
		{
			name: "a pass, a skip with its reason, and a failure with its output",
			events: `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:1: a log line of a passing test\n"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":1.5}
{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:9: deniedRequest returns request{}: the policy denies nothing\n"}
{"Action":"output","Package":"p","Test":"TestB","Output":"--- SKIP: TestB (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Test":"TestC/sub","Output":"    c_test.go:3: got 1, want 2\n"}
{"Action":"fail","Package":"p","Test":"TestC/sub","Elapsed":2}
{"Action":"fail","Package":"p","Test":"TestC","Elapsed":2}
{"Action":"output","Package":"p","Output":"FAIL\tp\t3.5s\n"}
{"Action":"fail","Package":"p","Elapsed":3.5}
`,
			status:   1,
			contains: []string{"--- PASS: TestA (1.5s)", "--- SKIP: TestB", "deniedRequest returns request{}: the policy denies nothing", "--- FAIL: TestC/sub", "got 1, want 2", "1 passed, 1 skipped, 1 failed", "skipped TestB: b_test.go:9: deniedRequest", "failed TestC/sub"},
			omits:    []string{"a log line of a passing test", "--- SKIP: TestB (0.00s)", "failed TestC ("},
		},
		{
			name:     "all passed",
			events:   `{"Action":"pass","Package":"p","Test":"TestA"}` + "\n" + `{"Action":"pass","Package":"p"}` + "\n",
			status:   0,
			contains: []string{"1 passed, 0 skipped, 0 failed"},
		},
		{name: "nothing ran", events: "", status: 1, contains: []string{"no test ran"}},
		{name: "a build failure", events: `{"Action":"build-output","ImportPath":"p","Output":"x.go:1: undefined: y\n"}` + "\n" + `{"Action":"build-fail","ImportPath":"p"}` + "\n", status: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if got := summarize(strings.NewReader(tc.events), &out); got != tc.status {
				t.Errorf("exit status %d, want %d\n%s", got, tc.status, &out)
			}
			for _, want := range tc.contains {
				if !strings.Contains(out.String(), want) {
					t.Errorf("the summary has no %q:\n%s", want, &out)
				}
			}
			for _, omit := range tc.omits {
				if strings.Contains(out.String(), omit) {
					t.Errorf("the summary has %q:\n%s", omit, &out)
				}
			}
		})
	}
}
