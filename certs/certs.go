// Package certs makes the webhook's certificates: `webhook certs`, a CA of
// the webhook's own and serving certificates it signs, and the development
// certificate the server makes when none is configured. It is a tool, not
// the server: the root package calls Run and WriteDev.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// DevValidity bounds the embedded development certificate: long
	// enough not to get in a developer's way, short enough that a copy left
	// somewhere stops working on its own.
	DevValidity = 90 * 24 * time.Hour

	// clockSkew backdates NotBefore so a certificate made now is accepted by
	// a peer whose clock is a little behind.
	clockSkew = 5 * time.Minute
)

// DevHosts are the names the development certificate is valid for: enough
// for curl on this machine and for a URL-mode webhook on loopback.
var DevHosts = []string{"localhost", "127.0.0.1", "::1"}

// KeyPair is a certificate with its private key, both parsed and PEM encoded.
type KeyPair struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA makes a self-signed CA of its own. It must never be the cluster's CA:
// a webhook CA signs serving certificates only, and reusing the cluster CA
// would let whoever holds this key mint cluster credentials.
func NewCA(commonName string, now time.Time, validity time.Duration) (*KeyPair, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return Issue(tmpl, nil)
}

// NewServingCert makes an ECDSA P-256 serving certificate signed by ca, valid
// for hosts, each an IP address or a DNS name.
func NewServingCert(ca *KeyPair, hosts []string, now time.Time, validity time.Duration) (*KeyPair, error) {
	if len(hosts) == 0 {
		return nil, errors.New("a serving certificate needs at least one host name or IP address")
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: hosts[0]},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return Issue(tmpl, ca)
}

// NewClientCert makes an ECDSA P-256 client certificate signed by ca,
// whose Common Name is name: the certificate the apiserver presents to a
// webhook run with -client-ca-file (ca's certificate) and
// -allowed-client-names (name).
func NewClientCert(ca *KeyPair, name string, now time.Time, validity time.Duration) (*KeyPair, error) {
	return Issue(&x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}, ca)
}

// Issue signs tmpl with a new P-256 key, by parent or, when parent is nil,
// by that new key itself.
func Issue(tmpl *x509.Certificate, parent *KeyPair) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating a Key: %w", err)
	}
	// RFC 5280 allows up to 20 octets; 128 random bits make serials unique.
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128)); err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	signerCert, signerKey := tmpl, key
	if parent != nil {
		signerCert, signerKey = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, &key.PublicKey, signerKey)
	if err != nil {
		return nil, fmt.Errorf("signing the certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &KeyPair{
		Cert:    cert,
		Key:     key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// DevCAName is the development CA's Common Name, by which a certificate
// WriteDev made is told from one a user made.
const DevCAName = "webhook development CA"

// WriteDev writes a new development CA and a serving certificate
// for DevHosts into dir as ca.crt, tls.crt and tls.key. The CA's key is not
// kept, so nothing else can ever be signed by it.
func WriteDev(dir string, now time.Time) error {
	ca, err := NewCA(DevCAName, now, DevValidity)
	if err != nil {
		return err
	}
	serving, err := NewServingCert(ca, DevHosts, now, DevValidity)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, "ca.crt"), ca.CertPEM, 0o644); err != nil {
		return err
	}
	return writeKeyPair(dir, "tls", serving)
}

// writeKeyPair writes kp into dir as name.key and name.crt, the key first:
// a watcher that sees the new certificate finds its key.
func writeKeyPair(dir, name string, kp *KeyPair) error {
	if err := writeFileAtomic(filepath.Join(dir, name+".key"), kp.KeyPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, name+".crt"), kp.CertPEM, 0o644)
}

// writeFileAtomic writes data to a temporary file beside path and renames it
// into place, so a reader never sees half a certificate or key. A file it
// replaces keeps its mode and owner (on Unix), as an operator set them for
// the service that reads it: a renewal in place needs no chown again.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if old, err := os.Stat(path); err == nil {
		perm = old.Mode().Perm()
		if err := sameOwner(tmp, old); err != nil {
			tmp.Close()
			return fmt.Errorf("keeping the owner of %s: %w", path, err)
		}
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

