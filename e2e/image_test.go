package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// distrolessUser is the uid and gid of distroless's nonroot user, which the
// Dockerfile and the Deployment run as.
const distrolessUser = 65532

// TestImagePremise proves what the distroless image relies on, without a
// Docker engine: the binary built as the Dockerfile builds it runs from an
// empty, read-only root filesystem (no /etc, no shell, no CA store, no
// libc) as uid 65532, with only its certificates beside it, and serves.
// A policy that reads the cluster has, besides, what kubelet gives a Pod
// whose ServiceAccount token is mounted: the token and the cluster's CA in
// /var/run/secrets/kubernetes.io/serviceaccount, and
// KUBERNETES_SERVICE_HOST and _PORT; it reads the suite's apiserver with
// them.
func TestImagePremise(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root; CI runs as root")
	}
	chroot, err := exec.LookPath("chroot")
	if err != nil {
		t.Skip("no chroot command")
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "webhook")
	// The Dockerfile's build line, in the build context .dockerignore
	// makes: a package it leaves out would fail here as in docker build.
	if err := goBuild(dockerContext(t), bin, ".", "-trimpath", "-ldflags", "-s -w"); err != nil {
		t.Fatal(err)
	}
	checkStatic(t, bin)
	if fi, err := os.Stat(bin); err == nil {
		t.Logf("stripped static binary: %.1f MB", float64(fi.Size())/1e6)
	}

	// The certificates, as a Secret volume would mount them: readable by
	// the nonroot user, writable by no one it is.
	tlsDir := filepath.Join(root, "tls")
	if _, err := exec.Command(bin, "certs", "-dir", tlsDir, "-hosts", "127.0.0.1,localhost").Output(); err != nil {
		t.Fatalf("webhook certs: %v", err)
	}
	if err := os.Remove(filepath.Join(tlsDir, "ca.key")); err != nil { // never mounted into a pod
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(tlsDir, "tls.key"), distrolessUser, distrolessUser); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(tlsDir, "tls.key"), 0o400); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{tlsDir, root} {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = os.Chmod(root, 0o755); _ = os.Chmod(tlsDir, 0o755) })
	want := "tls/ tls/ca.crt tls/tls.crt tls/tls.key webhook"
	var env []string
	if r := apiserver.reader(t, webhookBinary); r != nil {
		env = mountServiceAccount(t, root, r.token)
		want = "tls/ tls/ca.crt tls/tls.crt tls/tls.key var/ var/run/ var/run/secrets/ var/run/secrets/kubernetes.io/ var/run/secrets/kubernetes.io/serviceaccount/ var/run/secrets/kubernetes.io/serviceaccount/ca.crt var/run/secrets/kubernetes.io/serviceaccount/token webhook"
	}
	if got := listTree(t, root); got != want {
		t.Fatalf("the root filesystem holds %q, want only the binary and its certificates", got)
	}

	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := startProcessEnv("webhook in an empty root", "/", env, chroot,
		fmt.Sprintf("--userspec=%d:%d", distrolessUser, distrolessUser), root,
		"/webhook", "-listen", addr, "-tls-cert-file", "/tls/tls.crt", "-tls-private-key-file", "/tls/tls.key")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			p.dumpLog(os.Stderr)
		}
	})
	ca, err := os.ReadFile(filepath.Join(tlsDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if err := waitFor(p, startTimeout, func() bool {
		resp, err := client.Get("https://" + addr + "/ping")
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200 && string(body) == "pong"
	}); err != nil {
		t.Fatal(err)
	}
	review, err := os.ReadFile(filepath.Join(repoRoot, "testdata", "plumbing", "v1-deployment-create.json"))
	if err != nil {
		t.Fatal(err)
	}
	var in struct {
		Request struct{ UID string } `json:"request"`
	}
	if err := json.Unmarshal(review, &in); err != nil {
		t.Fatal(err)
	}
	for _, route := range []string{"/mutate", "/validate"} {
		resp, err := client.Post("https://"+addr+route+"?timeout=5s", "application/json", bytes.NewReader(review))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out struct {
			Kind     string
			Response struct{ UID string }
		}
		if err := json.Unmarshal(body, &out); resp.StatusCode != 200 || err != nil || out.Kind != "AdmissionReview" || out.Response.UID != in.Request.UID {
			t.Errorf("%s: got %d %s, want 200 and an AdmissionReview answering uid %s", route, resp.StatusCode, body, in.Request.UID)
		}
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			t.Errorf("exited with %v after SIGTERM, want 0", p.err)
		}
	case <-time.After(startTimeout):
		t.Error("did not exit after SIGTERM")
	}
}

// dockerContext copies into a new directory the files of the repository
// that .dockerignore lets into the image's build context, as docker
// decides: patterns in order, the last one that matches a path or one of
// its parent directories wins, and "!" lets it in.
func dockerContext(t *testing.T) string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(text), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	included := func(rel string) bool {
		in := true
		for _, p := range patterns {
			pattern, letIn := strings.CutPrefix(p, "!")
			// The path itself, or a directory above it.
			for dir := rel; dir != "."; dir = filepath.Dir(dir) {
				if ok, _ := filepath.Match(pattern, dir); ok {
					in = letIn
					break
				}
			}
		}
		return in
	}
	dir := t.TempDir()
	err = filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			if d != nil && d.Name() == ".git" {
				return filepath.SkipDir
			}
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if !included(rel) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the build context: %s", listTree(t, dir))
	return dir
}

// checkStatic fails unless bin is an ELF executable with no interpreter and
// no shared libraries: it must run where there is no libc.
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the binary names a dynamic loader; build with CGO_ENABLED=0")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Fatalf("the binary needs shared libraries %v", libs)
	}
}

// listTree lists every path under root, directories with a trailing slash.
func listTree(t *testing.T, root string) string {
	t.Helper()
	var paths []string
	err := filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
		if err != nil || path == root {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if info.IsDir() {
			rel += "/"
		}
		paths = append(paths, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	return strings.Join(paths, " ")
}

// mountServiceAccount puts token and the suite's apiserver's CA where
// kubelet mounts a Pod's ServiceAccount in root, readable by the nonroot
// user, and returns the environment kubelet gives the Pod: where the
// apiserver is.
func mountServiceAccount(t *testing.T, root, token string) []string {
	t.Helper()
	dir := filepath.Join(root, "var", "run", "secrets", "kubernetes.io", "serviceaccount")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(apiserver.dir, "certs", "apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"token": []byte(token), "ca.crt": ca} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	host, port, err := net.SplitHostPort(strings.TrimPrefix(apiserver.config.Host, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	return []string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port}
}
