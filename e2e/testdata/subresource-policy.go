package main

// A policy.go of e2e TestReviewSubresourcesMatchTheAPIServer's
// (e2e/review_kinds_test.go), built in place of the webhook's own with go
// build -overlay, as a copier replaces it. It decides on two subresources,
// what a copier caps or restricts through them: the replicas a Scale
// (deployments/scale, as kubectl scale writes it) asks for, and the images
// of the ephemeral containers a Pod is given (pods/ephemeralcontainers, as
// kubectl debug writes them). It has what main.go expects of policy.go and
// nothing more.

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
)

type policy struct {
	maxReplicas int    // -max-replicas: the most a Scale may ask for
	registry    string // -registry: the prefix every ephemeral container's image must have
}

func (p *policy) addFlags(flags *flag.FlagSet) error {
	flags.IntVar(&p.maxReplicas, "max-replicas", 5, "the most `replicas` a scale subresource may set")
	flags.StringVar(&p.registry, "registry", "registry.example.com/", "the `prefix` every ephemeral container's image must have")
	return nil
}

// reads: this policy reads nothing of the cluster.
func mutate(policy) admitFunc {
	return func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse { return allowed() }
}

func validate(p policy) admitFunc {
	return func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		switch {
		case req.SubResource == "scale" && req.Kind.Kind == "Scale" && req.Operation == admissionv1.Update:
			var scale struct {
				Spec struct {
					Replicas int `json:"replicas"`
				} `json:"spec"`
			}
			if err := decodeObject(req.Object, &scale); err != nil {
				return errored(http.StatusBadRequest, err)
			}
			if scale.Spec.Replicas > p.maxReplicas {
				return denied(fmt.Sprintf("%s %s/%s may have at most %d replicas, not %d", req.Resource.Resource, req.Namespace, req.Name, p.maxReplicas, scale.Spec.Replicas))
			}
		case req.SubResource == "ephemeralcontainers" && req.Kind.Kind == "Pod":
			var pod struct {
				Spec struct {
					EphemeralContainers []struct {
						Name  string `json:"name"`
						Image string `json:"image"`
					} `json:"ephemeralContainers"`
				} `json:"spec"`
			}
			if err := decodeObject(req.Object, &pod); err != nil {
				return errored(http.StatusBadRequest, err)
			}
			var bad []string
			for _, c := range pod.Spec.EphemeralContainers {
				if !strings.HasPrefix(c.Image, p.registry) {
					bad = append(bad, c.Name+" ("+c.Image+")")
				}
			}
			if len(bad) > 0 {
				return denied(fmt.Sprintf("Pod %s/%s: ephemeral containers may run images of %s only, not %s", req.Namespace, req.Name, p.registry, strings.Join(bad, ", ")))
			}
		}
		return allowed()
	}
}
