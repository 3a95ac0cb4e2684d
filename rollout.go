package main

// Rolling a policy out: -validation-action says what becomes of the
// policy's denials on /validate. The policy still decides; the action only
// changes what its denial does, so a new policy can run against live
// traffic, its would-be denials seen and counted, before it refuses
// anything. The same choice as ValidatingAdmissionPolicy's
// validationActions (Deny, Warn, Audit), Gatekeeper's enforcementAction
// and Kyverno's validationFailureAction.
//
// What the apiserver does with the two parts of an answer this relies on
// is in k8s.io/apiserver v1.37.1, pkg/admission/plugin/webhook/validating/
// dispatcher.go (webhookDispatcher.callHook), for the v1 and v1beta1
// answers alike (pkg/admission/plugin/webhook/request/admissionreview.go,
// VerifyAdmissionResponse):
//
//   - each of response.warnings goes to warning.AddWarning, and so to the
//     client as a "Warning: 299" header, which kubectl prints as
//     "Warning: <text>", whether the request is allowed or not;
//   - each of response.auditAnnotations is stored as "<webhook-name>/<key>"
//     by Attributes.AddAnnotation (pkg/admission/attributes.go), at audit
//     level Metadata, and so lands in every audit event of the request that
//     is recorded at Metadata or above.

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	admissionv1 "k8s.io/api/admission/v1"
)

// validationAction is what /validate does with a denial of the policy's:
// the zero value denies it, as it always did; warn and audit allow it
// instead, and tell the user (warn), the apiserver's audit log (audit), or
// both. It never changes what the policy decides, only what its denial
// does, so the policy never knows it.
//
// It is /validate's alone, not every admission route's. A validating
// policy's answer is only a verdict, so allowing what it would refuse
// changes nothing but the verdict. A mutating route that refuses does so
// because it cannot make the object right, and softening that would store
// the object it could not fix, with no patch. ValidatingAdmissionPolicy
// likewise has validationActions and MutatingAdmissionPolicy none.
//
// Only denials are softened: what verdict calls "denied", the policy's
// decision that the object is not acceptable (denied, 403 Forbidden). An
// errored answer (an object that does not decode, a webhook's own failure)
// is not a decision about the object, so it would be wrong to say the
// object "would have been denied": it stays a refusal under every action,
// and is counted as "errored" under every action, so that what warn and
// audit count is exactly what deny will refuse. A panic, answered with HTTP
// 500, is left to the webhook's failurePolicy as before.
type validationAction struct {
	warn, audit bool
}

// validationActions are the values -validation-action takes, each with its
// action.
var validationActions = []struct {
	name   string
	action validationAction
}{
	{"deny", validationAction{}},
	{"warn", validationAction{warn: true}},
	{"audit", validationAction{audit: true}},
	{"warn,audit", validationAction{warn: true, audit: true}},
}

func (a validationAction) String() string {
	for _, v := range validationActions {
		if v.action == a {
			return v.name
		}
	}
	return "deny"
}

// validationActionFlag is -validation-action.
type validationActionFlag struct{ action *validationAction }

func (f validationActionFlag) String() string {
	if f.action == nil {
		return "deny"
	}
	return f.action.String()
}

// Set takes deny, warn, audit, or warn,audit in either order.
func (f validationActionFlag) Set(s string) error {
	parts := strings.Split(s, ",")
	slices.Sort(parts)
	if joined := strings.Join(parts, ","); joined == "audit,warn" {
		s = "warn,audit"
	}
	for _, v := range validationActions {
		if v.name == s {
			*f.action = v.action
			return nil
		}
	}
	if slices.Contains(parts, "deny") {
		return errors.New("deny cannot be combined with warn or audit: a denial either refuses the request or lets it through")
	}
	return fmt.Errorf("%q is not an action: want deny, warn, audit, or warn,audit", s)
}

