// Package doctor is `webhook doctor`: it checks webhook configurations
// against the live webhook, as the kube-apiserver would call it, and says in
// plain words what would fail. It is a client of any admission webhook, not
// part of this one, so it shares no code with the server it checks: a bug in
// the server's codecs or types cannot hide from the check meant to catch it.
// This file is the command: its flags, reading the configurations and
// writing the report. checks.go has the checks.
package doctor

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

const doctorUsage = `usage: webhook doctor -f FILE [-address HOST:PORT] [-client-cert FILE -client-key FILE] [-o text|json]

Checks every webhook of the MutatingWebhookConfiguration and
ValidatingWebhookConfiguration objects in FILE (as kubectl get -o yaml prints
them; - reads stdin) against the live webhook: caBundle, target, TLS as the
apiserver does it, a dry-run review in each admissionReviewVersion, and lint.

Exit status: 0 when every check passes (warnings allowed), 1 when one fails,
2 for bad usage or an unreadable file.

`

// maxErrorDetail bounds how much of an error or an answer doctor quotes, so
// a huge or hostile answer cannot make a huge report.
const maxErrorDetail = 256

// ExitError is an error that sets the exit status, which for doctor means
// more than success or failure: 1 when a check failed, 2 for bad usage or
// an unreadable file. The command prints "webhook: " and Err, if any, on
// stderr and exits with Code; a nil Err exits without a message, doctor
// having said everything already.
type ExitError struct {
	Code int
	Err  error
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

// Run is `webhook doctor ARGS...`. It returns flag.ErrHelp for -h, an
// *ExitError with Code 1 when a check fails and 2 for bad usage or an
// unreadable file, and any other error when the report could not be
// written.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("webhook doctor", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {
		fmt.Fprint(stderr, doctorUsage)
		flags.PrintDefaults()
	}
	file := flags.String("f", "", "`file` of webhook configurations (YAML or JSON, several documents or a List); - reads stdin")
	address := flags.String("address", "", "dial `host:port` instead of the configured target, still checking the name the apiserver checks (with kubectl port-forward for service mode)")
	clientCert := flags.String("client-cert", "", "client certificate `file` (PEM) to present, as an apiserver whose AdmissionConfiguration kubeconfig names one does")
	clientKey := flags.String("client-key", "", "private key `file` (PEM) of -client-cert")
	output := flags.String("o", "text", "output `format`: text or json")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &ExitError{Code: 2} // flag has printed the error and the usage
	}
	usageError := func(format string, a ...any) error {
		return &ExitError{Code: 2, Err: fmt.Errorf("doctor: "+format, a...)}
	}
	switch {
	case flags.NArg() > 0:
		return usageError("unexpected argument %q: give the file with -f", flags.Arg(0))
	case *file == "":
		return usageError("-f is required: the file of webhook configurations, or - for stdin (kubectl get validatingwebhookconfiguration NAME -o yaml | webhook doctor -f -)")
	case *output != "text" && *output != "json":
		return usageError("-o %q: want text or json", *output)
	case (*clientCert == "") != (*clientKey == ""):
		return usageError("-client-cert and -client-key go together")
	}
	if *address != "" {
		if _, _, err := net.SplitHostPort(*address); err != nil {
			return usageError("-address %q: want host:port, such as 127.0.0.1:8443", *address)
		}
	}
	d := &doctor{address: *address, now: time.Now()}
	if *clientCert != "" {
		pair, err := tls.LoadX509KeyPair(*clientCert, *clientKey)
		if err == nil && pair.Leaf == nil { // only with GODEBUG=x509keypairleaf=0
			pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0])
		}
		if err != nil {
			return usageError("-client-cert %s, -client-key %s: %w", *clientCert, *clientKey, err)
		}
		d.clientCert = &pair
	}

	in, name := stdin, "stdin"
	if *file != "-" {
		f, err := os.Open(*file)
		if err != nil {
			return usageError("%w", err)
		}
		defer f.Close()
		in, name = f, *file
	} else if in == nil {
		return usageError("-f -: there is no stdin to read")
	}
	hooks, skipped, err := readWebhooks(in)
	if err != nil {
		return usageError("%s: %w", name, err)
	}
	if len(hooks) == 0 {
		return usageError("%s holds no MutatingWebhookConfiguration or ValidatingWebhookConfiguration of admissionregistration.k8s.io/v1 with webhooks", name)
	}

	findings := d.check(ctx, hooks)
	var werr error
	if *output == "json" {
		werr = writeJSONReport(stdout, hooks, findings)
	} else {
		werr = writeTextReport(stdout, name, hooks, skipped, findings)
	}
	if werr != nil {
		return werr
	}
	if count(findings)[levelFail] > 0 {
		return &ExitError{Code: 1}
	}
	return nil
}

