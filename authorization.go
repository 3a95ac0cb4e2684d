package main

// The authorization half: POST /authorize answers kube-apiserver's
// authorization webhook, which POSTs a SubjectAccessReview before it serves
// a request and reads only the answer's status, as
// k8s.io/apiserver/plugin/pkg/authorizer/webhook/webhook.go
// (WebhookAuthorizer.Authorize, v1.37.1) says:
//   - allowed allows the request; denied (alone) denies it, status.reason
//     ending the user's Forbidden message; no later authorizer runs;
//   - neither is no opinion: the next authorizer (RBAC) decides;
//   - both is malformed, which it treats as a deny with an error;
//   - an answer other than HTTP 200, or none, is the authorizer's
//     failurePolicy (NoOpinion or Deny), after a retry of 429s, 5xx and
//     dropped connections (k8s.io/apiserver/pkg/util/webhook,
//     DefaultShouldRetry). status.evaluationError is never read.

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	authorizationv1 "k8s.io/api/authorization/v1"
	authorizationv1beta1 "k8s.io/api/authorization/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/json"

	"github.com/example/webhook/convert"
)

// authorizeFunc decides on one SubjectAccessReview, whose spec has exactly
// one of ResourceAttributes and NonResourceAttributes, with noOpinion,
// deniedBecause or allowedBecause. Like admitFunc, it sees neither HTTP nor
// globals, and ctx ends at the apiserver's deadline. policy.go makes them.
type authorizeFunc func(ctx context.Context, spec *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus

// noOpinion neither allows nor denies: the apiserver asks the next
// authorizer, and forbids the request if none allows it.
func noOpinion() authorizationv1.SubjectAccessReviewStatus {
	return authorizationv1.SubjectAccessReviewStatus{}
}

// deniedBecause denies the request outright, so RBAC cannot allow it. The
// apiserver ends its Forbidden message, which kubectl prints, with reason.
func deniedBecause(reason string) authorizationv1.SubjectAccessReviewStatus {
	return authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: reason}
}

// allowedBecause allows the request outright: no later authorizer is asked.
// reason is for the apiserver's audit log and may be empty.
func allowedBecause(reason string) authorizationv1.SubjectAccessReviewStatus {
	return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: reason}
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

const wantSubjectAccessReview = "a SubjectAccessReview of authorization.k8s.io/v1 or authorization.k8s.io/v1beta1"

// authorizationDecoder decodes SubjectAccessReview in the two versions the
// apiserver sends (the authorizer's subjectAccessReviewVersion); any other
// kind, an AdmissionReview included, fails to decode.
var authorizationDecoder = decoderOf(authorizationv1.AddToScheme, authorizationv1beta1.AddToScheme)

// subjectAccessReviews is the kind of review of an authorize function: a
// SubjectAccessReview of v1 or v1beta1, answered in the same version with
// only its status, the one part the apiserver reads.
func subjectAccessReviews(authorize authorizeFunc) reviewKind {
	return reviewKind{name: wantSubjectAccessReview, review: func(ctx context.Context, body []byte) outcome {
		gvk, spec, err := decodeSubjectAccessReview(body)
		if err != nil {
			return failed(http.StatusBadRequest, err.Error())
		}
		attrs := authorizationAttrs(spec)
		status, panicked := callSafely(func() authorizationv1.SubjectAccessReviewStatus { return authorize(ctx, spec) })
		if panicked != nil {
			// A 500 is retried, then the authorizer's failurePolicy decides.
			o := failed(http.StatusInternalServerError, "the webhook failed while authorizing the request; its log has the details")
			o.attrs, o.panicked = attrs, panicked
			return o
		}
		if status.Allowed && status.Denied {
			// The apiserver denies such an answer and logs an error
			// (WebhookAuthorizer.Authorize): deny here too, with a status it
			// reads as meant, and a reason that says what went wrong.
			status = deniedBecause("the webhook's authorize function answered both allowed and denied; denied")
			attrs = append(attrs, slog.String("error", "the authorize function answered both allowed and denied"))
		}
		out, err := encodeSubjectAccessReview(gvk, status)
		if err != nil {
			o := failed(http.StatusInternalServerError, "encoding the review failed")
			o.attrs = append(attrs, slog.Any("err", err))
			return o
		}
		return outcome{code: http.StatusOK, body: out, verdict: authorizationVerdict(status), attrs: attrs}
	}}
}

// decodeSubjectAccessReview is decodeReview for a SubjectAccessReview: its
// version, and its spec as authorization.k8s.io/v1.
func decodeSubjectAccessReview(body []byte) (schema.GroupVersionKind, *authorizationv1.SubjectAccessReviewSpec, error) {
	obj, gvk, err := authorizationDecoder.Decode(body, nil, nil)
	if err != nil {
		return schema.GroupVersionKind{}, nil, describeDecodeError(gvk, err, wantSubjectAccessReview)
	}
	var spec *authorizationv1.SubjectAccessReviewSpec
	switch review := obj.(type) {
	case *authorizationv1.SubjectAccessReview:
		spec = &review.Spec
	case *authorizationv1beta1.SubjectAccessReview:
		spec = convert.SpecFromV1beta1(&review.Spec)
	default: // an unversioned meta kind (decoderOf)
		return schema.GroupVersionKind{}, nil, notA(*gvk, wantSubjectAccessReview)
	}
	// The apiserver sets exactly one (WebhookAuthorizer.Authorize); an
	// authorize function may rely on it.
	switch {
	case spec.ResourceAttributes == nil && spec.NonResourceAttributes == nil:
		return schema.GroupVersionKind{}, nil, fmt.Errorf("%s SubjectAccessReview has neither spec.resourceAttributes nor spec.nonResourceAttributes: the apiserver sends exactly one", gvk.GroupVersion())
	case spec.ResourceAttributes != nil && spec.NonResourceAttributes != nil:
		return schema.GroupVersionKind{}, nil, fmt.Errorf("%s SubjectAccessReview has both spec.resourceAttributes and spec.nonResourceAttributes: the apiserver sends exactly one", gvk.GroupVersion())
	}
	return *gvk, spec, nil
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

// authorizationAttrs names a SubjectAccessReview for its log line: who, which
// verb, on what. Never its groups, extra or uid: the apiserver's audit log
// has those, and extra may carry tokens' claims.
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
