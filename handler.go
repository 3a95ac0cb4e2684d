package main

// HTTP ⇄ review: the routes, and the one path every review takes, read top
// to bottom in handle and admission (the README's "How one review flows"
// walks it); a part's route, such as /authorize, takes the same path with
// a Decide of its own.
//
// A decision is sent with HTTP 200, its true status in response.status, as
// pod-security-admission's webhook does: the apiserver shows the user a
// review's message, and only a status code otherwise. A request with no
// review to decide is answered with a metav1.Status and its code (405,
// 415, 400, 413, 411, 408, 429); so is the webhook's own failure, a panic or no
// answer at all (500), and an answer that the policy cannot decide now
// (unavailable, 503: any answer whose code is a 5xx), which the apiserver's
// failurePolicy then decides, as it decides for a webhook it cannot reach.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/json" // encoding/json's API, as the apiserver decodes

	"github.com/example/webhook/body"
	"github.com/example/webhook/part"
)

// maxWebhookTimeout is the largest timeoutSeconds a webhook configuration
// may set; the apiserver never waits longer.
const maxWebhookTimeout = 30 * time.Second

// routes serves /mutate and /validate, each a review route (handle) that
// decides with admission of the policy's function, mutate's or validate's;
// and the parts' routes; each behind checkClient (requireClient, or
// nothing). rewriteDenial, when a part sets it, rewrites /validate's
// denials.
func routes(rs *reviewRoutes, p policy, rewriteDenial part.RewriteDenial, extra []part.Route, checkClient func(http.Handler) http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/mutate", checkClient(rs.handle("/mutate", acceptedAdmissionReviews, admission(mutate(p), nil))))
	mux.Handle("/validate", checkClient(rs.handle("/validate", acceptedAdmissionReviews, admission(validate(p), rewriteDenial))))
	for _, r := range extra {
		mux.Handle(r.Path, checkClient(rs.handle(r.Path, r.Expects, r.Decide)))
	}
	return mux
}

// reviewRoutes is what every review route shares: the log, the metrics,
// and the body reader with its byte budget.
type reviewRoutes struct {
	logger     *slog.Logger
	metrics    *metrics // nil: nothing is counted
	bodyBudget *body.Budget
}

// handle serves a review route, path, the one path every review takes:
// it checks the request, reads its body, has decide decide it, and answers
// with the review or a metav1.Status. expects names the review it takes.
func (rs *reviewRoutes) handle(path, expects string, decide part.Decide) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rs.metrics.inFlightAdd(path, 1)
		defer rs.metrics.inFlightAdd(path, -1)

		timeout, err := checkRequest(w, r, expects)
		if err != nil {
			rs.sendStatus(w, path, start, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		requestBody, err := rs.bodyBudget.Read(ctx, w, r)
		if err != nil {
			rs.sendStatus(w, path, start, err)
			return
		}
		defer requestBody.Release()

		d, err := decide(ctx, requestBody.Bytes())
		var status *part.Error
		errors.As(err, &status)
		switch {
		case err == nil:
			rs.sendReview(w, r, path, start, d.Review, d.Verdict, d.Attrs)
		case status != nil && status.Code >= 500 && d.Attrs != nil:
			// Unavailable: failurePolicy decides (docs/error-contract.md).
			writeStatus(w, status.Code, status.Message)
			rs.logReview(r, path, start, status.Code, "errored", append(d.Attrs, slog.Int("code", status.Code)))
		case status != nil:
			rs.sendStatus(w, path, start, err) // not the review expected
		default:
			rs.sendFailure(ctx, w, path, start, d.Attrs, err)
		}
	})
}

// admission decides an AdmissionReview with admit, which sees it as v1,
// and answers in its version, with its uid; rewriteDenial, when set,
// rewrites a denial.
func admission(admit admitFunc, rewriteDenial part.RewriteDenial) part.Decide {
	return func(ctx context.Context, body []byte) (part.Decision, error) {
		gvk, req, err := decodeAdmissionReview(body)
		if err != nil {
			return part.Decision{}, &part.Error{Code: http.StatusBadRequest, Message: err.Error()}
		}
		d := part.Decision{Attrs: admissionAttrs(req)}
		resp, err := part.Recover(func() *admissionv1.AdmissionResponse { return admit(ctx, req) })
		switch {
		case err != nil:
			return d, err
		case resp == nil:
			return d, part.ErrNoAnswer
		case resp.Result != nil && resp.Result.Code >= 500 && resp.Result.Code <= 599:
			return d, &part.Error{Code: int(resp.Result.Code), Message: resp.Result.Message}
		}
		verdict := admissionVerdict(resp)
		if verdict == "denied" && rewriteDenial != nil {
			resp, verdict = rewriteDenial(resp) // what a part sends instead
		}
		answer := copyForRequest(resp, req.UID)
		if d.Review, err = encodeAdmissionReview(gvk, answer); err != nil {
			return d, fmt.Errorf("encoding the review: %w", err)
		}
		d.Verdict, d.Attrs = verdict, answerAttrs(d.Attrs, answer)
		return d, nil
	}
}

