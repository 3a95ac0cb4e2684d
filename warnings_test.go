package main

// Warnings, and a part's rewriter of denials (package rollout's
// -validation-action): what reaches the apiserver, in both AdmissionReview
// versions, in a form it passes on. Like every plumbing test, these use
// admit functions of their own.

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	admissionv1 "k8s.io/api/admission/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// answerIn is the part of an answer these tests read beyond reviewIn's.
type answerIn struct {
	Response struct {
		Warnings         []string          `json:"warnings"`
		AuditAnnotations map[string]string `json:"auditAnnotations"`
	} `json:"response"`
}

func decodeAnswerIn(t testing.TB, b []byte) answerIn {
	t.Helper()
	var a answerIn
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return a
}

// reviewLine is the one log line of a review, decoded from JSON.
func reviewLine(t testing.TB, logs *bytes.Buffer) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("got %d log lines, want 1:\n%s", len(lines), logs)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
		t.Fatal(err)
	}
	return line
}

// TestDeniedRewriter: a part's rewriter of /validate's denials (rollout's
// -validation-action) is called for a denial alone, never for an object
// that does not decode, a patch or an allow; what it returns is sent, in
// the request's version, for the request (its uid, whatever the rewriter
// set) and with legible warnings, and its verdict is logged and counted.
func TestDeniedRewriter(t *testing.T) {
	calls := 0
	rewrite := func(d *admissionv1.AdmissionResponse) (*admissionv1.AdmissionResponse, string) {
		calls++
		return &admissionv1.AdmissionResponse{UID: "not the request's", Allowed: true, Warnings: []string{"let\nthrough: " + d.Result.Message}}, "rewritten"
	}
	all := plumbingReviews(t)
	for _, fixture := range []string{"v1-deployment-create", "v1beta1-deployment-create"} {
		t.Run(fixture, func(t *testing.T) {
			body := all[fixture]
			_, req, err := decodeAdmissionReview(body)
			if err != nil {
				t.Fatal(err)
			}
			message := denyingAdmit(context.Background(), req).Result.Message
			var logs bytes.Buffer
			reviews := newTestReviews(slog.New(slog.NewJSONHandler(&logs, nil)))
			w := post(reviews.admissionRoute("/validate", denyingAdmit, rewrite), "/validate?timeout=10s", body)
			out := checkReview(t, "/validate", decodeReviewIn(t, body), w) // the request's uid and version
			got := decodeAnswerIn(t, w.Body.Bytes()).Response
			if !out.Response.Allowed || out.Response.Status != nil {
				t.Errorf("got allowed=%v status %+v, want the rewriter's answer, allowed", out.Response.Allowed, out.Response.Status)
			}
			if want := []string{"let through: " + message}; !reflect.DeepEqual(got.Warnings, want) {
				t.Errorf("got warnings %q, want %q, legible", got.Warnings, want)
			}
			if line := reviewLine(t, &logs); line["verdict"] != "rewritten" {
				t.Errorf("log line %v: got verdict %v, want the rewriter's", line, line["verdict"])
			}
			var exposition bytes.Buffer
			reviews.metrics.write(&exposition)
			if want := `webhook_reviews_total{webhook="/validate",verdict="rewritten"} 1`; !strings.Contains(exposition.String(), want) {
				t.Errorf("metrics have no %s:\n%s", want, &exposition)
			}
		})
	}
	calls = 0
	body := all["v1-deployment-create"]
	for _, tc := range []struct {
		name  string
		admit admitFunc
		body  []byte
	}{
		{"an object that does not decode", denyingAdmit, withObject(t, body, json.RawMessage(`[1, 2]`))},
		{"a patch", patchingAdmit, body},
		{"an allow", func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse { return allowed() }, body},
	} {
		post(newTestReviews(discardLogger).admissionRoute("/validate", tc.admit, rewrite), "/validate", tc.body)
		if calls != 0 {
			t.Errorf("%s: the rewriter was called", tc.name)
		}
	}
}

