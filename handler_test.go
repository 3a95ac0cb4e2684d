package main

// The contract of the generic path, serve: what any admit function's answer
// becomes on the wire, and how every bad input is refused. These tests use
// admit functions of their own, never policy.go's, so they pass unchanged
// whatever the policy says.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/example/webhook/body"
)

// discardLogger drops what handlers log in tests that do not read it.
var discardLogger = slog.New(slog.DiscardHandler)

// testLabel is the label patchingAdmit sets.
var testLabel = keyValue{Key: "plumbing.test/seen", Value: "true"}

// patchingAdmit is a mutating policy of the tests' own: it sets testLabel
// on every object it is sent, and lets a DELETE, which has no object,
// through unchanged.
func patchingAdmit(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation == admissionv1.Delete {
		return allowed()
	}
	meta, err := decodeMetadata(req.Object)
	if err != nil {
		return errored(http.StatusBadRequest, err)
	}
	return patched(setLabels(meta, []keyValue{testLabel}))
}

// denyingAdmit is a validating policy of the tests' own: it refuses every
// object it is sent, naming it.
func denyingAdmit(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation == admissionv1.Delete {
		return denied("the plumbing tests refuse every request")
	}
	meta, err := decodeMetadata(req.Object)
	if err != nil {
		return errored(http.StatusBadRequest, err)
	}
	return denied(fmt.Sprintf("the plumbing tests refuse %s %s", req.Kind.Kind, objectName(req, meta)))
}

