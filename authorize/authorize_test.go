package authorize

// The contract of /authorize's plumbing, Decide: what any authorize
// function's answer becomes, and how every body that is not a
// SubjectAccessReview is refused. These tests use authorize functions of
// their own, never rules.go's. The HTTP around it (the method, the content
// type, the body's size and pace, the log line) is the server's one path
// for every review, tested in the root package.

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/example/webhook/part"
)

// The tests' own authorize functions, one per answer.
var (
	allowing = func(context.Context, *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		return Allowed("the plumbing tests allow everything")
	}
	denying = func(_ context.Context, spec *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		return Denied("the plumbing tests deny " + spec.User)
	}
	indifferent = func(context.Context, *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		return NoOpinion()
	}
)

// sarIn is a SubjectAccessReview as the apiserver reads an answer: its
// version, its kind, and its status. It is decoded with encoding/json,
// independently of Decide's decoder.
type sarIn struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Spec       json.RawMessage `json:"spec"`
	Status     struct {
		Allowed         bool   `json:"allowed"`
		Denied          bool   `json:"denied"`
		Reason          string `json:"reason"`
		EvaluationError string `json:"evaluationError"`
	} `json:"status"`
}

// decided decides body with authorize, as the server does, and checks
// what every answer to a SubjectAccessReview must be: the request's
// version and kind, and never allowed and denied together, which the
// apiserver takes for an error.
func decided(t testing.TB, name string, authorize Func, body []byte) (sarIn, part.Decision) {
	t.Helper()
	d, err := Decide(authorize)(context.Background(), body)
	if err != nil {
		t.Fatalf("%s: got %v, want a review", name, err)
	}
	var in, out sarIn
	if err := json.Unmarshal(body, &in); err != nil {
		t.Fatalf("%s: the request does not decode: %v", name, err)
	}
	if err := json.Unmarshal(d.Review, &out); err != nil {
		t.Fatalf("%s: the answer %s does not decode: %v", name, d.Review, err)
	}
	if out.APIVersion != in.APIVersion || out.Kind != "SubjectAccessReview" {
		t.Errorf("%s: got %s %s, want %s SubjectAccessReview", name, out.APIVersion, out.Kind, in.APIVersion)
	}
	if out.Status.Allowed && out.Status.Denied {
		t.Errorf("%s: got allowed and denied together: %s", name, d.Review)
	}
	return out, d
}

// TestAuthorizeFixtures sends every SubjectAccessReview in testdata/,
// whoever it is for, and the plumbing's own, to each kind of answer.
func TestAuthorizeFixtures(t *testing.T) {
	tests := []struct {
		name                  string
		authorize             Func
		wantAllowed, wantDeny bool
		wantReason            string // with USER for the review's user
		wantVerdict           string
	}{
		{"allow", allowing, true, false, "the plumbing tests allow everything", "allowed"},
		{"deny", denying, false, true, "the plumbing tests deny USER", "denied"},
		{"no opinion", indifferent, false, false, "", "no_opinion"},
	}
	all := subjectAccessReviewFixtures(t)
	for name, body := range plumbingSubjectAccessReviews(t) {
		all["plumbing-"+name] = body
	}
	for name, body := range all {
		var review struct {
			Spec struct{ User string } `json:"spec"`
		}
		if err := json.Unmarshal(body, &review); err != nil {
			t.Fatal(err)
		}
		for _, tc := range tests {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				out, d := decided(t, name, tc.authorize, body)
				s := out.Status
				if want := strings.ReplaceAll(tc.wantReason, "USER", review.Spec.User); s.Allowed != tc.wantAllowed || s.Denied != tc.wantDeny || s.Reason != want {
					t.Errorf("got status %+v, want allowed=%v denied=%v reason %q", s, tc.wantAllowed, tc.wantDeny, tc.wantReason)
				}
				if d.Verdict != tc.wantVerdict {
					t.Errorf("got verdict %q, want %q", d.Verdict, tc.wantVerdict)
				}
			})
		}
	}
}