// checkRequest checks the method (setting Allow if wrong), the content
// type, and the apiserver's ?timeout= (such as "10s"), which it returns,
// at most and by default maxWebhookTimeout; or a *part.Error to answer.
func checkRequest(w http.ResponseWriter, r *http.Request, expected string) (time.Duration, error) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return 0, &part.Error{Code: http.StatusMethodNotAllowed, Message: fmt.Sprintf("method %s is not allowed: %s is sent with POST", r.Method, expected)}
	}
	if mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mediaType != "application/json" {
		return 0, &part.Error{Code: http.StatusUnsupportedMediaType, Message: fmt.Sprintf("Content-Type %q is not supported: %s is sent as application/json", r.Header.Get("Content-Type"), expected)}
	}
	q, ok := timeoutParameter(r.URL.RawQuery)
	if !ok {
		return maxWebhookTimeout, nil
	}
	d, err := time.ParseDuration(q)
	if err != nil || d <= 0 {
		return 0, &part.Error{Code: http.StatusBadRequest, Message: fmt.Sprintf("query parameter timeout=%q is not a positive duration such as 10s", q)}
	}
	return min(d, maxWebhookTimeout), nil
}

// decodeAdmissionReview decodes an AdmissionReview of either version: its
// version, and its request as admission.k8s.io/v1, the one type admit
// functions see.
func decodeAdmissionReview(body []byte) (schema.GroupVersionKind, *admissionv1.AdmissionRequest, error) {
	obj, gvk, err := admissionDecoder.Decode(body, nil, nil)
	if err != nil {
		return schema.GroupVersionKind{}, nil, part.DecodeError(body, gvk, err, acceptedAdmissionReviews)
	}
	review, ok := obj.(*admissionv1.AdmissionReview)
	if !ok { // an unversioned meta kind (part.Decoder)
		return schema.GroupVersionKind{}, nil, part.WrongKind(*gvk, acceptedAdmissionReviews)
	}
	if review.Request == nil {
		return schema.GroupVersionKind{}, nil, fmt.Errorf("%s has no request to admit", gvk.GroupVersion())
	}
	return *gvk, review.Request, nil
}

// admissionDecoder decodes AdmissionReview in the two versions the
// apiserver sends, both into v1's type: v1beta1's has the same fields,
// written the same in JSON, so it needs no conversion either way.
var admissionDecoder = part.Decoder(admissionv1.AddToScheme, func(s *runtime.Scheme) error {
	s.AddKnownTypeWithName(admissionv1beta1.SchemeGroupVersion.WithKind("AdmissionReview"), &admissionv1.AdmissionReview{})
	return nil
})

// acceptedAdmissionReviews names what the admission routes take, in the
// messages of what they refuse.
const acceptedAdmissionReviews = "an AdmissionReview of admission.k8s.io/v1 or admission.k8s.io/v1beta1"

// copyForRequest is resp, the policy's answer, sent for the request whose
// uid is uid: a copy with the uid set, as a policy may return one answer
// to every request, and each warning legible (legibleWarning, on a copy).
func copyForRequest(resp *admissionv1.AdmissionResponse, uid types.UID) *admissionv1.AdmissionResponse {
	answer := *resp
	answer.UID = uid
	copied := false
	for i, w := range resp.Warnings {
		if lw := legibleWarning(w); lw != w {
			if !copied { // never written into: the policy's
				answer.Warnings, copied = slices.Clone(resp.Warnings), true
			}
			answer.Warnings[i] = lw
		}
	}
	return &answer
}

// encodeAdmissionReview encodes an AdmissionReview of resp in the request's
// version (admissionDecoder: v1beta1's is written as v1's).
func encodeAdmissionReview(gvk schema.GroupVersionKind, resp *admissionv1.AdmissionResponse) ([]byte, error) {
	return json.Marshal(&admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind}, Response: resp})
}

