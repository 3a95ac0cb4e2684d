package main

// The policy's toolbox: the shape of a decision (admitFunc), the answers
// it returns, the readers of the object under review, and
// addListFlag for its flags. patch.go has the rest, the JSON Patch
// builders. Nothing here sees HTTP.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/json"

	"github.com/example/webhook/jsonfield"
)

// admitFunc decides on one admission request, never returning nil. It sees
// neither HTTP nor globals. Its ctx ends ?timeout= after the request's
// header arrived; the apiserver, counting from before it dialed, gives up
// sooner (docs/error-contract.md). The answer it returns is never written
// to, so one may serve every request. policy.go makes them.
type admitFunc func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

// allowed admits the request unchanged.
func allowed() *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true}
}

// allowedWithWarning admits the request unchanged and warns the user, for
// a deprecation or a soft limit: kubectl prints "Warning: <message>". Keep
// it to one line, its point first (legibleWarning says why). To patch and
// warn, set the Warnings of patched's answer.
func allowedWithWarning(message string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true, Warnings: []string{message}}
}

// patched admits the request with ops applied. With no ops it sets neither
// patch nor patchType: the apiserver rejects one without the other.
func patched(ops []patchOp) *admissionv1.AdmissionResponse {
	if len(ops) == 0 {
		return allowed()
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return errored(http.StatusInternalServerError, fmt.Errorf("encoding the patch: %w", err))
	}
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt}
}

// denied refuses the request with 403 Forbidden. The apiserver shows the
// user `admission webhook "<name>" denied the request: <message>`.
func denied(message string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusForbidden,
		Reason:  metav1.StatusReasonForbidden,
		Message: message,
	}}
}

// errored answers the request with code and err's message, as
// controller-runtime's admission.Errored does. It is for a request the
// webhook could not judge, such as one whose object does not decode
// (400); a policy's own refusal is denied. With a 4xx the request is
// refused in the review (HTTP 200), whatever the webhook's failurePolicy
// says: the apiserver shows the message only from a review. With a 5xx
// the webhook could not decide at all: handler.go answers it as
// unavailable's, an HTTP error that failurePolicy settles. The verdict in
// the log and the metrics is "errored" for 400 and 5xx, else "denied"
// (admissionVerdict).
func errored(code int32, err error) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    code,
		Reason:  cmp.Or(reasonsForCodes[code], metav1.StatusReasonInternalError),
		Message: err.Error(),
	}}
}

// unavailable says the webhook cannot decide now, with err's message, such
// as a view of the cluster that has not synced or is too stale (view's
// lookups return such an err). It is errored(503), and handler.go answers
// it, as any 5xx, as an HTTP 503 with a Status, not as a review, so that
// the webhook configuration's failurePolicy decides, as for a webhook the
// apiserver cannot reach (hence its name): Fail refuses the request, and
// the user reads `failed calling webhook "<name>": failed to call webhook:
// <message>`; Ignore admits it. There is no Retry-After: the apiserver's
// client would retry the call up to ten times. Its verdict is "errored".
func unavailable(err error) *admissionv1.AdmissionResponse {
	return errored(http.StatusServiceUnavailable, err)
}

