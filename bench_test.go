package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var writeBenchBodies = flag.String("write-bench-bodies", "", "write the benchmark bodies into this `directory` (used by bench/)")

// benchBodies are the reviews the benchmarks send, made from the
// plumbing's captured reviews: a Deployment CREATE as the apiserver sends it (2–3 KB), a Pod
// of about 100 KB, and an UPDATE of about 1 MB carrying object and
// oldObject.
func benchBodies(tb testing.TB) []struct {
	name string
	body []byte
} {
	tb.Helper()
	all := plumbingReviews(tb)
	var deployment bytes.Buffer
	if err := json.Compact(&deployment, all["v1-deployment-create"]); err != nil {
		tb.Fatal(err)
	}
	pod := inflate(tb, all["v1-deployment-create"], 100<<10, func(req map[string]any) {
		// A Pod made of the Deployment's pod template.
		obj := req["object"].(map[string]any)
		tmpl := obj["spec"].(map[string]any)["template"].(map[string]any)
		meta := obj["metadata"].(map[string]any)
		req["kind"] = map[string]any{"group": "", "version": "v1", "kind": "Pod"}
		req["resource"] = map[string]any{"group": "", "version": "v1", "resource": "pods"}
		req["requestKind"], req["requestResource"] = req["kind"], req["resource"]
		req["object"] = map[string]any{"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": "nginx-pod", "namespace": meta["namespace"], "labels": tmpl["metadata"].(map[string]any)["labels"]},
			"spec":     tmpl["spec"]}
	}, "object")
	update := inflate(tb, all["v1-deployment-update-other-annotations"], 1<<20, nil, "object", "oldObject")
	return []struct {
		name string
		body []byte
	}{
		{"deployment-2k", deployment.Bytes()},
		{"pod-100k", pod},
		{"update-1m", update},
	}
}

// inflate grows the first container's env in each named object of review
// until the review is about size bytes, as a large real object would be.
func inflate(tb testing.TB, review []byte, size int, reshape func(req map[string]any), objects ...string) []byte {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal(review, &m); err != nil {
		tb.Fatal(err)
	}
	req := m["request"].(map[string]any)
	if reshape != nil {
		reshape(req)
	}
	perObject := (size - len(review)) / len(objects)
	for _, name := range objects {
		obj := req[name].(map[string]any)
		spec := obj["spec"].(map[string]any)
		if tmpl, ok := spec["template"]; ok {
			spec = tmpl.(map[string]any)["spec"].(map[string]any)
		}
		container := spec["containers"].([]any)[0].(map[string]any)
		var env []any
		for i := 0; i*80 < perObject; i++ {
			env = append(env, map[string]any{"name": fmt.Sprintf("SETTING_%05d", i), "value": fmt.Sprintf("value-%05d-of-a-moderately-long-configuration-entry", i)})
		}
		container["env"] = env
	}
	out, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// TestWriteBenchBodies writes the bodies for bench/, which sends the same
// ones over the network, when asked with -write-bench-bodies.
func TestWriteBenchBodies(t *testing.T) {
	if *writeBenchBodies == "" {
		t.Skip("only with -write-bench-bodies DIR")
	}
	for _, b := range benchBodies(t) {
		if err := os.WriteFile(filepath.Join(*writeBenchBodies, b.name+".json"), b.body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkHandler is the whole of /mutate and /validate for one review,
// with policy.go's policy as the binary runs it: read (with room in the
// budget for a large body), decode, admit, encode, count in the metrics, log (to a discarding
// handler).
func BenchmarkHandler(b *testing.B) {
	p := policyWithDefaults(b)
	reviews := newTestReviews(discardLogger)
	for _, body := range benchBodies(b) {
		for _, route := range []struct {
			name  string
			admit admitFunc
		}{{"mutate", mutate(p)}, {"validate", validate(p)}} {
			h := reviews.admission("/"+route.name, route.admit, validationAction{})
			b.Run(body.name+"/"+route.name, func(b *testing.B) {
				b.SetBytes(int64(len(body.body)))
				b.ReportAllocs()
				r := httptest.NewRequest(http.MethodPost, "/"+route.name+"?timeout=10s", nil)
				r.Header.Set("Content-Type", "application/json")
				w := &discardWriter{header: http.Header{}}
				rd := bytes.NewReader(nil)
				for b.Loop() {
					rd.Reset(body.body)
					r.Body, r.ContentLength = nopCloser{rd}, int64(len(body.body))
					clear(w.header)
					w.code = 0
					h.ServeHTTP(w, r)
					if w.code != 0 && w.code != http.StatusOK {
						b.Fatalf("got HTTP %d", w.code)
					}
				}
			})
		}
	}
}

// BenchmarkDecode is the UniversalDeserializer's decode of the same bodies
// alone: the part of the handler's cost the design fixes, against which
// the handler's own overhead shows.
func BenchmarkDecode(b *testing.B) {
	for _, body := range benchBodies(b) {
		b.Run(body.name, func(b *testing.B) {
			b.SetBytes(int64(len(body.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := admissionDecoder.Decode(body.body, nil, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type nopCloser struct{ *bytes.Reader }

// discardWriter is a ResponseWriter that keeps nothing, so the benchmark
// measures the handler rather than a recorder. net/http's own writer is
// reused across requests on a connection in the same way.
type discardWriter struct {
	header http.Header
	code   int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

// SetReadDeadline is what a server connection offers http.ResponseController,
// so the handler's deadline costs here what it costs when served.
func (w *discardWriter) SetReadDeadline(time.Time) error { return nil }

func (nopCloser) Close() error { return nil }
