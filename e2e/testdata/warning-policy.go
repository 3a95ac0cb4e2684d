package main

// A policy.go of e2e TestPolicyWarning's (e2e/rollout_test.go), built in
// place of the webhook's own with go build -overlay: /validate admits
// every object it acts on with a warning, by allowedWithWarning, as a
// policy warns of a deprecation or a soft limit. It has what main.go
// expects of policy.go and nothing more.

import (
	"context"
	"flag"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
)

type policy struct{}

func (p *policy) addFlags(*flag.FlagSet) error { return nil }

func mutate(policy) admitFunc {
	return func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return allowed()
	}
}

func validate(policy) admitFunc {
	return func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
			return allowed()
		}
		meta, err := objectMeta(req.Object)
		if err != nil {
			return errored(http.StatusBadRequest, err)
		}
		return allowedWithWarning(req.Kind.Kind + " " + objectName(req, meta) + " is checked by the e2e's warning policy")
	}
}

func authorize(policy) authorizeFunc {
	return func(context.Context, *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		return noOpinion()
	}
}
