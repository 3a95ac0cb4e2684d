// Package part is how the webhook's optional capabilities plug into it.
// Each is a package in a folder of its own that returns a Part, named by
// its line in main.go's parts; main.go calls each field that is set, when
// that field's comment says, and skips the rest. Delete a part's folder
// and its line (and import) in main.go, and the webhook builds, serves and
// passes its tests without it.
//
// A route's review is decided by a Decide, which the server's one path
// for reviews calls with the body it read: check the request, read the
// body within its budget, Decide, answer and log (handler.go's handle).
package part

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// Part is one optional capability, by what it adds to the webhook.
type Part struct {
	// Name is its folder's.
	Name string

	// Command is `webhook Name`, run with the arguments after it, and
	// Usage its line in `webhook help`.
	Command func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error
	Usage   string

	// Flags adds its flags to the server's, and to `webhook review`'s
	// (offline: the policy reviewed without a cluster or a server).
	Flags func(flags *flag.FlagSet, offline bool)

	// Start runs once the flags are parsed, before anything is served;
	// the stop it returns is called before run returns, after the server
	// has shut down. An error stops the server, naming the part.
	Start func(env Env) (stop func(), err error)

	// NotReady holds /ping at 503, saying why, while it returns an error.
	NotReady func() error

	// Route is a route it serves beside /mutate and /validate, given the
	// server's settings: a path of "" serves none; an error stops the
	// server as a bad flag does.
	Route func(env Env) (Route, error)

	// Denials, asked once the flags are parsed, is what becomes of
	// /validate's denials: nil, and each is sent as the policy made it.
	Denials func() RewriteDenial

	// Metrics writes its series, in Prometheus's text format, at each
	// scrape of -metrics-listen.
	Metrics func(w io.Writer)
}

// RewriteDenial turns a denial of /validate's (the policy's answer, never
// written to) into the answer sent instead, and returns its verdict.
type RewriteDenial func(denial *admissionv1.AdmissionResponse) (*admissionv1.AdmissionResponse, string)

// Env is what the server tells a part of itself.
type Env struct {
	Logger *slog.Logger
	Getenv func(string) string
	// Offline is true for `webhook review`: no apiserver, no clients.
	Offline bool
	// ClientCertificates is true when the review routes admit only a
	// client the CA of -client-ca-file signed.
	ClientCertificates bool
}

// Route is a review route: its path, what it expects (named in the
// messages of what it refuses, such as "an AdmissionReview of
// admission.k8s.io/v1"), and what decides each review.
type Route struct {
	Path    string
	Expects string
	Decide  Decide
}

// Decide decides one review from its body, read whole: the review to
// answer with; or an error, and then the server answers with a
// metav1.Status: an *Error's code and message, and 500 for any other,
// which the log explains (a *Panic, what Recover made of the policy's;
// ErrNoAnswer; a review that did not encode). Attrs are set whenever the
// body was the review expected, error or not.
type Decide func(ctx context.Context, body []byte) (Decision, error)

// Decision is a review decided: the review to send, with HTTP 200, its
// verdict (for the log line and the metrics: "allowed", "denied", …), and
// the log line's attributes, which name the request and never quote it.
type Decision struct {
	Review  []byte
	Verdict string
	Attrs   []slog.Attr
}

// Error is an answer that is not a review: its HTTP status and the
// message the apiserver shows. A 4xx is a body that is not the review
// expected. A 5xx is a review the policy cannot decide now, logged as the
// review's line (verdict "errored"), which the apiserver's failurePolicy
// then decides, as for a webhook it cannot reach.
type Error struct {
	Code    int
	Message string
}

func (e *Error) Error() string { return e.Message }

// ErrNoAnswer is a policy's function that returned nil.
var ErrNoAnswer = errors.New("the policy returned no answer")

// Recover calls decide, the policy, and returns its answer; or, when it
// panicked, a *Panic, so that a panic is answered instead of dropping
// the connection.
func Recover[T any](decide func() T) (answer T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = newPanic(p)
		}
	}()
	return decide(), nil
}

// Panic is a panic of the policy's, as it is logged: its stack, and its
// value only when the runtime made it (a runtime.Error); of a value the
// policy made, which may hold a Secret's contents, only its type.
type Panic struct {
	stack, runtimeError, valueType string
}

func newPanic(p any) *Panic {
	pp := &Panic{stack: string(debug.Stack())}
	if rerr, ok := p.(runtime.Error); ok {
		pp.runtimeError = rerr.Error()
	} else {
		pp.valueType = fmt.Sprintf("%T", p)
	}
	return pp
}

func (p *Panic) Error() string {
	if p.runtimeError != "" {
		return "the policy panicked: " + p.runtimeError
	}
	return "the policy panicked with a value of type " + p.valueType
}

// LogValue logs the panic as a group of its stack, and its runtime
// error's message or its value's type.
func (p *Panic) LogValue() slog.Value {
	if p.runtimeError != "" {
		return slog.GroupValue(slog.String("stack", p.stack), slog.String("value", p.runtimeError))
	}
	return slog.GroupValue(slog.String("stack", p.stack), slog.String("type", p.valueType))
}

// Decoder decodes the kinds that add register, in the versions they
// register, and nothing else: any other kind fails to decode, but for a
// few unversioned meta kinds, such as v1 Status, that registering any API
// group registers too. (AddToScheme fails only on conflicting
// registrations, which distinct group versions cannot have.)
func Decoder(add ...func(*k8sruntime.Scheme) error) k8sruntime.Decoder {
	scheme := k8sruntime.NewScheme()
	for _, f := range add {
		_ = f(scheme)
	}
	return serializer.NewCodecFactory(scheme).UniversalDeserializer()
}

// maxErrorDetail bounds how much of a decoder's error reaches a message,
// so a huge or hostile body cannot make a huge answer.
const maxErrorDetail = 256

// DecodeError says why body is not the review expected (expects names it)
// without quoting it, as apimachinery's "Kind is missing" does: it may be
// a Secret.
func DecodeError(body []byte, gvk *schema.GroupVersionKind, err error, expects string) error {
	switch {
	case len(body) == 0:
		return fmt.Errorf("request body is empty: expected %s", expects)
	case k8sruntime.IsMissingKind(err), k8sruntime.IsMissingVersion(err):
		return fmt.Errorf("request body has no apiVersion or kind: expected %s", expects)
	case k8sruntime.IsNotRegisteredError(err) && gvk != nil:
		return WrongKind(*gvk, expects)
	}
	detail := err.Error()
	if len(detail) > maxErrorDetail {
		detail = strings.ToValidUTF8(detail[:maxErrorDetail], "") + "…"
	}
	return fmt.Errorf("request body does not decode (expected %s): %s", expects, detail)
}

// WrongKind says that a body of kind gvk is not the review expected.
func WrongKind(gvk schema.GroupVersionKind, expects string) error {
	return fmt.Errorf("request body is apiVersion %q, kind %q: expected %s", gvk.GroupVersion(), gvk.Kind, expects)
}
