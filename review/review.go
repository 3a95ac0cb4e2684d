// Package review is `webhook review`: it runs the webhook's policy on
// manifests, without a cluster, through the very handler that serves the
// apiserver's reviews, called in process. It builds each request as the
// apiserver would, sends it to /mutate, applies the patch, sends the
// result to /validate, and says what the apiserver would do: admit,
// patch, warn or deny. With -audit-log it replays the apiserver's audit
// log instead (replay.go): each request the log recorded, as the
// AdmissionReview and the SubjectAccessReview the apiserver would have
// sent, beside what it did then. It knows no policy: main.go hands it the
// webhook's routes, built from the same flags the server takes.
package review

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/example/webhook/jsonpatch"
)

// ExitError is an error that ends the program with Code: 1 when an object
// is denied, errors, is not idempotent or differs on dry run; 2 for bad
// usage or input that cannot be read.
type ExitError struct {
	Code int
	Err  error // printed unless nil
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode is the status to exit with.
func (e *ExitError) ExitCode() int { return e.Code }

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// options are review's own flags.
type options struct {
	files, old, configs, groups listFlag
	operation                   string
	user, namespace, output     string
	verbose                     bool
	resources                   map[string]string // kind → plural, from -resource
	auditLogs                   listFlag          // -audit-log: replay these instead of reviewing manifests
	auditCacheBytes             int64
}

// Run is `webhook review`. flags holds the webhook's policy flags and
// -validation-action, which main.go registered; Run adds its own, parses
// args, and then calls routes for the webhook's routes, built from them.
func Run(ctx context.Context, flags *flag.FlagSet, args []string, stdin io.Reader, stdout, stderr io.Writer, routes func() http.Handler) error {
	flags.SetOutput(stderr)
	var o options
	flags.Var(&o.files, "f", "manifest `file`, directory (its *.yaml, *.yml, *.json) or - for stdin; YAML or JSON, several documents, Lists as kubectl prints them (repeatable)")
	flags.Var(&o.old, "old", "with -operation UPDATE: the objects as they were, paired by kind, namespace and name (`file`, repeatable)")
	flags.Var(&o.configs, "config", "webhook configurations `file` (deploy/webhooks.yaml): send each object only to the webhooks whose rules and selectors match it; without it every object goes to /mutate and /validate (repeatable)")
	flags.StringVar(&o.operation, "operation", "CREATE", "the request's `operation`: CREATE, UPDATE (with -old) or DELETE")
	flags.StringVar(&o.user, "user", "webhook-review", "userInfo.username of every request")
	flags.Var(&o.groups, "group", "userInfo.groups of every request (repeatable; default system:authenticated)")
	flags.StringVar(&o.namespace, "namespace", "default", "the `namespace` of a namespaced object that names none, as kubectl's context gives it")
	flags.StringVar(&o.output, "o", "text", "output `format`: text or json")
	flags.BoolVar(&o.verbose, "v", false, "show each patch as a diff of the object")
	flags.Var(&o.auditLogs, "audit-log", "replay the apiserver's audit log `file` (JSON lines; - for stdin; rotated files, gzip or not, oldest first) instead of manifests: each request as the review and the SubjectAccessReview the apiserver would have sent, beside what it did then (repeatable; docs/review.md)")
	flags.Int64Var(&o.auditCacheBytes, "audit-cache-bytes", defaultVersionCacheBytes, "with -audit-log: the most `bytes` of stored versions kept for the oldObject of later updates and deletes; the oldest go first, and the summary says how many")
	resources := &listFlag{}
	flags.Var(resources, "resource", "`Kind=plural`: the resource of a kind whose plural is not the apiserver's guess (lowercase, +s, +es after s, y→ies) (repeatable)")
	if err := flags.Parse(args); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	if flags.NArg() > 0 {
		return &ExitError{Code: 2, Err: fmt.Errorf("review: unexpected argument %q: give files with -f", flags.Arg(0))}
	}
	o.resources = map[string]string{}
	for _, r := range *resources {
		kind, plural, ok := strings.Cut(r, "=")
		if !ok || kind == "" || plural == "" {
			return &ExitError{Code: 2, Err: fmt.Errorf("-resource %q: want Kind=plural, such as Widget=widgets", r)}
		}
		o.resources[kind] = plural
	}
	if len(o.auditLogs) > 0 {
		return runReplay(ctx, flags, o, stdin, stdout, stderr, routes)
	}
	if len(o.groups) == 0 {
		o.groups = listFlag{"system:authenticated"}
	}
	op := admissionv1.Operation(strings.ToUpper(o.operation))
	switch {
	case len(o.files) == 0:
		return &ExitError{Code: 2, Err: errors.New("review: -f is required: the manifests to review")}
	case op != admissionv1.Create && op != admissionv1.Update && op != admissionv1.Delete:
		return &ExitError{Code: 2, Err: fmt.Errorf("-operation %q: want CREATE, UPDATE or DELETE", o.operation)}
	case op == admissionv1.Update && len(o.old) == 0:
		return &ExitError{Code: 2, Err: errors.New("-operation UPDATE needs -old: the objects as they were, which an UPDATE carries as oldObject")}
	case op != admissionv1.Update && len(o.old) > 0:
		return &ExitError{Code: 2, Err: errors.New("-old is for -operation UPDATE")}
	case o.output != "text" && o.output != "json":
		return &ExitError{Code: 2, Err: fmt.Errorf("-o %q: want text or json", o.output)}
	}
	var hooks []webhook
	if len(o.configs) > 0 {
		var err error
		if hooks, err = readConfigs(o.configs); err != nil {
			return &ExitError{Code: 2, Err: err}
		}
	}
	docs := readInputs(o.files, stdin)
	olds := map[string]*unstructured.Unstructured{}
	unreadable := false
	for _, d := range readInputs(o.old, nil) {
		if d.err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", d.source, d.err)
			unreadable = true
			continue
		}
		olds[objectKey(d.obj, o.namespaceOf(d.obj))] = d.obj
	}
	r := &reviewer{o: o, op: op, hooks: hooks, handler: routes(), namespaces: map[string]map[string]string{}}
	for _, d := range docs {
		if d.obj != nil && d.obj.GetKind() == "Namespace" && d.obj.GetAPIVersion() == "v1" {
			r.namespaces[d.obj.GetName()] = d.obj.GetLabels()
		}
	}

	var results []result
	for _, d := range docs {
		if d.err != nil {
			unreadable = true
			results = append(results, result{Source: d.source, Verdict: "error", Error: d.err.Error()})
			continue
		}
		results = append(results, r.review(ctx, d, olds))
	}
	if err := write(stdout, o, op, results); err != nil {
		return err
	}
	switch {
	case unreadable:
		return &ExitError{Code: 2}
	case slices.ContainsFunc(results, func(r result) bool { return r.failed() }):
		return &ExitError{Code: 1}
	}
	return nil
}

