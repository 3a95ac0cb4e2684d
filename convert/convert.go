// Package convert copies the reviews the apiserver may send in v1beta1 to
// and from v1, the one version the webhook's admit and authorize functions
// see. The apiserver sends admission.k8s.io/v1beta1 to webhooks that list
// only "v1beta1" in admissionReviewVersions, and authorization.k8s.io/
// v1beta1 when an authorizer's subjectAccessReviewVersion is v1beta1. Each
// has the same fields as v1 (a SubjectAccessReview's spec.groups is spelt
// "group" in v1beta1's JSON), and k8s.io/api has no conversions between
// them.
package convert

import (
	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	authorizationv1 "k8s.io/api/authorization/v1"
	authorizationv1beta1 "k8s.io/api/authorization/v1beta1"
)

// RequestFromV1beta1 copies an admission.k8s.io/v1beta1 request to v1,
// field by field.
func RequestFromV1beta1(in *admissionv1beta1.AdmissionRequest) *admissionv1.AdmissionRequest {
	return &admissionv1.AdmissionRequest{
		UID:                in.UID,
		Kind:               in.Kind,
		Resource:           in.Resource,
		SubResource:        in.SubResource,
		RequestKind:        in.RequestKind,
		RequestResource:    in.RequestResource,
		RequestSubResource: in.RequestSubResource,
		Name:               in.Name,
		Namespace:          in.Namespace,
		Operation:          admissionv1.Operation(in.Operation),
		UserInfo:           in.UserInfo,
		Object:             in.Object,
		OldObject:          in.OldObject,
		DryRun:             in.DryRun,
		Options:            in.Options,
	}
}

// ResponseToV1beta1 copies an admission.k8s.io/v1 response to v1beta1,
// field by field.
func ResponseToV1beta1(in *admissionv1.AdmissionResponse) *admissionv1beta1.AdmissionResponse {
	out := &admissionv1beta1.AdmissionResponse{
		UID:              in.UID,
		Allowed:          in.Allowed,
		Result:           in.Result,
		Patch:            in.Patch,
		AuditAnnotations: in.AuditAnnotations,
		Warnings:         in.Warnings,
	}
	if in.PatchType != nil {
		pt := admissionv1beta1.PatchType(*in.PatchType)
		out.PatchType = &pt
	}
	return out
}

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
