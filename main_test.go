package main

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
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/example/webhook/certs"
)

func TestParseFlags(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		wantCert   string
		wantKey    string
		configured bool
		wantListen string
	}{
		// The development certificate: only this host trusts its CA.
		{name: "defaults", wantCert: "tls/tls.crt", wantKey: "tls/tls.key", wantListen: "localhost:8443"},
		{name: "development certificate, -listen given", args: []string{"-listen", ":9443"},
			wantCert: "tls/tls.crt", wantKey: "tls/tls.key", wantListen: ":9443"},
		{name: "certificate from the environment",
			env:      map[string]string{"TLS_CERT": "/certs/tls.crt", "TLS_KEY": "/certs/tls.key"},
			wantCert: "/certs/tls.crt", wantKey: "/certs/tls.key", configured: true, wantListen: ":8443"},
		{name: "flags win over the environment",
			args:     []string{"-tls-cert-file", "a.crt", "-tls-private-key-file", "a.key"},
			env:      map[string]string{"TLS_CERT": "/certs/tls.crt", "TLS_KEY": "/certs/tls.key"},
			wantCert: "a.crt", wantKey: "a.key", configured: true, wantListen: ":8443"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseServerFlags(tc.args, env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.certFile != tc.wantCert || cfg.keyFile != tc.wantKey || cfg.certConfigured != tc.configured || cfg.listen != tc.wantListen {
				t.Errorf("got cert %q key %q configured %v listen %q, want %q %q %v %q", cfg.certFile, cfg.keyFile, cfg.certConfigured, cfg.listen, tc.wantCert, tc.wantKey, tc.configured, tc.wantListen)
			}
		})
	}
}

// TestAddListFlag: a list flag's defaults are parsed when it is
// registered, so that one that does not parse stops the server with an
// error naming the flag and the default, instead of leaving the list
// empty and the rule off. Given on the command line, the flag replaces
// its defaults, and says which.
func TestAddListFlag(t *testing.T) {
	parseSmall := func(before []int, s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err == nil && n > 9 {
			err = fmt.Errorf("%d is not below 10", n)
		}
		return n, err
	}
	var list []int
	err := addListFlag(flag.NewFlagSet("test", flag.ContinueOnError), "small", "", &list, parseSmall, "1", "12")
	if err == nil || !strings.Contains(err.Error(), "-small") || !strings.Contains(err.Error(), `"12"`) || !strings.Contains(err.Error(), "not below 10") {
		t.Errorf("a default that does not parse: got %v, want an error naming -small, the default and why", err)
	}

	flags := flag.NewFlagSet("test", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	if err := addListFlag(flags, "small", "", &list, parseSmall, "1", "2"); err != nil {
		t.Fatal(err)
	}
	replaced := flags.Lookup("small").Value.(interface{ defaultsReplaced() []string })
	if err := flags.Parse(nil); err != nil || !reflect.DeepEqual(list, []int{1, 2}) || replaced.defaultsReplaced() != nil {
		t.Errorf("no flag: got %v, %v, replaced %v; want the defaults [1 2], none replaced", list, err, replaced.defaultsReplaced())
	}
	if err := flags.Parse([]string{"-small", "3", "-small", "4"}); err != nil || !reflect.DeepEqual(list, []int{3, 4}) {
		t.Errorf("-small 3 -small 4: got %v, %v; want [3 4] in place of the defaults", list, err)
	}
	if got := replaced.defaultsReplaced(); !reflect.DeepEqual(got, []string{"1", "2"}) {
		t.Errorf("the defaults replaced: got %q, want [1 2]", got)
	}
	if err := flags.Parse([]string{"-small", "10"}); err == nil || !strings.Contains(err.Error(), "not below 10") {
		t.Errorf("-small 10: got %v, want the parser's error", err)
	}
}

// TestDefaultMemoryLimit: without GOMEMLIMIT the server sets a soft memory
// limit of its own that grows with -max-inflight-bytes; with it, the
// runtime's own stands.
func TestDefaultMemoryLimit(t *testing.T) {
	tests := []struct {
		gomemlimit string
		args       []string
		want       int64
	}{
		{"", nil, 40 << 20},
		{"", []string{"-max-inflight-bytes", "16777216"}, 48 << 20},
		{"100MiB", nil, 0},
		{"off", nil, 0},
	}
	for _, tc := range tests {
		getenv := func(key string) string {
			if key == "GOMEMLIMIT" {
				return tc.gomemlimit
			}
			return ""
		}
		cfg, err := parseServerFlags(tc.args, getenv)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.memoryLimit != tc.want {
			t.Errorf("GOMEMLIMIT=%q %v: memory limit %d, want %d", tc.gomemlimit, tc.args, cfg.memoryLimit, tc.want)
		}
	}
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want []string // parts of what is printed and returned
	}{
		{[]string{"-nope"}, []string{"-nope"}},
		{[]string{"-tls-min-version", "1.1"}, []string{"-tls-min-version", "1.2 or 1.3"}},
		{[]string{"-log-format", "xml"}, []string{"-log-format", "text or json"}},
		{[]string{"-shutdown-delay", "-1s"}, []string{"-shutdown-delay"}},
		{[]string{"-allowed-client-names", "kube-apiserver"}, []string{"-allowed-client-names needs -client-ca-file"}},
		{[]string{"-client-ca-file", "/does/not/exist"}, []string{"-client-ca-file", "/does/not/exist"}},
		{[]string{"stray"}, []string{`unexpected argument "stray"`}},
	}
	// A policy that reads the cluster is given credentials, so that what
	// is refused is the flag under test. The port to listen on is one this
	// test holds: a configuration that cannot serve must fail before it
	// listens, or it would fail on the port, not the flag (without -listen,
	// on localhost:8443 whenever a copier's `go run .` holds it).
	credentials, _ := testCredentials(t)
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " ")[:min(40, len(strings.Join(tc.args, " ")))], func(t *testing.T) {
			t.Chdir(t.TempDir())
			var stderr bytes.Buffer
			args := append(append(slices.Clone(credentials), "-listen", held.Addr().String()), tc.args...)
			err := run(context.Background(), args, testEnv, nil, io.Discard, &stderr)
			if err == nil {
				t.Fatal("got no error, want one")
			}
			got := err.Error() + "\n" + stderr.String()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("got %.300q…, want it to mention %q", got, w)
				}
			}
			if _, err := os.Stat("tls"); err == nil {
				t.Error("a configuration that cannot serve left a development certificate in tls/")
			}
		})
	}
	if err := run(context.Background(), []string{"-h"}, testEnv, nil, io.Discard, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: got %v, want flag.ErrHelp (exit 0)", err)
	}
}

