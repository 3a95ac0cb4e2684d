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
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	// And a 2 MB UPDATE, for bench's burst of large reviews only.
	all := plumbingReviews(t)
	update2m := inflate(t, all["v1-deployment-update-other-annotations"], 1800<<10, nil, "object", "oldObject")
	for _, b := range append(benchBodies(t), struct {
		name string
		body []byte
	}{"update-2m", update2m}) {
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
			h := reviews.admissionRoute("/"+route.name, route.admit, nil)
			b.Run(body.name+"/"+route.name, func(b *testing.B) {
				b.SetBytes(int64(len(body.body)))
				benchServe(b, h, "/"+route.name, body.body)
			})
		}
	}
}

// benchServe sends body to h at route, once each iteration of b, as the
// apiserver does, with no allocation of its own, failing on any answer but
// a 200.
func benchServe(b *testing.B, h http.Handler, route string, body []byte) {
	b.ReportAllocs()
	r := httptest.NewRequest(http.MethodPost, route+"?timeout=10s", nil)
	r.Header.Set("Content-Type", "application/json")
	w := &discardWriter{header: http.Header{}}
	rd := bytes.NewReader(nil)
	for b.Loop() {
		rd.Reset(body)
		r.Body, r.ContentLength = nopCloser{rd}, int64(len(body))
		clear(w.header)
		w.code = 0
		h.ServeHTTP(w, r)
		if w.code != 0 && w.code != http.StatusOK {
			b.Fatalf("got HTTP %d", w.code)
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

// toolboxPods are the objects BenchmarkToolbox patches: the plumbing's
// captured Pod (3 KB, two containers and an init container) and a Pod of
// about 1 MB made from it, 40 containers each with a large env, as a Pod
// of a big batch job or a service mesh's may be.
func toolboxPods(tb testing.TB) []struct {
	name   string
	object runtime.RawExtension
} {
	tb.Helper()
	var review struct {
		Request struct {
			Object json.RawMessage `json:"object"`
		} `json:"request"`
	}
	if err := json.Unmarshal(plumbingReviews(tb)["v1-pod-create"], &review); err != nil {
		tb.Fatal(err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(review.Request.Object, &pod); err != nil {
		tb.Fatal(err)
	}
	small, err := json.Marshal(&pod)
	if err != nil {
		tb.Fatal(err)
	}
	const containers, envPerContainer = 40, 290
	template := pod.Spec.Containers[0]
	pod.Spec.Containers = nil
	for i := range containers {
		c := *template.DeepCopy()
		c.Name = fmt.Sprintf("app-%02d", i)
		for j := range envPerContainer {
			c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("SETTING_%05d", j), Value: fmt.Sprintf("value-%05d-of-a-moderately-long-configuration-entry", j)})
		}
		pod.Spec.Containers = append(pod.Spec.Containers, c)
	}
	large, err := json.Marshal(&pod)
	if err != nil {
		tb.Fatal(err)
	}
	return []struct {
		name   string
		object runtime.RawExtension
	}{
		{"pod-3k", runtime.RawExtension{Raw: small}},
		{"pod-1m", runtime.RawExtension{Raw: large}},
	}
}

// BenchmarkToolbox is what each block of the policy's toolbox costs on one
// Pod (docs/patching.md gives the figures): the readers decodeMetadata and
// decodeObject (into benchPodMounts, what the injector reads), setLabels and
// setAnnotations given the metadata, patchObject with one default deep in
// the spec, and issue 34's sidecar injector built with patchObject against
// the same patch written by hand.
func BenchmarkToolbox(b *testing.B) {
	want := []keyValue{{"example.com/team", "web"}}
	for _, pod := range toolboxPods(b) {
		meta, err := decodeMetadata(pod.object)
		if err != nil {
			b.Fatal(err)
		}
		for _, block := range []struct {
			name string
			run  func(obj runtime.RawExtension) error
		}{
			{"decodeMetadata", func(obj runtime.RawExtension) error { _, err := decodeMetadata(obj); return err }},
			{"setLabels", func(runtime.RawExtension) error { setLabels(meta, want); return nil }},
			{"setAnnotations", func(runtime.RawExtension) error { setAnnotations(meta, want); return nil }},
			{"decodeObject", func(obj runtime.RawExtension) error { var pod benchPodMounts; return decodeObject(obj, &pod) }},
			{"patchObject-one-default", func(obj runtime.RawExtension) error {
				edit, err := patchObject(obj)
				if err != nil {
					return err
				}
				edit.setDefault(true, "spec", "securityContext", "runAsNonRoot")
				_, err = edit.patch()
				return err
			}},
			{"injector-patchObject", func(obj runtime.RawExtension) error { _, err := benchInjectWithPatchObject(obj); return err }},
			{"injector-by-hand", func(obj runtime.RawExtension) error { _, err := benchInjectByHand(obj); return err }},
		} {
			b.Run(block.name+"/"+pod.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := block.run(pod.object); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// The sidecar of issue 34's injector: a container, the volume it shares,
// and that volume mounted in every container of the Pod.
var (
	benchSidecarVolume    = corev1.Volume{Name: "agent-config", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	benchSidecarMount     = corev1.VolumeMount{Name: "agent-config", MountPath: "/etc/agent", ReadOnly: true}
	benchSidecarContainer = corev1.Container{Name: "log-agent", Image: "registry.example.com/log-agent:1.0", VolumeMounts: []corev1.VolumeMount{benchSidecarMount}}
)

// benchPodMounts is what the injector reads of a Pod to be idempotent: the
// names of its containers, of their mounts, and of its volumes.
type benchPodMounts struct {
	Spec struct {
		Containers []struct {
			Name         string       `json:"name"`
			VolumeMounts []benchNamed `json:"volumeMounts"`
		} `json:"containers"`
		Volumes []benchNamed `json:"volumes"`
	} `json:"spec"`
}

type benchNamed struct {
	Name string `json:"name"`
}

func benchHasNamed(list []benchNamed, name string) bool {
	return slices.ContainsFunc(list, func(n benchNamed) bool { return n.Name == name })
}

// benchInjectWithPatchObject is the injector built with patchObject: what is missing is
// appended, and patchObject works out whether each list exists.
func benchInjectWithPatchObject(obj runtime.RawExtension) ([]patchOp, error) {
	var pod benchPodMounts
	if err := decodeObject(obj, &pod); err != nil {
		return nil, err
	}
	edit, err := patchObject(obj)
	if err != nil {
		return nil, err
	}
	hasSidecar := false
	for i, c := range pod.Spec.Containers {
		hasSidecar = hasSidecar || c.Name == benchSidecarContainer.Name
		if !benchHasNamed(c.VolumeMounts, benchSidecarMount.Name) {
			edit.appendTo(benchSidecarMount, "spec", "containers", strconv.Itoa(i), "volumeMounts")
		}
	}
	if !hasSidecar {
		edit.appendTo(benchSidecarContainer, "spec", "containers")
	}
	if !benchHasNamed(pod.Spec.Volumes, benchSidecarVolume.Name) {
		edit.appendTo(benchSidecarVolume, "spec", "volumes")
	}
	return edit.patch()
}

// benchInjectByHand is the same patch written by hand from benchPodMounts
// alone: a missing or null list is added whole, else appended to.
func benchInjectByHand(obj runtime.RawExtension) ([]patchOp, error) {
	var pod benchPodMounts
	if err := decodeObject(obj, &pod); err != nil {
		return nil, err
	}
	var ops []patchOp
	appendOp := func(exists bool, value any, path ...string) {
		if exists {
			ops = append(ops, patchOp{Op: "add", Path: jsonPointer(path...) + "/-", Value: value})
		} else {
			ops = append(ops, patchOp{Op: "add", Path: jsonPointer(path...), Value: []any{value}})
		}
	}
	hasSidecar := false
	for i, c := range pod.Spec.Containers {
		hasSidecar = hasSidecar || c.Name == benchSidecarContainer.Name
		if !benchHasNamed(c.VolumeMounts, benchSidecarMount.Name) {
			appendOp(c.VolumeMounts != nil, benchSidecarMount, "spec", "containers", strconv.Itoa(i), "volumeMounts")
		}
	}
	if !hasSidecar {
		appendOp(pod.Spec.Containers != nil, benchSidecarContainer, "spec", "containers")
	}
	if !benchHasNamed(pod.Spec.Volumes, benchSidecarVolume.Name) {
		appendOp(pod.Spec.Volumes != nil, benchSidecarVolume, "spec", "volumes")
	}
	return ops, nil
}

// TestInjectors checks that BenchmarkToolbox's two injectors compare like
// with like: on each Pod, and on Pods with lists missing, null or empty,
// their patches apply and give the same Pod, which a second pass leaves
// as it is.
func TestInjectors(t *testing.T) {
	objects := map[string][]byte{
		"no lists":    []byte(`{"spec":{"containers":[{"name":"a"},{"name":"b","volumeMounts":null}]}}`),
		"empty lists": []byte(`{"spec":{"containers":[{"name":"a","volumeMounts":[]}],"volumes":[]}}`),
		"half done":   []byte(`{"spec":{"containers":[{"name":"a","volumeMounts":[{"name":"agent-config"}]},{"name":"b"}],"volumes":null}}`),
	}
	for _, pod := range toolboxPods(t) {
		objects[pod.name] = pod.object.Raw
	}
	for name, object := range objects {
		t.Run(name, func(t *testing.T) {
			var after [2][]byte
			for i, inject := range []func(runtime.RawExtension) ([]patchOp, error){benchInjectWithPatchObject, benchInjectByHand} {
				ops, err := inject(runtime.RawExtension{Raw: object})
				if err != nil {
					t.Fatal(err)
				}
				after[i] = applyPatch(t, object, ops)
				if again, err := inject(runtime.RawExtension{Raw: after[i]}); err != nil || len(again) > 0 {
					t.Errorf("injector %d, a second pass: got %v, %v; want no operations", i, again, err)
				}
			}
			if !sameJSON(t, after[0], after[1]) {
				t.Errorf("patchObject's injector gave\n%.2000s\nthe one by hand\n%.2000s", after[0], after[1])
			}
		})
	}
}
