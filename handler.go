package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	goruntime "runtime"
	"runtime/debug"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/json"

	"github.com/example/webhook/convert"
	"github.com/example/webhook/limits"
)

// admitFunc decides on one admission request, never returning nil. It sees
// neither HTTP nor globals, leaves the UID to serve, and its ctx ends at
// the apiserver's deadline. policy.go makes them.
type admitFunc func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

// allowed admits the request unchanged.
func allowed() *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true}
}

// allowedWithWarning admits the request unchanged and warns the user, for
// a deprecation or a soft limit: kubectl prints "Warning: <message>". Keep
// it to one line, its point first (legibleWarnings says why). To patch and
// warn, set the Warnings of patched's answer.
func allowedWithWarning(message string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true, Warnings: []string{message}}
}

// patched admits the request with ops applied. With no ops it sets neither
// patch nor patchType: the apiserver rejects one without the other.
func patched(ops []patchOp) *admissionv1.AdmissionResponse {
	if len(ops) == 0 {
		return allowed()
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return errored(http.StatusInternalServerError, fmt.Errorf("encoding the patch: %w", err))
	}
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt}
}

// denied refuses the request with 403 Forbidden. The apiserver shows the
// user `admission webhook "<name>" denied the request: <message>`.
func denied(message string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusForbidden,
		Reason:  metav1.StatusReasonForbidden,
		Message: message,
	}}
}

// errored refuses a request the webhook could not judge, such as one whose
// object does not decode, still with HTTP 200: the apiserver shows the
// message only from a review.
func errored(code int32, err error) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    code,
		Reason:  reasonForCode(code),
		Message: err.Error(),
	}}
}

// objectMetadata is the part of an object's metadata that most policies
// read; the namespace is req.Namespace. For more, decodeObject decodes
// only the fields a policy reads: the whole object costs as much again as
// the review.
type objectMetadata struct {
	Name         string            `json:"name,omitempty"`
	GenerateName string            `json:"generateName,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`

	// Missing is true when the object has no metadata at all, which the
	// apiserver never sends but a hand-made request can.
	Missing bool `json:"-"`
}

// objectMeta decodes the metadata of req.Object or req.OldObject, of any
// kind, skipping the rest of metadata: managedFields above all, most of
// the work of decoding it.
func objectMeta(obj runtime.RawExtension) (*objectMetadata, error) {
	var partial struct {
		Metadata *objectMetadata `json:"metadata"`
	}
	if err := decodeObject(obj, &partial); err != nil {
		return nil, err
	}
	if partial.Metadata == nil {
		return &objectMetadata{Missing: true}, nil
	}
	return partial.Metadata, nil
}

// decodeObject decodes the object under review, obj being req.Object or
// req.OldObject, into into: a pointer to a struct holding just the fields
// the policy reads, each tagged with its JSON name, such as
//
//	type container struct {
//		Name  string `json:"name"`
//		Image string `json:"image"`
//	}
//	var pod struct {
//		Spec struct {
//			Containers []container `json:"containers"`
//		} `json:"spec"`
//	}
//
// Decoding is case-sensitive, as in the apiserver: a field without its tag
// (Image for "image") stays empty. Unknown fields are skipped. An absent
// object (req.Object on DELETE) is an error.
func decodeObject(obj runtime.RawExtension, into any) error {
	if len(obj.Raw) == 0 || bytes.Equal(obj.Raw, []byte("null")) {
		return errors.New("the request carries no object to admit")
	}
	if err := json.Unmarshal(obj.Raw, into); err != nil {
		return fmt.Errorf("the object does not decode as a Kubernetes object: %w", err)
	}
	return nil
}

// objectName names the object for a message: "namespace/name", or "name"
// if cluster-scoped; on CREATE with generateName, the prefix and "*".
func objectName(req *admissionv1.AdmissionRequest, meta *objectMetadata) string {
	name := req.Name
	if name == "" && meta != nil {
		name = meta.Name
		if name == "" && meta.GenerateName != "" {
			name = meta.GenerateName + "*"
		}
	}
	if req.Namespace == "" {
		return name
	}
	return req.Namespace + "/" + name
}

// HTTP ⇄ review: one generic path for every kind of review and route.

