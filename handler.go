package main

// HTTP ⇄ review: the routes, and the one path every review takes, read top
// to bottom in admission (the README's "How one review flows" walks it);
// authorization, at the end, is the same path for a SubjectAccessReview.
//
// A decision is sent with HTTP 200, its true status in response.status, as
// pod-security-admission's webhook does: the apiserver shows the user a
// review's message, and only a status code otherwise. A request with no
// review to decide is answered with a metav1.Status and its code (405,
// 415, 400, 413, 411, 408, 429); so is the webhook's own failure, a panic or no
// answer at all (500), and an answer that the policy cannot decide now
// (undecided, 503: any answer whose code is a 5xx), which the apiserver's
// failurePolicy then decides, as it decides for a webhook it cannot reach.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	authorizationv1 "k8s.io/api/authorization/v1"
	authorizationv1beta1 "k8s.io/api/authorization/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/json" // encoding/json's API, as the apiserver decodes

	"github.com/example/webhook/body"
	"github.com/example/webhook/convert"
)

// maxWebhookTimeout is the largest timeoutSeconds a webhook configuration
// may set; the apiserver never waits longer.
const maxWebhookTimeout = 30 * time.Second

// routes serves the review routes, each with the policy's function, each
// behind checkClient (requireClient with -client-ca-file; else nothing);
// /authorize only with authorization (-authorization).
func routes(reviews *handlers, p policy, action validationAction, checkClient func(http.Handler) http.Handler, authorization bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/mutate", checkClient(reviews.admissionHandler("/mutate", mutate(p), validationAction{})))
	mux.Handle("/validate", checkClient(reviews.admissionHandler("/validate", validate(p), action)))
	// The authorization webhook's, for an AuthorizationConfiguration's
	// Webhook: only when asked for, as its answers name the policy's rules.
	if authorization {
		mux.Handle("/authorize", checkClient(reviews.authorizationHandler("/authorize", authorize(p))))
	}
	return mux
}

// handlers is what the review routes share: the log, the metrics, and
// the body reader with its byte budget.
type handlers struct {
	logger  *slog.Logger
	metrics *metrics // nil: nothing is counted
	bodies  *body.Budget
}

// admissionHandler serves an admission route: an AdmissionReview decided
// by admit and answered in the version it came in, with the request's
// uid. action is what becomes of admit's denials: /validate's
// -validation-action.
func (s *handlers) admissionHandler(path string, admit admitFunc, action validationAction) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		s.metrics.inFlightAdd(path, 1)
		defer s.metrics.inFlightAdd(path, -1)

		timeout, err := checkRequest(w, r, wantAdmissionReview)
		if err != nil {
			s.sendStatus(w, path, start, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		requestBody, err := s.bodies.Read(ctx, w, r)
		if err != nil {
			s.sendStatus(w, path, start, err)
			return
		}
		defer requestBody.Release()

		gvk, req, err := decodeAdmissionReview(requestBody.Bytes())
		if err != nil {
			s.sendStatus(w, path, start, &statusError{http.StatusBadRequest, err.Error()})
			return
		}
		attrs := admissionAttrs(req)

		resp, err := callRecovering(func() *admissionv1.AdmissionResponse { return admit(ctx, req) })
		if err != nil || resp == nil {
			s.logPolicyFailure(ctx, path, attrs, err)
			s.sendStatus(w, path, start, &statusError{http.StatusInternalServerError, fmt.Sprintf("the webhook failed while admitting request %s; its log has the details", req.UID)})
			return
		}

		if resp.Result != nil && resp.Result.Code >= 500 && resp.Result.Code <= 599 {
			s.sendUndecided(w, r, path, start, int(resp.Result.Code), resp.Result.Message, attrs)
			return
		}
		answer, verdict := completedAnswer(resp, req.UID), admissionVerdict(resp)
		if verdict == "denied" && action.allowsDenials() {
			answer, verdict = action.warnOrAudit(resp, req.UID)
		}
		out, err := encodeAdmissionReview(gvk, answer)
		if err != nil {
			s.logger.LogAttrs(ctx, slog.LevelError, "encoding the review failed", append(attrs, slog.Any("err", err))...)
			s.sendStatus(w, path, start, &statusError{http.StatusInternalServerError, "encoding the review failed"})
			return
		}
		if answer.Result != nil && answer.Result.Code != 0 {
			attrs = append(attrs, slog.Int("code", int(answer.Result.Code)))
		}
		if len(answer.Warnings) > 0 {
			// How many, not what: a warning may quote the object.
			attrs = append(attrs, slog.Int("warnings", len(answer.Warnings)))
		}
		s.sendReview(w, r, path, start, out, verdict, attrs)
	})
}