// TestServeFixtures sends every review in testdata/ through serve with a
// patching and a denying admit function and checks what the apiserver
// checks: the version, the uid, patch and patchType together, a patch
// that applies and changes nothing a second time, and a denial's Status.
func TestServeFixtures(t *testing.T) {
	mutating := admissionHandler(discardLogger, patchingAdmit)
	validating := admissionHandler(discardLogger, denyingAdmit)
	for name, body := range fixtures(t) {
		t.Run(name, func(t *testing.T) {
			in := decodeReviewIn(t, body)

			out := checkReview(t, "/mutate", in, post(mutating, "/mutate?timeout=10s", body))
			if !out.Response.Allowed {
				t.Fatalf("/mutate: got allowed=false (%+v), want true", out.Response.Status)
			}
			if in.Request.Operation == "DELETE" {
				if out.Response.Patch != nil {
					t.Errorf("/mutate of a DELETE: got patch %s, want none", out.Response.Patch)
				}
			} else {
				patchedObject := applyPatch(t, in.Request.Object, decodePatch(t, out.Response.Patch))
				before, after := metadataMap(t, in.Request.Object, "labels"), metadataMap(t, patchedObject, "labels")
				if after[testLabel.Key] != testLabel.Value {
					t.Errorf("/mutate: the patched object has labels %v, want %s among them", after, testLabel)
				}
				for k, v := range before {
					if after[k] != v {
						t.Errorf("/mutate: label %s=%q became %q; every other label must be kept", k, v, after[k])
					}
				}
				again := checkReview(t, "/mutate again", in, post(mutating, "/mutate", withObject(t, body, patchedObject)))
				if again.Response.Patch != nil {
					t.Errorf("/mutate of the patched object: got patch %s, want none", again.Response.Patch)
				}
			}

			out = checkReview(t, "/validate", in, post(validating, "/validate?timeout=10s", body))
			s := out.Response.Status
			if out.Response.Allowed || s == nil || s.Code != http.StatusForbidden || s.Reason != metav1.StatusReasonForbidden || s.Status != metav1.StatusFailure {
				t.Fatalf("/validate: got allowed=%v status %+v, want a denial with code 403, reason Forbidden", out.Response.Allowed, s)
			}
			if !strings.Contains(s.Message, "the plumbing tests refuse") {
				t.Errorf("/validate: got message %q, want the admit function's", s.Message)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	all := plumbingReviews(t)
	deployment := all["v1-deployment-create"]
	secret := all["v1-secret-create"]
	huge := bytes.Repeat([]byte(" "), body.MaxBytes+1)
	tests := []struct {
		name        string
		method      string
		contentType string
		target      string
		body        io.Reader
		wantCode    int
		wantReason  metav1.StatusReason
		wantMessage string // a part of the message
	}{
		{"GET", http.MethodGet, "application/json", "/mutate", nil, 405, metav1.StatusReasonMethodNotAllowed, "POST"},
		{"PUT", http.MethodPut, "application/json", "/validate", bytes.NewReader(deployment), 405, metav1.StatusReasonMethodNotAllowed, "PUT"},
		{"text/plain", http.MethodPost, "text/plain", "/mutate", bytes.NewReader(deployment), 415, metav1.StatusReasonUnsupportedMediaType, "text/plain"},
		{"no Content-Type", http.MethodPost, "", "/mutate", bytes.NewReader(deployment), 415, metav1.StatusReasonUnsupportedMediaType, "application/json"},
		{"YAML", http.MethodPost, "application/yaml", "/mutate", bytes.NewReader(deployment), 415, metav1.StatusReasonUnsupportedMediaType, "application/yaml"},
		{"too large, declared", http.MethodPost, "application/json", "/mutate", bytes.NewReader(huge), 413, metav1.StatusReasonRequestEntityTooLarge, fmt.Sprint(body.MaxBytes)},
		{"chunked", http.MethodPost, "application/json", "/mutate", io.MultiReader(bytes.NewReader(deployment)) /* unknown length, as chunked */, 411, metav1.StatusReasonBadRequest, "Content-Length"},
		{"empty body", http.MethodPost, "application/json", "/mutate", nil, 400, metav1.StatusReasonBadRequest, "empty"},
		{"malformed JSON", http.MethodPost, "application/json", "/mutate", strings.NewReader(`{"apiVersion": "admission.k8s.io/v1", "kind": `), 400, metav1.StatusReasonBadRequest, "does not decode"},
		{"JSON array", http.MethodPost, "application/json", "/mutate", strings.NewReader(`[]`), 400, metav1.StatusReasonBadRequest, "AdmissionReview"},
		{"no kind", http.MethodPost, "application/json", "/mutate", strings.NewReader(`{}`), 400, metav1.StatusReasonBadRequest, "no apiVersion or kind"},
		{"secret without kind is not echoed", http.MethodPost, "application/json", "/mutate", bytes.NewReader(bytes.Replace(secret, []byte(`"kind": "AdmissionReview",`), nil, 1)), 400, metav1.StatusReasonBadRequest, "no apiVersion or kind"},
		{"not a review", http.MethodPost, "application/json", "/mutate", strings.NewReader(`{"apiVersion":"v1","kind":"Status"}`), 400, metav1.StatusReasonBadRequest, `kind "Status"`},
		{"unknown version", http.MethodPost, "application/json", "/validate", strings.NewReader(`{"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview","request":{"uid":"x"}}`), 400, metav1.StatusReasonBadRequest, "admission.k8s.io/v2"},
		{"no request", http.MethodPost, "application/json", "/mutate", strings.NewReader(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), 400, metav1.StatusReasonBadRequest, "no request"},
		{"v1beta1 no request", http.MethodPost, "application/json", "/mutate", strings.NewReader(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","response":{"allowed":true}}`), 400, metav1.StatusReasonBadRequest, "no request"},
		{"request of the wrong type", http.MethodPost, "application/json", "/mutate", strings.NewReader(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":"yes"}`), 400, metav1.StatusReasonBadRequest, "does not decode"},
		{"bad timeout", http.MethodPost, "application/json", "/mutate?timeout=soon", bytes.NewReader(deployment), 400, metav1.StatusReasonBadRequest, `timeout="soon"`},
		{"negative timeout", http.MethodPost, "application/json", "/mutate?timeout=-1s", bytes.NewReader(deployment), 400, metav1.StatusReasonBadRequest, "timeout"},
	}
	h := admissionHandler(discardLogger, patchingAdmit)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.target, tc.body)
			if tc.contentType != "" {
				r.Header.Set("Content-Type", tc.contentType)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			s := checkStatusBody(t, w, tc.wantCode, tc.wantReason)
			if !strings.Contains(s.Message, tc.wantMessage) {
				t.Errorf("got message %q, want it to mention %q", s.Message, tc.wantMessage)
			}
			if strings.Contains(s.Message, "s3cr3t") || strings.Contains(s.Message, base64.StdEncoding.EncodeToString([]byte("s3cr3t"))[:6]) || len(s.Message) > 1024 {
				t.Errorf("message %q quotes the body or is too long", s.Message)
			}
			if tc.wantCode == http.StatusMethodNotAllowed && w.Header().Get("Allow") != http.MethodPost {
				t.Errorf("got Allow %q, want POST", w.Header().Get("Allow"))
			}
		})
	}
}

func TestUndecodableObject(t *testing.T) {
	all := plumbingReviews(t)
	tests := []struct {
		name, fixture string
		object        string // replaces request.object; "" removes it
		wantMessage   string
	}{
		{"array", "v1-deployment-create", `[1, 2, 3]`, "does not decode"},
		{"string", "v1beta1-deployment-create", `"a deployment"`, "does not decode"},
		{"metadata of the wrong type", "v1-widget-create", `{"metadata": {"annotations": ["a"]}}`, "does not decode"},
		{"missing on CREATE", "v1-deployment-create", ``, "carries no object"},
	}
	for _, tc := range tests {
		for _, route := range []string{"/mutate", "/validate"} {
			t.Run(tc.name+route, func(t *testing.T) {
				body := all[tc.fixture]
				if tc.object == "" {
					body = withObject(t, body, json.RawMessage("null"))
				} else {
					body = withObject(t, body, json.RawMessage(tc.object))
				}
				admit := patchingAdmit
				if route == "/validate" {
					admit = denyingAdmit
				}
				out := checkReview(t, route, decodeReviewIn(t, all[tc.fixture]), post(admissionHandler(discardLogger, admit), route, body))
				s := out.Response.Status
				if out.Response.Allowed || s == nil || s.Code != http.StatusBadRequest || s.Reason != metav1.StatusReasonBadRequest {
					t.Fatalf("got allowed=%v status %+v, want allowed=false, code 400, reason BadRequest", out.Response.Allowed, s)
				}
				if !strings.Contains(s.Message, tc.wantMessage) {
					t.Errorf("got message %q, want it to mention %q", s.Message, tc.wantMessage)
				}
				if out.Response.Patch != nil {
					t.Errorf("got a patch with an error")
				}
			})
		}
	}
}

// TestObjectWithoutMetadata covers an object with no metadata at all, which
// the apiserver never sends but a hand-made request can: a patch must make
// the whole path, and a denial must still name the object.
func TestObjectWithoutMetadata(t *testing.T) {
	body := withObject(t, plumbingReviews(t)["v1-widget-create"], json.RawMessage(`{"apiVersion":"example.com/v1","kind":"Widget"}`))
	in := decodeReviewIn(t, body)
	out := checkReview(t, "/mutate", in, post(admissionHandler(discardLogger, patchingAdmit), "/mutate", body))
	patched := applyPatch(t, in.Request.Object, decodePatch(t, out.Response.Patch))
	if got := metadataMap(t, patched, "labels"); got[testLabel.Key] != testLabel.Value {
		t.Errorf("patched object has labels %v, want %s", got, testLabel)
	}
	out = checkReview(t, "/validate", in, post(admissionHandler(discardLogger, denyingAdmit), "/validate", body))
	if out.Response.Allowed || !strings.Contains(out.Response.Status.Message, "Widget ") {
		t.Errorf("got allowed=%v %+v, want a denial naming the Widget", out.Response.Allowed, out.Response.Status)
	}
}

func TestPanicIsAnswered(t *testing.T) {
	body := plumbingReviews(t)["v1-deployment-create"]
	uid := decodeReviewIn(t, body).Request.UID
	tests := []struct {
		name      string
		admit     admitFunc
		wantLog   string
		forbidLog string
	}{
		{"panic with a value of the policy's", func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			panic("password=hunter2")
		}, "panicked", "hunter2"},
		{"runtime error", func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			var m map[string]int
			m[req.Name]++ // assignment to a nil map
			return allowed()
		}, "assignment to entry in nil map", ""},
		// No answer is the policy's failure too: the same 500, not a
		// refusal inside a review, so failurePolicy decides either way.
		{"no answer", func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			return nil
		}, "the policy returned no answer", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			w := post(admissionHandler(slog.New(slog.NewTextHandler(&logs, nil)), tc.admit), "/mutate", body)
			s := checkStatusBody(t, w, http.StatusInternalServerError, metav1.StatusReasonInternalError)
			if !strings.Contains(s.Message, uid) {
				t.Errorf("got message %q, want it to name the uid %s", s.Message, uid)
			}
			if w.Header().Get("Retry-After") != "" {
				t.Errorf("a 500 with Retry-After makes the apiserver retry; got %q", w.Header().Get("Retry-After"))
			}
			for _, want := range []string{"uid=" + uid, tc.wantLog} {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("log %q does not contain %q", logs.String(), want)
				}
			}
			if tc.forbidLog != "" && strings.Contains(logs.String(), tc.forbidLog) {
				t.Errorf("log contains the panic's value %q, which may be an object's content", tc.forbidLog)
			}
		})
	}
}

