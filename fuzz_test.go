package main

import (
	"net/http"
	"testing"
)

// FuzzServe feeds arbitrary bodies to serve, with the tests' own patching
// and denying admit functions. Whatever comes in, the answer is never a
// panic; a 200 is an AdmissionReview in the request's version with its uid;
// anything else is a Status; a validating route never patches.
func FuzzServe(f *testing.F) {
	addReviewSeeds(f)
	handlers := map[bool]http.Handler{
		false: admissionHandler(discardLogger, patchingAdmit),
		true:  admissionHandler(discardLogger, denyingAdmit),
	}
	f.Fuzz(func(t *testing.T, body []byte, validating bool) {
		route := "/mutate"
		if validating {
			route = "/validate"
		}
		checkAnyAnswer(t, route, body, post(handlers[validating], route, body))
	})
}

// addReviewSeeds seeds a fuzzer of (body, validating) with every review in
// testdata/ and testdata/plumbing/ for both routes, and with bodies at the
// edges of the format.
func addReviewSeeds(f *testing.F) {
	for _, set := range []map[string][]byte{fixtures(f), plumbingReviews(f)} {
		for _, b := range set {
			f.Add(b, false)
			f.Add(b, true)
		}
	}
	for _, s := range []string{``, `{}`, `[]`, `null`, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE","object":{"metadata":{"labels":null}}}}`,
		`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"operation":"CREATE","object":{"metadata":null}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"UPDATE","object":{"kind":"Pod","spec":{"containers":[{}]}},"oldObject":[]}}`,
		"apiVersion: admission.k8s.io/v1\nkind: AdmissionReview\n"} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
}

// FuzzPolicy feeds arbitrary bodies to the policy's routes: whatever comes
// in, the policy answers (never a panic, which serve answers with 500), in
// the request's version and with its uid, and /validate never patches.
func FuzzPolicy(f *testing.F) {
	addReviewSeeds(f)
	p := policyWithDefaults(f)
	handlers := map[bool]http.Handler{
		false: admissionHandler(discardLogger, mutate(p)),
		true:  admissionHandler(discardLogger, validate(p)),
	}
	f.Fuzz(func(t *testing.T, body []byte, validating bool) {
		route := "/mutate"
		if validating {
			route = "/validate"
		}
		checkAnyAnswer(t, route, body, post(handlers[validating], route, body))
	})
}
