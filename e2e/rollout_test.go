package e2e

// Rolling a policy out (-validation-action, docs/rollout.md) through a real
// kube-apiserver: what the user and the apiserver's audit log see of a
// denial under each action, and a policy's own warning. What the
// apiserver does with an answer's warnings and audit annotations is in
// k8s.io/apiserver v0.37.1, pkg/admission/plugin/webhook/validating/
// dispatcher.go (webhookDispatcher.callHook).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

const (
	// wouldDenyWarning begins the warning -validation-action=warn sends
	// for a denial, and wouldDenyAuditKey is the audit annotation
	// -validation-action=audit sets: the webhook's rollout.go, which this
	// module cannot import.
	wouldDenyWarning  = "the validating webhook would deny this request once enforced: "
	wouldDenyAuditKey = "would-deny"

	// auditLogTimeout bounds how long an audit event may take to reach
	// the log once the request is answered. The log backend writes each
	// event as its stage ends (--audit-log-mode=blocking, the default),
	// and ResponseComplete ends just after the answer is sent.
	auditLogTimeout = 10 * time.Second
)

// auditPolicy records every create, update, patch and delete, of any
// resource, at level Metadata, the lowest that carries admission's audit
// annotations (Attributes.AddAnnotation sets them at Metadata), and
// nothing else. Any resource and any of those verbs: deniedRequest is
// whatever request the policy denies.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete"]
- level: None
`

// startAuditedAPIServer starts a kube-apiserver of the test's own that writes an
// audit log, and the log's path.
func startAuditedAPIServer(t *testing.T) (*apiServer, string) {
	t.Helper()
	dir := filepath.Join(workDir, "apiserver-audit")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	policyFile, logFile := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policyFile, []byte(auditPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := startOwnAPIServer(t, filepath.Base(dir), []string{"--audit-policy-file", policyFile, "--audit-log-path", logFile})
	if err != nil {
		t.Fatal(err)
	}
	return a, logFile
}

// warningRecorder is a client-go WarningHandler that keeps every warning
// the apiserver sends, as kubectl prints them.
type warningRecorder struct {
	mu       sync.Mutex
	warnings []string
}

func (r *warningRecorder) HandleWarningHeader(code int, _, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.warnings = append(r.warnings, text)
}

func (r *warningRecorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.warnings...)
}

// TestValidationActions sends deniedRequest through /validate alone,
// whatever its operation, with the webhook run with each
// -validation-action, in AdmissionReview v1 and v1beta1, through a
// kube-apiserver of the test's own that writes an audit log. deny refuses
// it as always; warn and audit let it through, and the user sees the
// denial as a warning (warn), the audit log records it under the webhook's
// name (audit), or both; the message is the policy's.
func TestValidationActions(t *testing.T) {
	skipWithoutPart(t, "rollout", "-validation-action to test")
	skipWithoutValidation(t)
	if r, _ := deniedRequest("check", "check"); r.none() {
		t.Skip("deniedRequest (e2e/demonstration_test.go) returns request{}: the policy's /validate denies nothing, so there is no denial to roll out")
	}
	api, auditLog := startAuditedAPIServer(t)
	mark := api.logMark()
	for _, tc := range []struct{ action, version string }{
		{"deny", "v1"},
		{"warn", "v1"},
		{"warn", "v1beta1"},
		{"audit", "v1"},
		{"warn,audit", "v1beta1"},
	} {
		t.Run(tc.action+"/"+tc.version, func(t *testing.T) {
			ctx := context.Background()
			scope := newScopeIn(t, api, "action-"+strings.ReplaceAll(tc.action, ",", "-")+"-"+tc.version)
			w := startWebhook(t, "", append(api.webhookCredentials(t, webhookBinary), "-validation-action", tc.action)...)
			hook := "validate-" + scope.namespace + ".webhook.example.com"
			registerValidating(t, hookOptions{name: hook, url: w.url("/validate"), caBundle: w.caPEM, scope: scope, versions: []string{tc.version}, seen: w.saw})

			warnings := &warningRecorder{}
			denied, message := scope.denied("rolled-out")
			denied.warnings = warnings
			err := denied.send(ctx, false)
			event := requestEvent(t, auditLog, denied)
			annotation, audited := event.Annotations[hook+"/"+wouldDenyAuditKey]

			var ours []string // the warnings that came from this webhook
			for _, text := range warnings.all() {
				if strings.HasPrefix(text, wouldDenyWarning) {
					ours = append(ours, text)
				}
			}
			warn, audit := strings.Contains(tc.action, "warn"), strings.Contains(tc.action, "audit")
			if !warn && !audit {
				want := fmt.Sprintf("admission webhook %q denied the request: ", hook)
				if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), message) {
					t.Fatalf("got %v, want a Forbidden error containing %q and %q", err, want, message)
				}
			} else if err != nil {
				t.Fatalf("with -validation-action %s: got %v, want the %s admitted", tc.action, err, denied)
			}

			switch {
			case warn && (len(ours) != 1 || !strings.Contains(ours[0], message)):
				t.Errorf("got warnings %q, want one beginning %q and containing %q", warnings.all(), wouldDenyWarning, message)
			case !warn && len(ours) > 0:
				t.Errorf("got warnings %q, want none from the webhook", ours)
			}
			switch {
			case audit && (!audited || !strings.Contains(annotation, message)):
				t.Errorf("the audit event has annotations %v, want %s containing %q", event.Annotations, hook+"/"+wouldDenyAuditKey, message)
			case !audit && audited:
				t.Errorf("the audit event has annotation %s=%q, want none", hook+"/"+wouldDenyAuditKey, annotation)
			}
			// Both tell of the same denial, in the same words.
			if warn && audit && len(ours) == 1 && ours[0] != wouldDenyWarning+annotation {
				t.Errorf("got warning %q and audit annotation %q, want the same message", ours[0], annotation)
			}
			if code := event.ResponseStatus; code == nil || (err == nil) != (code.Code >= 200 && code.Code < 300) {
				t.Errorf("the audit event has responseStatus %+v, want the answer the client had (%v)", event.ResponseStatus, err)
			}
		})
	}
	if log := api.logSince(mark); strings.Contains(log, "ailed calling webhook") || strings.Contains(log, "Failed to set admission audit annotation") {
		t.Errorf("the apiserver logged:\n%s", grepLines(log, "ailed"))
	}
}

// skipWithoutValidation skips a test of /validate's answers when
// deploy/webhooks.yaml registers no validating webhook.
func skipWithoutValidation(t *testing.T) {
	t.Helper()
	if _, ok := deployed(t)[validateRoute]; !ok {
		t.Skip("deploy/webhooks.yaml registers no validating webhook: /validate has no denial to roll out and no warning to show")
	}
}

// warningPolicy is a copier's policy.go of the tests' own, whose /validate
// answers allowedWithWarning for every object. The demonstration's policy
// warns about nothing, and stays as it is; this shows that a policy's own
// warning reaches the user by building the webhook with this file in
// place of policy.go, as a copier does (go build -overlay), so that it is
// the same plumbing, built the same way.
const warningPolicy = "testdata/warning-policy.go"

// TestPolicyWarning runs the webhook built with warningPolicy and checks
// that its warning reaches the client through the apiserver, and that the
// request is admitted.
func TestPolicyWarning(t *testing.T) {
	skipWithoutValidation(t)
	bin := buildWithPolicy(t, warningPolicy)

	ctx := context.Background()
	scope := newScope(t, "policy-warning")
	mark := apiserver.logMark()
	w := startWebhookBinary(t, bin, "", "127.0.0.1:0", nil)
	registerValidating(t, hookOptions{name: "validate-" + scope.namespace + ".webhook.example.com", url: w.url("/validate"), caBundle: w.caPEM, scope: scope, seen: w.saw})
	warnings := &warningRecorder{}
	warned := scope.admitted(validateRoute, "warned", 0)
	warned.warnings = warnings
	if err := warned.send(ctx, false); err != nil {
		t.Fatalf("the %s: got %v, want it admitted with a warning", warned, err)
	}
	want := fmt.Sprintf("%s %s is checked by the e2e's warning policy", warned.kind(), qualified(warned.namespace(), warned.name()))
	if got := warnings.all(); len(got) != 1 || got[0] != want {
		t.Errorf("got warnings %q, want [%q]", got, want)
	}
	noFailedCalls(t, mark)
}