// sendReview answers with a review and 200, and logs and counts it.
func (rs *reviewRoutes) sendReview(w http.ResponseWriter, r *http.Request, path string, start time.Time, review []byte, verdict string, attrs []slog.Attr) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(review); err != nil {
		rs.logger.LogAttrs(r.Context(), slog.LevelWarn, "writing the answer failed", append(attrs, slog.Any("err", err))...)
	}
	rs.logReview(r, path, start, http.StatusOK, verdict, attrs)
}

// logReview logs a review's one line, and counts it.
func (rs *reviewRoutes) logReview(r *http.Request, path string, start time.Time, code int, verdict string, attrs []slog.Attr) {
	took := time.Since(start)
	rs.metrics.request(path, code, verdict, took)
	line := make([]slog.Attr, 0, len(attrs)+4) // one allocation for the line
	line = append(line, slog.String("path", path))
	line = append(line, attrs...)
	line = append(line, slog.String("verdict", verdict), slog.Duration("duration", took), slog.String("proto", r.Proto))
	rs.logger.LogAttrs(r.Context(), slog.LevelInfo, "review", line...)
}

// sendStatus answers a request that has no review to answer, err, a
// *part.Error or a *body.Error, with its code and a metav1.Status, and
// counts it. It does not log, so that bad requests cannot flood the log.
func (rs *reviewRoutes) sendStatus(w http.ResponseWriter, path string, start time.Time, err error) {
	code, message := http.StatusInternalServerError, err.Error()
	var pe *part.Error
	var be *body.Error
	switch {
	case errors.As(err, &pe):
		code = pe.Code
	case errors.As(err, &be):
		code = be.Code
	}
	writeStatus(w, code, message)
	rs.metrics.request(path, code, "", time.Since(start))
}

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

// answerAttrs appends to a review's log attributes its answer's status
// code, if any, and how many warnings it has, never what they say, which
// may quote the object.
func answerAttrs(attrs []slog.Attr, answer *admissionv1.AdmissionResponse) []slog.Attr {
	if answer.Result != nil && answer.Result.Code != 0 {
		attrs = append(attrs, slog.Int("code", int(answer.Result.Code)))
	}
	if len(answer.Warnings) > 0 {
		attrs = append(attrs, slog.Int("warnings", len(answer.Warnings)))
	}
	return attrs
}

// admissionVerdict names what an answer does, for the log line and the
// metrics: "patched", "allowed", "errored" for a refusal with 400 or a
// 5xx (the webhook could not judge), and "denied" for any other refusal.
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

// sendFailure logs the webhook's own failure to decide, err (the policy's
// panic, counted, its nil answer, or a review that did not encode), and
// answers it with 500 and a Status naming the review's uid.
func (rs *reviewRoutes) sendFailure(ctx context.Context, w http.ResponseWriter, path string, start time.Time, attrs []slog.Attr, err error) {
	var panicked *part.Panic
	switch {
	case errors.As(err, &panicked):
		rs.metrics.countPanic(path)
		rs.logger.LogAttrs(ctx, slog.LevelError, "the policy panicked", append(attrs, slog.Any("panic", panicked))...)
	case errors.Is(err, part.ErrNoAnswer):
		rs.logger.LogAttrs(ctx, slog.LevelError, "the policy returned no answer", attrs...)
	default:
		rs.logger.LogAttrs(ctx, slog.LevelError, "the webhook failed", append(attrs, slog.Any("err", err))...)
	}
	rs.sendStatus(w, path, start, &part.Error{Code: http.StatusInternalServerError, Message: "the webhook failed while deciding the review" + uidOf(attrs) + "; its log has the details"})
}

// uidOf is " <uid>" for a message, from a review's log attributes; "" for
// a review without one.
func uidOf(attrs []slog.Attr) string {
	for _, a := range attrs {
		if a.Key == "uid" {
			return " " + a.Value.String()
		}
	}
	return ""
}

// legibleWarning is w in a form the apiserver passes on: it drops, without
// a word, a warning that is not valid UTF-8 or has a control character,
// newlines and tabs included (docs/error-contract.md, "Warnings"), so here
// each becomes U+FFFD or a space, and a warning longer than
// maxWarningRunes is cut with "…".
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
// whole for one request; past that it cuts each to its first 256
// (docs/error-contract.md, "Warnings"): first words matter most.
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

// writeStatus answers a request that has no review to answer with a
// metav1.Status, the body the apiserver reads a message from.
func writeStatus(w http.ResponseWriter, code int, message string) {
	out, err := json.Marshal(&metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure,
		Code:     int32(code),
		Reason:   cmp.Or(reasonsForCodes[int32(code)], metav1.StatusReasonInternalError),
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

// reasonsForCodes is the reason Kubernetes clients switch on for each code
// the webhook answers with; StatusReasonInternalError is any other's.
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
