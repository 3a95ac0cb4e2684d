// Package rollout is an optional part of the webhook (package part):
// -validation-action lets a new policy run against live traffic, its
// would-be denials seen and counted, before it refuses anything, as
// ValidatingAdmissionPolicy's validationActions (Deny, Warn, Audit),
// Gatekeeper's enforcementAction and Kyverno's validationFailureAction do
// (docs/rollout.md). Delete this folder and its line in main.go, and
// /validate always denies what the policy denies.
//
// The apiserver (k8s.io/apiserver, pkg/admission/plugin/webhook/
// validating/dispatcher.go, webhookDispatcher.callHook; for v1 and v1beta1
// alike, pkg/admission/plugin/webhook/request/admissionreview.go,
// VerifyAdmissionResponse) sends each warning to the client as a "Warning:
// 299" header (warning.AddWarning), which kubectl prints, allowed or not,
// and stores each audit annotation as "<webhook-name>/<key>"
// (Attributes.AddAnnotation, pkg/admission/attributes.go) at level
// Metadata, in every audit event of the request at Metadata or above.

package rollout

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/example/webhook/part"
)

// Part is -validation-action, for the server and for webhook review.
func Part() part.Part {
	var a validationAction
	return part.Part{
		Name: "rollout",
		Flags: func(flags *flag.FlagSet, _ bool) {
			flags.Var(&a, "validation-action", "what /validate does with the policy's denials: `deny`, or allow the request and warn the user (warn), record the denial in the apiserver's audit log (audit), or both (warn,audit)")
		},
		Start: func(env part.Env) (func(), error) {
			if a.allowsDenials() {
				env.Logger.Info("/validate lets the policy's denials through", "validation_action", a)
			}
			return func() {}, nil
		},
		Denials: func() part.RewriteDenial {
			if !a.allowsDenials() {
				return nil // deny: no review of /validate's meets this part
			}
			return a.warnOrAudit
		},
	}
}

// validationAction is what /validate does with a denial of the policy's:
// the zero value denies it; warn and audit allow it instead, and tell the
// user (warn), the apiserver's audit log (audit), or both. The policy never
// knows which. Only /validate's denials are let through, never an answer
// the server calls "errored" (docs/rollout.md says why).
type validationAction struct {
	warn, audit bool
}

// validationActions are the values -validation-action takes.
var validationActions = []struct {
	name   string
	action validationAction
}{
	{"deny", validationAction{}},
	{"warn", validationAction{warn: true}},
	{"audit", validationAction{audit: true}},
	{"warn,audit", validationAction{warn: true, audit: true}},
}

// LogValue logs the action by its name, in the JSON log as in the text.
func (a validationAction) LogValue() slog.Value { return slog.StringValue(a.String()) }

func (a validationAction) String() string {
	for _, v := range validationActions {
		if v.action == a {
			return v.name
		}
	}
	return "deny"
}

// Set is -validation-action's: it takes deny, warn, audit, or warn,audit
// in either order.
func (a *validationAction) Set(s string) error {
	parts := strings.Split(s, ",")
	slices.Sort(parts)
	if joined := strings.Join(parts, ","); joined == "audit,warn" {
		s = "warn,audit"
	}
	for _, v := range validationActions {
		if v.name == s {
			*a = v.action
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
	// audit let through, stored as "<webhook-name>/would-deny", a
	// qualified name, as the apiserver requires (docs/rollout.md). Its
	// value is the denial's message, the words deny would have sent.
	wouldDenyAuditKey = "would-deny"

	// wouldDenyWarning begins the warning that warn sends for a denial.
	// The apiserver passes warnings on without naming the webhook, so the
	// text says where it comes from.
	wouldDenyWarning = "the validating webhook would deny this request once enforced: "
)

// allowsDenials reports whether a lets the policy's denials through (warn,
// audit, or both); under deny, the default, a denial is sent as the policy
// made it.
func (a validationAction) allowsDenials() bool { return a.warn || a.audit }

// warnOrAudit turns resp, a denial, into the answer a says instead, and
// returns its verdict: "warned", "audited" or "warned_and_audited". It is
// a new answer, not a copy of resp: allowed, with resp's uid, without the
// denial's status or any patch (which a validating webhook may not
// return), carrying the policy's warnings and audit annotations, copied
// before anything is added to them, and the denial's message as a warning,
// an audit annotation, or both. The server sets the request's uid and
// makes its warnings legible, as it does for every answer.
func (a validationAction) warnOrAudit(resp *admissionv1.AdmissionResponse) (*admissionv1.AdmissionResponse, string) {
	message := "the policy gave no reason"
	if resp.Result != nil && resp.Result.Message != "" {
		message = resp.Result.Message
	}
	out := &admissionv1.AdmissionResponse{UID: resp.UID, Allowed: true, Warnings: resp.Warnings, AuditAnnotations: resp.AuditAnnotations}
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
