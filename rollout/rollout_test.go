package rollout

// What -validation-action makes of a denial of /validate's (Part's
// Denials). The server sends what it returns, for the request it
// reviewed and with legible warnings, only for an answer it calls
// "denied": its own tests say so, with a rewriter of their own.

import (
	"flag"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/example/webhook/part"
)

// started is the part with the command line args, as the server starts it.
func started(t *testing.T, args ...string) (part.Part, error) {
	t.Helper()
	p := Part()
	flags := flag.NewFlagSet("webhook", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	p.Flags(flags, false)
	if err := flags.Parse(args); err != nil {
		return p, err
	}
	_, err := p.Start(part.Env{Logger: slog.New(slog.DiscardHandler)})
	return p, err
}

// rewrite is what the server sends for denial under p, and its verdict:
// the denial itself, "denied", when p rewrites none.
func rewrite(p part.Part, denial *admissionv1.AdmissionResponse) (*admissionv1.AdmissionResponse, string) {
	if r := p.Denials(); r != nil {
		return r(denial)
	}
	return denial, "denied"
}

// denial is a policy's denial of the request "uid-1", with message.
func denial(message string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{UID: "uid-1", Result: &metav1.Status{Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden, Message: message}}
}

func TestValidationActionFlag(t *testing.T) {
	tests := []struct {
		value       string
		wantVerdict string
		wantErr     string
	}{
		{"deny", "denied", ""},
		{"warn", "warned", ""},
		{"audit", "audited", ""},
		{"warn,audit", "warned_and_audited", ""},
		{"audit,warn", "warned_and_audited", ""},
		{"deny,warn", "", "deny cannot be combined"},
		{"Warn", "", `"Warn" is not an action: want deny, warn, audit, or warn,audit`},
		{"dryrun", "", `"dryrun" is not an action`},
		{"", "", "is not an action"},
	}
	for _, tc := range tests {
		p, err := started(t, "-validation-action", tc.value)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "-validation-action") {
				t.Errorf("-validation-action %q: got error %v, want one naming -validation-action and saying %q", tc.value, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("-validation-action %q: %v", tc.value, err)
		}
		if _, verdict := rewrite(p, denial("no")); verdict != tc.wantVerdict {
			t.Errorf("-validation-action %q: got verdict %q, want %q", tc.value, verdict, tc.wantVerdict)
		}
	}
	for _, args := range [][]string{nil, {"-validation-action", "deny"}} {
		if p, err := started(t, args...); err != nil {
			t.Fatal(err)
		} else if p.Denials() != nil {
			t.Errorf("%q: the part rewrites denials, want it to leave them to the server", args)
		}
	}
}

// TestValidationActions: under each action, a denial becomes an answer
// that allows, for the same request, with the denial's message as a
// warning, an audit annotation, or both; under deny, it is sent as is.
func TestValidationActions(t *testing.T) {
	const message = "Deployment plumbing/web must have the annotation x=y"
	for _, tc := range []struct {
		action          string
		wantWarnings    []string
		wantAnnotations map[string]string
	}{
		{"deny", nil, nil},
		{"warn", []string{wouldDenyWarning + message}, nil},
		{"audit", nil, map[string]string{wouldDenyAuditKey: message}},
		{"warn,audit", []string{wouldDenyWarning + message}, map[string]string{wouldDenyAuditKey: message}},
	} {
		p, err := started(t, "-validation-action", tc.action)
		if err != nil {
			t.Fatal(err)
		}
		in := denial(message)
		out, _ := rewrite(p, in)
		if tc.action == "deny" {
			if out != in {
				t.Errorf("deny: got %+v, want the denial itself", out)
			}
			continue
		}
		if !out.Allowed || out.Result != nil || out.Patch != nil || out.UID != in.UID {
			t.Errorf("%s: got %+v, want allowed, with no status and no patch, for uid %s", tc.action, out, in.UID)
		}
		if !reflect.DeepEqual(out.Warnings, tc.wantWarnings) {
			t.Errorf("%s: got warnings %q, want %q", tc.action, out.Warnings, tc.wantWarnings)
		}
		if !reflect.DeepEqual(out.AuditAnnotations, tc.wantAnnotations) {
			t.Errorf("%s: got auditAnnotations %v, want %v", tc.action, out.AuditAnnotations, tc.wantAnnotations)
		}
	}
}

// TestDenialsOwnWarningsKept: a denial's own warnings and audit
// annotations are kept, without changing the policy's answer, which it
// may share between requests; a denial without a message says so.
func TestDenialsOwnWarningsKept(t *testing.T) {
	p, err := started(t, "-validation-action", "warn,audit")
	if err != nil {
		t.Fatal(err)
	}
	shared := denial("no")
	shared.Warnings = make([]string, 1, 4) // room to append into, were it not copied
	shared.Warnings[0] = "the policy's own warning"
	shared.AuditAnnotations = map[string]string{"reason": "the policy's own annotation"}
	for range 2 {
		out, _ := rewrite(p, shared)
		if want := []string{"the policy's own warning", wouldDenyWarning + "no"}; !reflect.DeepEqual(out.Warnings, want) {
			t.Errorf("got warnings %q, want %q", out.Warnings, want)
		}
		if want := map[string]string{"reason": "the policy's own annotation", wouldDenyAuditKey: "no"}; !reflect.DeepEqual(out.AuditAnnotations, want) {
			t.Errorf("got auditAnnotations %v, want %v", out.AuditAnnotations, want)
		}
	}
	if shared.Allowed || len(shared.Warnings) != 1 || len(shared.AuditAnnotations) != 1 || shared.Warnings[:2][1] != "" {
		t.Errorf("the policy's answer was changed: %+v", shared)
	}
	out, verdict := rewrite(p, &admissionv1.AdmissionResponse{})
	if want := []string{wouldDenyWarning + "the policy gave no reason"}; !reflect.DeepEqual(out.Warnings, want) || verdict != "warned_and_audited" {
		t.Errorf("a denial without a message: got warnings %q, verdict %q; want %q, warned_and_audited", out.Warnings, verdict, want)
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