const (
	// maxBodyBytes caps what a review may be. The apiserver accepts request
	// bodies up to 3 MiB and a review can carry both object and oldObject,
	// so 2 × 3 MiB plus the envelope fits; anything larger is not from it.
	maxBodyBytes = 7 << 20

	// maxWebhookTimeout is the largest timeoutSeconds a webhook
	// configuration may set; the apiserver never waits longer.
	maxWebhookTimeout = 30 * time.Second
)

// overloadStatus answers a review that cannot be served before its
// deadline, without Retry-After. kube-apiserver v1.37.1 calls an admission
// webhook with client-go's rest.Request.Do (k8s.io/apiserver/pkg/admission/
// plugin/webhook/validating/dispatcher.go, callHook; mutating likewise),
// which retries a 429 or 5xx only with Retry-After
// (k8s.io/client-go/rest/with_retry.go, checkWait and IsNextRetry); without
// it, this Status's message is the error failurePolicy judges. A retry
// could not be served in the overloadMargin left and would only add load
// (e2e TestOverloadAnswer; with Retry-After: 0 the user saw "context
// deadline exceeded" instead). 429, not 503, so that
// apiserver_admission_webhook_rejection_count{rejection_code} tells it from
// the 503 of a webhook it cannot reach (dispatcher.go,
// NewServiceUnavailable). On /authorize the apiserver retries a 429 with
// backoff whatever the headers (authorization.go), and soon finds room.
const overloadStatus = http.StatusTooManyRequests

// overloadMargin is how long before a request's deadline it stops waiting
// for the byte budget, so that its answer still arrives in time.
const overloadMargin = 250 * time.Millisecond

// reviewServer is what every review route shares: the log, the metrics,
// and the byte budget with the turn of large bodies (body.go).
type reviewServer struct {
	logger  *slog.Logger
	metrics *metrics // nil: nothing is counted
	// budget bounds the bytes of large reviews being read and decoded at
	// once (defaultMaxInflightBytes says why); nil: no bound.
	budget *limits.Budget
	turn   *limits.Budget // of one: the large body being read; set with budget
}

// newReviewServer serves with metrics and a budget of budgetBytes.
func newReviewServer(logger *slog.Logger, m *metrics, budgetBytes int64) *reviewServer {
	return &reviewServer{logger: logger, metrics: m, budget: limits.NewBudget(budgetBytes), turn: limits.NewBudget(1)}
}

// A reviewKind is one kind of review the generic path serves:
// admissionReviews or subjectAccessReviews (authorization.go).
type reviewKind struct {
	name string // what a body must be, for messages: wantAdmissionReview
	// review decodes body, decides, and encodes the answer.
	review func(ctx context.Context, body []byte) outcome
}

// outcome is what one request came to.
type outcome struct {
	code    int    // the HTTP status
	body    []byte // the encoded review for code 200
	message string // otherwise, the message of the Status written
	verdict string // the review's, for the log line and the metrics; "" without one
	// attrs name the review for its log line (admissionAttrs).
	attrs    []slog.Attr
	panicked []any  // when not nil, what to log of a panic of the policy
	cut      string // why the body clock cut the body ("stalled", "too_slow"), or ""
}

// failed is the outcome of a request that has no review to answer.
func failed(code int, message string) outcome {
	return outcome{code: code, message: message}
}

