package main

// A policy.go of the e2e suite's own (view_test.go), built in place of the
// webhook's own with go build -overlay: one that reads the cluster. It
// keeps a view of every ConfigMap, their names alone, and looks a
// request's namespace up in it on every review, on both routes: it admits
// the request, unless the namespace holds the ConfigMap undecidedName,
// when it answers undecided, as a policy does whose view cannot answer. It
// has what main.go expects of policy.go and nothing more.

import (
	"context"
	"errors"
	"flag"

	admissionv1 "k8s.io/api/admission/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
)

// undecidedName is the ConfigMap whose presence in a namespace makes the
// policy answer undecided there.
const undecidedName = "e2e-undecided"

type policy struct {
	configMaps *view[struct{}]
}

func (p *policy) addFlags(*flag.FlagSet) error { return nil }

func (p *policy) reads() []read {
	return []read{readInto(&p.configMaps, clusterKind{APIVersion: "v1", Kind: "ConfigMap"})}
}

func lookUp(p policy) admitFunc {
	return func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		_, found, err := p.configMaps.get(req.Namespace, undecidedName)
		if err != nil {
			return undecided(err)
		}
		if found {
			return undecided(errors.New("the e2e's lookup policy cannot decide in namespace " + req.Namespace + ": it holds the ConfigMap " + undecidedName))
		}
		return allowed()
	}
}

func mutate(p policy) admitFunc   { return lookUp(p) }
func validate(p policy) admitFunc { return lookUp(p) }

func authorize(policy) authorizeFunc {
	return func(context.Context, *authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		return noOpinion()
	}
}