// runReplay is Run with -audit-log: the flags that describe a manifest's
// request do not apply, since each request of the log says its own.
func runReplay(ctx context.Context, flags *flag.FlagSet, o options, stdin io.Reader, stdout, stderr io.Writer, routes func() http.Handler) error {
	var conflicting []string
	flags.Visit(func(f *flag.Flag) {
		if slices.Contains([]string{"f", "old", "operation", "user", "group", "namespace", "resource"}, f.Name) {
			conflicting = append(conflicting, "-"+f.Name)
		}
	})
	switch {
	case len(conflicting) > 0:
		return &ExitError{Code: 2, Err: fmt.Errorf("-audit-log replays each request as the log records it: %s do not apply", strings.Join(conflicting, ", "))}
	case o.output != "text" && o.output != "json":
		return &ExitError{Code: 2, Err: fmt.Errorf("-o %q: want text or json", o.output)}
	case o.auditCacheBytes < 0:
		return &ExitError{Code: 2, Err: fmt.Errorf("-audit-cache-bytes %d: want zero (keep no stored version) or more", o.auditCacheBytes)}
	}
	var hooks []webhook
	if len(o.configs) > 0 {
		var err error
		if hooks, err = readConfigs(o.configs); err != nil {
			return &ExitError{Code: 2, Err: err}
		}
	}
	r := &reviewer{o: o, hooks: hooks, handler: routes(), namespaces: map[string]map[string]string{}}
	return replayAuditLogs(ctx, r, o, stdin, stdout, stderr)
}