// checkRequest checks what comes before a review's body, so that none of
// it is read for a request that could not be a review: the method, the
// content type, and the apiserver's ?timeout= (a Go duration such as
// "10s"), which it returns, at most maxWebhookTimeout; or a *statusError
// to answer with (for a wrong method, after setting the Allow header it
// needs). expected names the review in its messages.
func checkRequest(w http.ResponseWriter, r *http.Request, expected string) (time.Duration, error) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return 0, &statusError{http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed: %s is sent with POST", r.Method, expected)}
	}
	if mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mediaType != "application/json" {
		return 0, &statusError{http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q is not supported: %s is sent as application/json", r.Header.Get("Content-Type"), expected)}
	}
	q, ok := timeoutParameter(r.URL.RawQuery)
	if !ok {
		return maxWebhookTimeout, nil
	}
	d, err := time.ParseDuration(q)
	if err != nil || d <= 0 {
		return 0, &statusError{http.StatusBadRequest, fmt.Sprintf("query parameter timeout=%q is not a positive duration such as 10s", q)}
	}
	return min(d, maxWebhookTimeout), nil
}

// decodeAdmissionReview decodes an AdmissionReview of either version: its
// version, and its request as admission.k8s.io/v1, the one type admit
// functions see.
func decodeAdmissionReview(body []byte) (schema.GroupVersionKind, *admissionv1.AdmissionRequest, error) {
	obj, gvk, err := admissionDecoder.Decode(body, nil, nil)
	if err != nil {
		return schema.GroupVersionKind{}, nil, describeDecodeError(body, gvk, err, wantAdmissionReview)
	}
	var req *admissionv1.AdmissionRequest
	switch review := obj.(type) {
	case *admissionv1.AdmissionReview:
		req = review.Request
	case *admissionv1beta1.AdmissionReview:
		if review.Request != nil {
			req = convert.RequestFromV1beta1(review.Request)
		}
	default: // an unversioned meta kind (decoderOnlyFor)
		return schema.GroupVersionKind{}, nil, wrongKind(*gvk, wantAdmissionReview)
	}
	if req == nil {
		return schema.GroupVersionKind{}, nil, fmt.Errorf("%s has no request to admit", gvk.GroupVersion())
	}
	return *gvk, req, nil
}

// admissionDecoder decodes AdmissionReview in the two versions the
// apiserver sends.
var admissionDecoder = decoderOnlyFor(admissionv1.AddToScheme, admissionv1beta1.AddToScheme)

// completedAnswer is resp, the policy's answer, as sent for the request
// whose uid is uid: a copy with the uid set, as a policy may return one
// answer to every request, and its warnings as the apiserver will pass
// them on.
func completedAnswer(resp *admissionv1.AdmissionResponse, uid types.UID) *admissionv1.AdmissionResponse {
	answer := *resp
	answer.UID = uid
	if len(resp.Warnings) > 0 {
		answer.Warnings = legibleWarnings(resp.Warnings)
	}
	return &answer
}

// encodeAdmissionReview encodes an AdmissionReview of resp in the request's
// version.
func encodeAdmissionReview(gvk schema.GroupVersionKind, resp *admissionv1.AdmissionResponse) ([]byte, error) {
	typeMeta := metav1.TypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind}
	if gvk.GroupVersion() == admissionv1beta1.SchemeGroupVersion {
		return json.Marshal(&admissionv1beta1.AdmissionReview{TypeMeta: typeMeta, Response: convert.ResponseToV1beta1(resp)})
	}
	return json.Marshal(&admissionv1.AdmissionReview{TypeMeta: typeMeta, Response: resp})
}

// sendReview answers with a review and 200, and logs and counts it.
func (s *handlers) sendReview(w http.ResponseWriter, r *http.Request, path string, start time.Time, review []byte, verdict string, attrs []slog.Attr) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(review); err != nil {
		s.logger.LogAttrs(r.Context(), slog.LevelWarn, "writing the answer failed", append(attrs, slog.Any("err", err))...)
	}
	s.logReview(r, path, start, http.StatusOK, verdict, attrs)
}