const (
	// defaultServingValidity is the serving certificate's lifetime from
	// `webhook certs`: a year, so rotation is a routine that gets practised.
	defaultServingValidity = 365 * 24 * time.Hour

	// defaultCAValidity is the CA's lifetime. It outlives many serving
	// certificates, so rotating those never changes caBundle.
	defaultCAValidity = 10 * 365 * 24 * time.Hour
)

// usageError is a command line certs cannot run with: exit status 2, as
// for the webhook's other commands.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// ExitCode is the status to exit with.
func (e usageError) ExitCode() int { return 2 }

// Run is `webhook certs`: it writes ca.crt, ca.Key, tls.crt and tls.Key
// into -dir and prints the base64 caBundle on stdout; with -client, a
// client certificate, client.crt and client.key, instead of a serving
// one, and the -client-ca-file to give the webhook. An existing CA in -dir
// is kept, so issuing a new serving certificate leaves caBundle unchanged.
// A command line it cannot run with is an error whose ExitCode is 2.
func Run(args []string, now time.Time, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("webhook certs", flag.ContinueOnError)
	flags.SetOutput(stderr)
	dir := flags.String("dir", "tls", "`directory` to write ca.crt, ca.key, tls.crt and tls.key into")
	hosts := flags.String("hosts", "", "comma-separated DNS `names` and IP addresses the serving certificate is for")
	service := flags.String("service", "", "with no -hosts: the Service `name`; the names are NAME, NAME.NS, NAME.NS.svc and NAME.NS.svc.cluster.local")
	namespace := flags.String("namespace", "default", "the Service's `namespace`, with -service")
	client := flags.String("client", "", "instead of a serving certificate: a client certificate whose Common `name` is this, client.crt and client.key, for the apiserver to present to a webhook run with -client-ca-file DIR/ca.crt and -allowed-client-names NAME; use a -dir apart from the serving CA's (docs/operations.md, Security)")
	validity := flags.Duration("validity", defaultServingValidity, "serving certificate `lifetime`")
	caValidity := flags.Duration("ca-validity", defaultCAValidity, "lifetime of a new CA")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if flags.NArg() > 0 {
		return usageError{fmt.Errorf("certs: unexpected argument %q", flags.Arg(0))}
	}
	var names []string
	for _, h := range strings.Split(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			names = append(names, h)
		}
	}
	switch {
	case *client != "" && (len(names) > 0 || *service != ""):
		return usageError{errors.New("certs: -client makes a client certificate: give it without -hosts or -service")}
	case *client != "":
		// A Common Name -allowed-client-names can hold: no comma.
		if strings.ContainsAny(*client, ",\n") || strings.TrimSpace(*client) != *client {
			return usageError{fmt.Errorf("certs: -client %q: a name without commas or surrounding spaces, as -allowed-client-names lists it", *client)}
		}
	case len(names) > 0 && *service != "":
		return usageError{errors.New("certs: give -hosts or -service, not both")}
	case len(names) == 0 && *service == "":
		return usageError{errors.New("certs: give -hosts (such as 127.0.0.1,webhook.example.com) or -service with -namespace for a serving certificate, or -client NAME for the apiserver's client certificate")}
	case len(names) == 0:
		// A Service's name and its namespace's are DNS labels
		// (k8s.io/kubernetes pkg/apis/core/validation: ValidateServiceCreate
		// with RelaxedServiceNameValidation, on from 1.36, and
		// ValidateNamespaceName): a certificate for another name is
		// for no Service.
		svc, ns := *service, *namespace
		for _, f := range []struct{ flag, value, what string }{{"-service", svc, "Service"}, {"-namespace", ns, "namespace"}} {
			if errs := validation.IsDNS1123Label(f.value); len(errs) > 0 {
				return usageError{fmt.Errorf("certs: %s %q is not a %s name the apiserver takes: %s", f.flag, f.value, f.what, strings.Join(errs, "; "))}
			}
		}
		names = []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local"}
	default:
		for _, h := range names {
			if net.ParseIP(h) == nil && len(validation.IsDNS1123Subdomain(h)) > 0 && len(validation.IsWildcardDNS1123Subdomain(h)) > 0 {
				return usageError{fmt.Errorf("certs: -hosts %q: neither an IP address nor a DNS name (lowercase letters, digits, '-' and '.', such as webhook.example.com)", h)}
			}
		}
	}
	if *validity <= 0 || *caValidity <= 0 {
		return usageError{errors.New("certs: -validity and -ca-validity must be positive")}
	}

	// Everything is checked and made before anything is written: a run
	// that fails leaves -dir as it was.
	ca, err := loadCA(filepath.Join(*dir, "ca.crt"), filepath.Join(*dir, "ca.key"))
	newCA := errors.Is(err, fs.ErrNotExist)
	if _, statErr := os.Stat(filepath.Join(*dir, "ca.crt")); newCA && statErr == nil {
		// A caBundle made of that ca.crt would not verify what a new CA signs.
		return fmt.Errorf("certs: %s holds ca.crt without its key, ca.key: a new CA would sign a certificate that the caBundle made of ca.crt does not verify; to change CAs, rotate them (docs/deploy.md, \"Rotate certificates\"), or remove ca.crt too", *dir)
	}
	switch {
	case newCA && *validity > *caValidity:
		return usageError{fmt.Errorf("certs: -validity %s is longer than -ca-validity %s: a serving certificate cannot outlive the CA that signs it", *validity, *caValidity)}
	case newCA:
		if ca, err = NewCA("webhook CA", now, *caValidity); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("certs: the CA in %s: %w", *dir, err)
	case now.Add(*validity).After(ca.Cert.NotAfter):
		return fmt.Errorf("certs: the CA in %s expires on %s, before a serving certificate valid for %s would; rotate the CA first, or ask for a shorter -validity", *dir, ca.Cert.NotAfter.Format(time.DateOnly), *validity)
	}
	var leaf *KeyPair
	if *client != "" {
		leaf, err = NewClientCert(ca, *client, now, *validity)
	} else {
		leaf, err = NewServingCert(ca, names, now, *validity)
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	if newCA {
		if err := writeKeyPair(*dir, "ca", ca); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "made a new CA in %s (valid until %s, sha256 %s)\n", *dir, ca.Cert.NotAfter.Format(time.DateOnly), Fingerprint(ca.Cert))
	} else {
		fmt.Fprintf(stderr, "kept the CA in %s (valid until %s, sha256 %s); caBundle is unchanged\n", *dir, ca.Cert.NotAfter.Format(time.DateOnly), Fingerprint(ca.Cert))
	}
	if *client != "" {
		if err := writeKeyPair(*dir, "client", leaf); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote a client certificate for %q to %s (valid until %s)\n", *client, *dir, leaf.Cert.NotAfter.Format(time.DateOnly))
		_, err = fmt.Fprintf(stdout, "-client-ca-file %s -allowed-client-names %s\n", filepath.Join(*dir, "ca.crt"), *client)
		return err
	}
	if err := writeKeyPair(*dir, "tls", leaf); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote a serving certificate for %s to %s (valid until %s); caBundle on stdout\n",
		strings.Join(names, ", "), *dir, leaf.Cert.NotAfter.Format(time.DateOnly))
	_, err = fmt.Fprintln(stdout, base64.StdEncoding.EncodeToString(ca.CertPEM))
	return err
}

// Fingerprint is the SHA-256 of c's DER, in hex with colons as openssl
// x509 -fingerprint -sha256 prints it: what tells apart two CAs of one
// name.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	hexed := make([]string, len(sum))
	for i, b := range sum {
		hexed[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(hexed, ":")
}

// loadCA reads a CA made by Run. A missing file gives fs.ErrNotExist.
func loadCA(certFile, keyFile string) (*KeyPair, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the CA key is a %T; webhook certs makes and signs with ECDSA keys", pair.PrivateKey)
	}
	if !pair.Leaf.IsCA {
		return nil, errors.New("ca.crt is not a CA certificate")
	}
	return &KeyPair{Cert: pair.Leaf, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}
