// Package convert copies the reviews of authorization.k8s.io/v1beta1 to and
// from v1, the one version the webhook's authorize functions see: the
// apiserver sends v1beta1 when an authorizer's subjectAccessReviewVersion
// is v1beta1. It has v1's fields, but spells a SubjectAccessReview's
// spec.groups "group" in JSON, and k8s.io/api has no conversions between
// them. An AdmissionReview of admission.k8s.io/v1beta1 needs no copy: it
// is v1's, field for field and in JSON (TestAdmissionReviewV1beta1IsV1),
// so the webhook decodes it into v1's type.
package convert

import (
	authorizationv1 "k8s.io/api/authorization/v1"
	authorizationv1beta1 "k8s.io/api/authorization/v1beta1"
)

// SpecFromV1beta1 copies an authorization.k8s.io/v1beta1
// SubjectAccessReview's spec to v1, field by field, as the apiserver's own
// v1SpecToV1beta1Spec does the other way.
func SpecFromV1beta1(in *authorizationv1beta1.SubjectAccessReviewSpec) *authorizationv1.SubjectAccessReviewSpec {
	out := &authorizationv1.SubjectAccessReviewSpec{
		User:   in.User,
		Groups: in.Groups,
		UID:    in.UID,
	}
	if ra := in.ResourceAttributes; ra != nil {
		out.ResourceAttributes = &authorizationv1.ResourceAttributes{
			Namespace:     ra.Namespace,
			Verb:          ra.Verb,
			Group:         ra.Group,
			Version:       ra.Version,
			Resource:      ra.Resource,
			Subresource:   ra.Subresource,
			Name:          ra.Name,
			FieldSelector: ra.FieldSelector,
			LabelSelector: ra.LabelSelector,
		}
	}
	if nra := in.NonResourceAttributes; nra != nil {
		out.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: nra.Path, Verb: nra.Verb}
	}
	if in.Extra != nil {
		out.Extra = make(map[string]authorizationv1.ExtraValue, len(in.Extra))
		for k, v := range in.Extra {
			out.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	return out
}

// StatusToV1beta1 copies an authorization.k8s.io/v1 SubjectAccessReview's
// status to v1beta1.
func StatusToV1beta1(in authorizationv1.SubjectAccessReviewStatus) authorizationv1beta1.SubjectAccessReviewStatus {
	return authorizationv1beta1.SubjectAccessReviewStatus{
		Allowed:         in.Allowed,
		Denied:          in.Denied,
		Reason:          in.Reason,
		EvaluationError: in.EvaluationError,
	}
}