// sendUndecided answers a review the policy could not decide (undecided,
// or any answer whose code is a 5xx) with code and a metav1.Status of its
// message, not a review, so that the webhook configuration's failurePolicy
// decides: the apiserver reads any answer but a 2xx as a failed call
// (k8s.io/apiserver v0.37.2, pkg/admission/plugin/webhook/validating/
// dispatcher.go, callHook: r.Do(ctx).Into fails, and the call's error
// becomes an ErrCallingWebhook, which failurePolicy Ignore admits and Fail
// refuses with apierrors.NewInternalError; its message ends with the
// Status's, which k8s.io/client-go/rest, Result.Error, decodes from the
// body; the mutating dispatcher does the same). It logs the review's line,
// verdict "errored", with the code and without the message, which may
// quote the object.
func (s *handlers) sendUndecided(w http.ResponseWriter, r *http.Request, path string, start time.Time, code int, message string, attrs []slog.Attr) {
	writeStatus(w, code, message)
	s.logReview(r, path, start, code, "errored", append(attrs, slog.Int("code", code)))
}

// logReview logs a review's one line, and counts it.
func (s *handlers) logReview(r *http.Request, path string, start time.Time, code int, verdict string, attrs []slog.Attr) {
	took := time.Since(start)
	s.metrics.request(path, code, verdict, took)
	line := make([]slog.Attr, 0, len(attrs)+4) // one allocation for the line
	line = append(line, slog.String("path", path))
	line = append(line, attrs...)
	line = append(line, slog.String("verdict", verdict), slog.Duration("duration", took), slog.String("proto", r.Proto))
	s.logger.LogAttrs(r.Context(), slog.LevelInfo, "review", line...)
}

// sendStatus answers a request that has no review to answer, err, a
// *statusError or a *body.Error, with its code and a metav1.Status, and
// counts it. It does not log: any client that reaches the port can send a
// bad request, and one line each would let it flood the log; the metrics
// count them by code, and the body's refusals are summed up in the log
// (logRefusals).
func (s *handlers) sendStatus(w http.ResponseWriter, path string, start time.Time, err error) {
	code, message := http.StatusInternalServerError, err.Error()
	var se *statusError
	var be *body.Error
	switch {
	case errors.As(err, &se):
		code = se.code
	case errors.As(err, &be):
		code = be.Code
	}
	writeStatus(w, code, message)
	s.metrics.request(path, code, "", time.Since(start))
}

// statusError is the answer to a request with no review to decide, or
// whose decision failed: its HTTP status, and a message the apiserver
// shows the user.
type statusError struct {
	code    int
	message string
}

func (e *statusError) Error() string { return e.message }

// The steps' details, which a reader of the path above can take from
// their names and comments.

// admissionAttrs names an admission request for its log line: never the
// object or any of its values, which may be a Secret's.
func admissionAttrs(req *admissionv1.AdmissionRequest) []slog.Attr {
	attrs := make([]slog.Attr, 0, 10) // room for what admission adds
	attrs = append(attrs, slog.String("uid", string(req.UID)), slog.String("operation", string(req.Operation)),
		slog.String("kind", req.Kind.Kind), slog.String("name", objectName(req, nil)), slog.String("user", req.UserInfo.Username))
	if req.SubResource != "" {
		attrs = append(attrs, slog.String("subresource", req.SubResource))
	}
	if req.DryRun != nil && *req.DryRun {
		attrs = append(attrs, slog.Bool("dry_run", true))
	}
	return attrs
}

// callRecovering calls decide, the policy, and returns its answer; or, if it
// panicked, a *policyPanic, so that a panic is answered instead of
// dropping the connection.
func callRecovering[T any](decide func() T) (answer T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = newPolicyPanic(p)
		}
	}()
	return decide(), nil
}

// policyPanic is a panic of the policy's, as it is logged: its stack, and
// its value only when the runtime made it (a runtime.Error); of a value the
// policy made, which may hold a Secret's contents, only its type.
type policyPanic struct {
	stack, runtimeError, valueType string
}

func newPolicyPanic(p any) *policyPanic {
	pp := &policyPanic{stack: string(debug.Stack())}
	if rerr, ok := p.(goruntime.Error); ok {
		pp.runtimeError = rerr.Error()
	} else {
		pp.valueType = fmt.Sprintf("%T", p)
	}
	return pp
}

func (p *policyPanic) Error() string {
	if p.runtimeError != "" {
		return "the policy panicked: " + p.runtimeError
	}
	return "the policy panicked with a value of type " + p.valueType
}

