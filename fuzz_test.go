package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// FuzzServe feeds arbitrary bodies to both handlers. Whatever comes in, the
// answer is never a panic; a 200 is an AdmissionReview in the request's
// version with its uid; anything else is a Status; /validate never patches.
func FuzzServe(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
		f.Add(b, true)
	}
	for _, s := range []string{``, `{}`, `[]`, `null`, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`,
		`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"operation":"CREATE","object":{"metadata":null}}}`,
		"apiVersion: admission.k8s.io/v1\nkind: AdmissionReview\n"} {
		f.Add([]byte(s), false)
	}
	handlers := map[bool]http.Handler{
		false: serve(discardLogger, mutate(defaultPolicy)),
		true:  serve(discardLogger, validate(defaultPolicy)),
	}
	f.Fuzz(func(t *testing.T, body []byte, validating bool) {
		w := post(handlers[validating], "/", body)
		if w.Code != http.StatusOK {
			var s statusIn
			if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil || s.Kind != "Status" || s.Code != w.Code || s.Message == "" {
				t.Fatalf("HTTP %d with body %q, want a Status", w.Code, w.Body)
			}
			return
		}
		// The request decoded, so it names its version and uid.
		gvk, req, err := decodeReview(body)
		if err != nil {
			t.Fatalf("HTTP 200 for a body that does not decode: %v", err)
		}
		var out reviewIn
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatalf("answer %s is not JSON: %v", w.Body, err)
		}
		if out.APIVersion != gvk.GroupVersion().String() || out.Kind != "AdmissionReview" || out.Response == nil {
			t.Fatalf("answer %s is not an AdmissionReview of %s", w.Body, gvk.GroupVersion())
		}
		if out.Response.UID != string(req.UID) {
			t.Fatalf("answer uid %q, want %q", out.Response.UID, req.UID)
		}
		if validating && (out.Response.Patch != nil || out.Response.PatchType != nil) {
			t.Fatalf("/validate answered with a patch: %s", w.Body)
		}
		if (out.Response.Patch == nil) != (out.Response.PatchType == nil) {
			t.Fatalf("patch and patchType must come together: %s", w.Body)
		}
	})
}
