// Package e2e proves the webhook against a real kube-apiserver and etcd,
// built from the Go module proxy, driven with client-go as a user would.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	// etcdVersion is what e2e/etcd builds, shared by every kube-apiserver
	// version (versions_test.go chooses that one); the cached binaries are
	// named by their versions.
	etcdVersion = "v3.6.16"

	// adminToken is the static bearer token of the test's cluster-admin.
	adminToken = "e2e-admin-token"

	// startTimeout bounds how long etcd, the apiserver or a webhook may take
	// to become ready; they take a few seconds.
	startTimeout = 60 * time.Second

	// stopGrace is how long a process gets after SIGTERM before SIGKILL:
	// the apiserver can linger in its graceful shutdown.
	stopGrace = 5 * time.Second
)

// The suite shares one etcd and one apiserver; each test registers its own
// webhooks in its own namespace.
var (
	repoRoot      string // the webhook's repository
	webhookBinary string // built from repoRoot for this run
	apiserver     *apiServer
	workDir       string // this run's scratch, removed at the end
	etcdURL       string // for a second apiserver of a test's own
	kubeAPIServer string // the binary
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) (code int) {
	var err error
	if workDir, err = os.MkdirTemp("", "webhook-e2e-"); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(workDir)
	var procs []*process
	defer func() {
		// Stop in reverse order, and show every log when anything failed.
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop()
		}
		if code != 0 {
			for _, p := range procs {
				p.dumpLog(os.Stderr)
			}
		}
	}()

	if repoRoot, err = filepath.Abs(".."); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	webhookBinary = filepath.Join(workDir, "webhook")
	if err := goBuild(repoRoot, webhookBinary, "."); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building the webhook:", err)
		return 1
	}
	etcdBin, kubeBin, err := cachedBinaries()
	kubeAPIServer = kubeBin
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	etcd, err := startEtcd(etcdBin)
	if etcd != nil {
		procs = append(procs, etcd.process)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	etcdURL = etcd.clientURL
	apiserver, err = startAPIServer(kubeBin, etcd.clientURL, filepath.Join(workDir, "apiserver"), nil)
	if apiserver != nil {
		procs = append(procs, apiserver.process)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return m.Run()
}

// cachedBinaries returns etcd and kube-apiserver, building each once per
// version into the user's cache directory so only a cold run pays.
func cachedBinaries() (etcdBin, kubeBin string, err error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", "", err
	}
	if err := chooseKubernetes(); err != nil {
		return "", "", err
	}
	fmt.Fprintf(os.Stderr, "e2e: kube-apiserver %s (e2e/%s), etcd %s\n", kubernetesVersion, kubeModule, etcdVersion)
	dir := filepath.Join(cache, "webhook-e2e")
	etcdBin = filepath.Join(dir, "etcd-"+etcdVersion)
	kubeBin = filepath.Join(dir, "kube-apiserver-"+kubernetesVersion)
	builds := []struct {
		bin, module, pkg string
		ldflags          string
	}{
		{etcdBin, "etcd", "go.etcd.io/etcd/server/v3", ""},
		{kubeBin, kubeModule, "k8s.io/kubernetes/cmd/kube-apiserver",
			"-X k8s.io/component-base/version.gitVersion=" + kubernetesVersion +
				" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=" + strings.Split(kubernetesVersion, ".")[1]},
	}
	for _, b := range builds {
		if _, err := os.Stat(b.bin); err == nil {
			continue
		}
		fmt.Fprintf(os.Stderr, "e2e: building %s into %s (once per version; kube-apiserver takes about 5 minutes)\n", b.pkg, dir)
		start := time.Now()
		tmp := b.bin + ".tmp"
		if err := goBuild(filepath.Join(repoRoot, "e2e", b.module), tmp, b.pkg, "-ldflags", "-s -w "+b.ldflags); err != nil {
			return "", "", fmt.Errorf("building %s: %w", b.pkg, err)
		}
		if err := os.Rename(tmp, b.bin); err != nil {
			return "", "", err
		}
		fmt.Fprintf(os.Stderr, "e2e: built %s in %s\n", filepath.Base(b.bin), time.Since(start).Round(time.Second))
	}
	return etcdBin, kubeBin, nil
}