func (o options) namespaceOf(obj *unstructured.Unstructured) string {
	switch {
	case obj.GetNamespace() != "":
		return obj.GetNamespace()
	case isClusterScoped(obj.GetKind()):
		return ""
	}
	return o.namespace
}

// result is what the apiserver would do with one document.
type result struct {
	Source     string          `json:"source"`
	APIVersion string          `json:"apiVersion,omitempty"`
	Kind       string          `json:"kind,omitempty"`
	Namespace  string          `json:"namespace,omitempty"`
	Name       string          `json:"name,omitempty"`
	Verdict    string          `json:"verdict"` // admitted, denied, error; for a SubjectAccessReview allowed, denied, no-opinion
	Mutate     *mutateResult   `json:"mutate,omitempty"`
	Validate   *validateResult `json:"validate,omitempty"`
	DryRunSame *bool           `json:"dryRunSame,omitempty"`
	Webhooks   []string        `json:"webhooks,omitempty"` // with -config: those the object is sent to
	Notes      []string        `json:"notes,omitempty"`
	Error      string          `json:"error,omitempty"`
	Reason     string          `json:"reason,omitempty"` // a SubjectAccessReview's

	before, after json.RawMessage // the object, and as patched, for -v
}

type mutateResult struct {
	Patch      json.RawMessage `json:"patch"` // [] when none
	Idempotent bool            `json:"idempotent"`
	Warnings   []string        `json:"warnings,omitempty"`
	PatchedBy  []string        `json:"patchedBy,omitempty"` // with -config: the webhooks whose patch changed the object
}

type validateResult struct {
	Allowed          bool              `json:"allowed"`
	Message          string            `json:"message,omitempty"`
	Warnings         []string          `json:"warnings,omitempty"`
	AuditAnnotations map[string]string `json:"auditAnnotations,omitempty"`
	DeniedBy         string            `json:"deniedBy,omitempty"` // with -config: the webhook that denied it
}

// failed reports whether the result makes the exit status 1.
func (r result) failed() bool {
	return r.Verdict == "denied" || r.Verdict == "error" || (r.Mutate != nil && !r.Mutate.Idempotent) || (r.DryRunSame != nil && !*r.DryRunSame)
}

// reviewer reviews documents against the webhook's routes.
type reviewer struct {
	o          options
	op         admissionv1.Operation
	hooks      []webhook // from -config; nil sends every object to /mutate and /validate
	handler    http.Handler
	namespaces map[string]map[string]string // the labels of the Namespaces in the input
}

func (r *reviewer) review(ctx context.Context, d document, olds map[string]*unstructured.Unstructured) result {
	obj := d.obj
	res := result{Source: d.source, APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Name: obj.GetName()}
	if obj.GetKind() == "SubjectAccessReview" {
		return r.authorize(ctx, res, obj)
	}
	res.Namespace = r.o.namespaceOf(obj)
	var old *unstructured.Unstructured
	if r.op == admissionv1.Update {
		if old = olds[objectKey(obj, res.Namespace)]; old == nil {
			res.Verdict, res.Error = "error", fmt.Sprintf("no old object for %s %s in -old: an UPDATE carries the object as it was", obj.GetKind(), qualified(res.Namespace, obj.GetName()))
			return res
		}
	}
	req := r.manifestRequest(obj, old, res.Namespace)
	first := r.admit(ctx, &res, req)
	// As kubectl diff and apply --dry-run=server send it: a webhook with
	// sideEffects None must answer the same.
	req.dryRun, req.options = true, operationOptions(r.op, url.Values{"dryRun": {"All"}})
	dry := r.admit(ctx, &result{Namespace: res.Namespace}, req)
	if res.Verdict != "error" {
		same := first == dry
		res.DryRunSame = &same
	}
	return res
}

// manifestRequest is the request of a manifest: obj written with -operation
// by -user in -group, as the apiserver builds it (the resource its
// RESTMapper would name, the options of the operation).
func (r *reviewer) manifestRequest(obj, old *unstructured.Unstructured, namespace string) request {
	gvk := obj.GroupVersionKind()
	resource := r.resourceOf(gvk)
	req := request{
		operation: admissionregistrationv1.OperationType(r.op), kind: gvk, group: gvk.Group, version: gvk.Version, resource: resource.Resource,
		name: obj.GetName(), namespace: namespace, object: obj, oldObject: old,
		userInfo: authenticationv1.UserInfo{Username: r.o.user, Groups: r.o.groups},
		options:  operationOptions(r.op, nil),
	}
	if r.op == admissionv1.Delete {
		req.object, req.oldObject = nil, obj
	}
	r.setNamespaceLabels(&req)
	return req
}

