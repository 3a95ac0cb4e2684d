package doctor

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	pathpkg "path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/example/webhook/jsonpatch"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The checks of `webhook doctor`. Each one does what the kube-apiserver
// (k8s.io/apiserver v0.37, the code of kube-apiserver v1.37) does with a
// webhook configuration, and names the apiserver function it follows, so a
// failure here is one the apiserver would have.

const (
	// caExpiryWarning is how close to its not_after a caBundle certificate
	// gets a warning: time to rotate the CA without an outage.
	caExpiryWarning = 30 * 24 * time.Hour

	// clientCertVerdictWait is how long doctor waits, after a TLS 1.3
	// handshake in which it presented a client certificate, for the
	// webhook's refusal of it (clientCertRefusal): a server checks it
	// within the handshake's own round trip, microseconds on loopback.
	// A refusal later than this is named by the review that follows only
	// if that call's own error is the alert.
	clientCertVerdictWait = 500 * time.Millisecond

	// apiserverRequestTimeout is the deadline a write has by default
	// (k8s.io/apiserver pkg/server/config.go, NewConfig: RequestTimeout),
	// which every webhook call of that write shares.
	apiserverRequestTimeout = 60 * time.Second

	// namespaceNameLabel is the label every namespace has, holding its
	// name, which namespaceSelector can exclude a namespace by.
	namespaceNameLabel = "kubernetes.io/metadata.name"

	// doctorUser, doctorObjectName and doctorNamespace make the synthetic
	// review recognisable in the webhook's log.
	doctorUser       = "webhook-doctor"
	doctorObjectName = "webhook-doctor"
	doctorNamespace  = "default"

	// latencyPrecision is how finely a review's time is shown: a webhook
	// on loopback answers in well under a millisecond.
	latencyPrecision = 10 * time.Microsecond
)

// doctor is one run's settings.
type doctor struct {
	address    string           // -address: dial this instead of the target
	clientCert *tls.Certificate // -client-cert, with its Leaf: presented when asked for
	now        time.Time
}

// report collects the findings of one webhook, or of the whole file when
// hook is nil.
type report struct {
	hook     *webhookUnderTest
	findings []finding
}

func (r *report) add(l level, check, found, fix string) {
	f := finding{Check: check, Level: l, Found: found, Fix: fix}
	if r.hook != nil {
		f.Kind, f.Configuration, f.Webhook = r.hook.kind, r.hook.config, r.hook.name
	}
	r.findings = append(r.findings, f)
}

func (r *report) pass(check, found string)      { r.add(levelPass, check, found, "") }
func (r *report) warn(check, found, fix string) { r.add(levelWarn, check, found, fix) }
func (r *report) fail(check, found, fix string) { r.add(levelFail, check, found, fix) }

// failedSince reports whether any finding after the first n failed.
func (r *report) failedSince(n int) bool {
	return slices.ContainsFunc(r.findings[n:], func(f finding) bool { return f.Level == levelFail })
}

// check runs every check of every webhook, then those of the whole file.
func (d *doctor) check(ctx context.Context, hooks []webhookUnderTest) []finding {
	var all []finding
	for i := range hooks {
		r := &report{hook: &hooks[i]}
		d.checkWebhook(ctx, r, &hooks[i])
		all = append(all, r.findings...)
	}
	file := &report{}
	lintFile(file, hooks)
	return append(all, file.findings...)
}

func (d *doctor) checkWebhook(ctx context.Context, r *report, h *webhookUnderTest) {
	bundle := checkCABundle(r, h, d.now)
	if t, ok := checkTarget(r, h, d.address); ok {
		if reachable, refused := d.checkTLS(ctx, r, h, t, bundle); reachable {
			d.checkReviews(ctx, r, h, t, refused)
		}
	}
	lintWebhook(r, h)
}

// ---------------------------------------------------------------------------
// 1. caBundle
// ---------------------------------------------------------------------------

// caBundle is what the apiserver trusts for one webhook: the certificates
// of caBundle, or the system roots when it is empty.
type caBundle struct {
	pool  *x509.CertPool // nil: the system roots
	certs []*x509.Certificate
}

// checkCABundle reads caBundle as the apiserver does: an empty one means
// the system roots, and otherwise only its certificates are trusted
// (k8s.io/client-go transport/transport.go: TLSConfigFor sets RootCAs only
// when there is CA data, and rootCertPool skips a block that does not parse
// as long as one does, but fails when none does).
func checkCABundle(r *report, h *webhookUnderTest, now time.Time) caBundle {
	const check = "caBundle"
	data := h.clientConfig.CABundle
	if len(data) == 0 {
		if h.clientConfig.Service != nil {
			r.fail(check, "caBundle is empty, so the apiserver trusts only its host's system roots, and no public CA issues certificates for a .svc name.",
				"set caBundle to the base64 of the PEM of the CA that signed the serving certificate (webhook certs prints it).")
		} else {
			r.warn(check, "caBundle is empty, so the apiserver trusts its host's system roots for this URL, as doctor does here; that works only for a certificate from a public CA.",
				"set caBundle to the CA that signed the serving certificate, unless a public CA signed it.")
		}
		return caBundle{}
	}
	b := caBundle{pool: x509.NewCertPool()}
	for rest, i := data, 1; ; i++ {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type == "CERTIFICATE" && len(block.Headers) > 0 {
			// x509.CertPool.AppendCertsFromPEM, as client-go loads caBundle.
			r.warn(check, fmt.Sprintf("PEM block %d is a CERTIFICATE with headers (such as \"Comment: …\"); the apiserver ignores it.", i), "remove the header lines from caBundle.")
			continue
		}
		if block.Type != "CERTIFICATE" {
			if strings.Contains(block.Type, "PRIVATE KEY") {
				// Never quoted: it is a secret.
				r.fail(check, fmt.Sprintf("PEM block %d is a %s: anyone who can read webhook configurations can read it.", i, block.Type),
					"remove the key from caBundle and replace the key pair, since it has been exposed.")
			} else {
				r.warn(check, fmt.Sprintf("PEM block %d is a %s, not a CERTIFICATE; the apiserver ignores it.", i, block.Type), "remove it from caBundle.")
			}
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			r.warn(check, fmt.Sprintf("certificate %d does not parse (%v); the apiserver ignores it.", i, err), "remove it from caBundle.")
			continue
		}
		b.pool.AddCert(c)
		b.certs = append(b.certs, c)
		switch left := c.NotAfter.Sub(now); {
		case left < 0:
			r.fail(check, fmt.Sprintf("%q expired on %s.", c.Subject.String(), c.NotAfter.UTC().Format(time.RFC3339)),
				"rotate the CA: put the new CA in caBundle next to the old one, move the webhook to a certificate it signed, then remove the old one (README: Rotate certificates).")
		case now.Before(c.NotBefore):
			r.fail(check, fmt.Sprintf("%q is not valid before %s.", c.Subject.String(), c.NotBefore.UTC().Format(time.RFC3339)),
				"check the clock of the machine that made it, or reissue it.")
		case left < caExpiryWarning:
			r.warn(check, fmt.Sprintf("%s expires in %s.", describeCert(c), days(left)),
				"rotate the CA now, while both can be in caBundle (README: Rotate certificates).")
		default:
			r.pass(check, describeCert(c)+".")
		}
	}
	if len(b.certs) == 0 {
		r.fail(check, "caBundle holds no PEM certificate, so the apiserver cannot make a client for this webhook and every call fails.",
			"set caBundle to the base64 of the PEM of the CA that signed the serving certificate (webhook certs prints it).")
	}
	return b
}