const (
	// wouldDenyAuditKey is the audit annotation that records a denial
	// audit let through. The apiserver stores it as
	// "<webhook-name>/would-deny", so the key names the webhook that
	// would have denied; the whole must be a qualified name, or the
	// apiserver drops it with only a line in its own log
	// (Attributes.AddAnnotation, checkKeyFormat). The value has no limit
	// there, and is the denial's message: the same words the user and the
	// audit log's responseStatus would have had under deny.
	wouldDenyAuditKey = "would-deny"

	// wouldDenyWarning begins the warning that warn sends for a denial.
	// The apiserver passes a webhook's warnings on without naming the
	// webhook (warning.AddWarning with agent ""), so the text says where it
	// comes from, and that the request was let through this time only.
	wouldDenyWarning = "the validating webhook would deny this request once enforced: "

	// maxWarningRunes is the most runes of warnings the apiserver passes on
	// whole for one request (truncateAtTotalRunes, 4096, in
	// k8s.io/apiserver/pkg/endpoints/filters/warning.go, recorder.AddWarning).
	// Past that it cuts every warning of the request to its first 256 runes
	// (truncateItemRunes), so a warning's first words matter most.
	maxWarningRunes = 4 << 10
)

// apply turns resp, a denial, into the answer a, and returns its verdict
// for the log line and the metrics: "denied" when a denies (resp is then
// returned unchanged), "warned", "audited" or "warned_and_audited". The
// policy's own warnings and audit annotations are kept. resp is not
// modified: a policy may return the same answer to every request.
func (a validationAction) apply(resp *admissionv1.AdmissionResponse) (*admissionv1.AdmissionResponse, string) {
	if !a.warn && !a.audit {
		return resp, "denied"
	}
	message := "the policy gave no reason"
	if resp.Result != nil && resp.Result.Message != "" {
		message = resp.Result.Message
	}
	// A fresh answer: allowed, and without the denial's status, or any
	// patch, which a validating webhook may not return.
	out := &admissionv1.AdmissionResponse{Allowed: true, Warnings: resp.Warnings, AuditAnnotations: resp.AuditAnnotations}
	verdict := "audited"
	if a.warn {
		// Clipped, so that append copies instead of writing into the
		// policy's array.
		out.Warnings = append(slices.Clip(out.Warnings), wouldDenyWarning+message)
		verdict = "warned"
	}
	if a.audit {
		out.AuditAnnotations = maps.Clone(out.AuditAnnotations)
		if out.AuditAnnotations == nil {
			out.AuditAnnotations = map[string]string{}
		}
		out.AuditAnnotations[wouldDenyAuditKey] = message
		if a.warn {
			verdict = "warned_and_audited"
		}
	}
	return out, verdict
}

// legibleWarnings returns warnings as the apiserver will pass them on. It
// drops, without a word, a warning that is not valid UTF-8 or has a
// control character, a newline or a tab included
// (k8s.io/apimachinery/pkg/util/net/http.go, NewWarningHeader; the
// recorder ignores its error), which would make a warning vanish exactly
// when a multi-line message most needs reading. So each such character
// becomes a space or U+FFFD here, and a warning longer than the apiserver
// passes on whole is cut, marked with "…". warnings is copied before any
// change, and returned as it is when nothing needs one, which is always
// for an answer without warnings.
func legibleWarnings(warnings []string) []string {
	var out []string
	for i, w := range warnings {
		lw := legibleWarning(w)
		if lw == w && out == nil {
			continue
		}
		if out == nil {
			out = slices.Clone(warnings)
		}
		out[i] = lw
	}
	if out == nil {
		return warnings
	}
	return out
}

func legibleWarning(w string) string {
	if utf8.ValidString(w) && !strings.ContainsFunc(w, unicode.IsControl) && utf8.RuneCountInString(w) <= maxWarningRunes {
		return w
	}
	w = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(w, "\uFFFD"))
	if runes := []rune(w); len(runes) > maxWarningRunes {
		w = string(runes[:maxWarningRunes-1]) + "…"
	}
	return w
}