// TestSharedAnswer: an admit function may return one answer to every
// request. Under many concurrent reviews, each is answered with its own
// uid, and the shared answer is never written to (go test -race sees a
// write from two requests at once).
func TestSharedAnswer(t *testing.T) {
	shared := allowedWithWarning("one answer for every request")
	h := admissionHandler(discardLogger, func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse { return shared })
	var review map[string]any
	if err := json.Unmarshal(plumbingReviews(t)["v1-deployment-create"], &review); err != nil {
		t.Fatal(err)
	}
	const reviews = 2000
	bodies := make([][]byte, reviews)
	for i := range bodies {
		review["request"].(map[string]any)["uid"] = fmt.Sprintf("uid-%d", i)
		var err error
		if bodies[i], err = json.Marshal(review); err != nil {
			t.Fatal(err)
		}
	}
	wrong := make(chan string, reviews)
	var wg sync.WaitGroup
	for i, body := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out reviewIn
			w := post(h, "/validate", body)
			if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out.Response == nil || out.Response.UID != fmt.Sprintf("uid-%d", i) {
				wrong <- fmt.Sprintf("review uid-%d: got HTTP %d %s", i, w.Code, w.Body)
			}
		}()
	}
	wg.Wait()
	close(wrong)
	n := 0
	for msg := range wrong {
		if n++; n <= 5 {
			t.Error(msg)
		}
	}
	if n > 0 {
		t.Errorf("%d of %d reviews were answered with another request's uid, or none", n, reviews)
	}
	if shared.UID != "" || !reflect.DeepEqual(shared.Warnings, []string{"one answer for every request"}) {
		t.Errorf("the shared answer was written to: %+v", shared)
	}
}