// LogValue logs the panic as a group of its stack, and its runtime
// error's message or its value's type.
func (p *policyPanic) LogValue() slog.Value {
	if p.runtimeError != "" {
		return slog.GroupValue(slog.String("stack", p.stack), slog.String("value", p.runtimeError))
	}
	return slog.GroupValue(slog.String("stack", p.stack), slog.String("type", p.valueType))
}

// admissionVerdict names what an answer does, for the log line and the
// metrics: "patched", "allowed", "denied", or "errored" when the webhook
// could not judge the request: a refusal with 400 (an object that does not
// decode) or a 5xx. Every other refusal, denied's 403 and a refused 409 or
// 422 alike, is the policy's decision: "denied".
// A -validation-action of warn or audit makes a denial "warned",
// "audited" or "warned_and_audited" (warnOrAudit).
func admissionVerdict(resp *admissionv1.AdmissionResponse) string {
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

// logPolicyFailure logs the policy's failure to decide: err, its panic
// (counted), or nil for no answer at all.
func (s *handlers) logPolicyFailure(ctx context.Context, path string, attrs []slog.Attr, err error) {
	if err == nil {
		s.logger.LogAttrs(ctx, slog.LevelError, "the policy returned no answer", attrs...)
		return
	}
	s.metrics.countPanic(path)
	s.logger.LogAttrs(ctx, slog.LevelError, "the policy panicked", append(attrs, slog.Any("panic", err))...)
}

// legibleWarnings returns warnings as the apiserver will pass them on. It
// drops, without a word, a warning that is not valid UTF-8 or has a control
// character, newlines and tabs included (k8s.io/apimachinery/pkg/util/net/
// http.go, NewWarningHeader), so each becomes a space or U+FFFD here, and
// a warning longer than maxWarningRunes is cut with "…". warnings is
// copied before any change, and returned as it is when none is needed.
func legibleWarnings(warnings []string) []string {
	var out []string
	for i, w := range warnings {
		lw := legibleWarning(w)
		if lw == w && out == nil {
			continue
		}
		if out == nil {
			out = slices.Clone(warnings)
		}
		out[i] = lw
	}
	if out == nil {
		return warnings
	}
	return out
}

// legibleWarning is one warning as legibleWarnings returns it.
func legibleWarning(w string) string {
	if utf8.ValidString(w) && !strings.ContainsFunc(w, unicode.IsControl) && utf8.RuneCountInString(w) <= maxWarningRunes {
		return w
	}
	w = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(w, "\uFFFD"))
	if runes := []rune(w); len(runes) > maxWarningRunes {
		w = string(runes[:maxWarningRunes-1]) + "…"
	}
	return w
}

// maxWarningRunes is the most runes of warnings the apiserver passes on
// whole for one request (truncateAtTotalRunes in
// k8s.io/apiserver/pkg/endpoints/filters/warning.go); past that it cuts
// each to its first 256 (truncateItemRunes): first words matter most.
const maxWarningRunes = 4 << 10

// timeoutParameter returns the first timeout=VALUE of a raw query string,
// without r.URL.Query()'s map of them all (two allocations per review).
// The apiserver writes a Go duration, which needs no unescaping.
func timeoutParameter(rawQuery string) (string, bool) {
	for rest := rawQuery; rest != ""; {
		var pair string
		pair, rest, _ = strings.Cut(rest, "&")
		if v, ok := strings.CutPrefix(pair, "timeout="); ok {
			return v, true
		}
	}
	return "", false
}

// decoderOnlyFor decodes the kinds that add register, in the versions they
// register, and nothing else: any other kind fails to decode, but for a
// few unversioned meta kinds, such as v1 Status, that registering any API
// group registers too. (AddToScheme fails only on conflicting
// registrations, which distinct group versions cannot have.)
func decoderOnlyFor(add ...func(*runtime.Scheme) error) runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, f := range add {
		_ = f(scheme)
	}
	return serializer.NewCodecFactory(scheme).UniversalDeserializer()
}

const (
	// wantAdmissionReview and wantSubjectAccessReview name what each route
	// expects, in the messages of what it refuses.
	wantAdmissionReview     = "an AdmissionReview of admission.k8s.io/v1 or admission.k8s.io/v1beta1"
	wantSubjectAccessReview = "a SubjectAccessReview of authorization.k8s.io/v1 or authorization.k8s.io/v1beta1"

	// maxErrorDetail bounds how much of a decoder's error reaches a
	// message, so a huge or hostile body cannot make a huge answer.
	maxErrorDetail = 256
)