// setNamespaceLabels gives req the labels of the namespace a
// namespaceSelector reads: a Namespace's own, or those of a Namespace the
// input holds; otherwise it says they are unknown.
func (r *reviewer) setNamespaceLabels(req *request) {
	switch labels, ok := r.namespaces[req.namespace]; {
	case req.resource == "namespaces" && req.group == "":
		for _, o := range []*unstructured.Unstructured{req.object, req.oldObject} {
			if o != nil {
				req.namespaceLabels = o.GetLabels()
				return
			}
		}
	case ok:
		req.namespaceLabels = labels
	default:
		req.namespaceLabelsUnknown = true
	}
}

// operationOptions is the options object of an operation as the apiserver
// sends it: CreateOptions, UpdateOptions or DeleteOptions, with the
// request's dryRun, fieldManager and fieldValidation (from the URI's
// query), none for CONNECT. A PATCH is sent as an UPDATE with
// UpdateOptions, or a CREATE with CreateOptions
// (k8s.io/apiserver/pkg/endpoints/handlers/patch.go, patchToUpdateOptions
// and patchToCreateOptions).
func operationOptions(op admissionv1.Operation, query url.Values) []byte {
	var options any
	switch op {
	case admissionv1.Create:
		options = &metav1.CreateOptions{TypeMeta: metav1.TypeMeta{Kind: "CreateOptions", APIVersion: "meta.k8s.io/v1"},
			DryRun: query["dryRun"], FieldManager: query.Get("fieldManager"), FieldValidation: query.Get("fieldValidation")}
	case admissionv1.Update:
		options = &metav1.UpdateOptions{TypeMeta: metav1.TypeMeta{Kind: "UpdateOptions", APIVersion: "meta.k8s.io/v1"},
			DryRun: query["dryRun"], FieldManager: query.Get("fieldManager"), FieldValidation: query.Get("fieldValidation")}
	case admissionv1.Delete:
		d := &metav1.DeleteOptions{TypeMeta: metav1.TypeMeta{Kind: "DeleteOptions", APIVersion: "meta.k8s.io/v1"}, DryRun: query["dryRun"]}
		if p := metav1.DeletionPropagation(query.Get("propagationPolicy")); p != "" {
			d.PropagationPolicy = &p
		}
		options = d
	default:
		return nil
	}
	b, _ := json.Marshal(options)
	return b
}