func describeCert(c *x509.Certificate) string {
	return fmt.Sprintf("%q (not_after %s, sha256 %s)", c.Subject.String(), c.NotAfter.UTC().Format(time.DateOnly), fingerprint(c))
}

// fingerprint is the SHA-256 of c's DER as openssl x509 -fingerprint
// -sha256 prints it: what tells apart two certificates of one name.
func fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	hexed := make([]string, len(sum))
	for i, b := range sum {
		hexed[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(hexed, ":")
}

// keyID is a certificate's subject or authority key identifier in hex, or
// "none".
func keyID(id []byte) string {
	if len(id) == 0 {
		return "none"
	}
	return hex.EncodeToString(id)
}

// days says how long d is in days, or in hours when under two days.
func days(d time.Duration) string {
	if d < 48*time.Hour {
		return plural(int(d/time.Hour), "hour")
	}
	return plural(int(d/(24*time.Hour)), "day")
}

// ---------------------------------------------------------------------------
// 2. Target
// ---------------------------------------------------------------------------

// target is where the apiserver sends reviews for one webhook and how.
type target struct {
	url        *url.URL // the URL it posts to, before ?timeout=
	serverName string   // the name the serving certificate must hold
	dial       string   // host:port doctor connects to; "" when it cannot
	nextProtos []string // ALPN the apiserver offers
}

// checkTarget validates clientConfig as the apiserver validates it
// (k8s.io/apiserver pkg/util/webhook/validation.go, ValidateWebhookURL with
// forceHttps and ValidateWebhookService) and works out what it dials and
// which name it checks (pkg/util/webhook/client.go, hookClientConfig).
func checkTarget(r *report, h *webhookUnderTest, address string) (target, bool) {
	const check = "target"
	cc := h.clientConfig
	switch {
	case cc.URL != nil && cc.Service != nil:
		r.fail(check, "clientConfig has both url and service; the apiserver accepts exactly one.", "keep one of them.")
		return target{}, false
	case cc.Service != nil:
		return serviceTarget(r, h, address)
	case cc.URL != nil:
		return urlTarget(r, *cc.URL, address)
	default:
		r.fail(check, "clientConfig has neither url nor service.", "set service (name, namespace, path) for a webhook in the cluster, or url for one outside it.")
		return target{}, false
	}
}

func urlTarget(r *report, raw, address string) (target, bool) {
	const check = "target"
	u, err := url.Parse(raw)
	if err != nil {
		r.fail(check, fmt.Sprintf("url %q does not parse: %v.", raw, err), "write it as https://host[:port][/path].")
		return target{}, false
	}
	var problems []string
	if u.Scheme != "https" {
		problems = append(problems, "'https' is the only allowed URL scheme")
	}
	if u.Host == "" {
		problems = append(problems, "host must be specified")
	}
	if u.User != nil {
		problems = append(problems, "user information is not permitted in the URL")
	}
	if u.Fragment != "" {
		problems = append(problems, "fragments are not permitted in the URL")
	}
	if u.RawQuery != "" {
		problems = append(problems, "query parameters are not permitted in the URL")
	}
	if len(problems) > 0 {
		r.fail(check, fmt.Sprintf("url %q is refused by the apiserver: %s.", raw, strings.Join(problems, "; ")),
			"write it as https://host[:port][/path], with no user, query or fragment.")
		return target{}, false
	}
	port := u.Port()
	if port == "" {
		port = strconv.Itoa(defaultServicePort) // the https default the apiserver dials
	}
	hostPort := net.JoinHostPort(u.Hostname(), port)
	// client-go joins the path as path.Join does (rest/request.go): no
	// trailing "/", no "//", "%2F" as "/".
	posted := *u
	posted.Path, posted.RawPath = pathpkg.Join("/", u.Path), ""
	t := target{url: &posted, serverName: u.Hostname(), dial: cmp.Or(address, hostPort), nextProtos: []string{"http/1.1"}}
	// A loopback URL is the one case where the apiserver offers HTTP/2
	// (client.go, isLocalHost; every other target gets http/1.1 only,
	// kubernetes#75791).
	if isLoopback(u.Hostname()) {
		t.nextProtos = []string{"h2", "http/1.1"}
	}
	r.pass(check, fmt.Sprintf("url %s: the apiserver dials %s, checks the certificate for %s and offers ALPN %s%s.",
		raw, hostPort, t.serverName, strings.Join(t.nextProtos, ", "), viaAddress(address, hostPort)))
	return t, true
}

func serviceTarget(r *report, h *webhookUnderTest, address string) (target, bool) {
	const check = "target"
	s := h.clientConfig.Service
	port := int32(defaultServicePort)
	if s.Port != nil {
		port = *s.Port
	}
	path := ""
	if s.Path != nil {
		path = *s.Path
	}
	if problems := validateServicePath(s.Name, s.Namespace, path, port); len(problems) > 0 {
		r.fail(check, fmt.Sprintf("service %s/%s port %d path %q is refused by the apiserver: %s.", s.Namespace, s.Name, port, path, strings.Join(problems, "; ")),
			"set the Service's name and namespace, a port from 1 to 65535, and a path of lowercase DNS labels such as /validate.")
		return target{}, false
	}
	// The apiserver checks <name>.<namespace>.svc and always speaks
	// HTTP/1.1 to a service (client.go, hookClientConfig).
	serverName := s.Name + "." + s.Namespace + ".svc"
	hostPort := net.JoinHostPort(serverName, strconv.Itoa(int(port)))
	t := target{
		url:        &url.URL{Scheme: "https", Host: hostPort, Path: pathpkg.Join("/", path)}, // as client-go joins it
		serverName: serverName,
		dial:       address,
		nextProtos: []string{"http/1.1"},
	}
	r.pass(check, fmt.Sprintf("service %s/%s port %d path %q: the apiserver posts to https://%s%s, checks the certificate for %s and offers ALPN http/1.1%s.",
		s.Namespace, s.Name, port, path, hostPort, path, serverName, viaAddress(address, hostPort)))
	return t, true
}

// validateServicePath is ValidateWebhookService (validation.go): name and
// namespace set, a valid port, and a path of DNS-1123 subdomains.
func validateServicePath(name, namespace, path string, port int32) []string {
	var problems []string
	if name == "" {
		problems = append(problems, "name is required")
	}
	if namespace == "" {
		problems = append(problems, "namespace is required")
	}
	if errs := validation.IsValidPortNum(int(port)); len(errs) > 0 {
		problems = append(problems, "port is not valid: "+strings.Join(errs, ", "))
	}
	if path == "" || path == "/" {
		return problems
	}
	if !strings.HasPrefix(path, "/") {
		problems = append(problems, "path must start with a '/'")
	}
	for i, step := range strings.Split(strings.TrimSuffix(strings.TrimPrefix(path, "/"), "/"), "/") {
		if step == "" {
			problems = append(problems, fmt.Sprintf("path segment[%d] may not be empty", i))
			continue
		}
		for _, e := range validation.IsDNS1123Subdomain(step) {
			problems = append(problems, fmt.Sprintf("path segment[%d]: %s", i, e))
		}
	}
	return problems
}

func viaAddress(address, target string) string {
	if address == "" || address == target {
		return ""
	}
	return "; doctor dials " + address + " instead (-address)"
}

// isLoopback is client.go's isLocalHost: "localhost" or a loopback IP.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ---------------------------------------------------------------------------
// 3. TLS, as the apiserver does it
// ---------------------------------------------------------------------------

// tlsConfig is the apiserver's client TLS configuration for t (client-go
// transport/transport.go TLSConfigFor: TLS 1.2 at least, the target's
// ServerName and ALPN), except that the chain is not verified during the
// handshake: doctor verifies it after, the same way, so it can show why it
// fails and still look at the rest. asked records whether the webhook asked
// for a client certificate: crypto/tls calls GetClientCertificate only then.
func (d *doctor) tlsConfig(t target, asked *atomic.Bool) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.serverName,
		NextProtos:         t.nextProtos,
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			asked.Store(true)
			if d.clientCert != nil {
				return d.clientCert, nil
			}
			return &tls.Certificate{}, nil // none, as the apiserver by default
		},
	}
}

