// Package authorize is the webhook's authorization half, an optional part
// (package part): POST /authorize answers the apiserver's
// SubjectAccessReviews, served with -authorization, which needs
// -client-ca-file: its answers name the policy's rules, and only the
// apiserver should read them (README.md in this folder). The policy is
// rules.go's: it denies what a -deny rule matches, and has no opinion on
// everything else. Delete this folder and its line in main.go, and the
// webhook serves admission alone.
package authorize

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"

	authorizationv1 "k8s.io/api/authorization/v1"
	authorizationv1beta1 "k8s.io/api/authorization/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/json"

	"github.com/example/webhook/authorize/convert"
	"github.com/example/webhook/part"
)

// Func decides on one SubjectAccessReview, whose spec has exactly one of
// ResourceAttributes and NonResourceAttributes, with NoOpinion, Denied,
// Allowed or Undecided. It sees neither HTTP nor globals; ctx ends at the
// apiserver's ?timeout=. rules.go makes the policy's.
type Func func(ctx context.Context, spec *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus

// Part is /authorize, decided by the policy of rules.go, configured by its
// flags.
func Part() part.Part {
	var serve bool
	var p policy
	return part.Part{
		Name: "authorize",
		Flags: func(flags *flag.FlagSet, offline bool) {
			if !offline {
				flags.BoolVar(&serve, "authorization", false, "serve /authorize, the authorization webhook's SubjectAccessReviews; needs -client-ca-file, since its answers name the policy's rules")
			}
			p.addFlags(flags)
		},
		Start: func(env part.Env) (func(), error) {
			if p.err != nil {
				return nil, p.err
			}
			if serve || env.Offline {
				env.Logger.Info("authorization policy in force", "deny", p.deny)
			}
			return func() {}, nil
		},
		Route: func(env part.Env) (part.Route, error) {
			switch {
			case env.Offline:
				// webhook review replays the apiserver's authorizations.
			case !serve:
				return part.Route{}, nil
			case !env.ClientCertificates:
				return part.Route{}, errors.New("-authorization needs -client-ca-file: /authorize answers only the apiserver, whose client certificate that CA signed (authorize/README.md)")
			}
			return part.Route{Path: "/authorize", Expects: acceptedSubjectAccessReviews, Decide: Decide(authorize(p))}, nil
		},
	}
}

// acceptedSubjectAccessReviews names what /authorize takes, in the
// messages of what it refuses.
const acceptedSubjectAccessReviews = "a SubjectAccessReview of authorization.k8s.io/v1 or authorization.k8s.io/v1beta1"

// Decide decides a SubjectAccessReview with authorize, answered in the
// version it came in, with only its status, the one part the apiserver
// reads. It reads it so (k8s.io/apiserver/plugin/pkg/authorizer/webhook,
// WebhookAuthorizer.Authorize): allowed allows the request; denied alone
// denies it, status.reason ending the user's Forbidden message, and no
// later authorizer runs; neither is no opinion, and the next authorizer
// (RBAC) decides; both is malformed, a denial with an error. An answer
// other than HTTP 200, or none, is the authorizer's failurePolicy
// (NoOpinion or Deny), after a retry of 429s, 500s and dropped
// connections: Undecided's status is sent so, as a 503, which is not
// retried.
func Decide(authorize Func) part.Decide {
	return func(ctx context.Context, body []byte) (part.Decision, error) {
		gvk, spec, err := decodeSubjectAccessReview(body)
		if err != nil {
			return part.Decision{}, &part.Error{Code: http.StatusBadRequest, Message: err.Error()}
		}
		d := part.Decision{Attrs: authorizationAttrs(spec)}
		status, err := part.Recover(func() authorizationv1.SubjectAccessReviewStatus { return authorize(ctx, spec) })
		switch {
		case err != nil:
			return d, err // a 500: retried, then the authorizer's failurePolicy decides
		case !status.Allowed && !status.Denied && status.EvaluationError != "":
			return d, &part.Error{Code: http.StatusServiceUnavailable, Message: status.EvaluationError}
		case status.Allowed && status.Denied:
			// The apiserver denies such an answer and logs an error: deny
			// here too, with a status it reads as meant, and a reason that
			// says what went wrong.
			status = Denied("the webhook's authorize function answered both allowed and denied; denied")
			d.Attrs = append(d.Attrs, slog.String("error", "the authorize function answered both allowed and denied"))
		}
		if d.Review, err = encodeSubjectAccessReview(gvk, status); err != nil {
			return d, fmt.Errorf("encoding the review: %w", err)
		}
		d.Verdict = verdict(status)
		return d, nil
	}
}

// NoOpinion neither allows nor denies: the apiserver asks the next
// authorizer, and forbids the request if none allows it.
func NoOpinion() authorizationv1.SubjectAccessReviewStatus {
	return authorizationv1.SubjectAccessReviewStatus{}
}

// Denied denies the request outright, so RBAC cannot allow it. The
// apiserver ends its Forbidden message, which kubectl prints, with reason.
func Denied(reason string) authorizationv1.SubjectAccessReviewStatus {
	return authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: reason}
}

// Allowed allows the request outright: no later authorizer is asked.
// reason is for the apiserver's audit log and may be empty.
func Allowed(reason string) authorizationv1.SubjectAccessReviewStatus {
	return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: reason}
}

// Undecided says the webhook cannot decide now, for err. It is answered
// as an HTTP 503, which the apiserver does not retry, so that the
// authorizer's failurePolicy decides at once, and caches nothing (an
// answer of no opinion would be cached for unauthorizedTTL): Deny refuses
// the request; NoOpinion asks the next authorizer. Unless one allows it,
// the user gets the apiserver's 500 carrying err's message. (It is a
// status of no opinion with evaluationError set, which the webhook never
// sends as such.)
func Undecided(err error) authorizationv1.SubjectAccessReviewStatus {
	return authorizationv1.SubjectAccessReviewStatus{EvaluationError: err.Error()}
}

// decodeSubjectAccessReview decodes a SubjectAccessReview of either
// version: its version, and its spec as authorization.k8s.io/v1.
func decodeSubjectAccessReview(body []byte) (schema.GroupVersionKind, *authorizationv1.SubjectAccessReviewSpec, error) {
	obj, gvk, err := decoder.Decode(body, nil, nil)
	if err != nil {
		return schema.GroupVersionKind{}, nil, part.DecodeError(body, gvk, err, acceptedSubjectAccessReviews)
	}
	var spec *authorizationv1.SubjectAccessReviewSpec
	switch review := obj.(type) {
	case *authorizationv1.SubjectAccessReview:
		spec = &review.Spec
	case *authorizationv1beta1.SubjectAccessReview:
		spec = convert.SpecFromV1beta1(&review.Spec)
	default: // an unversioned meta kind (part.Decoder)
		return schema.GroupVersionKind{}, nil, part.WrongKind(*gvk, acceptedSubjectAccessReviews)
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

// decoder decodes SubjectAccessReview in the two versions the apiserver
// sends (the authorizer's subjectAccessReviewVersion).
var decoder = part.Decoder(authorizationv1.AddToScheme, authorizationv1beta1.AddToScheme)

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

// verdict names what a status does, for the log line and the metrics:
// "allowed", "denied" or "no_opinion".
func verdict(s authorizationv1.SubjectAccessReviewStatus) string {
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
