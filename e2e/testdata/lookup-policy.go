package main

// A policy.go of the e2e suite's own (view_test.go), built in place of the
// webhook's own with go build -overlay: one that reads the cluster. It
// keeps a view of every ConfigMap, their names alone, and looks a
// request's namespace up in it on every review, on both routes: it admits
// the request, unless the namespace holds the ConfigMap undecidedName,
// when it answers undecided, as a policy does whose view cannot answer.
//
// It also guards claims, as a copier's policy did: deleting a
// PersistentVolumeClaim is denied while a Pod of its namespace mounts it,
// the Pods read as of now (ListLatest), so that a Pod created a moment
// before the delete counts; a claim whose name starts with "view-" is
// guarded from the view alone (Indexed), to measure what that misses, and
// one whose name starts with "get-" by its Pod mounts-NAME alone, read as
// of now (GetLatest), to measure what that costs. It has what main.go
// expects of policy.go and nothing more.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/example/webhook/cluster"
)

// undecidedName is the ConfigMap whose presence in a namespace makes the
// policy answer undecided there.
const undecidedName = "e2e-undecided"

type policy struct {
	configMaps *cluster.View[struct{}]
	pods       *cluster.View[podClaims]
	maxStale   time.Duration // -max-stale: the ConfigMaps' MaxStale
}

// podClaims is what the policy keeps of a Pod: its namespace, and the
// claims it mounts.
type podClaims struct {
	Metadata struct {
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		Volumes []struct {
			PersistentVolumeClaim *struct {
				ClaimName string `json:"claimName"`
			} `json:"persistentVolumeClaim"`
		} `json:"volumes"`
	} `json:"spec"`
}

func (p podClaims) mounts() []string {
	var claims []string
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims = append(claims, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return claims
}

func (p *policy) addFlags(flags *flag.FlagSet) error {
	flags.DurationVar(&p.maxStale, "max-stale", 0, "the MaxStale of the view of ConfigMaps (0: the default)")
	return nil
}

func (p *policy) Reads() []cluster.Read {
	return []cluster.Read{
		cluster.ReadInto(&p.configMaps, cluster.Kind{APIVersion: "v1", Kind: "ConfigMap", MaxStale: p.maxStale}),
		cluster.ReadInto(&p.pods, cluster.Kind{APIVersion: "v1", Kind: "Pod"}, cluster.IndexBy("claim", func(pod podClaims) []string {
			var keys []string
			for _, c := range pod.mounts() {
				keys = append(keys, pod.Metadata.Namespace+"/"+c)
			}
			return keys
		})),
	}
}

func lookUp(p policy) admitFunc {
	return func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if req.Operation == admissionv1.Delete && req.Kind.Kind == "PersistentVolumeClaim" {
			return guardClaim(ctx, p, req)
		}
		_, found, err := p.configMaps.Get(req.Namespace, undecidedName)
		if err != nil {
			return unavailable(err)
		}
		if found {
			return unavailable(errors.New("the e2e's lookup policy cannot decide in namespace " + req.Namespace + ": it holds the ConfigMap " + undecidedName))
		}
		return allowed()
	}
}

// guardClaim denies deleting the claim req names while a Pod of its
// namespace mounts it.
func guardClaim(ctx context.Context, p policy, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	var pods []podClaims
	var err error
	switch {
	case strings.HasPrefix(req.Name, "view-"):
		pods, err = p.pods.Indexed("claim", req.Namespace+"/"+req.Name)
	case strings.HasPrefix(req.Name, "get-"):
		// A policy that knows which Pod would mount it: the one named
		// after the claim, read as of now.
		var pod podClaims
		var found bool
		pod, found, err = p.pods.GetLatest(ctx, req.Namespace, "mounts-"+req.Name)
		if found && slices.Contains(pod.mounts(), req.Name) {
			pods = append(pods, pod)
		}
	default:
		var all []podClaims
		all, err = p.pods.ListLatest(ctx, req.Namespace)
		for _, pod := range all {
			if slices.Contains(pod.mounts(), req.Name) {
				pods = append(pods, pod)
			}
		}
	}
	if err != nil {
		return unavailable(err)
	}
	if len(pods) > 0 {
		return denied(fmt.Sprintf("PersistentVolumeClaim %s is mounted by %d Pod(s) of namespace %s: delete them first", req.Name, len(pods), req.Namespace))
	}
	return allowed()
}

func mutate(p policy) admitFunc   { return lookUp(p) }
func validate(p policy) admitFunc { return lookUp(p) }
