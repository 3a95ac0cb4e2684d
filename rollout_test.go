package main

// The validation action (-validation-action) and warnings: what a denial
// becomes on the wire under each action, in both AdmissionReview versions,
// and that warnings reach the apiserver in a form it passes on. Like every
// plumbing test, these use admit functions of their own.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	admissionv1 "k8s.io/api/admission/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/validation"
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

func TestValidationActionFlag(t *testing.T) {
	tests := []struct {
		args    []string
		want    validationAction
		wantErr string
	}{
		{nil, validationAction{}, ""},
		{[]string{"-validation-action", "deny"}, validationAction{}, ""},
		{[]string{"-validation-action", "warn"}, validationAction{warn: true}, ""},
		{[]string{"-validation-action", "audit"}, validationAction{audit: true}, ""},
		{[]string{"-validation-action", "warn,audit"}, validationAction{warn: true, audit: true}, ""},
		{[]string{"-validation-action", "audit,warn"}, validationAction{warn: true, audit: true}, ""},
		{[]string{"-validation-action", "deny,warn"}, validationAction{}, "deny cannot be combined"},
		{[]string{"-validation-action", "Warn"}, validationAction{}, `"Warn" is not an action: want deny, warn, audit, or warn,audit`},
		{[]string{"-validation-action", "dryrun"}, validationAction{}, `"dryrun" is not an action`},
		{[]string{"-validation-action", ""}, validationAction{}, "is not an action"},
	}
	for _, tc := range tests {
		cfg, err := parseFlags(tc.args, func(string) string { return "" }, io.Discard)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "-validation-action") {
				t.Errorf("parseFlags(%q): got error %v, want one naming -validation-action and saying %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil || cfg.validationAction != tc.want {
			t.Errorf("parseFlags(%q): got %+v, %v; want %+v", tc.args, cfg.validationAction, err, tc.want)
		}
		// The start-up log line names it as the flag was given.
		if want := "deny"; len(tc.args) > 0 {
			want = strings.Replace(tc.args[1], "audit,warn", "warn,audit", 1)
			if got := cfg.validationAction.String(); got != want {
				t.Errorf("parseFlags(%q): the action prints as %q, want %q", tc.args, got, want)
			}
		}
	}
}

// TestValidationActions sends a review that the tests' denying admit
// function refuses through /validate under each action, in each
// AdmissionReview version, and checks the answer, the log line and the
// metrics.
func TestValidationActions(t *testing.T) {
	all := plumbingReviews(t)
	tests := []struct {
		action      validationAction
		wantVerdict string
	}{
		{validationAction{}, "denied"},
		{validationAction{warn: true}, "warned"},
		{validationAction{audit: true}, "audited"},
		{validationAction{warn: true, audit: true}, "warned_and_audited"},
	}
	for _, fixture := range []string{"v1-deployment-create", "v1beta1-deployment-create"} {
		for _, tc := range tests {
			t.Run(fixture+"/"+tc.action.String(), func(t *testing.T) {
				body := all[fixture]
				_, req, err := decodeAdmissionReview(body)
				if err != nil {
					t.Fatal(err)
				}
				// What the admit function says of this object.
				message := denyingAdmit(context.Background(), req).Result.Message
				var logs bytes.Buffer
				reviews := newTestReviews(slog.New(slog.NewJSONHandler(&logs, nil)))
				m := reviews.metrics
				h := reviews.admissionHandler("/validate", denyingAdmit, tc.action)
				w := post(h, "/validate?timeout=10s", body)
				out := checkReview(t, "/validate", decodeReviewIn(t, body), w)
				got := decodeAnswerIn(t, w.Body.Bytes()).Response

				if tc.action.warn || tc.action.audit {
					if !out.Response.Allowed || out.Response.Status != nil {
						t.Errorf("got allowed=%v status %+v, want allowed with no status", out.Response.Allowed, out.Response.Status)
					}
				} else {
					s := out.Response.Status
					if out.Response.Allowed || s == nil || s.Code != http.StatusForbidden || s.Message != message {
						t.Errorf("got allowed=%v status %+v, want the denial: 403 %q", out.Response.Allowed, s, message)
					}
				}
				var wantWarnings []string
				if tc.action.warn {
					wantWarnings = []string{wouldDenyWarning + message}
				}
				if !reflect.DeepEqual(got.Warnings, wantWarnings) {
					t.Errorf("got warnings %q, want %q", got.Warnings, wantWarnings)
				}
				var wantAnnotations map[string]string
				if tc.action.audit {
					wantAnnotations = map[string]string{wouldDenyAuditKey: message}
				}
				if !reflect.DeepEqual(got.AuditAnnotations, wantAnnotations) {
					t.Errorf("got auditAnnotations %v, want %v", got.AuditAnnotations, wantAnnotations)
				}

				line := reviewLine(t, &logs)
				if line["verdict"] != tc.wantVerdict {
					t.Errorf("log line %v: got verdict %v, want %s", line, line["verdict"], tc.wantVerdict)
				}
				if strings.Contains(logs.String(), "refuse") {
					t.Errorf("log %s has the denial's message, which may quote the object", &logs)
				}
				var exposition bytes.Buffer
				m.write(&exposition)
				if want := `webhook_reviews_total{webhook="/validate",verdict="` + tc.wantVerdict + `"} 1`; !strings.Contains(exposition.String(), want) {
					t.Errorf("metrics have no %s:\n%s", want, &exposition)
				}
			})
		}
	}
}