// TestVersion: -version prints the version, and serves nothing.
func TestVersion(t *testing.T) {
	t.Chdir(t.TempDir())
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"-version"}, testEnv, nil, &stdout, io.Discard); err != nil {
		t.Fatalf("-version: %v", err)
	}
	if got := stdout.String(); !strings.HasPrefix(got, "webhook ") || strings.TrimSpace(got) == "webhook" {
		t.Errorf("-version printed %q, want \"webhook VERSION\"", got)
	}
	if _, err := os.Stat("tls"); err == nil {
		t.Error("-version made a development certificate")
	}
}

// TestDoctorSubcommand checks that run hands `webhook doctor` to package
// doctor, whose tests cover it, and returns the exit status main gives.
// TestCertsSubcommand: `webhook certs` runs package certs (its own tests
// say what it makes).
func TestCertsSubcommand(t *testing.T) {
	dir := t.TempDir()
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"certs", "-dir", dir, "-hosts", "127.0.0.1"}, testEnv, nil, &stdout, io.Discard); err != nil {
		t.Fatalf("webhook certs: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tls.crt")); err != nil || stdout.Len() == 0 {
		t.Errorf("webhook certs: %v, printed %q; want tls.crt made and the caBundle printed", err, stdout.String())
	}
}

// TestPartCommands: each part's command is run by its name, its help is
// output (`webhook NAME -h`, `webhook help NAME`), exit 0, and `webhook
// help` lists it; an unknown flag of it exits 2, said once. What each does
// is its package's to test.
func TestPartCommands(t *testing.T) {
	var p policy
	var listing bytes.Buffer
	if err := run(context.Background(), []string{"help"}, testEnv, nil, &listing, io.Discard); err != nil {
		t.Fatalf("webhook help: %v", err)
	}
	for _, pt := range parts(&p) {
		if pt.Command == nil {
			continue
		}
		if !strings.Contains(listing.String(), "webhook "+pt.Usage) {
			t.Errorf("webhook help: %q, want it to list %q", listing.String(), pt.Usage)
		}
		for _, args := range [][]string{{pt.Name, "-h"}, {"help", pt.Name}} {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), args, testEnv, nil, &stdout, &stderr)
			if exitStatus(err, &stderr) != 0 || stderr.Len() > 0 || !strings.Contains(stdout.String(), "-") {
				t.Errorf("webhook %q: got %v, stdout %.200q, stderr %q; want its flags on stdout, exit 0, nothing on stderr", args, err, stdout.String(), stderr.String())
			}
		}
		var stderr bytes.Buffer
		err := run(context.Background(), []string{pt.Name, "-nosuch"}, testEnv, nil, io.Discard, &stderr)
		const once = "flag provided but not defined: -nosuch"
		if code := exitStatus(err, &stderr); code != 2 || strings.Count(stderr.String(), once) != 1 {
			t.Errorf("webhook %s -nosuch: exit %d, stderr:\n%s\nwant exit 2 and %q said once", pt.Name, code, stderr.String(), once)
		}
	}
}