// describeDecodeError says why body is not the review expected without
// quoting it, as apimachinery's "Kind is missing" does: it may be a Secret.
func describeDecodeError(body []byte, gvk *schema.GroupVersionKind, err error, expected string) error {
	switch {
	case len(body) == 0:
		return fmt.Errorf("request body is empty: expected %s", expected)
	case runtime.IsMissingKind(err), runtime.IsMissingVersion(err):
		return fmt.Errorf("request body has no apiVersion or kind: expected %s", expected)
	case runtime.IsNotRegisteredError(err) && gvk != nil:
		return wrongKind(*gvk, expected)
	}
	detail := err.Error()
	if len(detail) > maxErrorDetail {
		detail = strings.ToValidUTF8(detail[:maxErrorDetail], "") + "…"
	}
	return fmt.Errorf("request body does not decode (expected %s): %s", expected, detail)
}

// wrongKind says that a body of kind gvk is not the review expected.
func wrongKind(gvk schema.GroupVersionKind, expected string) error {
	return fmt.Errorf("request body is apiVersion %q, kind %q: expected %s", gvk.GroupVersion(), gvk.Kind, expected)
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
	http.StatusLengthRequired:        metav1.StatusReasonBadRequest,
	http.StatusRequestEntityTooLarge: metav1.StatusReasonRequestEntityTooLarge,
	http.StatusUnsupportedMediaType:  metav1.StatusReasonUnsupportedMediaType,
	http.StatusTooManyRequests:       metav1.StatusReasonTooManyRequests,
	http.StatusServiceUnavailable:    metav1.StatusReasonServiceUnavailable,
}

// The authorization webhook's path: the same steps for a
// SubjectAccessReview.

// authorizationHandler serves /authorize: a SubjectAccessReview decided
// by authorize and answered in the version it came in, with only its
// status, the one part the apiserver reads. It reads it so
// (k8s.io/apiserver/plugin/pkg/authorizer/webhook/webhook.go,
// WebhookAuthorizer.Authorize): allowed allows the request; denied alone
// denies it, status.reason ending the user's Forbidden message, and no
// later authorizer runs; neither is no opinion, and the next authorizer
// (RBAC) decides; both is malformed, a denial with an error. An answer
// other than HTTP 200, or none, is the authorizer's failurePolicy
// (NoOpinion or Deny), after a retry of 429s, 500s and dropped
// connections (k8s.io/apiserver/pkg/util/webhook, DefaultShouldRetry): a
// status of no opinion with an evaluationError (undecidedBecause) is sent
// so, as a 503, which is not retried.
func (s *handlers) authorizationHandler(path string, authorize authorizeFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		s.metrics.inFlightAdd(path, 1)
		defer s.metrics.inFlightAdd(path, -1)

		timeout, err := checkRequest(w, r, wantSubjectAccessReview)
		if err != nil {
			s.sendStatus(w, path, start, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		requestBody, err := s.bodies.Read(ctx, w, r)
		if err != nil {
			s.sendStatus(w, path, start, err)
			return
		}
		defer requestBody.Release()

		gvk, spec, err := decodeSubjectAccessReview(requestBody.Bytes())
		if err != nil {
			s.sendStatus(w, path, start, &statusError{http.StatusBadRequest, err.Error()})
			return
		}
		attrs := authorizationAttrs(spec)

		status, err := callRecovering(func() authorizationv1.SubjectAccessReviewStatus { return authorize(ctx, spec) })
		if err != nil {
			// A 500 is retried, then the authorizer's failurePolicy decides.
			s.logPolicyFailure(ctx, path, attrs, err)
			s.sendStatus(w, path, start, &statusError{http.StatusInternalServerError, "the webhook failed while authorizing the request; its log has the details"})
			return
		}
		if !status.Allowed && !status.Denied && status.EvaluationError != "" {
			s.sendUndecided(w, r, path, start, http.StatusServiceUnavailable, status.EvaluationError, attrs)
			return
		}
		if status.Allowed && status.Denied {
			// The apiserver denies such an answer and logs an error: deny
			// here too, with a status it reads as meant, and a reason that
			// says what went wrong.
			status = deniedBecause("the webhook's authorize function answered both allowed and denied; denied")
			attrs = append(attrs, slog.String("error", "the authorize function answered both allowed and denied"))
		}
		out, err := encodeSubjectAccessReview(gvk, status)
		if err != nil {
			s.logger.LogAttrs(ctx, slog.LevelError, "encoding the review failed", append(attrs, slog.Any("err", err))...)
			s.sendStatus(w, path, start, &statusError{http.StatusInternalServerError, "encoding the review failed"})
			return
		}
		s.sendReview(w, r, path, start, out, authorizationVerdict(status), attrs)
	})
}