// handle returns the handler of one route. It checks method, content
// type, declared size, timeout, then the body (body.go), in that order,
// answering a failure with its HTTP status and a metav1.Status the
// apiserver passes to the user; then kind decodes, decides and encodes
// (HTTP 200). One line is logged per review.
func (s *reviewServer) handle(route string, kind reviewKind) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		s.metrics.inFlightAdd(route, 1)
		defer s.metrics.inFlightAdd(route, -1)
		o := s.serve(w, r, kind)
		if o.code == http.StatusOK {
			w.Header().Set("Content-Type", "application/json")
			if _, err := w.Write(o.body); err != nil {
				s.logger.LogAttrs(r.Context(), slog.LevelWarn, "writing the answer failed", append(o.attrs, slog.Any("err", err))...)
			}
		} else {
			if o.cut != "" {
				// The client has stopped sending: nothing more will be read.
				w.Header().Set("Connection", "close")
				s.metrics.bodyCut(o.cut)
			}
			writeStatus(w, o.code, o.message)
		}
		took := time.Since(start)
		s.metrics.request(route, o.code, o.verdict, took)
		if o.panicked != nil {
			s.metrics.panicked(route)
			s.logger.LogAttrs(r.Context(), slog.LevelError, "the policy panicked", append(o.attrs, slog.Group("panic", o.panicked...))...)
		}
		if o.verdict != "" {
			attrs := make([]slog.Attr, 0, len(o.attrs)+4) // one allocation for the line
			attrs = append(attrs, slog.String("path", r.URL.Path))
			attrs = append(attrs, o.attrs...)
			attrs = append(attrs, slog.String("verdict", o.verdict), slog.Duration("duration", took), slog.String("proto", r.Proto))
			s.logger.LogAttrs(r.Context(), slog.LevelInfo, "review", attrs...)
		}
	})
}