// syncBuffer is a bytes.Buffer that the server writes and the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var servingAddr = regexp.MustCompile(`msg=serving addr=(\S+)`)

// viewSynced is in the line each view of the cluster logs once synced.
const viewSynced = "the view of the cluster is synced"

// startRun runs the program in a new empty directory, as a new user's first
// `go run .` does, and returns its address once it serves.
func startRun(t *testing.T, args ...string) (addr string, logs *syncBuffer, stop func() error) {
	t.Helper()
	t.Chdir(t.TempDir())
	logs = &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	credentials, views := testCredentials(t)
	args = append(append([]string{"-listen", "127.0.0.1:0"}, credentials...), args...)
	go func() {
		done <- run(ctx, args, testEnv, nil, io.Discard, logs)
	}()
	stop = func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(shutdownTimeout + 5*time.Second):
			t.Fatal("run did not return after its context ended")
			return nil
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		// Ready once serving, and once every view of the cluster has synced.
		if m := servingAddr.FindStringSubmatch(logs.String()); m != nil && strings.Count(logs.String(), viewSynced) == views {
			return m[1], logs, stop
		}
		select {
		case err := <-done:
			t.Fatalf("run returned %v before serving; log:\n%s", err, logs)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("run did not serve within 10s; log:\n%s", logs)
	return "", nil, nil
}

// clientTrusting returns a client that trusts the CA in caFile.
func clientTrusting(t *testing.T, caFile string) *http.Client {
	t.Helper()
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("%s holds no certificate", caFile)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// TestRunFirstCommand is a new user's first command: `go run .` in a clean
// checkout makes a development certificate, serves, and answers curl.
func TestRunFirstCommand(t *testing.T) {
	review := plumbingReviews(t)["v1-deployment-create"]
	addr, logs, stop := startRun(t)
	port := addr[strings.LastIndex(addr, ":"):]
	client := clientTrusting(t, filepath.Join("tls", "ca.crt"))

	for _, host := range []string{"localhost", "127.0.0.1"} {
		resp, err := client.Get("https://" + host + port + "/ping")
		if err != nil {
			t.Fatalf("GET /ping on %s: %v", host, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "pong" {
			t.Errorf("GET /ping on %s: got %d %q, want 200 pong", host, resp.StatusCode, body)
		}
	}
	for _, route := range []string{"/mutate", "/validate"} {
		resp, err := client.Post("https://localhost"+port+route+"?timeout=10s", "application/json", bytes.NewReader(review))
		if err != nil {
			t.Fatal(err)
		}
		checkReview(t, "POST "+route, decodeReviewIn(t, review), recorded(t, resp))
	}

	// /authorize is served only when asked for (-authorization).
	resp, err := client.Post("https://localhost"+port+"/authorize", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /authorize without -authorization: got %d, want 404", resp.StatusCode)
	}
	if !strings.Contains(logs.String(), "version=") {
		t.Errorf("the start-up log does not say the version:\n%s", logs)
	}

	for name, wantPerm := range map[string]os.FileMode{"ca.crt": 0o644, "tls.crt": 0o644, "tls.key": 0o600} {
		fi, err := os.Stat(filepath.Join("tls", name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != wantPerm {
			t.Errorf("tls/%s has mode %v, want %v", name, fi.Mode().Perm(), wantPerm)
		}
	}
	if n := strings.Count(logs.String(), "made a development CA"); n != 1 {
		t.Errorf("got %d log lines about the development certificate, want 1:\n%s", n, logs)
	}
	if err := stop(); err != nil {
		t.Errorf("run returned %v after its context ended, want nil", err)
	}
}

// TestRunKeepsExistingCertificate checks a second start reuses tls/ rather
// than minting a new CA that clients do not trust yet.
func TestRunKeepsExistingCertificate(t *testing.T) {
	_, _, stop := startRun(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(filepath.Join("tls", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	credentials, _ := testCredentials(t)
	args := append([]string{"-listen", "127.0.0.1:0"}, credentials...)
	go func() {
		done <- run(ctx, args, testEnv, nil, io.Discard, logs)
	}()
	waitForLog(t, logs, "msg=serving")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(filepath.Join("tls", "ca.crt"))
	if !bytes.Equal(first, second) || strings.Contains(logs.String(), "made a development CA") {
		t.Error("a second start replaced the existing development certificate")
	}
}

// TestRunRemakesExpiredDevelopmentCertificate: a development certificate
// that has expired is made anew at start-up, as a new user's `go run .`
// after DevValidity expects; an expired certificate of the user's own in
// tls/ is not replaced, and fails as it is.
func TestRunRemakesExpiredDevelopmentCertificate(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := certs.WriteDev("tls", time.Now().Add(-certs.DevValidity-time.Hour)); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	credentials, _ := testCredentials(t)
	go func() {
		done <- run(ctx, append([]string{"-listen", "127.0.0.1:0"}, credentials...), testEnv, nil, io.Discard, logs)
	}()
	waitForLog(t, logs, "msg=serving")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	served, err := tls.LoadX509KeyPair(filepath.Join("tls", "tls.crt"), filepath.Join("tls", "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	if !time.Now().Before(served.Leaf.NotAfter) || !strings.Contains(logs.String(), "expired: made anew") {
		t.Errorf("the certificate in tls/ expires %s; log:\n%s\nwant one made anew", served.Leaf.NotAfter, logs)
	}

	// A user's own, expired: kept, and refused as expired.
	ca, err := certs.NewCA("my CA", time.Now().Add(-48*time.Hour), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	mine, err := certs.NewServingCert(ca, certs.DevHosts, time.Now().Add(-48*time.Hour), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join("tls", "tls.crt"), mine.CertPEM)
	writeFile(t, filepath.Join("tls", "tls.key"), mine.KeyPEM)
	logs = &syncBuffer{}
	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		done <- run(ctx, append([]string{"-listen", "127.0.0.1:0"}, credentials...), testEnv, nil, io.Discard, logs)
	}()
	waitForLog(t, logs, "msg=serving")
	cancel()
	<-done
	if kept, _ := os.ReadFile(filepath.Join("tls", "tls.crt")); !bytes.Equal(kept, mine.CertPEM) {
		t.Error("a certificate of the user's own in tls/ was replaced")
	}
}

func TestRunConfiguredCertificateMissing(t *testing.T) {
	t.Chdir(t.TempDir())
	credentials, _ := testCredentials(t)
	err := run(context.Background(), append(credentials, "-listen", "127.0.0.1:0", "-tls-cert-file", "missing.crt", "-tls-private-key-file", "missing.key"), testEnv, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "missing.crt") {
		t.Errorf("got %v, want an error naming missing.crt", err)
	}
	if _, err := os.Stat("tls"); !errors.Is(err, os.ErrNotExist) {
		t.Error("a development certificate was made although one was configured")
	}
}

// TestJSONLogs checks -log-format json: every line, from start-up to
// shutdown, is one JSON object an aggregator can parse.
func TestJSONLogs(t *testing.T) {
	review := plumbingReviews(t)["v1-deployment-create"]
	addr, logs, stop := startRunJSON(t)
	client := clientTrusting(t, filepath.Join("tls", "ca.crt"))
	resp, err := client.Post("https://"+addr+"/validate", "application/json", bytes.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var entry struct {
			Msg    string
			Routes []string
		}
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		msgs = append(msgs, entry.Msg)
		// The routes served, which the parts add to.
		if entry.Msg == "serving" && !slices.Contains(entry.Routes, "/mutate") {
			t.Errorf("the serving line has routes %q, want /mutate among them: %s", entry.Routes, line)
		}
	}
	for _, want := range []string{"loaded the serving certificate", "serving", "review", "stopped"} {
		if !slices.Contains(msgs, want) {
			t.Errorf("no %q line among %q", want, msgs)
		}
	}
}

// startRunJSON is startRun with -log-format json, whose serving line is
// found by its JSON form.
func startRunJSON(t *testing.T) (string, *syncBuffer, func() error) {
	t.Helper()
	t.Chdir(t.TempDir())
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	credentials, views := testCredentials(t)
	args := append([]string{"-listen", "127.0.0.1:0", "-log-format", "json"}, credentials...)
	go func() {
		done <- run(ctx, args, testEnv, nil, io.Discard, logs)
	}()
	addrRE := regexp.MustCompile(`"msg":"serving","addr":"([^"]+)"`)
	for i := 0; i < 1000; i++ {
		if m := addrRE.FindStringSubmatch(logs.String()); m != nil && strings.Count(logs.String(), viewSynced) == views {
			return m[1], logs, func() error { cancel(); return <-done }
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	t.Fatalf("no JSON serving line:\n%s", logs)
	return "", nil, nil
}

// testEnv is the environment of the servers the tests run: GOMEMLIMIT=off,
// as the memory limit a server sets is its process's, and a test binary
// holds many servers and the race detector's shadow memory.
func testEnv(key string) string {
	if key == "GOMEMLIMIT" {
		return "off"
	}
	return ""
}

// TestUsageExitStatus: a command line that cannot run exits 2, whichever
// command it is for, as package flag's own errors do; -h and help exit 0,
// listing the commands.
func TestUsageExitStatus(t *testing.T) {
	for _, args := range [][]string{
		{"-no-such-flag"}, {"-tls-min-version", "1.1"}, {"stray"},
		{"certs"}, {"certs", "-no-such-flag"}, {"certs", "-hosts", "a", "-service", "b"},
	} {
		t.Chdir(t.TempDir())
		err := run(context.Background(), args, testEnv, nil, io.Discard, io.Discard)
		var exit interface{ ExitCode() int }
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("webhook %q: got %v, want exit status 2", args, err)
		}
	}
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"help"}, testEnv, nil, &stdout, io.Discard); err != nil || !strings.Contains(stdout.String(), "webhook certs [flags]") {
		t.Errorf("webhook help: got %v, %q; want the commands", err, stdout.String())
	}
}

// TestHelpIsOutput: help that was asked for (-h, help COMMAND) is written
// to stdout, so that `webhook review -h | less` pages it, and exits 0;
// nothing goes to stderr.
func TestHelpIsOutput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-h"}, []string{"webhook certs [flags]", "-listen"}},
		{[]string{"--help"}, []string{"webhook certs [flags]", "-listen"}},
		{[]string{"certs", "-h"}, []string{"-ca-validity"}},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tc.args, testEnv, nil, &stdout, &stderr)
		if exitStatus(err, &stderr) != 0 || stderr.Len() > 0 {
			t.Errorf("webhook %q: got %v, stderr %q; want exit 0 and nothing on stderr", tc.args, err, stderr.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(stdout.String(), w) {
				t.Errorf("webhook %q: stdout %.200q…, want it to name %s", tc.args, stdout.String(), w)
			}
		}
	}
}

// TestCommandEdges: the edges a new user meets, each said once, with the
// exit status the docs give (2 for bad usage).
func TestCommandEdges(t *testing.T) {
	credentials, _ := testCredentials(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		// once is said exactly once on stderr, what main prints included.
		once string
	}{
		{"help of no command", []string{"help", "nosuch"}, 2, "no such command"},
		{"no such command", []string{"nosuch"}, 2, `no such command "nosuch"`},
		{"an unknown flag", append(slices.Clone(credentials), "-nosuch"), 2, "flag provided but not defined: -nosuch"},
		{"an unknown flag of certs", []string{"certs", "-nosuch"}, 2, "flag provided but not defined: -nosuch"},
		{"a port out of range", append(slices.Clone(credentials), "-listen", ":99999"), 2, `-listen ":99999"`},
		{"a metrics port out of range", append(slices.Clone(credentials), "-listen", "127.0.0.1:0", "-metrics-listen", "localhost:70000"), 2, `-metrics-listen "localhost:70000"`},
		{"a listen address without a port", append(slices.Clone(credentials), "-listen", "localhost"), 2, `-listen "localhost"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Chdir(t.TempDir())
			var stderr bytes.Buffer
			err := run(context.Background(), tc.args, testEnv, nil, io.Discard, &stderr)
			code := exitStatus(err, &stderr)
			if code != tc.code || strings.Count(stderr.String(), tc.once) != 1 {
				t.Errorf("webhook %q: exit %d, stderr:\n%s\nwant exit %d and %q said once", tc.args, code, stderr.String(), tc.code, tc.once)
			}
		})
	}
}

// parseServerFlags is parseFlags as run calls it: the policy's flags and
// every part's.
func parseServerFlags(args []string, getenv func(string) string) (config, error) {
	var p policy
	return parseFlags(args, getenv, io.Discard, &p, parts(&p))
}