// TestAllowedWithWarning checks that a policy's own warning reaches the
// apiserver in both versions, on one line, that the review counts as
// allowed, and that its log line says how many warnings it had but not
// what they said.
func TestAllowedWithWarning(t *testing.T) {
	// On two lines, which the apiserver would drop.
	const warning = "plumbing.test/old is deprecated; use plumbing.test/new"
	admit := func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return allowedWithWarning(strings.Replace(warning, " ", "\n", 1))
	}
	all := plumbingReviews(t)
	for _, fixture := range []string{"v1-deployment-create", "v1beta1-deployment-create"} {
		t.Run(fixture, func(t *testing.T) {
			body := all[fixture]
			var logs bytes.Buffer
			w := post(admissionHandler(slog.New(slog.NewJSONHandler(&logs, nil)), admit), "/validate", body)
			out := checkReview(t, "/validate", decodeReviewIn(t, body), w)
			answer := decodeAnswerIn(t, w.Body.Bytes())
			if !out.Response.Allowed || out.Response.Status != nil || !reflect.DeepEqual(answer.Response.Warnings, []string{warning}) {
				t.Errorf("got allowed=%v status %+v warnings %q; want allowed with the warning %q", out.Response.Allowed, out.Response.Status, answer.Response.Warnings, warning)
			}
			line := reviewLine(t, &logs)
			if line["verdict"] != "allowed" || line["warnings"] != 1.0 {
				t.Errorf("log line %v: want verdict allowed, warnings 1", line)
			}
			if strings.Contains(logs.String(), "deprecated") {
				t.Errorf("log %s has the warning's text, which may quote the object", &logs)
			}
		})
	}
}

// TestLegibleWarnings checks that every warning leaves in a form the
// apiserver passes on, checked with the function it checks them with.
func TestLegibleWarnings(t *testing.T) {
	long := strings.Repeat("é", maxWarningRunes+10)
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"plain", "x is deprecated", "x is deprecated"},
		{"unicode", "größe ≤ 3 ✓", "größe ≤ 3 ✓"},
		{"newline and tab", "first line\nsecond\tline", "first line second line"},
		{"carriage return and escape", "a\r\x1b[31mb", "a  [31mb"},
		{"C1 control", "a\u0085b", "a b"},
		{"invalid UTF-8", "a\xffb", "a\uFFFDb"},
		{"exactly the limit", long[:2*maxWarningRunes], long[:2*maxWarningRunes]},
		{"over the limit", long, long[:2*(maxWarningRunes-1)] + "…"},
	}
	for _, tc := range tests {
		got := copyForRequest(&admissionv1.AdmissionResponse{Allowed: true, Warnings: []string{tc.in}}, "uid").Warnings
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s: copyForRequest's warnings of %q = %q, want %q", tc.name, tc.in, got, tc.want)
			continue
		}
		if _, err := utilnet.NewWarningHeader(299, "", got[0]); err != nil {
			t.Errorf("%s: the apiserver would drop %q: %v", tc.name, got[0], err)
		}
		if n := utf8.RuneCountInString(got[0]); n > maxWarningRunes {
			t.Errorf("%s: got %d runes, want at most %d", tc.name, n, maxWarningRunes)
		}
	}

	in := []string{"fine", "not\nfine"}
	if got := copyForRequest(&admissionv1.AdmissionResponse{Warnings: in}, "uid").Warnings; len(got) != 2 || got[1] != "not fine" || in[1] != "not\nfine" || got[0] != "fine" {
		t.Errorf("copyForRequest's warnings of %q = %q, and left its input %q; want a changed copy", []string{"fine", "not\nfine"}, got, in)
	}
	// The usual answer has no warnings, or legible ones, and costs only
	// its copy.
	for _, warnings := range [][]string{nil, {"fine", "also fine"}} {
		legible := &admissionv1.AdmissionResponse{Allowed: true, Warnings: warnings}
		if n := testing.AllocsPerRun(100, func() { copyForRequest(legible, "uid") }); n != 1 {
			t.Errorf("copyForRequest of an answer with warnings %q allocates %v times, want 1", warnings, n)
		}
	}
}