// decodeSubjectAccessReview is decodeAdmissionReview for a
// SubjectAccessReview: its version, and its spec as authorization.k8s.io/v1.
func decodeSubjectAccessReview(body []byte) (schema.GroupVersionKind, *authorizationv1.SubjectAccessReviewSpec, error) {
	obj, gvk, err := authorizationDecoder.Decode(body, nil, nil)
	if err != nil {
		return schema.GroupVersionKind{}, nil, describeDecodeError(body, gvk, err, wantSubjectAccessReview)
	}
	var spec *authorizationv1.SubjectAccessReviewSpec
	switch review := obj.(type) {
	case *authorizationv1.SubjectAccessReview:
		spec = &review.Spec
	case *authorizationv1beta1.SubjectAccessReview:
		spec = convert.SpecFromV1beta1(&review.Spec)
	default: // an unversioned meta kind (decoderOnlyFor)
		return schema.GroupVersionKind{}, nil, wrongKind(*gvk, wantSubjectAccessReview)
	}
	// The apiserver sets exactly one; an authorize function may rely on it.
	switch {
	case spec.ResourceAttributes == nil && spec.NonResourceAttributes == nil:
		return schema.GroupVersionKind{}, nil, fmt.Errorf("%s SubjectAccessReview has neither spec.resourceAttributes nor spec.nonResourceAttributes: the apiserver sends exactly one", gvk.GroupVersion())
	case spec.ResourceAttributes != nil && spec.NonResourceAttributes != nil:
		return schema.GroupVersionKind{}, nil, fmt.Errorf("%s SubjectAccessReview has both spec.resourceAttributes and spec.nonResourceAttributes: the apiserver sends exactly one", gvk.GroupVersion())
	}
	return *gvk, spec, nil
}

// authorizationDecoder decodes SubjectAccessReview in the two versions
// the apiserver sends (the authorizer's subjectAccessReviewVersion).
var authorizationDecoder = decoderOnlyFor(authorizationv1.AddToScheme, authorizationv1beta1.AddToScheme)

// authorizationAttrs names a SubjectAccessReview for its log line: who,
// which verb, on what. Never its groups, extra or uid: the apiserver's
// audit log has those, and extra may carry tokens' claims.
func authorizationAttrs(spec *authorizationv1.SubjectAccessReviewSpec) []slog.Attr {
	attrs := make([]slog.Attr, 0, 6)
	attrs = append(attrs, slog.String("user", spec.User))
	if ra := spec.ResourceAttributes; ra != nil {
		resource := ra.Resource
		if ra.Group != "" {
			resource = ra.Group + "/" + resource
		}
		attrs = append(attrs, slog.String("verb", ra.Verb), slog.String("resource", resource))
		if ra.Subresource != "" {
			attrs = append(attrs, slog.String("subresource", ra.Subresource))
		}
		if ra.Namespace != "" {
			attrs = append(attrs, slog.String("namespace", ra.Namespace))
		}
		return attrs
	}
	// "path" is the route's in every review line.
	return append(attrs, slog.String("verb", spec.NonResourceAttributes.Verb), slog.String("request_path", spec.NonResourceAttributes.Path))
}

// authorizationVerdict names what a status does, for the log line and the
// metrics: "allowed", "denied" or "no_opinion".
func authorizationVerdict(s authorizationv1.SubjectAccessReviewStatus) string {
	switch {
	case s.Denied:
		return "denied"
	case s.Allowed:
		return "allowed"
	default:
		return "no_opinion"
	}
}

// encodeSubjectAccessReview encodes a SubjectAccessReview holding only
// status, in the version the request came in.
func encodeSubjectAccessReview(gvk schema.GroupVersionKind, status authorizationv1.SubjectAccessReviewStatus) ([]byte, error) {
	typeMeta := metav1.TypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind}
	if gvk.GroupVersion() == authorizationv1beta1.SchemeGroupVersion {
		return json.Marshal(&authorizationv1beta1.SubjectAccessReview{TypeMeta: typeMeta, Status: convert.StatusToV1beta1(status)})
	}
	return json.Marshal(&authorizationv1.SubjectAccessReview{TypeMeta: typeMeta, Status: status})
}