// ---------------------------------------------------------------------------
// Reading the configurations.
// ---------------------------------------------------------------------------

const (
	// defaultTimeoutSeconds, defaultFailurePolicy, defaultReinvocation and
	// defaultServicePort are what the apiserver fills in for a field left
	// out (k8s.io/kubernetes pkg/apis/admissionregistration/v1/defaults.go,
	// SetDefaults_MutatingWebhook and SetDefaults_ServiceReference), so a
	// hand-written file is checked as the stored object would be.
	defaultTimeoutSeconds = 10
	// maxTimeoutSeconds is the most the apiserver takes: it refuses a
	// configuration with a timeoutSeconds outside 1 to 30 (k8s.io/kubernetes
	// v1.37.2, pkg/apis/admissionregistration/validation/validation.go).
	maxTimeoutSeconds    = 30
	defaultFailurePolicy = admissionregistrationv1.Fail
	defaultReinvocation  = admissionregistrationv1.NeverReinvocationPolicy
	defaultServicePort   = 443

	// yamlLookahead is how far the YAML-or-JSON decoder looks to tell the
	// two apart; the first character decides.
	yamlLookahead = 4096
)

// webhookUnderTest is one webhook of a configuration, mutating or
// validating, with the apiserver's defaults filled in.
type webhookUnderTest struct {
	kind   string // MutatingWebhookConfiguration or ValidatingWebhookConfiguration
	config string // the configuration's name
	name   string

	mutating          bool
	clientConfig      admissionregistrationv1.WebhookClientConfig
	rules             []admissionregistrationv1.RuleWithOperations
	failurePolicy     admissionregistrationv1.FailurePolicyType
	namespaceSelector *metav1.LabelSelector
	objectSelector    *metav1.LabelSelector
	sideEffects       *admissionregistrationv1.SideEffectClass
	timeout           time.Duration // timeoutSeconds, within 1 to 30
	timeoutSeconds    int32
	reviewVersions    []string
	reinvocation      admissionregistrationv1.ReinvocationPolicyType // mutating only
}

// configDecoder decodes the two webhook configuration kinds, their lists,
// and `v1 List`, which kubectl prints for more than one object.
var configDecoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	// AddToScheme only fails on conflicting registrations, which one group
	// version and the List kind cannot have.
	_ = admissionregistrationv1.AddToScheme(scheme)
	scheme.AddKnownTypeWithName(schema.GroupVersion{Version: "v1"}.WithKind("List"), &metav1.List{})
	return serializer.NewCodecFactory(scheme).UniversalDeserializer()
}()

// readWebhooks reads every webhook of every configuration in r: YAML or
// JSON, one object, several documents, or a List. Objects of other kinds
// are skipped and named in skipped, by kind only: one may be a Secret.
// caBundlePlaceholder is what deploy/webhooks.yaml has for caBundle until
// deploy/render.sh fills it in.
const caBundlePlaceholder = "__CA_BUNDLE__"

func readWebhooks(r io.Reader) (hooks []webhookUnderTest, skipped []string, err error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, yamlLookahead)
	for doc := 1; ; doc++ {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return hooks, skipped, nil
		} else if err != nil {
			return nil, nil, fmt.Errorf("document %d is not YAML or JSON: %w", doc, err)
		}
		if len(raw.Raw) == 0 || string(raw.Raw) == "null" {
			continue // an empty document, such as a trailing ---
		}
		if bytes.Contains(raw.Raw, []byte(caBundlePlaceholder)) {
			// deploy/webhooks.yaml as it is committed: its caBundle would
			// not decode ("illegal base64 data"), and says nothing of a
			// deployed webhook.
			return nil, nil, fmt.Errorf("document %d: caBundle is the placeholder %s, which deploy/render.sh replaces with the CA it makes: check what render.sh writes (deploy/render.sh in-cluster out/, then webhook doctor -f out/08-webhooks.yaml), or what the cluster holds (kubectl get validatingwebhookconfiguration NAME -o yaml | webhook doctor -f -)", doc, caBundlePlaceholder)
		}
		h, s, err := decodeWebhooks(raw.Raw)
		if err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", doc, err)
		}
		hooks, skipped = append(hooks, h...), append(skipped, s...)
	}
}