// admit runs one request through the webhooks in the apiserver's order:
// each mutating webhook, its patch applied before the next, then each
// mutating webhook again on the result (a patch then is not idempotent),
// then every validating webhook on the patched object. It fills res, and
// returns what a dry run must agree with.
func (r *reviewer) admit(ctx context.Context, res *result, req request) string {
	var mutating, validating []webhook // to call, in order
	if r.hooks == nil {
		mutating, validating = []webhook{{mutating: true, route: "/mutate"}}, []webhook{{route: "/validate"}}
	}
	res.Webhooks, res.Notes = nil, builtinNotes(req)
	for _, h := range r.hooks {
		ok, notes := h.matches(req)
		if !ok {
			continue
		}
		res.Webhooks = append(res.Webhooks, h.name)
		res.Notes = append(res.Notes, notes...)
		if h.mutating {
			mutating = append(mutating, h)
		} else {
			validating = append(validating, h)
		}
	}
	if len(mutating)+len(validating) == 0 {
		res.Verdict = "admitted"
		res.Notes = append(res.Notes, "no webhook of -config matches it: the apiserver does not call the webhook")
		return "not sent"
	}

	// The object as each webhook is sent it, encoded once per change:
	// the apiserver encodes it once per webhook, replay once per patch.
	var current, old []byte
	if req.object != nil {
		current, _ = json.Marshal(req.object.Object)
	}
	if req.oldObject != nil {
		old, _ = json.Marshal(req.oldObject.Object)
	}
	res.before = current
	var ops []json.RawMessage
	var warnings, patchedBy []string
	for _, h := range mutating {
		resp, err := r.call(ctx, h.route, req, current, old)
		if err != nil {
			res.Verdict, res.Error = "error", fmt.Sprintf("%s: %v", h.route, err)
			return res.Error
		}
		warnings = append(warnings, resp.Warnings...)
		if !resp.Allowed {
			res.Verdict = "denied"
			res.Mutate = &mutateResult{Patch: json.RawMessage("[]"), Idempotent: true, Warnings: warnings}
			res.Validate = &validateResult{Message: statusMessage(resp), DeniedBy: h.name}
			return "denied: " + res.Validate.Message
		}
		if len(resp.Patch) > 0 && current != nil {
			patched, err := jsonpatch.Apply(current, resp.Patch)
			if err != nil {
				res.Verdict, res.Error = "error", fmt.Sprintf("%s: the patch does not apply, and the apiserver fails the request: %v", h.route, err)
				return res.Error
			}
			if trimmed := bytes.TrimSpace(patched); len(trimmed) == 0 || trimmed[0] != '{' {
				res.Verdict, res.Error = "error", fmt.Sprintf("%s: the patched object is not an object", h.route)
				return res.Error
			}
			// As the apiserver records it in the audit annotation
			// mutation.webhook.admission.k8s.io/round_0_index_N: whether
			// the object changed, not whether a patch came back. Both are
			// encoded with their keys sorted.
			if h.name != "" && !bytes.Equal(current, patched) {
				patchedBy = append(patchedBy, h.name)
			}
			current = patched
			var these []json.RawMessage
			_ = json.Unmarshal(resp.Patch, &these)
			ops = append(ops, these...)
		}
	}
	patch, _ := json.Marshal(ops)
	if len(ops) == 0 {
		patch = []byte("[]")
	}
	res.after = current
	idempotent := true
	for _, h := range mutating {
		if current == nil {
			break
		}
		resp, err := r.call(ctx, h.route, req, current, old)
		if err == nil && resp.Allowed && len(resp.Patch) > 0 && string(resp.Patch) != "[]" {
			idempotent = false
		}
	}
	if len(mutating) > 0 {
		res.Mutate = &mutateResult{Patch: patch, Idempotent: idempotent, Warnings: warnings, PatchedBy: patchedBy}
	}
	res.Verdict = "admitted"
	v := &validateResult{Allowed: true}
	for _, h := range validating {
		resp, err := r.call(ctx, h.route, req, current, old)
		if err != nil {
			res.Verdict, res.Error = "error", fmt.Sprintf("%s: %v", h.route, err)
			return res.Error
		}
		v.Warnings = append(v.Warnings, resp.Warnings...)
		for k, a := range resp.AuditAnnotations {
			if v.AuditAnnotations == nil {
				v.AuditAnnotations = map[string]string{}
			}
			v.AuditAnnotations[k] = a
		}
		if !resp.Allowed && v.Allowed {
			v.Allowed, v.Message, v.DeniedBy = false, statusMessage(resp), h.name
			res.Verdict = "denied"
		}
	}
	if len(validating) > 0 {
		res.Validate = v
	}
	return fmt.Sprintf("%s %s %v %s", res.Verdict, patch, v.Allowed, v.Message)
}

// resourceOf is the resource of gvk: -resource's, or the apiserver's
// RESTMapper's guess for a kind it knows no plural of
// (meta.UnsafeGuessKindToResource), right for the built-in kinds.
func (r *reviewer) resourceOf(gvk schema.GroupVersionKind) schema.GroupVersionResource {
	if plural, ok := r.o.resources[gvk.Kind]; ok {
		return gvk.GroupVersion().WithResource(plural)
	}
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	return plural
}

