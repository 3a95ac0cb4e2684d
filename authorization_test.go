package main

// The contract of /authorize's plumbing: what any authorize function's
// answer becomes on the wire, and how every bad input is refused. These
// tests use authorize functions of their own, never policy.go's.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/example/webhook/body"
)

// The tests' own authorize functions, one per answer.
var (
	allowingAuthorize = func(context.Context, *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		return allowedBecause("the plumbing tests allow everything")
	}
	denyingAuthorize = func(_ context.Context, spec *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		return deniedBecause("the plumbing tests deny " + spec.User)
	}
	indifferentAuthorize = func(context.Context, *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		return noOpinion()
	}
)

// authorizationHandler is the generic path for one authorize function, as
// the server runs it.
func authorizationHandler(logger *slog.Logger, authorize authorizeFunc) http.Handler {
	return newTestReviews(logger).authorizationHandler("/authorize", authorize)
}

// sarIn is a SubjectAccessReview as the apiserver reads an answer: its
// version, its kind, and its status. It is decoded with encoding/json,
// independently of the handler's decoder.
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

// checkSubjectAccessReview checks what every answer to a SubjectAccessReview
// must be: HTTP 200, JSON, the request's version and kind, and never allowed
// and denied together, which the apiserver takes for an error.
func checkSubjectAccessReview(t testing.TB, name string, body []byte, w *httptest.ResponseRecorder) sarIn {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("%s: got HTTP %d %s, want 200", name, w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: got Content-Type %q, want application/json", name, ct)
	}
	var in, out sarIn
	if err := json.Unmarshal(body, &in); err != nil {
		t.Fatalf("%s: the request does not decode: %v", name, err)
	}
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s: the answer %s does not decode: %v", name, w.Body, err)
	}
	if out.APIVersion != in.APIVersion || out.Kind != "SubjectAccessReview" {
		t.Errorf("%s: got %s %s, want %s SubjectAccessReview", name, out.APIVersion, out.Kind, in.APIVersion)
	}
	if out.Status.Allowed && out.Status.Denied {
		t.Errorf("%s: got allowed and denied together: %s", name, w.Body)
	}
	return out
}