// decodeWebhooks decodes one object, a List's items included.
func decodeWebhooks(data []byte) (hooks []webhookUnderTest, skipped []string, err error) {
	obj, gvk, err := configDecoder.Decode(data, nil, nil)
	switch {
	case err == nil:
	case runtime.IsMissingKind(err), runtime.IsMissingVersion(err):
		// The decoder's own message quotes the whole object.
		return nil, nil, errors.New("an object has no apiVersion or kind")
	case runtime.IsNotRegisteredError(err) && gvk != nil:
		if gvk.Group == admissionregistrationv1.GroupName && strings.HasSuffix(gvk.Kind, "WebhookConfiguration") {
			return nil, nil, fmt.Errorf("%s %s: doctor reads admissionregistration.k8s.io/v1, the only version served since Kubernetes 1.22; get it from the cluster with kubectl get -o yaml", gvk.GroupVersion(), gvk.Kind)
		}
		return nil, []string{gvk.Kind}, nil
	default:
		return nil, nil, errors.New(truncate(err.Error(), maxErrorDetail))
	}
	switch o := obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		return mutatingWebhooks(o), nil, nil
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		return validatingWebhooks(o), nil, nil
	case *admissionregistrationv1.MutatingWebhookConfigurationList:
		for i := range o.Items {
			hooks = append(hooks, mutatingWebhooks(&o.Items[i])...)
		}
		return hooks, nil, nil
	case *admissionregistrationv1.ValidatingWebhookConfigurationList:
		for i := range o.Items {
			hooks = append(hooks, validatingWebhooks(&o.Items[i])...)
		}
		return hooks, nil, nil
	case *metav1.List:
		for i, item := range o.Items {
			h, s, err := decodeWebhooks(item.Raw)
			if err != nil {
				return nil, nil, fmt.Errorf("item %d: %w", i, err)
			}
			hooks, skipped = append(hooks, h...), append(skipped, s...)
		}
		return hooks, skipped, nil
	default:
		return nil, []string{gvk.Kind}, nil
	}
}

func mutatingWebhooks(c *admissionregistrationv1.MutatingWebhookConfiguration) []webhookUnderTest {
	hooks := make([]webhookUnderTest, 0, len(c.Webhooks))
	for _, w := range c.Webhooks {
		h := webhookUnderTest{
			kind: "MutatingWebhookConfiguration", config: c.Name, name: w.Name, mutating: true,
			clientConfig: w.ClientConfig, rules: w.Rules, sideEffects: w.SideEffects, reviewVersions: w.AdmissionReviewVersions,
			reinvocation: defaultReinvocation,
		}
		if w.ReinvocationPolicy != nil {
			h.reinvocation = *w.ReinvocationPolicy
		}
		hooks = append(hooks, h.withDefaults(w.FailurePolicy, w.NamespaceSelector, w.ObjectSelector, w.TimeoutSeconds))
	}
	return hooks
}

func validatingWebhooks(c *admissionregistrationv1.ValidatingWebhookConfiguration) []webhookUnderTest {
	hooks := make([]webhookUnderTest, 0, len(c.Webhooks))
	for _, w := range c.Webhooks {
		h := webhookUnderTest{
			kind: "ValidatingWebhookConfiguration", config: c.Name, name: w.Name,
			clientConfig: w.ClientConfig, rules: w.Rules, sideEffects: w.SideEffects, reviewVersions: w.AdmissionReviewVersions,
		}
		hooks = append(hooks, h.withDefaults(w.FailurePolicy, w.NamespaceSelector, w.ObjectSelector, w.TimeoutSeconds))
	}
	return hooks
}

