package main

import (
	"bytes"
	"net/http"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

// FuzzServe feeds arbitrary bodies to the generic path, with the tests' own
// patching and denying admit functions. Whatever comes in, the answer is
// never a panic; a 200 is an AdmissionReview in the request's version with
// its uid; anything else is a Status; a validating route never patches.
// And decodeMetadata, which reads an object only as far as its metadata, reads
// what a full decode of the object reads (objectMetaFullDecode).
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
		if _, req, err := decodeAdmissionReview(body); err == nil {
			for _, obj := range []runtime.RawExtension{req.Object, req.OldObject} {
				checkObjectMeta(t, obj)
			}
		}
	})
}

// checkObjectMeta holds decodeMetadata to a full decode of the object: the
// same metadata, or an error from both. An object whose metadata member is
// written twice is left out: a decoder keeps the last, decodeMetadata the
// first, and the apiserver writes each member once.
func checkObjectMeta(t *testing.T, obj runtime.RawExtension) {
	t.Helper()
	got, err := decodeMetadata(obj)
	want, wantErr := objectMetaFullDecode(obj)
	if (err != nil) != (wantErr != nil) {
		if bytes.Count(obj.Raw, []byte(`"metadata"`)) > 1 {
			return
		}
		t.Fatalf("decodeMetadata(%s) = %+v, %v; a full decode gives %+v, %v", obj.Raw, got, err, want, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) && bytes.Count(obj.Raw, []byte(`"metadata"`)) <= 1 {
		t.Fatalf("decodeMetadata(%s) = %+v; a full decode gives %+v", obj.Raw, got, want)
	}
}

// objectMetaFullDecode is decodeMetadata as it was: a decode of the whole
// object, every member scanned, into a struct holding metadata alone.
func objectMetaFullDecode(obj runtime.RawExtension) (*objectMetadata, error) {
	var partial struct {
		Metadata *objectMetadata `json:"metadata"`
	}
	if err := decodeObject(obj, &partial); err != nil {
		return nil, err
	}
	if partial.Metadata == nil {
		return &objectMetadata{Absent: true}, nil
	}
	return partial.Metadata, nil
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