func TestTimeoutIsTheDeadline(t *testing.T) {
	body := plumbingReviews(t)["v1-deployment-create"]
	tests := []struct {
		query    string
		min, max time.Duration
	}{
		{"?timeout=2s", time.Second, 2 * time.Second},
		{"?timeout=500ms", 0, 500 * time.Millisecond},
		{"", maxWebhookTimeout - time.Second, maxWebhookTimeout},
		{"?timeout=1h", maxWebhookTimeout - time.Second, maxWebhookTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			var left time.Duration
			admit := func(ctx context.Context, _ *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
				deadline, ok := ctx.Deadline()
				if !ok {
					t.Error("the admit function's context has no deadline")
				}
				left = time.Until(deadline)
				return allowed()
			}
			checkReview(t, "/validate", decodeReviewIn(t, body), post(admissionHandler(discardLogger, admit), "/validate"+tc.query, body))
			if left <= tc.min || left > tc.max {
				t.Errorf("got %s left before the deadline, want (%s, %s]", left, tc.min, tc.max)
			}
		})
	}
}

// TestLogsNoObjectValues checks the one log line per review, and that no
// value of the object reaches it: the object may be a Secret.
func TestLogsNoObjectValues(t *testing.T) {
	secretValue := "s3cr3t-value-that-must-never-be-logged"
	forbidden := []string{
		secretValue,
		base64.StdEncoding.EncodeToString([]byte(secretValue)),
		"nginx:1.14.2", // a container image from the Deployments' spec
		"payments",     // an annotation value
	}
	for name, body := range plumbingReviews(t) {
		for _, admit := range []admitFunc{patchingAdmit, denyingAdmit} {
			var logs bytes.Buffer
			checkReview(t, name, decodeReviewIn(t, body), post(admissionHandler(slog.New(slog.NewJSONHandler(&logs, nil)), admit), "/x", body))
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("%s: got %d log lines, want 1:\n%s", name, len(lines), logs.String())
			}
			var line map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{"path", "uid", "operation", "kind", "name", "user", "verdict", "duration", "proto"} {
				if _, ok := line[key]; !ok {
					t.Errorf("%s: log line %s has no %q", name, lines[0], key)
				}
			}
			for _, f := range forbidden {
				if strings.Contains(logs.String(), f) {
					t.Errorf("%s: log %s contains %q, a value of the object", name, lines[0], f)
				}
			}
		}
	}
}