// checkTLS connects as the apiserver would and judges the served chain
// against caBundle. It reports whether there is a webhook to send reviews
// to, and the webhook's refusal of doctor's client certificate, if it saw
// one.
func (d *doctor) checkTLS(ctx context.Context, r *report, h *webhookUnderTest, t target, bundle caBundle) (reachable bool, refused error) {
	const check = "tls"
	if t.dial == "" {
		s := h.clientConfig.Service
		r.fail(check, fmt.Sprintf("the apiserver reaches %s through the cluster's network; from here there is nothing to dial.", t.url.Host),
			fmt.Sprintf("forward a local port to the Service (kubectl port-forward -n %s svc/%s 8443:%s) and run doctor again with -address 127.0.0.1:8443.", s.Namespace, s.Name, t.url.Port()))
		return false, nil
	}
	var asked atomic.Bool
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	conn, err := (&tls.Dialer{Config: d.tlsConfig(t, &asked)}).DialContext(ctx, "tcp", t.dial)
	if err != nil {
		found, fix := describeConnError(err, t.dial, h.timeout)
		r.fail(check, found, fix)
		return false, nil
	}
	state := conn.(*tls.Conn).ConnectionState()
	if asked.Load() && d.clientCert != nil {
		refused = clientCertRefusal(conn.(*tls.Conn))
	}
	conn.Close()
	if len(state.PeerCertificates) == 0 { // crypto/tls refuses this; never index an empty chain
		r.fail(check, "the webhook served no certificate.", "serve a certificate signed by the CA in caBundle.")
		return false, nil
	}

	alpn := state.NegotiatedProtocol
	if alpn == "" {
		alpn = "none (so HTTP/1.1)"
	}
	r.pass(check, fmt.Sprintf("%s, ALPN %s (offered %s).", tls.VersionName(state.Version), alpn, strings.Join(t.nextProtos, ", ")))
	switch {
	case refused != nil:
		r.fail("tls.client", fmt.Sprintf("the webhook asked for a client certificate and refused the one doctor presented, %q issued by %q (-client-cert): %v.", d.clientCert.Leaf.Subject.String(), d.clientCert.Leaf.Issuer.String(), refused),
			"present a certificate signed by the CA the webhook trusts (its -client-ca-file), or give the webhook the CA that signed this one; then give the apiserver the same certificate through its AdmissionConfiguration kubeconfig (README: Security).")
	case asked.Load() && d.clientCert != nil:
		r.pass("tls.client", fmt.Sprintf("the webhook asked for a client certificate; doctor presented %q (-client-cert).", d.clientCert.Leaf.Subject.String()))
	case asked.Load():
		r.warn("tls.client", "the webhook asked for a client certificate; doctor presented none, as the apiserver presents none unless its AdmissionConfiguration kubeconfig names one for this webhook.",
			"if the webhook requires one, run doctor with -client-cert and -client-key, and configure the apiserver the same way (README: Security).")
	default:
		r.pass("tls.client", "the webhook did not ask for a client certificate.")
	}
	checkServingChain(r, state.PeerCertificates, bundle, t.serverName, d.now)
	return true, refused
}

// clientCertRefusal waits up to clientCertVerdictWait, after a handshake
// in which doctor presented a client certificate, for the webhook to
// refuse it. In TLS 1.3 the server checks the client's certificate after
// the client's side of the handshake is done: a refusal arrives as an
// alert on the first read, and a webhook that accepts it waits for a
// request instead. It returns the alert, or nil.
func clientCertRefusal(conn *tls.Conn) error {
	_ = conn.SetReadDeadline(time.Now().Add(clientCertVerdictWait))
	_, err := conn.Read(make([]byte, 1))
	var netErr net.Error
	if err == nil || errors.As(err, &netErr) && netErr.Timeout() || errors.Is(err, io.EOF) {
		return nil
	}
	if isClientCertAlert(err) {
		return err
	}
	return nil
}

// isClientCertAlert reports whether err is a TLS alert by which a server
// refuses the client's certificate (crypto/tls sends bad_certificate,
// unknown_ca, certificate_expired, certificate_required …).
func isClientCertAlert(err error) bool {
	msg := err.Error()
	for _, alert := range []string{"remote error: tls: bad certificate", "remote error: tls: unknown certificate authority", "remote error: tls: expired certificate",
		"remote error: tls: certificate required", "remote error: tls: unsupported certificate", "remote error: tls: revoked certificate", "remote error: tls: unknown certificate"} {
		if strings.Contains(msg, alert) {
			return true
		}
	}
	return false
}

