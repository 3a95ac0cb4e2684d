package main

// This file is the webhook's policy: what it admits, what it changes, and
// the flags that configure both. It is the file to change to make the
// webhook yours, with policy_test.go beside it; README.md's "Make it yours"
// lists the rest (the rules in deploy/webhooks.yaml, the goldens, the
// demonstration's e2e tests). Everything else is plumbing you need not open.
//
// main.go expects four things of this file: the type policy, its addFlags
// method (which may register nothing), and the admit functions mutate and
// validate. LogValue is optional: it shapes the start-up log line. The
// building blocks they use are:
//
//   - the responses allowed, denied, patched and errored (handler.go);
//   - objectMeta, which decodes the fields of metadata most policies read,
//     and decodeObject, which decodes any other fields into a struct of
//     yours (handler.go);
//   - setLabels and setAnnotations, which build the JSON Patch that sets
//     entries of metadata.labels or metadata.annotations (patch.go).

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// defaultAnnotation is what /mutate adds and /validate requires unless told
// otherwise: the demonstration this project started from.
const defaultAnnotation = "webhook.example.com/allow=true"

// policy is the webhook's whole configuration of what to admit and what to
// change. It reaches the admit functions through their makers, never as a
// global.
type policy struct {
	// annotate lists the annotations /mutate sets.
	annotate []keyValue
	// require lists the annotations /validate insists on.
	require []keyValue
}

// addFlags registers the policy's flags on flags, which main.go parses with
// the server's own. Each flag has a working default: the tests start the
// server with no flags at all.
func (p *policy) addFlags(flags *flag.FlagSet) {
	flags.Var(newAnnotationsFlag(&p.annotate, defaultAnnotation), "annotate", "annotation `key=value` that /mutate sets (repeatable)")
	flags.Var(newAnnotationsFlag(&p.require, defaultAnnotation), "require", "annotation `key=value` that /validate requires (repeatable)")
}

// LogValue is how the policy appears in the server's start-up log line.
func (p policy) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Any("annotate", p.annotate),
		slog.Any("require", p.require),
	)
}

// mutate returns the admit function of /mutate: it adds p.annotate to every
// object it acts on and keeps every other annotation.
func mutate(p policy) admitFunc {
	return func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if !actsOn(req) {
			return allowed()
		}
		meta, err := objectMeta(req.Object)
		if err != nil {
			return errored(http.StatusBadRequest, err)
		}
		return patched(setAnnotations(meta, p.annotate))
	}
}

// validate returns the admit function of /validate: it denies an object that
// lacks any of p.require, naming each missing key=value.
func validate(p policy) admitFunc {
	return func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if !actsOn(req) {
			return allowed()
		}
		meta, err := objectMeta(req.Object)
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

// actsOn reports whether the policy applies to req. Only writes of a whole
// object are acted on: DELETE and CONNECT carry no object to annotate, and a
// subresource such as deployments/scale or /status carries another kind
// (autoscaling/v1 Scale) whose metadata is not the object's.
func actsOn(req *admissionv1.AdmissionRequest) bool {
	return (req.Operation == admissionv1.Create || req.Operation == admissionv1.Update) && req.SubResource == ""
}

// annotationsFlag is a repeatable -flag key=value that fills a list of
// annotations. The first use replaces the default; each key is checked as
// the apiserver checks annotation keys, so a typo fails at start-up rather
// than on the first review.
type annotationsFlag struct {
	list    *[]keyValue
	changed bool
}

func newAnnotationsFlag(list *[]keyValue, def string) *annotationsFlag {
	f := &annotationsFlag{list: list}
	// The default is a constant known to be valid.
	_ = f.Set(def)
	f.changed = false
	return f
}

func (f *annotationsFlag) String() string {
	if f == nil || f.list == nil {
		return ""
	}
	s := make([]string, len(*f.list))
	for i, a := range *f.list {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

func (f *annotationsFlag) Set(s string) error {
	key, value, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("want key=value, such as %s", defaultAnnotation)
	}
	if !f.changed {
		*f.list, f.changed = nil, true
	}
	all := map[string]string{key: value}
	for _, a := range *f.list {
		if a.Key == key {
			return fmt.Errorf("annotation key %q is given twice", key)
		}
		all[a.Key] = a.Value
	}
	if errs := apivalidation.ValidateAnnotations(all, field.NewPath("metadata", "annotations")); len(errs) > 0 {
		return errs.ToAggregate()
	}
	*f.list = append(*f.list, keyValue{Key: key, Value: value})
	return nil
}