func (s *reviewServer) serve(w http.ResponseWriter, r *http.Request, kind reviewKind) outcome {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return failed(http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed: %s is sent with POST", r.Method, kind.name))
	}
	if mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mediaType != "application/json" {
		return failed(http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q is not supported: %s is sent as application/json", r.Header.Get("Content-Type"), kind.name))
	}
	// A declared length over the cap is refused before reading a byte.
	if r.ContentLength > maxBodyBytes {
		return failed(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes, the most %s can be", maxBodyBytes, kind.name))
	}
	ctx, cancel, err := requestContext(r)
	if err != nil {
		return failed(http.StatusBadRequest, err.Error())
	}
	defer cancel()
	deadline, _ := ctx.Deadline()
	clock := limits.NewBodyClock(r, http.NewResponseController(w), deadline, bodyStallTimeout, minBodyRate)
	read := s.readBody(ctx, w, r, &clock, kind.name)
	if read.fail != nil {
		return *read.fail
	}
	defer s.giveBack(read.held)
	return kind.review(ctx, read.body)
}

// requestContext ends the request's context at the apiserver's ?timeout=
// (a Go duration, such as "10s"), or else at maxWebhookTimeout.
func requestContext(r *http.Request) (context.Context, context.CancelFunc, error) {
	timeout := maxWebhookTimeout
	if q, ok := timeoutParameter(r.URL.RawQuery); ok {
		d, err := time.ParseDuration(q)
		if err != nil || d <= 0 {
			return nil, nil, fmt.Errorf("query parameter timeout=%q is not a positive duration such as 10s", q)
		}
		timeout = min(d, maxWebhookTimeout)
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	return ctx, cancel, nil
}

// timeoutParameter returns the first timeout=VALUE of a raw query string,
// without r.URL.Query()'s map of them all (two allocations per review).
func timeoutParameter(rawQuery string) (string, bool) {
	for rest := rawQuery; rest != ""; {
		var pair string
		pair, rest, _ = strings.Cut(rest, "&")
		if v, ok := strings.CutPrefix(pair, "timeout="); ok {
			if unescaped, err := url.QueryUnescape(v); err == nil {
				return unescaped, true
			}
			return v, true
		}
	}
	return "", false
}

// maxErrorDetail bounds how much of a decoder's error reaches a message, so
// a huge or hostile body cannot make a huge answer.
const maxErrorDetail = 256

// describeDecodeError says why a body is not the review wanted without
// quoting it, as apimachinery's "Kind is missing" does: it may be a Secret.
func describeDecodeError(gvk *schema.GroupVersionKind, err error, want string) error {
	switch {
	case runtime.IsMissingKind(err), runtime.IsMissingVersion(err):
		return fmt.Errorf("request body has no apiVersion or kind: expected %s", want)
	case runtime.IsNotRegisteredError(err) && gvk != nil:
		return notA(*gvk, want)
	}
	detail := err.Error()
	if len(detail) > maxErrorDetail {
		detail = strings.ToValidUTF8(detail[:maxErrorDetail], "") + "…"
	}
	return fmt.Errorf("request body does not decode (expected %s): %s", want, detail)
}

func notA(gvk schema.GroupVersionKind, want string) error {
	return fmt.Errorf("request body is apiVersion %q, kind %q: expected %s", gvk.GroupVersion(), gvk.Kind, want)
}

// callSafely calls decide and turns a panic into log attributes instead of
// a dropped connection. The panic's value is logged only when the runtime
// made it: one the policy made may hold a Secret's contents.
func callSafely[T any](decide func() T) (result T, panicked []any) {
	defer func() {
		if p := recover(); p != nil {
			panicked = []any{"stack", string(debug.Stack())}
			if rerr, ok := p.(goruntime.Error); ok {
				panicked = append(panicked, "value", rerr.Error())
			} else {
				panicked = append(panicked, "type", fmt.Sprintf("%T", p))
			}
		}
	}()
	return decide(), nil
}

// writeStatus answers a request that has no review to answer with a
// metav1.Status, the body the apiserver reads a message from.
func writeStatus(w http.ResponseWriter, code int, message string) {
	out, err := json.Marshal(&metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure,
		Code:     int32(code),
		Reason:   reasonForCode(int32(code)),
		Message:  message,
	})
	if err != nil {
		// A Status of plain strings always encodes; keep the code anyway.
		http.Error(w, message, code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(out)
}

// reasonForCode is the reason Kubernetes clients switch on for each code
// the webhook answers with: StatusReasonInternalError for any other.
func reasonForCode(code int32) metav1.StatusReason {
	if reason, ok := reasonsForCodes[code]; ok {
		return reason
	}
	return metav1.StatusReasonInternalError
}

var reasonsForCodes = map[int32]metav1.StatusReason{
	http.StatusBadRequest:            metav1.StatusReasonBadRequest,
	http.StatusUnauthorized:          metav1.StatusReasonUnauthorized,
	http.StatusForbidden:             metav1.StatusReasonForbidden,
	http.StatusMethodNotAllowed:      metav1.StatusReasonMethodNotAllowed,
	http.StatusRequestTimeout:        metav1.StatusReasonTimeout,
	http.StatusRequestEntityTooLarge: metav1.StatusReasonRequestEntityTooLarge,
	http.StatusUnsupportedMediaType:  metav1.StatusReasonUnsupportedMediaType,
	http.StatusTooManyRequests:       metav1.StatusReasonTooManyRequests,
	http.StatusServiceUnavailable:    metav1.StatusReasonServiceUnavailable,
}

const wantAdmissionReview = "an AdmissionReview of admission.k8s.io/v1 or admission.k8s.io/v1beta1"

// decoderOf decodes the kinds that add register, in the versions they
// register, and nothing else: any other kind fails to decode, but for a
// few unversioned meta kinds, such as v1 Status, that registering any API
// group registers too. (AddToScheme fails only on conflicting
// registrations, which distinct group versions cannot have.)
func decoderOf(add ...func(*runtime.Scheme) error) runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, f := range add {
		_ = f(scheme)
	}
	return serializer.NewCodecFactory(scheme).UniversalDeserializer()
}

// admissionDecoder decodes AdmissionReview in the two versions the
// apiserver sends.
var admissionDecoder = decoderOf(admissionv1.AddToScheme, admissionv1beta1.AddToScheme)

// admissionReviews is the kind of review of an admit function: an
// AdmissionReview of v1 or v1beta1, answered in the same version with the
// request's uid, and with 200 whenever an AdmissionResponse can be sent
// (the true status is in response.status).
func admissionReviews(admit admitFunc) reviewKind {
	return admissionReviewsActing(admit, validationAction{})
}

// admissionReviewsActing is admissionReviews with action applied to the
// admit function's denials: /validate's is -validation-action (rollout.go).
func admissionReviewsActing(admit admitFunc, action validationAction) reviewKind {
	return reviewKind{name: wantAdmissionReview, review: func(ctx context.Context, body []byte) outcome {
		gvk, req, err := decodeReview(body)
		if err != nil {
			return failed(http.StatusBadRequest, err.Error())
		}
		attrs := admissionAttrs(req)
		resp, panicked := callSafely(func() *admissionv1.AdmissionResponse { return admit(ctx, req) })
		if panicked != nil {
			o := failed(http.StatusInternalServerError, fmt.Sprintf("the webhook failed while admitting request %s; its log has the details", req.UID))
			o.attrs, o.panicked = attrs, panicked
			return o
		}
		if resp == nil {
			// A nil response would be encoded as a review without one,
			// which the apiserver rejects with a less helpful message.
			resp = errored(http.StatusInternalServerError, errors.New("the webhook's admit function returned no response"))
		}
		v := verdict(resp)
		if v == "denied" {
			resp, v = action.apply(resp)
		}
		resp.Warnings = legibleWarnings(resp.Warnings)
		resp.UID = req.UID
		out, err := encodeReview(gvk, resp)
		if err != nil {
			o := failed(http.StatusInternalServerError, "encoding the review failed")
			o.attrs = append(attrs, slog.Any("err", err))
			return o
		}
		if resp.Result != nil && resp.Result.Code != 0 {
			attrs = append(attrs, slog.Int("code", int(resp.Result.Code)))
		}
		if len(resp.Warnings) > 0 {
			// How many, not what: a warning may quote the object.
			attrs = append(attrs, slog.Int("warnings", len(resp.Warnings)))
		}
		return outcome{code: http.StatusOK, body: out, verdict: v, attrs: attrs}
	}}
}

// decodeReview decodes an AdmissionReview of either version: its version,
// and its request as admission.k8s.io/v1, the one type admit functions see.
func decodeReview(body []byte) (schema.GroupVersionKind, *admissionv1.AdmissionRequest, error) {
	obj, gvk, err := admissionDecoder.Decode(body, nil, nil)
	if err != nil {
		return schema.GroupVersionKind{}, nil, describeDecodeError(gvk, err, wantAdmissionReview)
	}
	var req *admissionv1.AdmissionRequest
	switch review := obj.(type) {
	case *admissionv1.AdmissionReview:
		req = review.Request
	case *admissionv1beta1.AdmissionReview:
		if review.Request != nil {
			req = convert.RequestFromV1beta1(review.Request)
		}
	default: // an unversioned meta kind (decoderOf)
		return schema.GroupVersionKind{}, nil, notA(*gvk, wantAdmissionReview)
	}
	if req == nil {
		return schema.GroupVersionKind{}, nil, fmt.Errorf("%s has no request to admit", gvk.GroupVersion())
	}
	return *gvk, req, nil
}

// encodeReview encodes an AdmissionReview of resp in the request's version.
func encodeReview(gvk schema.GroupVersionKind, resp *admissionv1.AdmissionResponse) ([]byte, error) {
	if gvk.GroupVersion() == admissionv1beta1.SchemeGroupVersion {
		return json.Marshal(&admissionv1beta1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind},
			Response: convert.ResponseToV1beta1(resp),
		})
	}
	return json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind},
		Response: resp,
	})
}

