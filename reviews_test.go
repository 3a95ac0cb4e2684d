package main

// The plumbing tests' own reviews, which no policy change touches.

import (
	"path/filepath"
	"testing"
)

// plumbingReviews returns the plumbing tests' AdmissionReviews, by name:
// copies of reviews recorded from a real kube-apiserver v1.37.1, kept in
// testdata/plumbing/ apart from the fixtures in testdata/, which are the
// copier's to replace. The plumbing's tests, benchmarks and fuzzers read
// these, so they neither know nor break on the copier's fixtures.
func plumbingReviews(t testing.TB) map[string][]byte {
	t.Helper()
	return readBodies(t, filepath.Join("testdata", "plumbing"))
}