// call sends the AdmissionReview of req, with object and oldObject as
// JSON (req's, or the object as the mutating webhooks before left it), to
// the webhook's route, as the apiserver builds it (k8s.io/apiserver/pkg/
// admission/plugin/webhook/request/admissionreview.go,
// CreateV1AdmissionReview), and returns the webhook's answer: an error for
// anything but 200 and a review with the request's uid.
func (r *reviewer) call(ctx context.Context, route string, req request, object, oldObject []byte) (*admissionv1.AdmissionResponse, error) {
	resource := metav1.GroupVersionResource{Group: req.group, Version: req.version, Resource: req.resource}
	uid := types.UID(newUID())
	userInfo := req.userInfo
	if userInfo.Extra == nil {
		userInfo.Extra = map[string]authenticationv1.ExtraValue{}
	}
	areq := &admissionv1.AdmissionRequest{
		UID:                uid,
		Kind:               metav1.GroupVersionKind(req.kind),
		Resource:           resource,
		SubResource:        req.subresource,
		RequestKind:        ptr(metav1.GroupVersionKind(req.kind)),
		RequestResource:    ptr(resource),
		RequestSubResource: req.subresource,
		Name:               req.name,
		Namespace:          req.namespace,
		Operation:          admissionv1.Operation(req.operation),
		UserInfo:           userInfo,
		DryRun:             ptr(req.dryRun),
		Options:            runtime.RawExtension{Raw: req.options},
		Object:             runtime.RawExtension{Raw: object},
		OldObject:          runtime.RawExtension{Raw: oldObject},
	}
	// A Namespace is sent in its own namespace (create.go, createHandler).
	if req.resource == "namespaces" && req.group == "" {
		areq.Namespace = req.name
	}
	if req.operation == admissionregistrationv1.Delete {
		areq.Object.Raw = nil
	}
	body, err := json.Marshal(&admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: areq})
	if err != nil {
		return nil, err
	}
	out, err := r.post(ctx, route, body)
	if err != nil {
		return nil, err
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &review); err != nil || review.Response == nil {
		return nil, fmt.Errorf("the answer is not an AdmissionReview: %.200s", out)
	}
	if review.Response.UID != uid {
		return nil, fmt.Errorf("the answer's uid %q is not the request's %q: the apiserver refuses it", review.Response.UID, uid)
	}
	return review.Response, nil
}

// post sends body to route of the webhook's handler, in process, as the
// apiserver POSTs it, and returns a 200's body.
func (r *reviewer) post(ctx context.Context, route string, body []byte) ([]byte, error) {
	hr := httptest.NewRequestWithContext(ctx, http.MethodPost, route+"?timeout=10s", bytes.NewReader(body))
	hr.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	r.handler.ServeHTTP(w, hr)
	if w.Code != http.StatusOK {
		var s metav1.Status
		if json.Unmarshal(w.Body.Bytes(), &s) == nil && s.Message != "" {
			return nil, fmt.Errorf("HTTP %d: %s", w.Code, s.Message)
		}
		return nil, fmt.Errorf("HTTP %d: %.200s", w.Code, w.Body.String())
	}
	return w.Body.Bytes(), nil
}

// authorize sends a SubjectAccessReview document to /authorize.
func (r *reviewer) authorize(ctx context.Context, res result, obj *unstructured.Unstructured) result {
	body, _ := json.Marshal(obj.Object)
	res.Verdict, res.Reason, res.Error = r.askAuthorize(ctx, body)
	return res
}

// askAuthorize sends body, a SubjectAccessReview, to /authorize and says
// what it answered: its verdict ("allowed", "denied" or "no-opinion") and
// reason, or "error" and why.
func (r *reviewer) askAuthorize(ctx context.Context, body []byte) (verdict, reason, problem string) {
	out, err := r.post(ctx, "/authorize", body)
	if err != nil {
		return "error", "", "/authorize: " + err.Error()
	}
	var sar authorizationv1.SubjectAccessReview
	if err := json.Unmarshal(out, &sar); err != nil {
		return "error", "", fmt.Sprintf("/authorize: the answer is not a SubjectAccessReview: %.200s", out)
	}
	switch {
	case sar.Status.Denied:
		return "denied", sar.Status.Reason, ""
	case sar.Status.Allowed:
		return "allowed", sar.Status.Reason, ""
	}
	return "no-opinion", sar.Status.Reason, ""
}

func statusMessage(resp *admissionv1.AdmissionResponse) string {
	if resp.Result != nil && resp.Result.Message != "" {
		return resp.Result.Message
	}
	return "the webhook gave no reason"
}

func qualified(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

func ptr[T any](v T) *T { return &v }

// newUID is a random version 4 UUID, as the apiserver gives each request.
func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