// checkServingChain verifies the served chain as crypto/tls verifies it for
// the apiserver's client (Roots: caBundle, DNSName: the ServerName,
// serverAuth), one property at a time so that each problem is named with
// its evidence, rather than only the first the verifier meets.
func checkServingChain(r *report, chain []*x509.Certificate, bundle caBundle, serverName string, now time.Time) {
	start := len(r.findings)
	leaf := chain[0]
	intermediates := x509.NewCertPool()
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}

	// Trust, judged at a moment the leaf is valid, so that an expired leaf
	// is reported as expired (below) rather than hiding whether caBundle
	// trusts it.
	at := now
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		at = leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) / 2)
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: bundle.pool, Intermediates: intermediates, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	var unknown x509.UnknownAuthorityError
	switch {
	case err == nil:
		r.pass("tls.trust", fmt.Sprintf("the served certificate %q, issued by %q, verifies against %s.", leaf.Subject.String(), leaf.Issuer.String(), bundle.describe()))
	case errors.As(err, &unknown):
		top := chain[len(chain)-1]
		found := fmt.Sprintf("the served chain (%s) was issued by %q, but the apiserver trusts only %s, so it fails with \"x509: certificate signed by unknown authority\".",
			describeChain(chain), top.Issuer.String(), bundle.describe())
		if slices.ContainsFunc(bundle.certs, func(c *x509.Certificate) bool { return c.Subject.String() == top.Issuer.String() }) {
			// Two CAs of one name: their keys tell them apart.
			var ids []string
			for _, c := range bundle.certs {
				ids = append(ids, fmt.Sprintf("%q has subject key id %s", c.Subject.String(), keyID(c.SubjectKeyId)))
			}
			found += fmt.Sprintf(" Another CA of the same name signed it: the served certificate's authority key id is %s, and caBundle's %s.", keyID(top.AuthorityKeyId), strings.Join(ids, ", "))
		}
		r.fail("tls.trust", found, "set caBundle to the base64 of the PEM of the CA that signed the serving certificate, or serve a certificate that CA signed.")
	default:
		r.fail("tls.trust", fmt.Sprintf("the served chain (%s) does not verify against %s: %v.", describeChain(chain), bundle.describe(), err),
			"serve a certificate signed by the CA in caBundle, with any intermediates after it in the certificate file.")
	}

	// The name: Go, and so the apiserver, ignores the Common Name.
	names := describeSANs(leaf)
	switch err := leaf.VerifyHostname(serverName); {
	case names == "":
		r.fail("tls.name", fmt.Sprintf("the certificate has no subject alternative names, only the Common Name %q, which Go and so the apiserver ignore (\"x509: certificate relies on legacy Common Name field, use SANs instead\").", leaf.Subject.CommonName),
			fmt.Sprintf("reissue it with %s as a subject alternative name (webhook certs does that).", serverName))
	case err != nil:
		r.fail("tls.name", fmt.Sprintf("the certificate is valid for %s, not %s, the name the apiserver checks; it fails with: %v.", names, serverName, err),
			fmt.Sprintf("reissue the certificate with %s as a subject alternative name (webhook certs -hosts, or -service NAME -namespace NS), or point the configuration at a name it holds.", serverName))
	default:
		r.pass("tls.name", fmt.Sprintf("valid for %s, the name the apiserver checks (%s).", serverName, names))
	}

	// Validity of every served certificate.
	valid := true
	for _, c := range chain {
		switch {
		case now.After(c.NotAfter):
			valid = false
			r.fail("tls.validity", fmt.Sprintf("%q expired on %s, %s ago; the apiserver fails with \"x509: certificate has expired or is not yet valid\".", c.Subject.String(), c.NotAfter.UTC().Format(time.RFC3339), days(now.Sub(c.NotAfter))),
				"renew the serving certificate (run webhook certs again; with cert-manager, see why the Certificate did not renew).")
		case now.Before(c.NotBefore):
			valid = false
			r.fail("tls.validity", fmt.Sprintf("%q is not valid before %s; the apiserver fails with \"x509: certificate has expired or is not yet valid\".", c.Subject.String(), c.NotBefore.UTC().Format(time.RFC3339)),
				"check the clock of the machine that issued it, or reissue it.")
		}
	}
	if valid {
		r.pass("tls.validity", fmt.Sprintf("valid until %s (%s left).", leaf.NotAfter.UTC().Format(time.RFC3339), days(leaf.NotAfter.Sub(now))))
	}

	// Extended key usage: none at all means any.
	if len(leaf.ExtKeyUsage) == 0 || slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
		r.pass("tls.usage", "the certificate may be used for serverAuth.")
	} else {
		r.fail("tls.usage", "the certificate's extended key usage does not include serverAuth; the apiserver fails with \"x509: certificate specifies an incompatible key usage\".",
			"reissue it with the serverAuth extended key usage (webhook certs does that).")
	}

	// Whatever the verifier itself says, in case it is something the
	// checks above do not name.
	if !r.failedSince(start) {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: bundle.pool, Intermediates: intermediates, CurrentTime: now, DNSName: serverName}); err != nil {
			r.fail("tls.verify", fmt.Sprintf("the apiserver's verification fails: %v.", err), "serve a certificate that verifies against caBundle for "+serverName+".")
		}
	}
}

func (b caBundle) describe() string {
	if b.pool == nil {
		return "the system roots (caBundle is empty)"
	}
	if len(b.certs) == 0 {
		return "nothing (caBundle has no certificate)"
	}
	subjects := make([]string, len(b.certs))
	for i, c := range b.certs {
		subjects[i] = strconv.Quote(c.Subject.String())
	}
	return "caBundle's " + strings.Join(subjects, ", ")
}

func describeChain(chain []*x509.Certificate) string {
	subjects := make([]string, len(chain))
	for i, c := range chain {
		subjects[i] = strconv.Quote(c.Subject.String())
	}
	return strings.Join(subjects, " ← ")
}

func describeSANs(c *x509.Certificate) string {
	var names []string
	for _, n := range c.DNSNames {
		names = append(names, "DNS:"+n)
	}
	for _, ip := range c.IPAddresses {
		names = append(names, "IP:"+ip.String())
	}
	return strings.Join(names, ", ")
}

// describeConnError says in plain words why a connection or a call failed,
// and what to do.
func describeConnError(err error, addr string, timeout time.Duration) (found, fix string) {
	var dnsErr *net.DNSError
	var recordErr tls.RecordHeaderError
	var netErr net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("connection refused: nothing listens on %s (the apiserver says \"connect: connection refused\").", addr),
			"start the webhook, or correct the host and port; in service mode check the Service's port and targetPort and that it has ready endpoints (kubectl get endpointslices -n NS -l kubernetes.io/service-name=NAME)."
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Sprintf("no answer from %s within timeoutSeconds (%s); the apiserver gives up and says \"context deadline exceeded\".", addr, timeout),
			"make the webhook answer in milliseconds (look for slow calls it makes while admitting), or, if it must be slow, raise timeoutSeconds (at most 30)."
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("the host of %s does not resolve: %v.", addr, dnsErr), "correct the host name in the URL, or dial another address with -address."
	case errors.As(err, &recordErr):
		return fmt.Sprintf("%s does not speak TLS (it answered like plain HTTP); the apiserver calls webhooks only over HTTPS.", addr), "serve HTTPS on this port."
	case strings.Contains(err.Error(), "certificate required"):
		return fmt.Sprintf("the webhook at %s refused the connection without a client certificate: %v.", addr, err),
			"run doctor with -client-cert and -client-key, and give the apiserver the same through its AdmissionConfiguration kubeconfig (README: Security)."
	case isClientCertAlert(err):
		return fmt.Sprintf("the webhook at %s refused the client certificate presented: %v.", addr, err),
			"present a certificate signed by the CA the webhook trusts (its -client-ca-file), as the apiserver must (README: Security)."
	default:
		return fmt.Sprintf("calling %s failed: %v.", addr, err), "check that the webhook is running and reachable at that address."
	}
}

// ---------------------------------------------------------------------------
// 4. Round trip
// ---------------------------------------------------------------------------

// knownReviewVersions are the AdmissionReview versions the apiserver sends,
// in the order it prefers them (request/admissionreview.go,
// CreateAdmissionObjects: the first of admissionReviewVersions it knows).
var knownReviewVersions = []string{admissionv1.SchemeGroupVersion.Version, admissionv1beta1.SchemeGroupVersion.Version}

// reviewResponseDecoder decodes an answer as the apiserver's webhook client
// does (generic/webhook.go NewClientManager: the legacy codec of a scheme
// with both AdmissionReview versions), so an answer in the other version,
// or with no apiVersion, fails here as it fails there.
var reviewResponseDecoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	// AddToScheme only fails on conflicting registrations, which two
	// distinct group versions cannot have.
	_ = admissionv1.AddToScheme(scheme)
	_ = admissionv1beta1.AddToScheme(scheme)
	return serializer.NewCodecFactory(scheme).LegacyCodec(admissionv1beta1.SchemeGroupVersion, admissionv1.SchemeGroupVersion)
}()

// maxAnswerBytes is the most of an answer doctor reads. A webhook's answer
// holds at most a patch of an object the apiserver took (3 MiB), so 7 MiB,
// room for two such objects and the envelope, is more than any good answer.
const maxAnswerBytes = 7 << 20

