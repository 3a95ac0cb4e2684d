package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// cert is a certificate and key as PEM, with the parsed certificate, for
// CAs and leaves made by the tests.
type cert struct {
	x509    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

// newTestCA makes a self-signed CA. Serving and client CAs are kept apart,
// as in production.
func newTestCA(t *testing.T, name string) *cert {
	t.Helper()
	return signCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil)
}

// newTestClientCert makes a client certificate named cn.
func newTestClientCert(t *testing.T, ca *cert, cn string) *cert {
	t.Helper()
	return signCert(t, &x509.Certificate{
		Subject:  pkix.Name{CommonName: cn},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca)
}

func signCert(t *testing.T, tmpl *x509.Certificate, ca *cert) *cert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber, _ = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if tmpl.NotAfter.IsZero() { // valid now, unless the test dates it
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	}
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.x509, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	parsed, _ := x509.ParseCertificate(der)
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	return &cert{
		x509: parsed, key: key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}

// writePair writes c as name.crt and name.key in dir and returns the paths.
func writePair(t *testing.T, dir, name string, c *cert) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, c.certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, c.keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