// TestAuthorizeSeesV1 checks that an authorize function is given the
// review's spec as authorization.k8s.io/v1, whatever version it came in.
func TestAuthorizeSeesV1(t *testing.T) {
	all := plumbingSubjectAccessReviews(t)
	for _, pair := range [][2]string{{"v1-get-configmap", "v1beta1-get-configmap"}, {"v1-get-version", "v1beta1-get-version"}} {
		var specs [2]*authorizationv1.SubjectAccessReviewSpec
		for i, name := range pair {
			record := func(_ context.Context, spec *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
				specs[i] = spec
				return NoOpinion()
			}
			decided(t, name, record, all[name])
		}
		if specs[0] == nil || specs[1] == nil {
			t.Fatalf("%v: the authorize function was not called", pair)
		}
		if !reflect.DeepEqual(specs[0], specs[1]) {
			t.Errorf("%s gave %+v, %s gave %+v; want the same", pair[0], specs[0], pair[1], specs[1])
		}
		if len(specs[1].User) == 0 {
			t.Errorf("%s: the spec lost its user", pair[1])
		}
	}
}

// TestAuthorizeBadInput: a body that is not a SubjectAccessReview the
// apiserver sends is refused with 400, saying why without quoting it.
func TestAuthorizeBadInput(t *testing.T) {
	sar := func(spec string) string {
		return `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":` + spec + `}`
	}
	tests := []struct {
		name, body  string
		wantMessage string // a part of the message
	}{
		{"empty body", "", "empty: expected a SubjectAccessReview"},
		{"malformed JSON", `{"apiVersion": "authorization.k8s.io/v1", "kind": `, "does not decode"},
		{"no kind", `{"spec":{"user":"jane"}}`, "no apiVersion or kind"},
		{"an AdmissionReview", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`, `kind "AdmissionReview": expected a SubjectAccessReview`},
		{"a SelfSubjectAccessReview", `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{}}`, `kind "SelfSubjectAccessReview"`},
		{"unknown version", `{"apiVersion":"authorization.k8s.io/v2","kind":"SubjectAccessReview","spec":{}}`, "authorization.k8s.io/v2"},
		{"no attributes", sar(`{"user":"jane"}`), "neither spec.resourceAttributes nor spec.nonResourceAttributes"},
		{"both attributes", sar(`{"user":"jane","resourceAttributes":{"verb":"get"},"nonResourceAttributes":{"path":"/","verb":"get"}}`), "both spec.resourceAttributes and spec.nonResourceAttributes"},
		{"spec of the wrong type", sar(`"jane"`), "does not decode"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decide(denying)(context.Background(), []byte(tc.body))
			var e *part.Error
			if !errors.As(err, &e) || e.Code != http.StatusBadRequest {
				t.Fatalf("got %v, want a *part.Error of 400", err)
			}
			if !strings.Contains(e.Message, tc.wantMessage) {
				t.Errorf("got message %q, want it to mention %q", e.Message, tc.wantMessage)
			}
			if len(e.Message) > 1024 {
				t.Errorf("message %q is too long", e.Message)
			}
		})
	}
}

// TestAuthorizePanicIsAnswered: a panic is the policy's failure, which the
// server answers with 500 and logs with the review's attributes; the
// panic's own value is not kept.
func TestAuthorizePanicIsAnswered(t *testing.T) {
	body := plumbingSubjectAccessReviews(t)["v1-get-configmap"]
	panicking := func(context.Context, *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		panic("token=hunter2")
	}
	d, err := Decide(panicking)(context.Background(), body)
	var p *part.Panic
	if !errors.As(err, &p) {
		t.Fatalf("got %v, want a *part.Panic", err)
	}
	if !attrsHave(d.Attrs, "user", plumbingUser) {
		t.Errorf("got attributes %v, want the review's user", d.Attrs)
	}
	if logged := p.LogValue().String() + p.Error(); strings.Contains(logged, "hunter2") {
		t.Errorf("the panic %q keeps its value", logged)
	}
}

// TestAllowedAndDeniedIsADenial: the apiserver reads a status with both
// set as a deny and an error (WebhookAuthorizer.Authorize), so Decide
// never sends one: it denies, saying why.
func TestAllowedAndDeniedIsADenial(t *testing.T) {
	body := plumbingSubjectAccessReviews(t)["v1-get-configmap"]
	both := func(context.Context, *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Denied: true, Reason: "confused"}
	}
	out, d := decided(t, "both", both, body)
	if out.Status.Allowed || !out.Status.Denied || !strings.Contains(out.Status.Reason, "both allowed and denied") {
		t.Errorf("got status %+v, want a denial whose reason says it answered both", out.Status)
	}
	if d.Verdict != "denied" || !attrsHave(d.Attrs, "error", "") {
		t.Errorf("got verdict %q and attributes %v: want a denial with an error", d.Verdict, d.Attrs)
	}
}

// TestAuthorizeUndecided: Undecided's answer is a 503 with its message,
// which the apiserver does not retry, and its authorizer's failurePolicy
// decides: never a status of no opinion, which it would cache.
func TestAuthorizeUndecided(t *testing.T) {
	body := plumbingSubjectAccessReviews(t)["v1-get-configmap"]
	undecided := func(context.Context, *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		return Undecided(errors.New("the view of the cluster is too stale"))
	}
	d, err := Decide(undecided)(context.Background(), body)
	var e *part.Error
	if !errors.As(err, &e) || e.Code != http.StatusServiceUnavailable || e.Message != "the view of the cluster is too stale" {
		t.Fatalf("got %v, want a *part.Error of 503 with the function's message", err)
	}
	if d.Attrs == nil {
		t.Error("no attributes: the server would not log the review's line")
	}
}

// TestAuthorizeLogLine checks the log line's attributes of a decision:
// who, which verb, on what; never the user's groups, extra or uid.
func TestAuthorizeLogLine(t *testing.T) {
	tests := map[string][]string{
		"v1-get-configmap":        {"verb=get", "resource=configmaps", "namespace=plumbing"},
		"v1beta1-get-configmap":   {"verb=get", "resource=configmaps", "namespace=plumbing"},
		"v1-get-deployment-scale": {"verb=get", "resource=apps/deployments", "subresource=scale"},
		"v1-get-version":          {"verb=get", "request_path=/version"},
	}
	all := plumbingSubjectAccessReviews(t)
	for name, want := range tests {
		_, d := decided(t, name, denying, all[name])
		line := slog.GroupValue(d.Attrs...).String()
		for _, w := range append(want, "user="+plumbingUser) {
			if !strings.Contains(line, w) {
				t.Errorf("%s: log attributes %s have no %q", name, line, w)
			}
		}
		for _, f := range []string{"plumbing-testers", "system:authenticated", "groups", "extra", "uid", "the plumbing tests deny"} {
			if strings.Contains(line, f) {
				t.Errorf("%s: log attributes %s have %q, which is beyond the review's attributes", name, line, f)
			}
		}
	}
}

// attrsHave reports whether attrs has key, with value unless it is "".
func attrsHave(attrs []slog.Attr, key, value string) bool {
	for _, a := range attrs {
		if a.Key == key && (value == "" || a.Value.String() == value) {
			return true
		}
	}
	return false
}

// FuzzAuthorize feeds arbitrary bodies to Decide: whatever comes in, it
// never panics; a review answered is a SubjectAccessReview in the
// request's version; anything else is a *part.Error of 400, never the
// 500 of a failure.
func FuzzAuthorize(f *testing.F) {
	for _, b := range subjectAccessReviewFixtures(f) {
		f.Add(b)
	}
	for _, b := range plumbingSubjectAccessReviews(f) {
		f.Add(b)
	}
	for _, s := range []string{``, `{}`, `null`, `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview"}`,
		`{"apiVersion":"authorization.k8s.io/v1beta1","kind":"SubjectAccessReview","spec":{"group":null,"nonResourceAttributes":{}}}`,
		`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"resourceAttributes":{"fieldSelector":{"requirements":[{}]}}}}`,
		`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","status":{"allowed":true,"denied":true}}`} {
		f.Add([]byte(s))
	}
	decide := Decide(denying)
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := decide(context.Background(), body)
		if err != nil {
			var e *part.Error
			if !errors.As(err, &e) || e.Code != http.StatusBadRequest || e.Message == "" {
				t.Fatalf("body %q: got %v, want a review or a *part.Error of 400", body, err)
			}
			return
		}
		gvk, _, err := decodeSubjectAccessReview(body)
		if err != nil {
			t.Fatalf("a review answered for a body that does not decode: %v", err)
		}
		var out sarIn
		if err := json.Unmarshal(d.Review, &out); err != nil || out.APIVersion != gvk.GroupVersion().String() || out.Kind != "SubjectAccessReview" {
			t.Fatalf("body %q: got %s, want a SubjectAccessReview of %s", body, d.Review, gvk.GroupVersion())
		}
	})
}