// checkReviews sends one dry-run review per AdmissionReview version the
// webhook lists and the apiserver knows. refused is the refusal of doctor's
// client certificate that the TLS check saw, or nil.
func (d *doctor) checkReviews(ctx context.Context, r *report, h *webhookUnderTest, t target, refused error) {
	if h.sideEffects == nil || !isDryRunSafe(*h.sideEffects) {
		r.warn("review", "not sent: a webhook that may have side effects is not sent reviews, not even a dry-run one (see sideEffects).", "")
		return
	}
	var asked atomic.Bool // reported by the TLS check already
	tlsConfig := d.tlsConfig(t, &asked)
	transport := &http.Transport{
		// Always the target doctor dials, whatever the URL's host, which
		// stays in the URL for the Host header the apiserver sends.
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, t.dial)
		},
		TLSClientConfig:   tlsConfig,
		ForceAttemptHTTP2: slices.Contains(t.nextProtos, "h2"),
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	obj := syntheticObject(h.rules)
	first := ""
	for _, v := range h.reviewVersions {
		if slices.Contains(knownReviewVersions, v) {
			d.checkReview(ctx, r, h, t, client, refused, v, cmp.Or(first, v), obj)
			first = cmp.Or(first, v)
		}
	}
}

// checkReview posts one review, as the apiserver does
// (mutating/dispatcher.go callAttrMutatingHook), and checks the answer as it
// does. Problems in a version the apiserver does not send (one listed after
// sent, the first it knows) are warnings.
func (d *doctor) checkReview(ctx context.Context, r *report, h *webhookUnderTest, t target, client *http.Client, refused error, version, sent string, obj syntheticObj) {
	check := "review." + version
	problem := r.fail
	note := ""
	if version != sent {
		problem = r.warn
		note = fmt.Sprintf(" The apiserver sends %s, the first version listed that it knows, so only doctor sees this.", sent)
	}
	uid := newUID()
	body, err := json.Marshal(reviewRequest(version, uid, obj))
	if err != nil {
		r.fail(check, "doctor could not encode its review: "+err.Error(), "report this as a bug in webhook doctor.")
		return
	}
	// The apiserver sets ?timeout= to the time left, rounded up to whole
	// seconds: timeoutSeconds itself, unless the write is running out
	// of time (dispatcher.go, r.Timeout; client-go formats it with
	// time.Duration.String, so 10s).
	u := *t.url
	u.RawQuery = "timeout=" + h.timeout.String()
	callCtx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(callCtx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		r.fail(check, "doctor could not make its request: "+err.Error(), "report this as a bug in webhook doctor.")
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, */*")
	start := time.Now()
	resp, err := client.Do(req)
	var answer []byte
	if err == nil {
		answer, err = io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		resp.Body.Close()
	}
	took := time.Since(start)
	if err != nil {
		if refused != nil {
			// The call's own error need not say so: net/http reports a
			// connection the webhook closed with an alert as closed or
			// reset when its write meets the close first.
			err = refused
		}
		found, fix := describeConnError(err, t.dial, h.timeout)
		problem(check, found+note, fix)
		return
	}
	asked := fmt.Sprintf("CREATE %s %s (dryRun) in %s", obj.kind, obj.namespacedName(), u.RequestURI())
	if resp.StatusCode < http.StatusOK || resp.StatusCode > http.StatusPartialContent {
		problem(check, fmt.Sprintf("%s: HTTP %d, %s; the apiserver counts any answer outside 200–206 as a failed call%s.%s", asked, resp.StatusCode, describeErrorBody(answer), retried(resp), note), fixForStatus(resp.StatusCode, t.url.Path))
		return
	}

	var into runtime.Object = &admissionv1.AdmissionReview{}
	if version == admissionv1beta1.SchemeGroupVersion.Version {
		into = &admissionv1beta1.AdmissionReview{}
	}
	decoded, _, err := reviewResponseDecoder.Decode(answer, nil, into)
	if err != nil {
		problem(check, fmt.Sprintf("%s: HTTP %d, but the answer is not an AdmissionReview of admission.k8s.io/%s%s; the apiserver fails with: %s.%s",
			asked, resp.StatusCode, version, answeredIn(answer), printable(err.Error()), note),
			"answer with an AdmissionReview in the version of the request, with the request's uid in response.uid.")
		return
	}
	verified, err := verifyAdmissionResponse(uid, h.mutating, decoded)
	if err != nil {
		problem(check, fmt.Sprintf("%s: HTTP %d, but the apiserver rejects the answer: %v.%s", asked, resp.StatusCode, err, note), fixForVerify(err))
		return
	}
	verdict := "allowed"
	if !verified.Allowed {
		verdict = "denied without explanation"
		if s := verified.Result; s != nil && (s.Message != "" || s.Reason != "") {
			verdict = fmt.Sprintf("denied with %d: %q", s.Code, truncate(cmp.Or(s.Message, string(s.Reason)), maxErrorDetail))
		}
	}
	if ignored, ok := decoded.(*admissionv1beta1.AdmissionReview); ok && !h.mutating && len(ignored.Response.Patch) > 0 {
		r.warn(check, fmt.Sprintf("%s: HTTP %d, %s, with a patch, which the apiserver ignores from a validating webhook.", asked, resp.StatusCode, verdict), "return no patch from a validating webhook.")
	} else {
		r.pass(check, fmt.Sprintf("%s: HTTP %d, the request's uid and version, %s%s.", asked, resp.StatusCode, verdict, describePatchSize(verified.Patch)))
	}
	if verified.Allowed && len(verified.Patch) > 0 {
		checkPatch(r, "patch."+version, verified, obj, problem, note)
	}
	if took > h.timeout/2 {
		r.warn("latency."+version, fmt.Sprintf("answered in %s, more than half of timeoutSeconds (%s): under load calls will time out.", took.Round(latencyPrecision), h.timeout),
			"make the webhook answer in milliseconds, or raise timeoutSeconds.")
	} else {
		r.pass("latency."+version, fmt.Sprintf("answered in %s (timeoutSeconds %s).", took.Round(latencyPrecision), h.timeout))
	}
}

func describePatchSize(patch []byte) string {
	var ops []json.RawMessage
	if len(patch) == 0 || json.Unmarshal(patch, &ops) != nil {
		return ""
	}
	return fmt.Sprintf(", with a JSON Patch of %s", plural(len(ops), "operation"))
}

// answeredIn names the apiVersion and kind an answer declares, to make a
// version mismatch plain.
func answeredIn(answer []byte) string {
	var tm metav1.TypeMeta
	if json.Unmarshal(answer, &tm) != nil || tm.APIVersion == "" && tm.Kind == "" {
		return ""
	}
	return fmt.Sprintf(" (it is %s %s)", printable(tm.APIVersion), printable(tm.Kind))
}

// printable keeps what a webhook wrote from moving the terminal: only
// printable characters, at most maxErrorDetail bytes.
func printable(s string) string {
	return truncate(strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, s), maxErrorDetail)
}

// describeErrorBody shows what an error answer says: a Status's message,
// else a short quote of the body.
func describeErrorBody(body []byte) string {
	var s metav1.Status
	if json.Unmarshal(body, &s) == nil && s.Kind == "Status" && s.Message != "" {
		return fmt.Sprintf("a Status saying %q", truncate(s.Message, maxErrorDetail))
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return "with an empty body"
	}
	return fmt.Sprintf("body %q", truncate(string(body), maxErrorDetail))
}

func retried(resp *http.Response) string {
	if resp.Header.Get("Retry-After") != "" && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500) {
		return ", after retrying up to 10 times because of the Retry-After header"
	}
	return ""
}

func fixForStatus(code int, path string) string {
	switch code {
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return fmt.Sprintf("serve POST %s, or correct the path in clientConfig.", cmp.Or(path, "/"))
	case http.StatusUnauthorized, http.StatusForbidden:
		return "the webhook wants a client certificate it trusts: run doctor with -client-cert and -client-key, and configure the apiserver to present the same (README: Security)."
	default:
		return "answer every review with HTTP 200 and put the verdict in response.allowed and response.status: a denial is not an HTTP error."
	}
}

func fixForVerify(err error) string {
	switch msg := err.Error(); {
	case strings.Contains(msg, "uid"):
		return "copy request.uid into response.uid."
	case strings.Contains(msg, "expected webhook response of"):
		return "answer with apiVersion admission.k8s.io/v1 and kind AdmissionReview when asked in v1."
	case strings.Contains(msg, "absent"):
		return "put the verdict in the answer's response field."
	case strings.Contains(msg, "validating webhook"):
		return "return no patch and no patchType from a validating webhook."
	default:
		return "set patch and patchType together (patchType: JSONPatch), or neither."
	}
}

// verifyAdmissionResponse is VerifyAdmissionResponse of k8s.io/apiserver
// pkg/admission/plugin/webhook/request/admissionreview.go (v0.37), with its
// error texts, since the root module does not depend on k8s.io/apiserver:
// v1 must echo the uid and declare admission.k8s.io/v1 AdmissionReview, and
// carry patch and patchType together from a mutating webhook and neither
// from a validating one; v1beta1 is checked for none of that, and any patch
// in it counts as a JSON Patch from a mutating webhook only.
func verifyAdmissionResponse(uid types.UID, mutating bool, review runtime.Object) (*admissionv1.AdmissionResponse, error) {
	switch r := review.(type) {
	case *admissionv1.AdmissionReview:
		if r.Response == nil {
			return nil, errors.New("webhook response was absent")
		}
		if r.Response.UID != uid {
			return nil, fmt.Errorf("expected response.uid=%q, got %q", uid, r.Response.UID)
		}
		v1GVK := admissionv1.SchemeGroupVersion.WithKind("AdmissionReview")
		if r.GroupVersionKind() != v1GVK {
			return nil, fmt.Errorf("expected webhook response of %v, got %v", v1GVK.String(), r.GroupVersionKind().String())
		}
		resp := *r.Response
		if mutating {
			switch {
			case len(resp.Patch) > 0 && resp.PatchType == nil:
				return nil, errors.New("webhook returned response.patch but not response.patchType")
			case len(resp.Patch) == 0 && resp.PatchType != nil:
				return nil, errors.New("webhook returned response.patchType but not response.patch")
			case resp.PatchType != nil && len(*resp.PatchType) == 0:
				return nil, fmt.Errorf("webhook returned invalid response.patchType of %q", *resp.PatchType)
			}
		} else {
			switch {
			case len(resp.Patch) > 0:
				return nil, errors.New("validating webhook may not return response.patch")
			case resp.PatchType != nil:
				return nil, errors.New("validating webhook may not return response.patchType")
			}
		}
		return &resp, nil
	case *admissionv1beta1.AdmissionReview:
		if r.Response == nil {
			return nil, errors.New("webhook response was absent")
		}
		resp := &admissionv1.AdmissionResponse{UID: r.Response.UID, Allowed: r.Response.Allowed, Result: r.Response.Result, Warnings: r.Response.Warnings}
		if mutating && len(r.Response.Patch) > 0 {
			pt := admissionv1.PatchTypeJSONPatch
			resp.Patch, resp.PatchType = r.Response.Patch, &pt
		}
		return resp, nil
	default:
		return nil, fmt.Errorf("unexpected response type %T", review)
	}
}

// checkPatch applies the answer's patch to doctor's object, as the
// apiserver applies it to the object it sent (dispatcher.go,
// callAttrMutatingHook). A patch that fails there is an internal error of
// the write, whatever failurePolicy says.
func checkPatch(r *report, check string, resp *admissionv1.AdmissionResponse, obj syntheticObj, problem func(check, found, fix string), note string) {
	if pt := *resp.PatchType; pt != admissionv1.PatchTypeJSONPatch {
		problem(check, fmt.Sprintf("patchType %q: the apiserver fails with \"unsupported patch type %q\"; JSONPatch is the only one.%s", pt, pt, note), "set patchType: JSONPatch.")
		return
	}
	if _, applied, err := applyJSONPatch(obj.json, resp.Patch); err != nil {
		problem(check, fmt.Sprintf("the patch does not apply to doctor's %s, an object with only a name and namespace%s; the apiserver fails the write with: Internal error occurred: %v.%s", obj.kind, appliedFirst(applied), err, note),
			"add a missing parent before its members: add the whole map (/metadata/annotations) when the object has none, and escape ~ and / in keys as ~0 and ~1.")
	} else {
		r.pass(check, fmt.Sprintf("applies to doctor's %s: %s.", obj.kind, strings.Join(applied, ", ")))
	}
}

func appliedFirst(ops []string) string {
	if len(ops) == 0 {
		return ""
	}
	return " (after " + strings.Join(ops, ", ") + ")"
}

// applyJSONPatch applies a JSON Patch to doc as the apiserver does
// (package jsonpatch), one operation at a time, so that a failure can say
// which applied before it. It returns the patched document and the
// operations applied, as "op path".
func applyJSONPatch(doc, patch []byte) (patched []byte, applied []string, err error) {
	var ops []json.RawMessage
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, nil, fmt.Errorf("received undecodable patch in webhook response: %w", err)
	}
	patched = doc
	for _, raw := range ops {
		if patched, err = jsonpatch.Apply(patched, []byte("["+string(raw)+"]")); err != nil {
			return nil, applied, err
		}
		var op struct{ Op, Path string }
		_ = json.Unmarshal(raw, &op)
		applied = append(applied, op.Op+" "+op.Path)
	}
	return patched, applied, nil
}

// syntheticObj is the object doctor's reviews carry: the smallest object of
// a kind the webhook's rules match.
type syntheticObj struct {
	builtinResource
	json []byte
}

func (o syntheticObj) namespacedName() string {
	if o.namespaced {
		return doctorNamespace + "/" + doctorObjectName
	}
	return doctorObjectName
}

// builtinResource is a built-in kind doctor can make an object of.
type builtinResource struct {
	group, version, resource, kind string
	namespaced                     bool
}

// builtinResources are the kinds webhooks most often act on. A webhook
// whose rules match none of them gets the first, a ConfigMap: reviews of
// kinds a webhook does not expect are still reviews it must answer.
var builtinResources = []builtinResource{
	{"", "v1", "configmaps", "ConfigMap", true},
	{"", "v1", "pods", "Pod", true},
	{"", "v1", "services", "Service", true},
	{"", "v1", "secrets", "Secret", true},
	{"", "v1", "serviceaccounts", "ServiceAccount", true},
	{"", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", true},
	{"", "v1", "namespaces", "Namespace", false},
	{"apps", "v1", "deployments", "Deployment", true},
	{"apps", "v1", "statefulsets", "StatefulSet", true},
	{"apps", "v1", "daemonsets", "DaemonSet", true},
	{"apps", "v1", "replicasets", "ReplicaSet", true},
	{"batch", "v1", "jobs", "Job", true},
	{"batch", "v1", "cronjobs", "CronJob", true},
	{"networking.k8s.io", "v1", "ingresses", "Ingress", true},
	{"networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", true},
	{"policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", true},
	{"rbac.authorization.k8s.io", "v1", "roles", "Role", true},
	{"rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", true},
	{"rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", false},
	{"rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", false},
}

// syntheticObject makes the object of the first built-in kind, in the order
// of the rules, that a rule matches for CREATE-like scope, group, version
// and resource; doctor sends CREATE whatever the rule's operations.
func syntheticObject(rules []admissionregistrationv1.RuleWithOperations) syntheticObj {
	res := builtinResources[0]
find:
	for _, rule := range rules {
		for _, b := range builtinResources {
			if ruleMatches(rule, b, "") {
				res = b
				break find
			}
		}
	}
	meta := map[string]any{"name": doctorObjectName}
	if res.namespaced {
		meta["namespace"] = doctorNamespace
	}
	apiVersion := res.version
	if res.group != "" {
		apiVersion = res.group + "/" + res.version
	}
	// A map of plain strings always encodes.
	data, _ := json.Marshal(map[string]any{"apiVersion": apiVersion, "kind": res.kind, "metadata": meta})
	return syntheticObj{builtinResource: res, json: data}
}

// ruleMatches is the apiserver's rule matcher
// (predicates/rules/rules.go, Matcher.Matches) for a request on r; an
// empty operation matches any.
func ruleMatches(rule admissionregistrationv1.RuleWithOperations, r builtinResource, operation admissionregistrationv1.OperationType) bool {
	wild := func(items []string, want string) bool {
		return slices.Contains(items, "*") || slices.Contains(items, want)
	}
	if rule.Scope != nil {
		switch *rule.Scope {
		case admissionregistrationv1.NamespacedScope:
			if !r.namespaced {
				return false
			}
		case admissionregistrationv1.ClusterScope:
			if r.namespaced {
				return false
			}
		}
	}
	if operation != "" && !slices.Contains(rule.Operations, admissionregistrationv1.OperationAll) && !slices.Contains(rule.Operations, operation) {
		return false
	}
	if !wild(rule.APIGroups, r.group) || !wild(rule.APIVersions, r.version) {
		return false
	}
	for _, res := range rule.Resources {
		name, sub, _ := strings.Cut(res, "/")
		if (name == "*" || name == r.resource) && (sub == "*" || sub == "") {
			return true
		}
	}
	return false
}

// reviewRequest is the review the apiserver would send for a dry-run
// CREATE of obj (request/admissionreview.go, CreateV1AdmissionReview).
// v1beta1 has the same fields as v1 (handler.go copies them one by one), so
// the v1 request with apiVersion v1beta1 is what the apiserver sends in
// v1beta1.
func reviewRequest(version string, uid types.UID, obj syntheticObj) *admissionv1.AdmissionReview {
	dryRun := true
	kind := metav1.GroupVersionKind{Group: obj.group, Version: obj.version, Kind: obj.kind}
	resource := metav1.GroupVersionResource{Group: obj.group, Version: obj.version, Resource: obj.resource}
	namespace := ""
	switch {
	case obj.namespaced:
		namespace = doctorNamespace
	case obj.resource == "namespaces":
		namespace = doctorObjectName // a Namespace's request carries its own name
	}
	return &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.GroupName + "/" + version, Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:             uid,
			Kind:            kind,
			Resource:        resource,
			RequestKind:     &kind,
			RequestResource: &resource,
			Name:            doctorObjectName,
			Namespace:       namespace,
			Operation:       admissionv1.Create,
			UserInfo:        authenticationv1.UserInfo{Username: doctorUser},
			Object:          runtime.RawExtension{Raw: obj.json},
			DryRun:          &dryRun,
			Options:         runtime.RawExtension{Raw: []byte(`{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1","dryRun":["All"]}`)},
		},
	}
}

// newUID returns a random (version 4) UUID, as the apiserver's uids are.
func newUID() types.UID {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]))
}

// ---------------------------------------------------------------------------
// 5. Lint
// ---------------------------------------------------------------------------

// virtualResources are never stored, but are created, and so admitted, on
// every authentication and authorization check made through the API
// (kubelets' delegated authn/authz among them).
var virtualResources = []builtinResource{
	{"authentication.k8s.io", "v1", "tokenreviews", "TokenReview", false},
	{"authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", false},
	{"authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", false},
	{"authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", false},
	{"authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", false},
	{"authorization.k8s.io", "v1", "localsubjectaccessreviews", "LocalSubjectAccessReview", true},
}

// nodeLeases are what every kubelet renews in kube-node-lease every 10 s.
var nodeLeases = builtinResource{"coordination.k8s.io", "v1", "leases", "Lease", true}

func isDryRunSafe(s admissionregistrationv1.SideEffectClass) bool {
	return s == admissionregistrationv1.SideEffectClassNone || s == admissionregistrationv1.SideEffectClassNoneOnDryRun
}

func lintWebhook(r *report, h *webhookUnderTest) {
	nsSelector, err := metav1.LabelSelectorAsSelector(h.namespaceSelector)
	if err != nil {
		r.fail("namespaceSelector", fmt.Sprintf("namespaceSelector does not parse: %v.", err), "fix the selector; the apiserver refuses it.")
		return
	}
	objSelector, err := metav1.LabelSelectorAsSelector(h.objectSelector)
	if err != nil {
		r.fail("objectSelector", fmt.Sprintf("objectSelector does not parse: %v.", err), "fix the selector; the apiserver refuses it.")
		return
	}
	// namespaceSelector is matched against the namespace's labels
	// (predicates/namespace/matcher.go, MatchNamespaceSelector), and every
	// namespace is labelled with its name.
	sendsIn := func(ns string) bool { return nsSelector.Matches(labels.Set{namespaceNameLabel: ns}) }
	// An objectSelector that an object without labels fails sends only
	// labelled objects: it may exclude a namespace's objects, but doctor
	// cannot know their labels.
	optIn := !objSelector.Matches(labels.Set{})

	lintFailurePolicy(r, h, sendsIn, optIn)
	lintTimeout(r, h)
	lintSideEffects(r, h)
	lintRules(r, h, sendsIn, optIn)
	lintReviewVersions(r, h)
}

// lintFailurePolicy fails a Fail webhook that kube-system, or in service
// mode its own namespace, is not excluded from: when it is down, nothing
// there can be created, the webhook's own Pods included.
func lintFailurePolicy(r *report, h *webhookUnderTest, sendsIn func(string) bool, optIn bool) {
	const check = "failurePolicy"
	if h.failurePolicy == admissionregistrationv1.Ignore {
		r.pass(check, "Ignore: when a call fails, the request goes ahead without this webhook.")
		return
	}
	protected := []string{metav1.NamespaceSystem}
	if s := h.clientConfig.Service; s != nil && s.Namespace != metav1.NamespaceSystem {
		protected = append(protected, s.Namespace)
	}
	var open []string
	for _, ns := range protected {
		if sendsIn(ns) {
			open = append(open, ns)
		}
	}
	describe := func(nss []string) string {
		s := strings.Join(nss, " and ")
		if h.clientConfig.Service != nil && slices.Contains(nss, h.clientConfig.Service.Namespace) {
			s += fmt.Sprintf(" (%s is the webhook's own namespace)", h.clientConfig.Service.Namespace)
		}
		return s
	}
	fix := fmt.Sprintf("exclude them with namespaceSelector: {matchExpressions: [{key: %s, operator: NotIn, values: [%s]}]}, or set failurePolicy: Ignore.", namespaceNameLabel, strings.Join(protected, ", "))
	switch {
	case len(open) == 0:
		r.pass(check, fmt.Sprintf("Fail, and namespaceSelector excludes %s.", describe(protected)))
	case optIn:
		r.warn(check, fmt.Sprintf("Fail; namespaceSelector does not exclude %s, but objectSelector (%s) sends only labelled objects, so objects there are safe only while none carries those labels.",
			describe(open), metav1.FormatLabelSelector(h.objectSelector)), "to be sure, "+fix)
	default:
		r.fail(check, fmt.Sprintf("Fail, and neither namespaceSelector nor objectSelector excludes %s: while the webhook is down, nothing there can be created or changed, which can keep the webhook itself from coming back.", describe(open)), fix)
	}
}

// lintTimeout fails a timeoutSeconds the apiserver refuses.
func lintTimeout(r *report, h *webhookUnderTest) {
	if h.timeoutSeconds < 1 || h.timeoutSeconds > maxTimeoutSeconds {
		r.fail("timeoutSeconds", fmt.Sprintf("%d: the apiserver refuses the configuration (\"the timeout value must be between 1 and 30 seconds\"); doctor waited %s.", h.timeoutSeconds, h.timeout),
			"set timeoutSeconds from 1 to 30 (10 if unset).")
	}
}

// lintSideEffects fails sideEffects that make the apiserver refuse dry-run
// requests (mutating/dispatcher.go callAttrMutatingHook:
// NewDryRunUnsupportedErr, or "Webhook SideEffects is nil").
func lintSideEffects(r *report, h *webhookUnderTest) {
	const check = "sideEffects"
	fix := "make the webhook free of side effects, or skip them when request.dryRun is true, and set sideEffects: None or NoneOnDryRun."
	switch {
	case h.sideEffects == nil:
		r.fail(check, "sideEffects is not set: admissionregistration.k8s.io/v1 requires it, and the apiserver fails every dry-run request the webhook matches (\"Webhook SideEffects is nil\").", fix)
	case !isDryRunSafe(*h.sideEffects):
		r.fail(check, fmt.Sprintf("%s: the apiserver refuses every dry-run request the webhook matches (\"admission webhook %q does not support dry run\"), so kubectl apply --dry-run=server and kubectl diff fail.", *h.sideEffects, h.name), fix)
	default:
		r.pass(check, string(*h.sideEffects)+".")
	}
}

// lintRules warns about rules that match virtual resources, or node leases.
func lintRules(r *report, h *webhookUnderTest, sendsIn func(string) bool, optIn bool) {
	const check = "rules"
	var virtual []string
	for _, v := range virtualResources {
		if slices.ContainsFunc(h.rules, func(rule admissionregistrationv1.RuleWithOperations) bool {
			return ruleMatches(rule, v, admissionregistrationv1.Create)
		}) {
			virtual = append(virtual, v.resource)
		}
	}
	leases := sendsIn("kube-node-lease") && !optIn && slices.ContainsFunc(h.rules, func(rule admissionregistrationv1.RuleWithOperations) bool {
		return ruleMatches(rule, nodeLeases, admissionregistrationv1.Update)
	})
	var problems []string
	if len(virtual) > 0 {
		problems = append(problems, fmt.Sprintf("the rules match %s: virtual resources that are never stored, but created on every authentication or authorization check made through the API, so each of those waits for this webhook.", strings.Join(virtual, ", ")))
	}
	if leases {
		problems = append(problems, "The rules match leases in kube-node-lease, which every node renews every 10 seconds: the webhook is called that often per node, and nodes are marked NotReady while it fails.")
	}
	if len(problems) == 0 {
		r.pass(check, "no virtual resources (tokenreviews, subjectaccessreviews, …) and no node leases.")
		return
	}
	r.warn(check, strings.Join(problems, " "), "list the groups and resources the webhook needs instead of a wildcard, and exclude kube-node-lease with namespaceSelector.")
}

// lintReviewVersions checks admissionReviewVersions as
// request/admissionreview.go CreateAdmissionObjects uses it.
func lintReviewVersions(r *report, h *webhookUnderTest) {
	const check = "admissionReviewVersions"
	versions := cmp.Or(strings.Join(h.reviewVersions, ", "), "an empty list")
	first := ""
	for _, v := range h.reviewVersions {
		if slices.Contains(knownReviewVersions, v) {
			first = v
			break
		}
	}
	switch {
	case first == "":
		r.fail(check, fmt.Sprintf("%s has no version the apiserver knows, so it fails every call (\"webhook does not accept known AdmissionReview versions (v1, v1beta1)\").", versions),
			"support admission.k8s.io/v1 and list v1.")
	case !slices.Contains(h.reviewVersions, "v1"):
		r.warn(check, fmt.Sprintf("%s has no v1, so the apiserver sends v1beta1, deprecated since Kubernetes 1.16.", versions),
			"support admission.k8s.io/v1 and list it first.")
	default:
		r.pass(check, fmt.Sprintf("%s: the apiserver sends %s.", versions, first))
	}
}

// lintFile checks what the webhooks of the file do together.
func lintFile(r *report, hooks []webhookUnderTest) {
	// Mutating webhooks are called one after another, those with
	// reinvocationPolicy IfNeeded possibly twice, then the validating ones
	// in parallel (mutating/dispatcher.go, Dispatch): the worst case of a
	// write is when each times out in turn.
	var mutating []string
	var worst, slowestValidating time.Duration
	var never []string
	for _, h := range hooks {
		if !h.mutating {
			slowestValidating = max(slowestValidating, h.timeout)
			continue
		}
		calls := time.Duration(1)
		if h.reinvocation == admissionregistrationv1.IfNeededReinvocationPolicy {
			calls = 2
		} else {
			never = append(never, h.name)
		}
		worst += calls * h.timeout
		mutating = append(mutating, fmt.Sprintf("%s %s", h.name, seconds(h.timeout)))
	}
	worst += slowestValidating
	validating := "none"
	if slowestValidating > 0 {
		validating = seconds(slowestValidating)
	}
	found := fmt.Sprintf("if every webhook times out, a write waits %s (mutating one after another: %s; then the slowest validating: %s)",
		seconds(worst), cmp.Or(strings.Join(mutating, ", "), "none"), validating)
	if worst >= apiserverRequestTimeout {
		r.warn("timeoutSeconds", found+fmt.Sprintf(", which reaches the apiserver's default %s request deadline: the write times out even with failurePolicy: Ignore.", seconds(apiserverRequestTimeout)),
			"lower timeoutSeconds: a webhook should answer in milliseconds, and 1–5 seconds is plenty.")
	} else {
		r.pass("timeoutSeconds", found+fmt.Sprintf(", within the apiserver's default %s request deadline.", seconds(apiserverRequestTimeout)))
	}

	switch {
	case len(mutating) < 2:
	case len(never) > 0:
		r.warn("reinvocationPolicy", fmt.Sprintf("%d mutating webhooks, and %s %s reinvocationPolicy Never (the default): each is called once, so it does not see what the webhooks after it change.", len(mutating), strings.Join(never, ", "), hasHave(len(never))),
			"set reinvocationPolicy: IfNeeded on a webhook whose patch depends on fields others change, and make its patch idempotent.")
	default:
		r.pass("reinvocationPolicy", "every mutating webhook has reinvocationPolicy IfNeeded.")
	}
}

// seconds writes a whole number of seconds as timeoutSeconds counts them.
func seconds(d time.Duration) string { return fmt.Sprintf("%ds", d/time.Second) }

func hasHave(n int) string {
	if n == 1 {
		return "has"
	}
	return "have"
}