// withDefaults sets the fields both webhook types share, defaulted as the
// apiserver defaults them.
func (h webhookUnderTest) withDefaults(fp *admissionregistrationv1.FailurePolicyType, ns, obj *metav1.LabelSelector, timeoutSeconds *int32) webhookUnderTest {
	h.failurePolicy = defaultFailurePolicy
	if fp != nil {
		h.failurePolicy = *fp
	}
	h.namespaceSelector, h.objectSelector = ns, obj
	if ns == nil {
		h.namespaceSelector = &metav1.LabelSelector{}
	}
	if obj == nil {
		h.objectSelector = &metav1.LabelSelector{}
	}
	h.timeoutSeconds = int32(defaultTimeoutSeconds)
	if timeoutSeconds != nil {
		h.timeoutSeconds = *timeoutSeconds
	}
	// doctor's own waits, within what the apiserver takes (lintTimeout
	// fails a value outside it).
	h.timeout = time.Duration(min(max(h.timeoutSeconds, 1), maxTimeoutSeconds)) * time.Second
	return h
}

// ---------------------------------------------------------------------------
// Findings and the report.
// ---------------------------------------------------------------------------

// level is how a check came out.
type level string

const (
	levelPass level = "pass"
	levelWarn level = "warn"
	levelFail level = "fail"
)

var levelSymbols = map[level]string{levelPass: "✓", levelWarn: "!", levelFail: "✗"}

// finding is the outcome of one check of one webhook, or of the whole file
// when Webhook is empty. Fix is set for every failure.
type finding struct {
	Kind          string `json:"kind,omitempty"`
	Configuration string `json:"configuration,omitempty"`
	Webhook       string `json:"webhook,omitempty"`
	Check         string `json:"check"`
	Level         level  `json:"level"`
	Found         string `json:"found"`
	Fix           string `json:"fix,omitempty"`
}

func count(findings []finding) map[level]int {
	n := map[level]int{}
	for _, f := range findings {
		n[f.Level]++
	}
	return n
}

// writeTextReport writes one line per finding under a line per webhook,
// then a summary.
func writeTextReport(w io.Writer, source string, hooks []webhookUnderTest, skipped []string, findings []finding) error {
	var b strings.Builder
	fmt.Fprintf(&b, "webhook doctor: %s from %s", plural(len(hooks), "webhook"), source)
	if len(skipped) > 0 {
		fmt.Fprintf(&b, " (skipped %s that %s not webhook configurations: %s)", plural(len(skipped), "object"), isAre(len(skipped)), strings.Join(skipped, ", "))
	}
	b.WriteString("\n")
	heading := "\x00" // no heading is this
	for _, f := range findings {
		h := "all webhooks in the file"
		if f.Webhook != "" {
			h = fmt.Sprintf("%s (%s %s)", f.Webhook, f.Kind, f.Configuration)
		}
		if h != heading {
			heading = h
			fmt.Fprintf(&b, "\n%s\n", h)
		}
		fmt.Fprintf(&b, "  %s %s: %s", levelSymbols[f.Level], f.Check, f.Found)
		if f.Fix != "" {
			fmt.Fprintf(&b, " Fix: %s", f.Fix)
		}
		b.WriteString("\n")
	}
	n := count(findings)
	fmt.Fprintf(&b, "\n%s: %d passed, %s, %d failed\n", plural(len(hooks), "webhook"), n[levelPass], plural(n[levelWarn], "warning"), n[levelFail])
	_, err := io.WriteString(w, b.String())
	return err
}

// jsonReport is what -o json writes: the same findings, for scripts.
type jsonReport struct {
	Findings []finding  `json:"findings"`
	Summary  jsonCounts `json:"summary"`
}

type jsonCounts struct {
	Webhooks int `json:"webhooks"`
	Pass     int `json:"pass"`
	Warn     int `json:"warn"`
	Fail     int `json:"fail"`
}

func writeJSONReport(w io.Writer, hooks []webhookUnderTest, findings []finding) error {
	n := count(findings)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(jsonReport{
		Findings: findings,
		Summary:  jsonCounts{Webhooks: len(hooks), Pass: n[levelPass], Warn: n[levelWarn], Fail: n[levelFail]},
	})
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// truncate cuts s to at most n bytes of valid UTF-8, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
