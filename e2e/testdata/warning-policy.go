package main

// A policy.go of e2e TestPolicyWarning's (e2e/rollout_test.go), built in
// place of the webhook's own with go build -overlay: /validate admits
// every object it acts on with a warning, by allowedWithWarning, as a
// policy warns of a deprecation or a soft limit. It has what main.go
// expects of policy.go and nothing more.

import (
	"context"
	"flag"

	admissionv1 "k8s.io/api/admission/v1"
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
		// Every operation, as the admitted request may be any: the name
		// is the request's (the e2e suite names every object).
		return allowedWithWarning(req.Kind.Kind + " " + objectName(req, nil) + " is checked by the e2e's warning policy")
	}
}