// admissionAttrs names an admission request for its log line: never the
// object or any of its values, which may be a Secret's.
func admissionAttrs(req *admissionv1.AdmissionRequest) []slog.Attr {
	name := req.Name
	if req.Namespace != "" {
		name = req.Namespace + "/" + name
	}
	attrs := make([]slog.Attr, 0, 10)
	attrs = append(attrs,
		slog.String("uid", string(req.UID)),
		slog.String("operation", string(req.Operation)),
		slog.String("kind", req.Kind.Kind),
		slog.String("name", name),
		slog.String("user", req.UserInfo.Username),
	)
	if req.SubResource != "" {
		attrs = append(attrs, slog.String("subresource", req.SubResource))
	}
	if req.DryRun != nil && *req.DryRun {
		attrs = append(attrs, slog.Bool("dry_run", true))
	}
	return attrs
}

// verdict names what an answer does: "patched", "allowed", "denied", or
// "errored" when the webhook could not judge the request (a 400 for an
// object that does not decode, or a 5xx); any other refusal is "denied".
// validationAction.apply may make a denial "warned", "audited" or
// "warned_and_audited".
func verdict(resp *admissionv1.AdmissionResponse) string {
	switch {
	case resp.Allowed && len(resp.Patch) > 0:
		return "patched"
	case resp.Allowed:
		return "allowed"
	case resp.Result != nil && (resp.Result.Code == http.StatusBadRequest || resp.Result.Code >= http.StatusInternalServerError):
		return "errored"
	default:
		return "denied"
	}
}
