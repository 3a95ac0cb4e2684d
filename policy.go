package main

// This file is the webhook's policy: what it admits and what it changes,
// then the flags that configure it. It is the file to change to make the
// webhook yours, with policy_test.go; README.md's "Make it yours" lists the
// rest. main.go expects of it the type policy with its addFlags method,
// and handler.go's routes the admit functions mutate and validate.
//
// They are built from the toolbox (toolbox.go, patch.go): the answers
// allowed, allowedWithWarning, denied, patched, errored and unavailable; the
// readers decodeMetadata (the metadata most policies read; the namespace is
// req.Namespace), decodeObject (any other fields, into a struct of yours)
// and objectName (the object's name for a message); the patch builders
// setLabels and setAnnotations (entries of metadata.labels or .annotations
// from a []keyValue) and patchObject (set, setDefault and appendTo
// anywhere in the object, creating missing parents; docs/patching.md works
// an example); and addListFlag, a repeatable flag whose defaults are
// checked at start-up. A policy that looks something up in the cluster
// adds a method Reads, which the cluster part (cluster/) finds
// (docs/cluster.md works an example). A denial is what the operator's
// -validation-action makes it (rollout/: refused, or let through with a
// warning or an audit annotation while the policy rolls out); the policy
// never needs to know which.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// policy is the webhook's whole configuration of what to admit and what to
// change. It reaches the admit functions through their makers, never as a
// global.
type policy struct {
	annotate []keyValue // the annotations /mutate sets
	require  []keyValue // the annotations /validate insists on
}

// mutate returns the admit function of /mutate: it adds p.annotate to every
// object it acts on and keeps every other annotation.
func mutate(p policy) admitFunc {
	return func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if !writesWholeObject(req) {
			return allowed()
		}
		meta, err := decodeMetadata(req.Object)
		if err != nil {
			return errored(http.StatusBadRequest, err)
		}
		return patched(setAnnotations(meta, p.annotate))
	}
}

// validate returns the admit function of /validate: it denies an object that
// lacks any of p.require (-require; by default defaultAnnotation), naming
// each missing key=value.
func validate(p policy) admitFunc {
	return func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if !writesWholeObject(req) {
			return allowed()
		}
		meta, err := decodeMetadata(req.Object)
		if err != nil {
			return errored(http.StatusBadRequest, err)
		}
		var missing []string
		for _, a := range p.require {
			if v, ok := meta.Annotations[a.Key]; !ok || v != a.Value {
				missing = append(missing, a.String())
			}
		}
		if len(missing) == 0 {
			return allowed()
		}
		noun := "annotation"
		if len(missing) > 1 {
			noun = "annotations"
		}
		return denied(fmt.Sprintf("%s %s must have the %s %s in metadata.annotations; add it, or create the object through the mutating webhook that sets it",
			req.Kind.Kind, objectName(req, meta), noun, strings.Join(missing, ", ")))
	}
}

// writesWholeObject reports whether the policy applies to req. Only writes of a whole
// object are acted on: DELETE and CONNECT carry no object to annotate, and a
// subresource such as deployments/scale or /status carries another kind
// (autoscaling/v1 Scale) whose metadata is not the object's.
func writesWholeObject(req *admissionv1.AdmissionRequest) bool {
	return (req.Operation == admissionv1.Create || req.Operation == admissionv1.Update) && req.SubResource == ""
}

// The policy's flags.

// defaultAnnotation is what /mutate adds and /validate requires unless told
// otherwise: the demonstration this project started from.
const defaultAnnotation = "webhook.example.com/allow=true"

// addFlags registers the policy's flags on flags, which main.go parses with
// the server's own. Each has a working default: the tests start the server
// with no flags, and every deployment runs the defaults (deploy/ passes
// only the server's flags), so a rule for everywhere is a default here. A
// default that does not parse is an error: the server does not start.
func (p *policy) addFlags(flags *flag.FlagSet) error {
	return errors.Join(
		addListFlag(flags, "annotate", "annotation `key=value` that /mutate sets (repeatable)", &p.annotate, parseAnnotation, defaultAnnotation),
		addListFlag(flags, "require", "annotation `key=value` that /validate requires (repeatable)", &p.require, parseAnnotation, defaultAnnotation),
	)
}

// LogValue is how the policy appears in the server's start-up log.
func (p policy) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Any("annotate", p.annotate),
		slog.Any("require", p.require),
	)
}

// parseAnnotation parses key=value, an annotation to add to those before it
// in the list. Each key is checked as the apiserver checks them, so a typo
// fails at start-up.
func parseAnnotation(before []keyValue, s string) (keyValue, error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok {
		return keyValue{}, fmt.Errorf("want key=value, such as %s", defaultAnnotation)
	}
	all := map[string]string{key: value}
	for _, a := range before {
		if a.Key == key {
			return keyValue{}, fmt.Errorf("annotation key %q is given twice", key)
		}
		all[a.Key] = a.Value
	}
	if errs := apivalidation.ValidateAnnotations(all, field.NewPath("metadata", "annotations")); len(errs) > 0 {
		return keyValue{}, errs.ToAggregate()
	}
	return keyValue{Key: key, Value: value}, nil
}