// objectMetadata is the metadata most policies read: Name, GenerateName,
// Labels and Annotations, and Absent when there is none; the namespace is
// req.Namespace. For more, decodeObject decodes the fields a policy reads.
type objectMetadata struct {
	Name         string            `json:"name,omitempty"`
	GenerateName string            `json:"generateName,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	Absent       bool              `json:"-"` // no metadata at all, which only a hand-made request has
}

// decodeMetadata decodes the metadata of req.Object or req.OldObject, of any
// kind. It reads the object only as far as the end of its metadata, which
// the apiserver writes before spec and status, and of metadata only these
// fields: managedFields above all is most of the work of decoding it.
func decodeMetadata(obj runtime.RawExtension) (*objectMetadata, error) {
	if len(obj.Raw) == 0 || bytes.Equal(obj.Raw, []byte("null")) {
		return nil, errors.New("the request carries no object to admit")
	}
	raw, found, err := jsonfield.Top(obj.Raw, "metadata")
	if err != nil {
		return nil, fmt.Errorf("the object does not decode as a Kubernetes object: %w", err)
	}
	if !found || bytes.Equal(raw, []byte("null")) {
		return &objectMetadata{Absent: true}, nil
	}
	// Four members, each decoded alone: the rest of metadata, managedFields
	// above all, is skipped, not decoded.
	fields, err := jsonfield.Members(raw, "name", "generateName", "labels", "annotations")
	if err != nil {
		return nil, fmt.Errorf("the object does not decode as a Kubernetes object: metadata: %w", err)
	}
	var meta objectMetadata
	for i, into := range []any{&meta.Name, &meta.GenerateName, &meta.Labels, &meta.Annotations} {
		if fields[i] == nil {
			continue
		}
		if err := json.Unmarshal(fields[i], into); err != nil {
			return nil, fmt.Errorf("the object does not decode as a Kubernetes object: metadata: %w", err)
		}
	}
	return &meta, nil
}

// decodeObject decodes the object under review, obj being req.Object or
// req.OldObject, into into: a pointer to a struct holding just the fields
// the policy reads, each tagged with its JSON name, such as
//
//	type container struct {
//		Name  string `json:"name"`
//		Image string `json:"image"`
//	}
//	var pod struct {
//		Spec struct {
//			Containers []container `json:"containers"`
//		} `json:"spec"`
//	}
//
// Decoding is case-sensitive, as in the apiserver: a field without its tag
// (Image for "image") stays empty. Unknown fields are skipped. An absent
// object (req.Object on DELETE) is an error.
func decodeObject(obj runtime.RawExtension, into any) error {
	if len(obj.Raw) == 0 || bytes.Equal(obj.Raw, []byte("null")) {
		return errors.New("the request carries no object to admit")
	}
	if err := json.Unmarshal(obj.Raw, into); err != nil {
		return fmt.Errorf("the object does not decode as a Kubernetes object: %w", err)
	}
	return nil
}

// objectName names the object for a message: "namespace/name", or "name"
// if cluster-scoped; on CREATE with generateName, the prefix and "*". A
// Namespace is named alone, though the apiserver sends its name as
// req.Namespace too.
func objectName(req *admissionv1.AdmissionRequest, meta *objectMetadata) string {
	name := req.Name
	if name == "" && meta != nil {
		name = meta.Name
		if name == "" && meta.GenerateName != "" {
			name = meta.GenerateName + "*"
		}
	}
	if req.Namespace == "" || (req.Resource.Group == "" && req.Resource.Resource == "namespaces") {
		return name
	}
	return req.Namespace + "/" + name
}

// addListFlag registers -name on flags, a repeatable flag that fills *list
// with each value parse accepts (parse sees the values before it, to refuse
// a repeated one). Until the flag is given, *list holds defaults; the first
// use replaces them all, and the server's start-up log says so. The
// defaults are parsed now, as the command line will be: one that does not
// parse is an error naming it, so that a typo in policy.go stops the
// server rather than leaving a rule out.
func addListFlag[T any](flags *flag.FlagSet, name, usage string, list *[]T, parse func(before []T, value string) (T, error), defaults ...string) error {
	*list = nil
	for _, d := range defaults {
		v, err := parse(*list, d)
		if err != nil {
			return fmt.Errorf("policy.go: the default %q of -%s does not parse: %w", d, name, err)
		}
		*list = append(*list, v)
	}
	flags.Var(&listFlag[T]{list: list, parse: parse, defaults: defaults}, name, usage)
	return nil
}

// listFlag is the flag.Value of addListFlag.
type listFlag[T any] struct {
	list     *[]T
	parse    func([]T, string) (T, error)
	defaults []string
	given    bool
}

func (f *listFlag[T]) Set(s string) error {
	if !f.given {
		*f.list, f.given = nil, true
	}
	v, err := f.parse(*f.list, s)
	if err != nil {
		return err
	}
	*f.list = append(*f.list, v)
	return nil
}

// String lists the values, as -help shows the defaults.
func (f *listFlag[T]) String() string {
	if f == nil || f.list == nil {
		return ""
	}
	s := make([]string, len(*f.list))
	for i, v := range *f.list {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, " ")
}

// defaultsReplaced returns the defaults the command line replaced, if any.
func (f *listFlag[T]) defaultsReplaced() []string {
	if !f.given {
		return nil
	}
	return f.defaults
}
