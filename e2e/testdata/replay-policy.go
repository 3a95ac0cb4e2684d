package main

// A policy.go of e2e TestAuditReplay's (e2e/replay_test.go), built in
// place of the webhook's own with go build -overlay, as a copier replaces
// it. It decides by everything `webhook review -audit-log` must carry over
// from the apiserver's audit log, so that a replay's verdicts can be held
// to the apiserver's: the operation, the object, the object before an
// UPDATE or a DELETE, and the user's groups. (/authorize is the authorize
// part's, its -deny rules by group, verb and resource.) It has what
// main.go expects of policy.go and nothing more.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
)

const (
	// mutatedKey is the annotation /mutate sets on what it creates or
	// updates, when it is not there.
	mutatedKey = "replay.example.com/mutated"
	// ownerLabel may be changed on UPDATE only by a member of -admin-group.
	ownerLabel = "replay.example.com/owner"
	// protectedLabel, "true", lets only a member of -admin-group DELETE.
	protectedLabel = "replay.example.com/protected"
)

type policy struct {
	require []keyValue // -require key=value: /validate denies a CREATE or UPDATE without it
	admins  []string   // -admin-group
}

func (p *policy) addFlags(flags *flag.FlagSet) error {
	return errors.Join(
		addListFlag(flags, "require", "annotation `key=value` that /validate requires on CREATE and UPDATE (repeatable)", &p.require, parseRequired),
		addListFlag(flags, "admin-group", "`group` whose members may change the owner label and delete protected objects (repeatable)", &p.admins, func(_ []string, s string) (string, error) { return s, nil }, "replay:admins"),
	)
}

// reads: this policy reads nothing of the cluster.
func parseRequired(_ []keyValue, s string) (keyValue, error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok || key == "" {
		return keyValue{}, fmt.Errorf("want key=value")
	}
	return keyValue{Key: key, Value: value}, nil
}

// writes reports whether the policy decides on req: a CREATE, UPDATE or
// DELETE of the object itself, not a subresource.
func writes(req *admissionv1.AdmissionRequest) bool {
	return req.SubResource == "" && (req.Operation == admissionv1.Create || req.Operation == admissionv1.Update || req.Operation == admissionv1.Delete)
}

func mutate(policy) admitFunc {
	return func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if !writes(req) || req.Operation == admissionv1.Delete {
			return allowed()
		}
		meta, err := decodeMetadata(req.Object)
		if err != nil {
			return errored(http.StatusBadRequest, err)
		}
		if _, ok := meta.Annotations[mutatedKey]; ok {
			return allowed()
		}
		return patched(setAnnotations(meta, []keyValue{{Key: mutatedKey, Value: "true"}}))
	}
}

func validate(p policy) admitFunc {
	return func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if !writes(req) {
			return allowed()
		}
		admin := slices.ContainsFunc(req.UserInfo.Groups, func(g string) bool { return slices.Contains(p.admins, g) })
		if req.Operation == admissionv1.Delete {
			old, err := decodeMetadata(req.OldObject)
			if err != nil {
				return errored(http.StatusBadRequest, err)
			}
			if old.Labels[protectedLabel] == "true" && !admin {
				return denied(fmt.Sprintf("%s %s is protected: only %s may delete it", req.Kind.Kind, objectName(req, old), strings.Join(p.admins, ", ")))
			}
			return allowed()
		}
		meta, err := decodeMetadata(req.Object)
		if err != nil {
			return errored(http.StatusBadRequest, err)
		}
		var missing []string
		for _, a := range p.require {
			if meta.Annotations[a.Key] != a.Value {
				missing = append(missing, a.Key+"="+a.Value)
			}
		}
		if len(missing) > 0 {
			return denied(fmt.Sprintf("%s %s lacks the annotations %s", req.Kind.Kind, objectName(req, meta), strings.Join(missing, ", ")))
		}
		if req.Operation == admissionv1.Update {
			old, err := decodeMetadata(req.OldObject)
			if err != nil {
				return errored(http.StatusBadRequest, fmt.Errorf("oldObject: %w", err))
			}
			if old.Labels[ownerLabel] != meta.Labels[ownerLabel] && !admin {
				return denied(fmt.Sprintf("%s %s: only %s may change the label %s", req.Kind.Kind, objectName(req, meta), strings.Join(p.admins, ", "), ownerLabel))
			}
		}
		return allowed()
	}
}