func TestObjectName(t *testing.T) {
	tests := []struct {
		resource        string // of the request, in the core group
		namespace, name string // of the request
		meta            *objectMetadata
		want            string
	}{
		{"deployments", "shop", "web", &objectMetadata{Name: "web"}, "shop/web"},
		{"clusterroles", "", "cluster-wide", &objectMetadata{Name: "cluster-wide"}, "cluster-wide"},
		{"deployments", "shop", "", &objectMetadata{Name: "from-metadata"}, "shop/from-metadata"},
		{"deployments", "shop", "", &objectMetadata{GenerateName: "web-"}, "shop/web-*"},
		{"deployments", "shop", "", &objectMetadata{Absent: true}, "shop/"},
		{"deployments", "", "", nil, ""},
		// The apiserver names a Namespace in request.namespace too
		// (testdata/v1-namespace-*.json).
		{"namespaces", "team-a", "team-a", &objectMetadata{Name: "team-a"}, "team-a"},
		{"namespaces", "team-a", "team-a", nil, "team-a"},
	}
	for _, tc := range tests {
		req := &admissionv1.AdmissionRequest{Resource: metav1.GroupVersionResource{Version: "v1", Resource: tc.resource}, Namespace: tc.namespace, Name: tc.name}
		if got := objectName(req, tc.meta); got != tc.want {
			t.Errorf("objectName(%s, namespace %q, name %q, %+v) = %q, want %q", tc.resource, tc.namespace, tc.name, tc.meta, got, tc.want)
		}
	}
}

func TestObjectMeta(t *testing.T) {
	tests := []struct {
		object  string
		want    objectMetadata
		wantErr string
	}{
		{`{"metadata":{"name":"a","namespace":"n","generateName":"g","labels":{"l":"1"},"annotations":{"a":"2"},"managedFields":[{}]}}`,
			objectMetadata{Name: "a", GenerateName: "g", Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "2"}}, ""},
		{`{"metadata":{}}`, objectMetadata{}, ""},
		{`{"metadata":null}`, objectMetadata{Absent: true}, ""},
		{`{"kind":"Widget"}`, objectMetadata{Absent: true}, ""},
		// Case-sensitive, as the apiserver decodes: "Labels" is not "labels".
		{`{"metadata":{"Labels":{"l":"1"}}}`, objectMetadata{}, ""},
		{``, objectMetadata{}, "carries no object"},
		{`null`, objectMetadata{}, "carries no object"},
		{`{"metadata":{"labels":["l"]}}`, objectMetadata{}, "does not decode"},
	}
	for _, tc := range tests {
		got, err := decodeMetadata(runtime.RawExtension{Raw: []byte(tc.object)})
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("decodeMetadata(%s): got error %v, want one saying %q", tc.object, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("decodeMetadata(%s) = %+v, %v; want %+v", tc.object, got, err, tc.want)
		}
	}
}

// TestDecodeObject decodes what a policy that reads more than metadata
// reads, a Pod's containers, from a captured Pod CREATE.
func TestDecodeObject(t *testing.T) {
	type container struct {
		Name  string `json:"name"`
		Image string `json:"image"`
	}
	var pod struct {
		Spec struct {
			InitContainers []container `json:"initContainers"`
			Containers     []container `json:"containers"`
		} `json:"spec"`
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(plumbingReviews(t)["v1-pod-create"], &review); err != nil {
		t.Fatal(err)
	}
	if err := decodeObject(review.Request.Object, &pod); err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.InitContainers) == 0 || len(pod.Spec.Containers) == 0 {
		t.Fatalf("got %+v, want init containers and containers", pod.Spec)
	}
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		if c.Name == "" || c.Image == "" {
			t.Errorf("got container %+v, want a name and an image", c)
		}
	}
	if err := decodeObject(review.Request.OldObject, &pod); err == nil || !strings.Contains(err.Error(), "carries no object") {
		t.Errorf("decoding the oldObject of a CREATE: got %v, want an error saying there is none", err)
	}
}

func TestVerdict(t *testing.T) {
	tests := []struct {
		resp *admissionv1.AdmissionResponse
		want string
	}{
		{allowed(), "allowed"},
		{patched([]patchOp{{Op: "add", Path: "/a", Value: "b"}}), "patched"},
		{patched(nil), "allowed"},
		{denied("no"), "denied"},
		{&admissionv1.AdmissionResponse{Result: &metav1.Status{Code: http.StatusUnprocessableEntity}}, "denied"},
		{&admissionv1.AdmissionResponse{}, "denied"},
		{errored(http.StatusBadRequest, errors.New("bad object")), "errored"},
		{errored(http.StatusInternalServerError, errors.New("broken")), "errored"},
	}
	for _, tc := range tests {
		if got := admissionVerdict(tc.resp); got != tc.want {
			t.Errorf("admissionVerdict(%+v) = %q, want %q", tc.resp, got, tc.want)
		}
	}
}