func goBuild(dir, out, pkg string, flags ...string) error {
	args := append([]string{"build", "-o", out}, flags...)
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	output, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w\n%s", err, output)
	}
	return nil
}

// process is a started server with its log kept in memory.
type process struct {
	name string
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
	err  error // valid once done is closed
	once sync.Once
}

func startProcess(name, dir string, bin string, args ...string) (*process, error) {
	return startProcessEnv(name, dir, nil, bin, args...)
}

// startProcessEnv is startProcess with env added to this process's
// environment.
func startProcessEnv(name, dir string, env []string, bin string, args ...string) (*process, error) {
	p := &process{name: name, log: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	// Its own process group, so a stop reaches anything it started.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

// signal sends sig to the process without waiting.
func (p *process) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

// stop ends the process: SIGTERM, then SIGKILL to its group after stopGrace.
func (p *process) stop() {
	p.once.Do(func() {
		p.signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopGrace):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) dumpLog(w io.Writer) {
	fmt.Fprintf(w, "\n===== log of %s =====\n%s===== end of %s =====\n", p.name, p.log.String(), p.name)
}

// syncBuffer is a bytes.Buffer safe for a process writing and a test reading.
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

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

type etcdServer struct {
	*process
	clientURL string
}

func startEtcd(bin string) (*etcdServer, error) {
	clientPort, err := freePort()
	if err != nil {
		return nil, err
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	dir := filepath.Join(workDir, "etcd")
	p, err := startProcess("etcd", workDir, bin,
		"--data-dir", dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "default="+peer,
		"--log-level", "warn",
	)
	if err != nil {
		return nil, err
	}
	e := &etcdServer{process: p, clientURL: client}
	return e, waitFor(p, startTimeout, func() bool {
		resp, err := http.Get(client + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// apiServer is a running kube-apiserver and a cluster-admin's view of it.
type apiServer struct {
	*process
	config  *rest.Config
	client  kubernetes.Interface
	dynamic dynamic.Interface // for objects whose kind the test does not know
}

// startAPIServer starts kube-apiserver against etcdURL, keeping its files in
// dir. extraArgs are added last (e.g. --admission-control-config-file).
// Authorization is RBAC unless extraArgs has --authorization-config, which
// the apiserver refuses beside --authorization-mode.
func startAPIServer(bin, etcdURL, dir string, extraArgs []string) (*apiServer, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	saKey := filepath.Join(dir, "sa.key")
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return nil, err
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(adminToken+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return nil, err
	}
	args := append([]string{
		"--etcd-servers", etcdURL,
		"--etcd-prefix", "/" + filepath.Base(dir),
		"--secure-port", fmt.Sprint(port),
		"--bind-address", "127.0.0.1",
		"--cert-dir", filepath.Join(dir, "certs"),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", saKey,
		"--service-account-signing-key-file", saKey,
		"--token-auth-file", tokens,
		"--service-cluster-ip-range", "10.96.0.0/16",
	}, extraArgs...)
	if !slices.Contains(extraArgs, "--authorization-config") {
		args = append(args, "--authorization-mode", "RBAC")
	}
	p, err := startProcess("kube-apiserver "+filepath.Base(dir), dir, bin, args...)
	if err != nil {
		return nil, err
	}
	cfg := &rest.Config{
		Host:        fmt.Sprintf("https://127.0.0.1:%d", port),
		BearerToken: adminToken,
		// The apiserver makes its own self-signed serving certificate;
		// what is under test is the webhook's TLS, not this one.
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             -1, // no client-side rate limit in a test
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return &apiServer{process: p}, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return &apiServer{process: p}, err
	}
	a := &apiServer{process: p, config: cfg, client: client, dynamic: dyn}
	return a, waitFor(p, startTimeout, func() bool {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		return err == nil && string(body) == "ok"
	})
}

// waitFor polls ready until it is true, the process exits or timeout passes.
func waitFor(p *process, timeout time.Duration, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("%s exited while starting: %v", p.name, p.err)
		}
		if ready() {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s was not ready within %s", p.name, timeout)
}

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

// logMark returns a position in the process's log, for logSince.
func (p *process) logMark() int { return len(p.log.String()) }

// logSince returns what the process logged after mark.
func (p *process) logSince(mark int) string { return p.log.String()[mark:] }