// TestValidationActionSoftensOnlyDenials checks that an action other than
// deny leaves every answer but a denial as it is: an object the policy
// could not judge is still refused, an allowed or patched answer is not
// touched, and a denial's own warnings and audit annotations are kept
// without changing the policy's answer, which it may share between
// requests.
func TestValidationActionSoftensOnlyDenials(t *testing.T) {
	all := plumbingReviews(t)
	body := all["v1-deployment-create"]
	in := decodeReviewIn(t, body)
	action := validationAction{warn: true, audit: true}
	run := func(t *testing.T, route string, admit admitFunc, body []byte) (reviewIn, answerIn, map[string]any) {
		t.Helper()
		var logs bytes.Buffer
		h := newTestReviews(slog.New(slog.NewJSONHandler(&logs, nil))).admissionHandler(route, admit, action)
		w := post(h, route, body)
		return checkReview(t, route, in, w), decodeAnswerIn(t, w.Body.Bytes()), reviewLine(t, &logs)
	}

	t.Run("an object that does not decode is still refused", func(t *testing.T) {
		out, answer, line := run(t, "/validate", denyingAdmit, withObject(t, body, json.RawMessage(`[1, 2]`)))
		if s := out.Response.Status; out.Response.Allowed || s == nil || s.Code != http.StatusBadRequest {
			t.Errorf("got allowed=%v status %+v, want a refusal with code 400", out.Response.Allowed, s)
		}
		if answer.Response.Warnings != nil || answer.Response.AuditAnnotations != nil {
			t.Errorf("got warnings %q, auditAnnotations %v; want none for an error", answer.Response.Warnings, answer.Response.AuditAnnotations)
		}
		if line["verdict"] != "errored" {
			t.Errorf("got verdict %v, want errored", line["verdict"])
		}
	})
	t.Run("a patched answer is untouched", func(t *testing.T) {
		out, answer, line := run(t, "/mutate", patchingAdmit, body)
		if !out.Response.Allowed || out.Response.Patch == nil || answer.Response.Warnings != nil || answer.Response.AuditAnnotations != nil {
			t.Errorf("got %+v, %+v; want the patch alone", out.Response, answer.Response)
		}
		if line["verdict"] != "patched" {
			t.Errorf("got verdict %v, want patched", line["verdict"])
		}
	})
	t.Run("an allowed answer is untouched", func(t *testing.T) {
		out, answer, line := run(t, "/validate", func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse { return allowed() }, body)
		if !out.Response.Allowed || answer.Response.Warnings != nil || answer.Response.AuditAnnotations != nil || line["verdict"] != "allowed" {
			t.Errorf("got %+v, %+v, verdict %v; want allowed alone", out.Response, answer.Response, line["verdict"])
		}
	})
	t.Run("a denial's own warnings and annotations are kept", func(t *testing.T) {
		shared := denied("no")
		shared.Warnings = make([]string, 1, 4) // room to append into, were it not copied
		shared.Warnings[0] = "the policy's own warning"
		shared.AuditAnnotations = map[string]string{"reason": "the policy's own annotation"}
		admit := func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse { return shared }
		for range 2 {
			out, answer, _ := run(t, "/validate", admit, body)
			if !out.Response.Allowed {
				t.Errorf("got allowed=false, want the denial let through")
			}
			if want := []string{"the policy's own warning", wouldDenyWarning + "no"}; !reflect.DeepEqual(answer.Response.Warnings, want) {
				t.Errorf("got warnings %q, want %q", answer.Response.Warnings, want)
			}
			if want := map[string]string{"reason": "the policy's own annotation", wouldDenyAuditKey: "no"}; !reflect.DeepEqual(answer.Response.AuditAnnotations, want) {
				t.Errorf("got auditAnnotations %v, want %v", answer.Response.AuditAnnotations, want)
			}
		}
		if shared.Allowed || len(shared.Warnings) != 1 || len(shared.AuditAnnotations) != 1 || shared.Warnings[:2][1] != "" {
			t.Errorf("the policy's answer was changed: %+v", shared)
		}
	})
	t.Run("a denial without a message", func(t *testing.T) {
		admit := func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			return &admissionv1.AdmissionResponse{}
		}
		_, answer, line := run(t, "/validate", admit, body)
		if want := []string{wouldDenyWarning + "the policy gave no reason"}; !reflect.DeepEqual(answer.Response.Warnings, want) || line["verdict"] != "warned_and_audited" {
			t.Errorf("got warnings %q, verdict %v; want %q, warned_and_audited", answer.Response.Warnings, line["verdict"], want)
		}
	})
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
		got := legibleWarnings([]string{tc.in})
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s: legibleWarnings(%q) = %q, want %q", tc.name, tc.in, got, tc.want)
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
	if got := legibleWarnings(in); got[1] != "not fine" || in[1] != "not\nfine" || got[0] != "fine" {
		t.Errorf("legibleWarnings(%q) = %q and left its input %q; want a changed copy", []string{"fine", "not\nfine"}, got, in)
	}
	// The usual answer has no warnings, and must cost nothing.
	if n := testing.AllocsPerRun(100, func() { legibleWarnings(nil); legibleWarnings([]string{"fine"}) }); n != 0 {
		t.Errorf("legibleWarnings of legible warnings allocates %v times, want 0", n)
	}
}

// TestWouldDenyAuditKey checks the audit annotation's key as the apiserver
// stores it, under a webhook's name, against the rule it checks it by
// (Attributes.AddAnnotation): a qualified name, or it is dropped.
func TestWouldDenyAuditKey(t *testing.T) {
	// Webhook names are DNS subdomains of at least three labels; this one
	// is as long as a prefix may be.
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	for _, webhook := range []string{"validate.webhook.example.com", long} {
		key := webhook + "/" + wouldDenyAuditKey
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			t.Errorf("the apiserver would drop audit annotation %q: %v", key, errs)
		}
	}
}
