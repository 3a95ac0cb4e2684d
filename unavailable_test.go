package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/example/webhook/part"
)

// TestUnavailableLetsFailurePolicyDecide: an answer whose code is a 5xx,
// unavailable's or errored's, is sent as that HTTP status with a Status
// carrying its message, not as a review, on /validate under every
// -validation-action and on /mutate, so that the apiserver's failurePolicy
// decides; no Retry-After, which would make the apiserver retry. Its log
// line says errored and the code, never the message. A 4xx refusal stays
// in the review.
func TestUnavailableLetsFailurePolicyDecide(t *testing.T) {
	body := plumbingReviews(t)["v1-deployment-create"]
	uid := decodeReviewIn(t, body).Request.UID
	const why = "the webhook's view of serviceaccounts is not synced yet: secret=hunter2"
	for _, tc := range []struct {
		name   string
		answer *admissionv1.AdmissionResponse
		code   int
		reason metav1.StatusReason
		denied part.RewriteDenial
	}{
		{"unavailable", unavailable(errors.New(why)), http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, nil},
		{"unavailable with a rewriter of denials", unavailable(errors.New(why)), http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, func(*admissionv1.AdmissionResponse) (*admissionv1.AdmissionResponse, string) {
			t.Error("an unavailable answer was rewritten as a denial")
			return allowed(), "rewritten"
		}},
		{"errored with 500", errored(http.StatusInternalServerError, errors.New(why)), http.StatusInternalServerError, metav1.StatusReasonInternalError, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			h := newTestReviews(slog.New(slog.NewJSONHandler(&logs, nil))).admissionRoute("/validate", func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
				return tc.answer
			}, tc.denied)
			w := post(h, "/validate?timeout=5s", body)
			s := checkStatusBody(t, w, tc.code, tc.reason)
			if s.Message != why {
				t.Errorf("got message %q, want %q", s.Message, why)
			}
			if w.Header().Get("Retry-After") != "" {
				t.Errorf("got Retry-After %q: the apiserver would retry", w.Header().Get("Retry-After"))
			}
			line := reviewLine(t, &logs)
			if line["verdict"] != "errored" || line["code"] != float64(tc.code) || line["uid"] != uid {
				t.Errorf("got log line %v, want verdict errored, code %d, uid %s", line, tc.code, uid)
			}
			if strings.Contains(logs.String(), "hunter2") {
				t.Errorf("the log holds the message: %s", &logs)
			}
		})
	}
	t.Run("a 4xx refusal stays in the review", func(t *testing.T) {
		admit := func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			return errored(http.StatusConflict, errors.New("taken"))
		}
		out := checkReview(t, "/validate", decodeReviewIn(t, body), post(admissionHandler(discardLogger, admit), "/validate", body))
		if out.Response.Allowed || out.Response.Status.Code != http.StatusConflict {
			t.Errorf("got %+v, want a refusal with 409 in the review", out.Response)
		}
	})
}

// TestPartRoutesKeepTheRewriter: a part whose Denials is nil, as
// rollout's is under deny, leaves the rewriter another part set.
func TestPartRoutesKeepTheRewriter(t *testing.T) {
	rewrite := func(d *admissionv1.AdmissionResponse) (*admissionv1.AdmissionResponse, string) { return d, "rewritten" }
	parts := []part.Part{
		{Name: "sets", Denials: func() part.RewriteDenial { return rewrite }},
		{Name: "none", Denials: func() part.RewriteDenial { return nil }},
	}
	_, got, err := partRoutes(parts, part.Env{})
	if err != nil || got == nil {
		t.Fatalf("got %v, %v; want the first part's rewriter", got, err)
	}
	if _, verdict := got(&admissionv1.AdmissionResponse{}); verdict != "rewritten" {
		t.Errorf("got verdict %q, want the first part's rewriter's", verdict)
	}
}
