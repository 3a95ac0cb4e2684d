package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"github.com/example/webhook/body"
	"github.com/example/webhook/certs"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// testPKI is a serving CA and a client CA, kept apart as they must be.
type testPKI struct {
	servingCA, clientCA *certs.KeyPair
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	servingCA, err := certs.NewCA("test serving CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := certs.NewCA("test client CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return testPKI{servingCA, clientCA}
}

func (p testPKI) serving(t *testing.T) *certs.KeyPair {
	t.Helper()
	kp, err := certs.NewServingCert(p.servingCA, certs.DevHosts, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// newClientCert issues a client certificate named cn by ca.
func newClientCert(t *testing.T, ca *certs.KeyPair, cn string) tls.Certificate {
	t.Helper()
	kp, err := certs.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		NotBefore:   time.Now().Add(-time.Minute),
		NotAfter:    time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// secretVolume updates files the way kubelet updates a Secret volume: the
// files live in a timestamped directory, ..data is a symlink to it, and each
// name is a symlink through ..data. An update writes a new directory and
// renames a new ..data link over the old one, so the inode of every file a
// reader opened before stays as it was.
type secretVolume struct {
	dir string
	n   int
}

func (v *secretVolume) write(t *testing.T, files map[string][]byte) {
	t.Helper()
	v.n++
	ts := fmt.Sprintf("..2026_11_22_00_00_%02d.%d", v.n, v.n)
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(v.dir, ts, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func (v *secretVolume) path(name string) string { return filepath.Join(v.dir, name) }

// tlsClient returns a client trusting the serving CA, presenting cert when
// given, with a new connection per request unless keepAlive.
func (p testPKI) tlsClient(cert *tls.Certificate, keepAlive bool) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(p.servingCA.Cert)
	cfg := &tls.Config{RootCAs: pool}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: !keepAlive}}
}

func TestCertificateRotation(t *testing.T) {
	pki := newTestPKI(t)
	review := plumbingReviews(t)["v1-deployment-create"]
	vol := &secretVolume{dir: t.TempDir()}
	first, second := pki.serving(t), pki.serving(t)
	vol.write(t, map[string][]byte{"tls.crt": first.CertPEM, "tls.key": first.KeyPEM})
	addr, logs, stop := startRun(t, "-tls-cert-file", vol.path("tls.crt"), "-tls-private-key-file", vol.path("tls.key"))
	defer stop()

	// A connection made before the swap keeps working after it.
	pooled := pki.tlsClient(nil, true)
	if got := servedSerial(t, pooled, addr); got.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("serving serial %x, want the first certificate's %x", got, first.Cert.SerialNumber)
	}

	// A loop of reviews, each on a new connection, runs across the swaps.
	var requests, failures atomic.Int64
	var lastSerial atomic.Pointer[big.Int]
	loopCtx, stopLoop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		fresh := pki.tlsClient(nil, false)
		for loopCtx.Err() == nil {
			requests.Add(1)
			resp, err := fresh.Post("https://"+addr+"/validate?timeout=5s", "application/json", bytes.NewReader(review))
			if err != nil {
				failures.Add(1)
				t.Errorf("review failed during rotation: %v", err)
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				failures.Add(1)
				t.Errorf("review during rotation: got HTTP %d", resp.StatusCode)
			}
			lastSerial.Store(resp.TLS.PeerCertificates[0].SerialNumber)
		}
	}()

	time.Sleep(300 * time.Millisecond)
	swapped := time.Now()
	vol.write(t, map[string][]byte{"tls.crt": second.CertPEM, "tls.key": second.KeyPEM})
	for {
		if s := lastSerial.Load(); s != nil && s.Cmp(second.Cert.SerialNumber) == 0 {
			break
		}
		if time.Since(swapped) > 10*time.Second {
			t.Fatalf("the new certificate was not served within 10s; log:\n%s", logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("new certificate served %s after the swap", time.Since(swapped).Round(time.Millisecond))
	if got := servedSerial(t, pooled, addr); got.Cmp(first.Cert.SerialNumber) != 0 {
		t.Errorf("the pooled connection's certificate changed to %x; connections in flight must be untouched", got)
	}

	// A broken pair (the key of another certificate) keeps the good one.
	vol.write(t, map[string][]byte{"tls.crt": first.CertPEM, "tls.key": second.KeyPEM})
	time.Sleep(3 * certPollInterval)
	syscallHUP(t) // a SIGHUP re-reads too, and must not log the same failure again
	time.Sleep(certPollInterval)
	stopLoop()
	wg.Wait()
	if got := servedSerial(t, pki.tlsClient(nil, false), addr); got.Cmp(second.Cert.SerialNumber) != 0 {
		t.Errorf("after a broken update got serial %x, want the last good %x", got, second.Cert.SerialNumber)
	}
	if n := strings.Count(logs.String(), "keeping the last good serving certificate"); n != 1 {
		t.Errorf("got %d log lines about the broken pair, want exactly 1:\n%s", n, logs)
	}
	if n := requests.Load(); failures.Load() != 0 || n < 10 {
		t.Errorf("got %d failed of %d reviews across the rotation, want 0 of at least 10", failures.Load(), n)
	}
	for _, want := range []string{"loaded the serving certificate", "not_after=", "dns_names=", "SIGHUP"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log does not mention %q:\n%s", want, logs)
		}
	}
}

func syscallHUP(t *testing.T) {
	t.Helper()
	p, err := os.FindProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}

// servedSerial returns the serial number of the certificate the server
// presents to client.
func servedSerial(t *testing.T, client *http.Client, addr string) *big.Int {
	t.Helper()
	resp, err := client.Get("https://" + addr + "/ping")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.TLS.PeerCertificates[0].SerialNumber
}

func TestExpiringCertificateWarns(t *testing.T) {
	pki := newTestPKI(t)
	soon, err := certs.NewServingCert(pki.servingCA, certs.DevHosts, time.Now(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "tls.crt"), soon.CertPEM)
	writeFile(t, filepath.Join(dir, "tls.key"), soon.KeyPEM)
	_, logs, stop := startRun(t, "-tls-cert-file", filepath.Join(dir, "tls.crt"), "-tls-private-key-file", filepath.Join(dir, "tls.key"))
	defer stop()
	if !strings.Contains(logs.String(), "expires soon") {
		t.Errorf("no warning for a certificate that expires in a day:\n%s", logs)
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestMutualTLS(t *testing.T) {
	pki := newTestPKI(t)
	review := plumbingReviews(t)["v1-deployment-create"]
	dir := t.TempDir()
	serving := pki.serving(t)
	writeFile(t, filepath.Join(dir, "tls.crt"), serving.CertPEM)
	writeFile(t, filepath.Join(dir, "tls.key"), serving.KeyPEM)
	caVol := &secretVolume{dir: t.TempDir()}
	caVol.write(t, map[string][]byte{"ca.crt": pki.clientCA.CertPEM})
	addr, logs, stop := startRun(t,
		"-tls-cert-file", filepath.Join(dir, "tls.crt"), "-tls-private-key-file", filepath.Join(dir, "tls.key"),
		"-client-ca-file", caVol.path("ca.crt"), "-allowed-client-names", "kube-apiserver, webhook-client")
	defer stop()

	otherCA, err := certs.NewCA("some other CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	apiserver := newClientCert(t, pki.clientCA, "kube-apiserver")
	intruder := newClientCert(t, pki.clientCA, "intruder")
	foreign := newClientCert(t, otherCA, "kube-apiserver")
	servingAsClient := tls.Certificate{Certificate: [][]byte{serving.Cert.Raw}, PrivateKey: serving.Key}

	tests := []struct {
		name     string
		cert     *tls.Certificate
		path     string
		wantCode int // 0: the handshake must fail
	}{
		{"no certificate, ping", nil, "/ping", 200},
		{"no certificate, validate", nil, "/validate", 401},
		{"no certificate, mutate", nil, "/mutate", 401},
		{"another CA", &foreign, "/validate", 0},
		{"another CA, ping", &foreign, "/ping", 0},
		{"a serving certificate as a client", &servingAsClient, "/validate", 0},
		{"name not allowed, validate", &intruder, "/validate", 403},
		{"name not allowed, mutate", &intruder, "/mutate", 403},
		{"allowed, validate", &apiserver, "/validate", 200},
		{"allowed, mutate", &apiserver, "/mutate", 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Kept alive, as the apiserver's connections are. On a
			// connection its client asked to close, net/http answers a
			// refusal without reading the body and closes it, and on a
			// busy machine the body's last bytes meet the reset: the
			// client sees "broken pipe", not the answer.
			client := pki.tlsClient(tc.cert, true)
			defer client.CloseIdleConnections()
			var resp *http.Response
			var err error
			if tc.path == "/ping" {
				resp, err = client.Get("https://" + addr + tc.path)
			} else {
				resp, err = client.Post("https://"+addr+tc.path, "application/json", bytes.NewReader(review))
			}
			if tc.wantCode == 0 {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("got HTTP %d, want the handshake refused", resp.StatusCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantCode {
				t.Fatalf("got HTTP %d %s, want %d", resp.StatusCode, body, tc.wantCode)
			}
			if tc.wantCode == 401 || tc.wantCode == 403 {
				if !bytes.Contains(body, []byte(`"kind":"Status"`)) {
					t.Errorf("refusal body %s is not a Status", body)
				}
			}
		})
	}
	for _, want := range []string{"without a client certificate", `common_name=intruder`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log does not record the refusal %q", want)
		}
	}

	// The client CA reloads like the serving pair: after the swap the other
	// CA's certificate is admitted and the first CA's is refused.
	caVol.write(t, map[string][]byte{"ca.crt": otherCA.CertPEM})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := pki.tlsClient(&foreign, false).Post("https://"+addr+"/validate", "application/json", bytes.NewReader(review))
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a certificate from the new client CA was not accepted within 10s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if resp, err := pki.tlsClient(&apiserver, false).Post("https://"+addr+"/validate", "application/json", bytes.NewReader(review)); err == nil {
		resp.Body.Close()
		t.Error("a certificate of the replaced client CA is still accepted")
	}
}

func TestProtocols(t *testing.T) {
	review := plumbingReviews(t)["v1-deployment-create"]
	pki := newTestPKI(t)
	dir := t.TempDir()
	serving := pki.serving(t)
	writeFile(t, filepath.Join(dir, "tls.crt"), serving.CertPEM)
	writeFile(t, filepath.Join(dir, "tls.key"), serving.KeyPEM)
	certFlags := []string{"-tls-cert-file", filepath.Join(dir, "tls.crt"), "-tls-private-key-file", filepath.Join(dir, "tls.key")}
	pool := x509.NewCertPool()
	pool.AddCert(pki.servingCA.Cert)

	handshake := func(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
		cfg.RootCAs = pool
		cfg.ServerName = "localhost"
		conn, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return tls.ConnectionState{}, err
		}
		defer conn.Close()
		return conn.ConnectionState(), nil
	}

	tests := []struct {
		name      string
		flags     []string
		client    *tls.Config
		wantProto string // "" : the handshake must fail
	}{
		{"TLS 1.1 refused", nil, &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}, ""},
		{"TLS 1.2 by default", nil, &tls.Config{MaxVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}, "http/1.1"},
		{"TLS 1.2 without ECDHE refused", nil, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_RSA_WITH_AES_128_GCM_SHA256}}, ""},
		{"TLS 1.2 refused with -tls-min-version 1.3", []string{"-tls-min-version", "1.3"}, &tls.Config{MaxVersion: tls.VersionTLS12}, ""},
		{"no h2 by default", nil, &tls.Config{NextProtos: []string{"h2", "http/1.1"}}, "http/1.1"},
		{"h2 with -http2", []string{"-http2"}, &tls.Config{NextProtos: []string{"h2", "http/1.1"}}, "h2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr, _, stop := startRun(t, append(certFlags, tc.flags...)...)
			defer stop()
			state, err := handshake(addr, tc.client)
			if tc.wantProto == "" {
				if err == nil {
					t.Fatalf("handshake succeeded with %s, want it refused", tls.VersionName(state.Version))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if state.NegotiatedProtocol != tc.wantProto {
				t.Errorf("negotiated %q, want %q", state.NegotiatedProtocol, tc.wantProto)
			}
		})
	}

	// With -http2 the server really speaks it: Go's client uses h2 when
	// offered, as the apiserver does for a loopback URL.
	addr, _, stop := startRun(t, append(certFlags, "-http2")...)
	defer stop()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	resp, err := client.Post("https://"+addr+"/validate", "application/json", bytes.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Errorf("got %s %d, want HTTP/2.0 200", resp.Proto, resp.StatusCode)
	}

	// A review larger than a stream's window, on a new connection: the
	// client may send 65,535 bytes before it has the server's settings
	// (RFC 9113, 6.9.2), as Go's does, and the apiserver's with it. A
	// smaller window reset such streams with FLOW_CONTROL_ERROR, which no
	// client retries: 18 of 20 failed.
	large := append(bytes.Clone(review), bytes.Repeat([]byte(" "), 60<<10)...) // JSON allows whitespace after the value
	failed := 0
	for range 20 {
		transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
		resp, err := (&http.Client{Transport: transport}).Post("https://"+addr+"/validate", "application/json", bytes.NewReader(large))
		switch {
		case err != nil:
			failed++
			t.Log(err)
		case resp.StatusCode != 200:
			failed++
			t.Logf("%s %d", resp.Proto, resp.StatusCode)
		}
		if err == nil {
			resp.Body.Close()
		}
		transport.CloseIdleConnections()
	}
	if failed > 0 {
		t.Errorf("%d of 20 reviews of %d bytes, each on a new HTTP/2 connection, failed: want none", failed, len(large))
	}
}

// TestGracefulShutdown ends run's context, as SIGTERM does, while a review
// is in flight.
func TestGracefulShutdown(t *testing.T) {
	review := plumbingReviews(t)["v1-deployment-create"]
	const delay = 500 * time.Millisecond
	addr, logs, stop := startRun(t, "-shutdown-delay", delay.String(), "-metrics-listen", "127.0.0.1:0")
	client := clientTrusting(t, filepath.Join("tls", "ca.crt"))
	// The metrics port answers /ping as the review port does: the
	// Deployment's probes use it.
	m := regexp.MustCompile(`msg="serving metrics" addr=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no metrics address in the log:\n%s", logs)
	}
	metricsPing := "http://" + m[1] + "/ping"
	if code := getStatus(t, metricsPing); code != http.StatusOK {
		t.Errorf("/ping on the metrics port while serving: got %d, want 200", code)
	}

	// A review whose body is still arriving when shutdown starts: as long
	// as the largest review, whitespace (which JSON allows around a value)
	// before and after it.
	inFlightBody, bodyWriter := io.Pipe()
	inFlight := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "https://"+addr+"/validate?timeout=10s", inFlightBody)
		req.ContentLength = body.MaxBytes
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("the review in flight failed: %v", err)
			inFlight <- nil
			return
		}
		inFlight <- resp
	}()
	// Until the listener has closed, the body is whitespace, which JSON
	// allows before the review, sent well above the pace the server
	// holds a body to (body.MinRate): paused instead, for however long a
	// loaded machine takes to close the listener, it would be cut as
	// stalled.
	listenerClosed := make(chan struct{})
	fillerDone := make(chan struct{})
	sent := 0
	go func() {
		defer close(fillerDone)
		chunk := bytes.Repeat([]byte{' '}, 64<<10)
		for ; sent+len(chunk) < body.MaxBytes-len(review); sent += len(chunk) {
			select {
			case <-listenerClosed:
				return
			case <-time.After(20 * time.Millisecond): // 3.2 MiB/s, for 2 s at most
			}
			if _, err := bodyWriter.Write(chunk); err != nil {
				return
			}
		}
	}()

	stopped := make(chan error, 1)
	shutdownAt := time.Now()
	go func() { stopped <- stop() }()

	// During the delay /ping fails, reviews are still answered, and every
	// answer closes its connection.
	waitForLog(t, logs, "closes its connection")
	resp, err := clientTrusting(t, filepath.Join("tls", "ca.crt")).Get("https://" + addr + "/ping")
	if err != nil {
		t.Fatalf("/ping during the shutdown delay: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/ping during the shutdown delay: got %d, want 503", resp.StatusCode)
	}
	if code := getStatus(t, metricsPing); code != http.StatusServiceUnavailable {
		t.Errorf("/ping on the metrics port during the shutdown delay: got %d, want 503", code)
	}
	// Liveness holds while readiness fails: kubelet restarts nothing that
	// drains.
	resp, err = clientTrusting(t, filepath.Join("tls", "ca.crt")).Get("https://" + addr + "/livez")
	if err != nil {
		t.Fatalf("/livez during the shutdown delay: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/livez during the shutdown delay: got %d, want 200", resp.StatusCode)
	}
	resp, err = client.Post("https://"+addr+"/mutate", "application/json", bytes.NewReader(review))
	if err != nil {
		t.Fatalf("a review during the shutdown delay failed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !resp.Close {
		t.Errorf("a review during the shutdown delay: got %d, close=%v; want 200 and Connection: close", resp.StatusCode, resp.Close)
	}

	// Finish the body only after the listener has closed.
	waitForLog(t, logs, "closing the listener")
	close(listenerClosed)
	<-fillerDone
	if _, err := bodyWriter.Write(review); err != nil {
		t.Fatal(err)
	}
	if _, err := bodyWriter.Write(bytes.Repeat([]byte{' '}, body.MaxBytes-sent-len(review))); err != nil {
		t.Fatal(err)
	}
	bodyWriter.Close()
	if r := <-inFlight; r == nil || r.StatusCode != 200 {
		t.Errorf("the review in flight did not complete with 200: %v", r)
	} else {
		r.Body.Close()
	}
	if err := <-stopped; err != nil {
		t.Errorf("run returned %v, want nil", err)
	}
	if took := time.Since(shutdownAt); took < delay {
		t.Errorf("run returned %s after shutdown began, before the %s delay", took, delay)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("the listener still accepts connections after run returned")
	}
}

// TestKeptAliveConnectionServedAfterTheDelay: a connection its client
// keeps idle through the shutdown delay, as the apiserver keeps its pool,
// stays open when the listener closes, and a review written into it then
// is answered, closing it: closing it idle would race with that review.
// Over HTTP/2, which Shutdown's GOAWAY ends without a race, shutdown
// waits for no idle connection.
func TestKeptAliveConnectionServedAfterTheDelay(t *testing.T) {
	review := plumbingReviews(t)["v1-deployment-create"]
	t.Run("HTTP/1.1", func(t *testing.T) {
		addr, logs, stop := startRun(t, "-shutdown-delay", "200ms")
		conn := dialTrusting(t, addr)
		answers := bufio.NewReader(conn)
		post := func() (*http.Response, error) {
			header := fmt.Sprintf("POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(review))
			if _, err := conn.Write(append([]byte(header), review...)); err != nil {
				return nil, err
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(answers, nil)
			if err != nil {
				return nil, err
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp, err
		}
		if resp, err := post(); err != nil || resp.StatusCode != 200 || resp.Close {
			t.Fatalf("a review before shutdown: %v, %v; want 200 and the connection kept alive", resp, err)
		}

		stopped := make(chan error, 1)
		go func() { stopped <- stop() }()
		waitForLog(t, logs, "closing the listener")
		time.Sleep(200 * time.Millisecond) // where Shutdown once closed idle connections
		resp, err := post()
		if err != nil {
			t.Fatalf("a review on a connection kept idle through the shutdown delay: %v, want it answered", err)
		}
		if resp.StatusCode != 200 || !resp.Close {
			t.Errorf("a review on a connection kept idle through the shutdown delay: got %d, close=%v; want 200 and Connection: close", resp.StatusCode, resp.Close)
		}
		if err := <-stopped; err != nil {
			t.Errorf("run returned %v, want nil", err)
		}
	})
	t.Run("HTTP/2", func(t *testing.T) {
		addr, _, stop := startRun(t, "-shutdown-delay", "200ms", "-http2")
		client := clientTrusting(t, filepath.Join("tls", "ca.crt"))
		client.Transport.(*http.Transport).ForceAttemptHTTP2 = true
		resp, err := client.Post("https://"+addr+"/validate", "application/json", bytes.NewReader(review))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("the review went over %s, want HTTP/2", resp.Proto)
		}
		began := time.Now()
		if err := stop(); err != nil {
			t.Errorf("run returned %v, want nil", err)
		}
		if took := time.Since(began); took >= keptAliveWait {
			t.Errorf("run returned %s after shutdown began, with an idle HTTP/2 connection: it waited as for HTTP/1", took)
		}
	})
}

// TestWaitLetGoHoldsALateAnswer: a connection whose request began before
// shutdown, answered only after the wait for kept-alive connections
// began, keeps its connection alive (its answer was decided while
// serving); the wait holds it until it has been idle keep, however late
// that is within atMost. One idle keep already is not waited for.
func TestWaitLetGoHoldsALateAnswer(t *testing.T) {
	const keep = 300 * time.Millisecond
	o := &openConns{idle: map[net.Conn]time.Time{}}
	late, lateClient := net.Pipe()
	defer late.Close()
	defer lateClient.Close()
	old, oldClient := net.Pipe()
	defer old.Close()
	defer oldClient.Close()
	o.track(late, http.StateNew)
	o.track(late, http.StateActive)
	o.track(old, http.StateNew)
	o.mu.Lock()
	o.idle[old] = time.Now().Add(-keep)
	o.mu.Unlock()
	go func() {
		time.Sleep(keep) // the answer comes as late as a connection is kept
		o.track(late, http.StateIdle)
	}()
	if open := o.waitLetGo(keep, time.Minute); open != 2 {
		t.Errorf("waitLetGo returned %d open, want the 2 it does not close", open)
	}
	o.mu.Lock()
	since := o.idle[late]
	o.mu.Unlock()
	if since.IsZero() || time.Since(since) < keep {
		t.Errorf("waitLetGo returned with the late connection active or idle only %s, want idle %s", time.Since(since), keep)
	}
}

func waitForLog(t *testing.T, logs *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("log never said %q:\n%s", want, logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestUnusedConnectionKept opens a connection that completes its handshake
// and sends nothing, as the apiserver's pool keeps one it dialed and did
// not need, and checks that the server keeps it open while serving others,
// then serves a review on it: closing it would race with that review.
func TestUnusedConnectionKept(t *testing.T) {
	addr, _, stop := startRun(t)
	defer stop()
	conn := dialTrusting(t, addr)

	// Meanwhile another client is served.
	client := clientTrusting(t, filepath.Join("tls", "ca.crt"))
	resp, err := client.Get("https://" + addr + "/ping")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/ping while an unused connection waits: got %d", resp.StatusCode)
	}

	// Longer than the apiserver takes to reuse a pooled connection under
	// load, and than the 1 s this timeout once was.
	time.Sleep(2 * time.Second)
	if _, err := io.WriteString(conn, "GET /ping HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		t.Fatalf("writing on the unused connection: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("a request on a connection unused for 2 s: %v, want it served", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/ping on the unused connection: got %d", resp.StatusCode)
	}
}

// dialTrusting opens a TLS connection to addr, trusting startRun's
// development CA, closed when the test ends.
func dialTrusting(t *testing.T, addr string) *tls.Conn {
	t.Helper()
	pool := x509.NewCertPool()
	ca, _ := os.ReadFile(filepath.Join("tls", "ca.crt"))
	pool.AppendCertsFromPEM(ca)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestUnreadBodyAnswered: a request that declares a body and sends none,
// on a route that answers without reading it, is answered and its
// connection closed by body.StallTimeout: net/http reads such a body before
// the answer, and without that bound held the answer, and the shutdown
// after it, forever. One such request open as shutdown begins does not
// keep run from returning nil.
func TestUnreadBodyAnswered(t *testing.T) {
	addr, _, stop := startRun(t)
	send := func(request string) net.Conn {
		conn := dialTrusting(t, addr)
		if _, err := io.WriteString(conn, request); err != nil {
			t.Fatal(err)
		}
		return conn
	}
	headerOnly := func(method, path, contentType string) string {
		return method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: " + contentType + "\r\nContent-Length: 100\r\n\r\n"
	}
	cases := []struct {
		request string
		want    int
		conn    net.Conn
	}{
		{request: headerOnly("POST", "/mutate", "text/plain"), want: http.StatusUnsupportedMediaType},
		{request: headerOnly("POST", "/validate?timeout=soon", "application/json"), want: http.StatusBadRequest},
		{request: headerOnly("GET", "/ping", "text/plain"), want: http.StatusOK},
		{request: headerOnly("POST", "/nowhere", "application/json"), want: http.StatusNotFound},
	}
	for i := range cases {
		cases[i].conn = send(cases[i].request)
	}
	for _, tc := range cases {
		// Far longer than body.StallTimeout, however loaded the machine.
		_ = tc.conn.SetReadDeadline(time.Now().Add(body.StallTimeout + time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(tc.conn), nil)
		if err != nil {
			t.Errorf("%.40q: %v, want an answer", tc.request, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want || !resp.Close {
			t.Errorf("%.40q: got %d, close=%v, want %d and the connection closed", tc.request, resp.StatusCode, resp.Close, tc.want)
		}
	}
	send(headerOnly("POST", "/mutate", "text/plain"))
	time.Sleep(100 * time.Millisecond) // its header read
	if err := stop(); err != nil {
		t.Errorf("run returned %v with a request's body unread as shutdown began, want nil", err)
	}
}

// TestClientRefusalsDoNotFloodTheLog: with -client-ca-file, each request
// without a client certificate is refused and counted, but at most
// refusalLogBurst of them are logged in a refusalLogInterval, and the next
// line says how many were not.
func TestClientRefusalsDoNotFloodTheLog(t *testing.T) {
	var logs bytes.Buffer
	m := newMetrics(nil)
	h := requireClient(slog.New(slog.NewTextHandler(&logs, nil)), m, nil, http.NotFoundHandler())
	const requests = 100
	for range requests {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/validate", nil))
		if w.Code != http.StatusUnauthorized {
			t.Fatalf("a request without a client certificate: got HTTP %d, want 401", w.Code)
		}
	}
	if got := strings.Count(logs.String(), "refused a request without a client certificate"); got != refusalLogBurst {
		t.Errorf("%d refusals logged %d lines, want %d:\n%s", requests, got, refusalLogBurst, &logs)
	}
	if got := scrape(t, m)[`webhook_client_certificates_refused_total{reason="missing"}`]; got != requests {
		t.Errorf("refusals counted: got %v, want %d", got, requests)
	}

	l := &logLimiter{burst: 2, interval: time.Minute}
	start := time.Now()
	for i, want := range []bool{true, true, false, false, false} {
		if ok, _ := l.allow(start); ok != want {
			t.Errorf("line %d in the first interval: allowed %v, want %v", i, ok, want)
		}
	}
	if ok, unlogged := l.allow(start.Add(time.Minute)); !ok || unlogged != 3 {
		t.Errorf("the first line of the next interval: allowed %v saying %d unlogged, want true and 3", ok, unlogged)
	}
}

// getStatus gets url over plain HTTP and returns the answer's status.
func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
