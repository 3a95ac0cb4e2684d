package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

const (
	// devCertValidity bounds the embedded development certificate: long
	// enough not to get in a developer's way, short enough that a copy left
	// somewhere stops working on its own.
	devCertValidity = 90 * 24 * time.Hour

	// clockSkew backdates NotBefore so a certificate made now is accepted by
	// a peer whose clock is a little behind.
	clockSkew = 5 * time.Minute
)

// devHosts are the names the development certificate is valid for: enough
// for curl on this machine and for a URL-mode webhook on loopback.
var devHosts = []string{"localhost", "127.0.0.1", "::1"}

// keyPair is a certificate with its private key, both parsed and PEM encoded.
type keyPair struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

// newCA makes a self-signed CA of its own. It must never be the cluster's CA:
// a webhook CA signs serving certificates only, and reusing the cluster CA
// would let whoever holds this key mint cluster credentials.
func newCA(commonName string, now time.Time, validity time.Duration) (*keyPair, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return issue(tmpl, nil)
}

// newServingCert makes an ECDSA P-256 serving certificate signed by ca, valid
// for hosts, each an IP address or a DNS name.
func newServingCert(ca *keyPair, hosts []string, now time.Time, validity time.Duration) (*keyPair, error) {
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
	return issue(tmpl, ca)
}

// issue signs tmpl with a new P-256 key, by parent or, when parent is nil,
// by that new key itself.
func issue(tmpl *x509.Certificate, parent *keyPair) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating a key: %w", err)
	}
	// RFC 5280 allows up to 20 octets; 128 random bits make serials unique.
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128)); err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	signerCert, signerKey := tmpl, key
	if parent != nil {
		signerCert, signerKey = parent.cert, parent.key
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
	return &keyPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// writeDevCertificates writes a new development CA and a serving certificate
// for devHosts into dir as ca.crt, tls.crt and tls.key. The CA's key is not
// kept, so nothing else can ever be signed by it.
func writeDevCertificates(dir string, now time.Time) error {
	ca, err := newCA("webhook development CA", now, devCertValidity)
	if err != nil {
		return err
	}
	serving, err := newServingCert(ca, devHosts, now, devCertValidity)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		perm os.FileMode
	}{
		{"ca.crt", ca.certPEM, 0o644},
		{"tls.key", serving.keyPEM, 0o600},
		{"tls.crt", serving.certPEM, 0o644},
	} {
		if err := writeFileAtomic(filepath.Join(dir, f.name), f.data, f.perm); err != nil {
			return err
		}
	}
	return nil
}

// writeFileAtomic writes data to a temporary file beside path and renames it
// into place, so a reader never sees half a certificate or key.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
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
