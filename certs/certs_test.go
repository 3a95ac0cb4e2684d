package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// certsRun runs `webhook certs args...` and returns what it printed.
func certsRun(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = Run(args, time.Now(), &out, &errOut)
	return out.String(), errOut.String(), err
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s holds no PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCertsForService(t *testing.T) {
	dir := t.TempDir()
	stdout, _, err := certsRun(t, "-dir", dir, "-service", "webhook", "-namespace", "webhook-system", "-validity", "720h")
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if got := strings.TrimSpace(stdout); got != base64.StdEncoding.EncodeToString(caPEM) {
		t.Errorf("stdout %q is not the base64 of ca.crt", got)
	}
	for name, perm := range map[string]os.FileMode{"ca.crt": 0o644, "ca.key": 0o600, "tls.crt": 0o644, "tls.key": 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != perm {
			t.Errorf("%s has mode %v, want %v", name, fi.Mode().Perm(), perm)
		}
	}
	ca, serving := readCert(t, filepath.Join(dir, "ca.crt")), readCert(t, filepath.Join(dir, "tls.crt"))
	if !ca.IsCA || serving.IsCA {
		t.Errorf("got ca.IsCA=%v tls.IsCA=%v, want true and false", ca.IsCA, serving.IsCA)
	}
	if len(serving.ExtKeyUsage) != 1 || serving.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("got extended key usage %v, want serverAuth only", serving.ExtKeyUsage)
	}
	if pub, ok := serving.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("got a %T key, want ECDSA P-256", serving.PublicKey)
	}
	if life := serving.NotAfter.Sub(serving.NotBefore); life > 721*time.Hour {
		t.Errorf("serving certificate lives %s, want the -validity of 720h", life)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, name := range []string{"webhook", "webhook.webhook-system", "webhook.webhook-system.svc", "webhook.webhook-system.svc.cluster.local"} {
		if _, err := serving.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("tls.crt does not verify for %s: %v", name, err)
		}
	}
	if _, err := serving.Verify(x509.VerifyOptions{Roots: pool, DNSName: "webhook.other.svc"}); err == nil {
		t.Error("tls.crt verifies for a name it was not made for")
	}
}

// TestCertsKeepTheCA checks that a second run issues a new serving
// certificate under the same CA, so caBundle does not change.
func TestCertsKeepTheCA(t *testing.T) {
	dir := t.TempDir()
	first, _, err := certsRun(t, "-dir", dir, "-hosts", "127.0.0.1,webhook.example.com")
	if err != nil {
		t.Fatal(err)
	}
	serial1 := readCert(t, filepath.Join(dir, "tls.crt")).SerialNumber
	second, stderr, err := certsRun(t, "-dir", dir, "-hosts", "127.0.0.1,webhook.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Error("caBundle changed when only the serving certificate was renewed")
	}
	if !strings.Contains(stderr, "kept the CA") {
		t.Errorf("stderr %q does not say the CA was kept", stderr)
	}
	// The CA is named by its fingerprint, as openssl prints it: two CAs
	// of one name are told apart.
	if fp := Fingerprint(readCert(t, filepath.Join(dir, "ca.crt"))); len(fp) != 95 || !strings.Contains(stderr, "sha256 "+fp) {
		t.Errorf("stderr %q does not give the CA's SHA-256 fingerprint %s", stderr, fp)
	}
	serving := readCert(t, filepath.Join(dir, "tls.crt"))
	if serving.SerialNumber.Cmp(serial1) == 0 {
		t.Error("the serving certificate was not renewed")
	}
	if len(serving.IPAddresses) != 1 || !serving.IPAddresses[0].Equal([]byte{127, 0, 0, 1}) || len(serving.DNSNames) != 1 || serving.DNSNames[0] != "webhook.example.com" {
		t.Errorf("got IPs %v and DNS names %v", serving.IPAddresses, serving.DNSNames)
	}
	pool := x509.NewCertPool()
	pool.AddCert(readCert(t, filepath.Join(dir, "ca.crt")))
	if _, err := serving.Verify(x509.VerifyOptions{Roots: pool, DNSName: "webhook.example.com"}); err != nil {
		t.Errorf("the renewed certificate does not chain to the kept CA: %v", err)
	}
}

func TestCertsErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-dir", dir}, "give -hosts"},
		{[]string{"-dir", dir, "-hosts", "a", "-service", "b"}, "not both"},
		{[]string{"-dir", dir, "-hosts", "a", "-validity", "-1h"}, "must be positive"},
		{[]string{"-dir", dir, "-hosts", "a", "-ca-validity", "1h", "-validity", "8760h"}, "cannot outlive the CA"},
		{[]string{"-dir", dir, "stray"}, "unexpected argument"},
		{[]string{"-dir", dir, "-service", "Bad_Name"}, `-service "Bad_Name" is not a Service name`},
		{[]string{"-dir", dir, "-service", "webhook", "-namespace", "web.hook"}, `-namespace "web.hook" is not a namespace name`},
		{[]string{"-dir", dir, "-hosts", "127.0.0.1,Web_Hook.example.com"}, `-hosts "Web_Hook.example.com"`},
	}
	for _, tc := range tests {
		_, _, err := certsRun(t, tc.args...)
		var exit interface{ ExitCode() int }
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("certs %q: got %v, want a usage error (exit 2) about %q", tc.args, err, tc.want)
		}
	}
	// None of them wrote anything: a CA made for a run that then fails
	// would be kept by the next.
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("the failed runs left %v in -dir", entries)
	}
	// An existing CA that expires before the serving certificate would:
	// nothing is written either.
	short := t.TempDir()
	if _, _, err := certsRun(t, "-dir", short, "-hosts", "a", "-ca-validity", "48h", "-validity", "24h"); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(short, "tls.crt"))
	if _, _, err := certsRun(t, "-dir", short, "-hosts", "a", "-validity", "72h"); err == nil || !strings.Contains(err.Error(), "rotate the CA first") {
		t.Errorf("a serving certificate outliving the kept CA: got %v, want a refusal", err)
	}
	if after, _ := os.ReadFile(filepath.Join(short, "tls.crt")); !bytes.Equal(before, after) {
		t.Error("the refused run replaced tls.crt")
	}
	// A CA file that is not a CA is refused rather than used.
	bad := t.TempDir()
	if _, _, err := certsRun(t, "-dir", bad, "-hosts", "a"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"crt", "key"} {
		b, _ := os.ReadFile(filepath.Join(bad, "tls."+f))
		if err := os.WriteFile(filepath.Join(bad, "ca."+f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := certsRun(t, "-dir", bad, "-hosts", "a"); err == nil || !strings.Contains(err.Error(), "not a CA") {
		t.Errorf("got %v, want a refusal of a ca.crt that is not a CA", err)
	}
	// A ca.crt without its key, as a user who deleted the key leaves it:
	// refused, not replaced by a new CA the caBundle does not hold.
	keyless := t.TempDir()
	if _, _, err := certsRun(t, "-dir", keyless, "-hosts", "a"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(keyless, "ca.key")); err != nil {
		t.Fatal(err)
	}
	caBefore, _ := os.ReadFile(filepath.Join(keyless, "ca.crt"))
	if _, _, err := certsRun(t, "-dir", keyless, "-hosts", "a"); err == nil || !strings.Contains(err.Error(), "without its key") {
		t.Errorf("ca.crt without ca.key: got %v, want a refusal", err)
	}
	if caAfter, _ := os.ReadFile(filepath.Join(keyless, "ca.crt")); !bytes.Equal(caBefore, caAfter) {
		t.Error("the refused run replaced ca.crt")
	}
}

// TestCertsForTheAPIServer: -client makes the client certificate the
// apiserver presents to a webhook run with -client-ca-file and
// -allowed-client-names, as the line it prints says: a webhook's TLS
// configuration that trusts that CA takes it, for client authentication
// only, with the Common Name given.
func TestCertsForTheAPIServer(t *testing.T) {
	dir := t.TempDir()
	stdout, _, err := certsRun(t, "-dir", dir, "-client", "kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	if want := "-client-ca-file " + filepath.Join(dir, "ca.crt") + " -allowed-client-names kube-apiserver\n"; stdout != want {
		t.Errorf("printed %q, want %q", stdout, want)
	}
	client := readCert(t, filepath.Join(dir, "client.crt"))
	pool := x509.NewCertPool()
	pool.AddCert(readCert(t, filepath.Join(dir, "ca.crt")))
	if _, err := client.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the client certificate does not verify for client authentication against ca.crt: %v", err)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("the client certificate may also serve: want clientAuth only")
	}
	if client.Subject.CommonName != "kube-apiserver" || client.IsCA {
		t.Errorf("got CN %q, CA %v; want kube-apiserver, not a CA", client.Subject.CommonName, client.IsCA)
	}
	if info, err := os.Stat(filepath.Join(dir, "client.key")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("client.key: %v, mode %v; want 0600", err, info.Mode())
	}
	if _, err := os.Stat(filepath.Join(dir, "tls.crt")); err == nil {
		t.Error("-client wrote a serving certificate too")
	}
	for _, args := range [][]string{{"-client", "a", "-hosts", "b"}, {"-client", "a,b"}} {
		if _, _, err := certsRun(t, append([]string{"-dir", t.TempDir()}, args...)...); err == nil {
			t.Errorf("certs %q: got no error", args)
		}
	}
}