// TestAuthorizeFixtures sends every SubjectAccessReview in
// testdata/authorization/, whoever it is for, and the plumbing's own, to
// each kind of answer.
func TestAuthorizeFixtures(t *testing.T) {
	tests := []struct {
		name                  string
		authorize             authorizeFunc
		wantAllowed, wantDeny bool
		wantReason            string // with USER for the review's user
	}{
		{"allow", allowingAuthorize, true, false, "the plumbing tests allow everything"},
		{"deny", denyingAuthorize, false, true, "the plumbing tests deny USER"},
		{"no opinion", indifferentAuthorize, false, false, ""},
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
				out := checkSubjectAccessReview(t, name, body, post(authorizationHandler(discardLogger, tc.authorize), "/authorize?timeout=3s", body))
				s := out.Status
				if want := strings.ReplaceAll(tc.wantReason, "USER", review.Spec.User); s.Allowed != tc.wantAllowed || s.Denied != tc.wantDeny || s.Reason != want {
					t.Errorf("got status %+v, want allowed=%v denied=%v reason %q", s, tc.wantAllowed, tc.wantDeny, tc.wantReason)
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
				return noOpinion()
			}
			checkSubjectAccessReview(t, name, all[name], post(authorizationHandler(discardLogger, record), "/authorize", all[name]))
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

func TestAuthorizeBadInput(t *testing.T) {
	review := plumbingSubjectAccessReviews(t)["v1-get-configmap"]
	huge := bytes.Repeat([]byte(" "), body.MaxBytes+1)
	admission := plumbingReviews(t)["v1-deployment-create"]
	sar := func(spec string) io.Reader {
		return strings.NewReader(`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":` + spec + `}`)
	}
	tests := []struct {
		name        string
		method      string
		contentType string
		body        io.Reader
		wantCode    int
		wantReason  metav1.StatusReason
		wantMessage string // a part of the message
	}{
		{"GET", http.MethodGet, "application/json", nil, 405, metav1.StatusReasonMethodNotAllowed, "authorization.k8s.io/v1beta1 is sent with POST"},
		{"text/plain", http.MethodPost, "text/plain", bytes.NewReader(review), 415, metav1.StatusReasonUnsupportedMediaType, "text/plain"},
		{"too large", http.MethodPost, "application/json", bytes.NewReader(huge), 413, metav1.StatusReasonRequestEntityTooLarge, fmt.Sprint(body.MaxBytes)},
		{"empty body", http.MethodPost, "application/json", nil, 400, metav1.StatusReasonBadRequest, "empty: expected a SubjectAccessReview"},
		{"malformed JSON", http.MethodPost, "application/json", strings.NewReader(`{"apiVersion": "authorization.k8s.io/v1", "kind": `), 400, metav1.StatusReasonBadRequest, "does not decode"},
		{"no kind", http.MethodPost, "application/json", strings.NewReader(`{"spec":{"user":"jane"}}`), 400, metav1.StatusReasonBadRequest, "no apiVersion or kind"},
		{"an AdmissionReview", http.MethodPost, "application/json", bytes.NewReader(admission), 400, metav1.StatusReasonBadRequest, `kind "AdmissionReview": expected a SubjectAccessReview`},
		{"a SelfSubjectAccessReview", http.MethodPost, "application/json", strings.NewReader(`{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{}}`), 400, metav1.StatusReasonBadRequest, `kind "SelfSubjectAccessReview"`},
		{"unknown version", http.MethodPost, "application/json", strings.NewReader(`{"apiVersion":"authorization.k8s.io/v2","kind":"SubjectAccessReview","spec":{}}`), 400, metav1.StatusReasonBadRequest, "authorization.k8s.io/v2"},
		{"no attributes", http.MethodPost, "application/json", sar(`{"user":"jane"}`), 400, metav1.StatusReasonBadRequest, "neither spec.resourceAttributes nor spec.nonResourceAttributes"},
		{"both attributes", http.MethodPost, "application/json", sar(`{"user":"jane","resourceAttributes":{"verb":"get"},"nonResourceAttributes":{"path":"/","verb":"get"}}`), 400, metav1.StatusReasonBadRequest, "both spec.resourceAttributes and spec.nonResourceAttributes"},
		{"spec of the wrong type", http.MethodPost, "application/json", sar(`"jane"`), 400, metav1.StatusReasonBadRequest, "does not decode"},
	}
	h := authorizationHandler(discardLogger, denyingAuthorize)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "/authorize", tc.body)
			if tc.contentType != "" {
				r.Header.Set("Content-Type", tc.contentType)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			s := checkStatusBody(t, w, tc.wantCode, tc.wantReason)
			if !strings.Contains(s.Message, tc.wantMessage) {
				t.Errorf("got message %q, want it to mention %q", s.Message, tc.wantMessage)
			}
			if len(s.Message) > 1024 {
				t.Errorf("message %q is too long", s.Message)
			}
		})
	}
}

// TestAuthorizePanicIsAnswered: a panic is a 500 with a Status, which the
// apiserver retries and then settles by the authorizer's failurePolicy;
// the panic's own value is not logged.
func TestAuthorizePanicIsAnswered(t *testing.T) {
	body := plumbingSubjectAccessReviews(t)["v1-get-configmap"]
	var logs bytes.Buffer
	panicking := func(context.Context, *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		panic("token=hunter2")
	}
	w := post(authorizationHandler(slog.New(slog.NewTextHandler(&logs, nil)), panicking), "/authorize", body)
	checkStatusBody(t, w, http.StatusInternalServerError, metav1.StatusReasonInternalError)
	for _, want := range []string{"panicked", "user=" + plumbingUser, "panic.type=string"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log %q does not contain %q", logs.String(), want)
		}
	}
	if strings.Contains(logs.String(), "hunter2") {
		t.Errorf("log %q contains the panic's value", logs.String())
	}
}

// TestAllowedAndDeniedIsADenial: the apiserver reads a status with both
// set as a deny and an error (WebhookAuthorizer.Authorize), so the plumbing
// never sends one: it denies, saying why.
func TestAllowedAndDeniedIsADenial(t *testing.T) {
	body := plumbingSubjectAccessReviews(t)["v1-get-configmap"]
	both := func(context.Context, *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Denied: true, Reason: "confused"}
	}
	var logs bytes.Buffer
	out := checkSubjectAccessReview(t, "both", body, post(authorizationHandler(slog.New(slog.NewTextHandler(&logs, nil)), both), "/authorize", body))
	if out.Status.Allowed || !out.Status.Denied || !strings.Contains(out.Status.Reason, "both allowed and denied") {
		t.Errorf("got status %+v, want a denial whose reason says it answered both", out.Status)
	}
	if !strings.Contains(logs.String(), "verdict=denied") || !strings.Contains(logs.String(), "error=") {
		t.Errorf("log %q: want a denial with an error", logs.String())
	}
}

// TestAuthorizeLogLine checks the one log line per decision: who, which
// verb, on what, and the verdict; never the user's groups, extra or uid.
func TestAuthorizeLogLine(t *testing.T) {
	user := "user=" + plumbingUser
	tests := map[string][]string{
		"v1-get-configmap":        {user, "verb=get", "resource=configmaps", "namespace=plumbing", "verdict=denied"},
		"v1beta1-get-configmap":   {user, "verb=get", "resource=configmaps", "namespace=plumbing", "verdict=denied"},
		"v1-get-deployment-scale": {user, "verb=get", "resource=apps/deployments", "subresource=scale", "verdict=denied"},
		"v1-get-version":          {user, "verb=get", "request_path=/version", "verdict=denied"},
	}
	all := plumbingSubjectAccessReviews(t)
	for name, want := range tests {
		var logs bytes.Buffer
		checkSubjectAccessReview(t, name, all[name], post(authorizationHandler(slog.New(slog.NewTextHandler(&logs, nil)), denyingAuthorize), "/authorize", all[name]))
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		if len(lines) != 1 {
			t.Fatalf("%s: got %d log lines, want 1:\n%s", name, len(lines), logs.String())
		}
		for _, w := range append(want, "path=/authorize") {
			if !strings.Contains(lines[0], w) {
				t.Errorf("%s: log line %s has no %q", name, lines[0], w)
			}
		}
		for _, f := range []string{"plumbing-testers", "system:authenticated", "groups", "extra", "uid", "the plumbing tests deny"} {
			if strings.Contains(lines[0], f) {
				t.Errorf("%s: log line %s has %q, which is beyond the review's attributes", name, lines[0], f)
			}
		}
	}
}

// FuzzAuthorize feeds arbitrary bodies to /authorize: whatever comes in,
// the answer is never a panic; a 200 is a SubjectAccessReview in the
// request's version; anything else is a Status.
func FuzzAuthorize(f *testing.F) {
	addSubjectAccessReviewSeeds(f)
	h := authorizationHandler(discardLogger, denyingAuthorize)
	f.Fuzz(func(t *testing.T, body []byte) {
		checkAnyAuthorizeAnswer(t, body, post(h, "/authorize", body))
	})
}

// addSubjectAccessReviewSeeds seeds a fuzzer of bodies with every
// SubjectAccessReview in testdata/authorization/ and bodies at the edges of
// the format.
func addSubjectAccessReviewSeeds(f *testing.F) {
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
}

// checkAnyAuthorizeAnswer checks the answer to an arbitrary body: a 200 is
// a well-formed SubjectAccessReview answer; anything else is a Status; the
// webhook never fails with 500, which is how a panic is answered.
func checkAnyAuthorizeAnswer(t *testing.T, body []byte, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code == http.StatusInternalServerError {
		t.Fatalf("HTTP 500 (a panic?) for body %q: %s", body, w.Body)
	}
	if w.Code != http.StatusOK {
		var s statusIn
		if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil || s.Kind != "Status" || s.Code != w.Code || s.Message == "" {
			t.Fatalf("HTTP %d with body %q, want a Status", w.Code, w.Body)
		}
		return
	}
	gvk, _, err := decodeSubjectAccessReview(body)
	if err != nil {
		t.Fatalf("HTTP 200 for a body that does not decode: %v", err)
	}
	checkSubjectAccessReview(t, fmt.Sprint(gvk), []byte(fmt.Sprintf(`{"apiVersion":%q}`, gvk.GroupVersion())), w)
}
