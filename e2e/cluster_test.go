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
	"k8s.io/client-go/restmapper"
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

	// serviceClusterIPRange is where the apiserver gives Services their
	// ClusterIPs: loopback addresses, apart from 127.0.0.0/16, where the
	// tests' servers and clients are.
	serviceClusterIPRange = "127.50.0.0/16"
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
	etcdBinary    string // the binary

	// suiteCleanups run when the suite ends, last first: what a test
	// started once for every test (theNode).
	suiteCleanups []func(failed bool)
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
		// What tests started for the whole suite (the node), then the
		// suite's own processes in reverse order; every log when anything
		// failed.
		for i := len(suiteCleanups) - 1; i >= 0; i-- {
			suiteCleanups[i](code != 0)
		}
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
	etcdBinary = etcdBin
	etcd, err := startEtcd(etcdBin, filepath.Join(workDir, "etcd"))
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
		if err := buildOnce(b.bin, func(tmp string) error {
			if err := enoughTimeToBuild(); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "e2e: building %s into %s (once per version; kube-apiserver takes about 5 minutes)\n", b.pkg, dir)
			start := time.Now()
			if err := goBuild(filepath.Join(repoRoot, "e2e", b.module), tmp, b.pkg, "-ldflags", "-s -w "+b.ldflags); err != nil {
				return fmt.Errorf("building %s: %w", b.pkg, err)
			}
			fmt.Fprintf(os.Stderr, "e2e: built %s in %s\n", filepath.Base(b.bin), time.Since(start).Round(time.Second))
			return nil
		}); err != nil {
			return "", "", err
		}
	}
	return etcdBin, kubeBin, nil
}

// enoughTimeToBuild fails at once when the run's -timeout cannot fit a
// cold build of kube-apiserver: go test's default of 10 minutes ends the
// run in the middle of it, and the next run starts the build again.
func enoughTimeToBuild() error {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return nil
	}
	if d, err := time.ParseDuration(f.Value.String()); err == nil && d > 0 && d < 25*time.Minute {
		return fmt.Errorf("this run's -timeout %s is too short for the first run's build of kube-apiserver and the node (up to 15 minutes on 2 cores): use make e2e, or go test -timeout 40m", d)
	}
	return nil
}

// buildOnce makes bin with build, unless it exists, once for every run on
// the machine: two runs started together (two clones, or CI beside a
// developer) share the cache directory. Each takes an exclusive lock on
// bin.lock while it looks and builds, so the second waits for the first's
// binary instead of building its own; build writes to a file of this run's
// own, renamed into place once whole, so no run ever starts half a
// binary. The kernel drops the lock if the process dies.
func buildOnce(bin string, build func(tmp string) error) error {
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: another run is building %s; waiting for it\n", filepath.Base(bin))
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			return fmt.Errorf("locking %s: %w", lock.Name(), err)
		}
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(bin), filepath.Base(bin)+".*.tmp")
	if err != nil {
		return err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := build(tmp.Name()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), bin)
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
	// Its own process group, so a stop reaches anything it started; and
	// killed with the test binary, which a panicking test ends before
	// any cleanup runs (etcd and kube-apiserver were left running).
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
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

// handedOut are the ports freePort has returned in this run.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freePort returns a loopback port that was free a moment ago and that it
// has not returned before in this run: the kernel may hand a closed port
// out again at once. Another socket can still take it before the process
// it is for binds it: startEtcd and startAPIServer then start again on
// another (startRetrying); a webhook the tests start needs no port chosen
// for it (startWebhook).
func freePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
}

// portAttempts is how many times a server is started on fresh ports when
// one it was given was taken in between.
const portAttempts = 5

// startRetrying starts a server with start, on ports it picks with pick,
// again on others when it exits saying an address was in use. A failure
// names the ports and what held them.
func startRetrying[S any](name string, pick func() (int, error), start func(pick func() (int, error)) (S, *process, error)) (S, error) {
	var last error
	for attempt := 1; attempt <= portAttempts; attempt++ {
		var ports []int
		picker := func() (int, error) {
			port, err := pick()
			ports = append(ports, port)
			return port, err
		}
		s, p, err := start(picker)
		if err == nil {
			return s, nil
		}
		if p == nil || !strings.Contains(p.log.String(), "address already in use") {
			return s, err
		}
		p.stop()
		var held []string
		for _, port := range ports {
			if h := portHolder(port); h != "" {
				held = append(held, fmt.Sprintf("%d (held by %s)", port, h))
			} else {
				held = append(held, fmt.Sprint(port))
			}
		}
		last = fmt.Errorf("%s could not bind one of its ports %s, taken after they were chosen: %w", name, strings.Join(held, ", "), err)
		fmt.Fprintf(os.Stderr, "e2e: %v; starting it again on other ports (attempt %d of %d)\n", last, attempt, portAttempts)
	}
	var zero S
	return zero, last
}

// portHolder names the process listening on a loopback port, from /proc,
// or returns "" when it cannot tell.
func portHolder(port int) string {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		raw, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(raw)) {
			f := strings.Fields(line)
			if len(f) > 9 && strings.HasSuffix(f[1], fmt.Sprintf(":%04X", port)) {
				inodes["socket:["+f[9]+"]"] = true
			}
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		if target, err := os.Readlink(fd); err == nil && inodes[target] {
			pid := strings.Split(fd, "/")[2]
			cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
			return fmt.Sprintf("pid %s, %s", pid, strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")))
		}
	}
	if len(inodes) > 0 {
		return "a socket of another user's process"
	}
	return ""
}

type etcdServer struct {
	*process
	clientURL string
}

// startEtcd starts etcd with its data in dataDir, on ports freePort picks.
func startEtcd(bin, dataDir string) (*etcdServer, error) {
	return startEtcdOn(bin, dataDir, freePort)
}

// startEtcdOn is startEtcd on ports pick picks.
func startEtcdOn(bin, dataDir string, pick func() (int, error)) (*etcdServer, error) {
	return startRetrying("etcd", pick, func(pick func() (int, error)) (*etcdServer, *process, error) {
		clientPort, err := pick()
		if err != nil {
			return nil, nil, err
		}
		peerPort, err := pick()
		if err != nil {
			return nil, nil, err
		}
		client := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
		peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
		// A fresh data directory each attempt: one begun with other ports
		// would not take these.
		if err := os.RemoveAll(dataDir); err != nil {
			return nil, nil, err
		}
		p, err := startProcess("etcd", filepath.Dir(dataDir), bin,
			"--data-dir", dataDir,
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "default="+peer,
			"--log-level", "warn",
		)
		if err != nil {
			return nil, nil, err
		}
		e := &etcdServer{process: p, clientURL: client}
		// A timeout of its own: a port taken by another socket may accept
		// and never answer.
		health := &http.Client{Timeout: time.Second}
		return e, p, waitFor(p, startTimeout, func() bool {
			resp, err := health.Get(client + "/health")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	})
}

// apiServer is a running kube-apiserver and a cluster-admin's view of it.
type apiServer struct {
	*process
	config  *rest.Config
	client  kubernetes.Interface
	dynamic dynamic.Interface // for objects whose kind the test does not know

	mapperOnce sync.Once
	mapper     *restmapper.DeferredDiscoveryRESTMapper // kinds to resources (mapping)

	usersMu sync.Mutex
	users   map[string]dynamic.Interface // impersonating clients (dynamicAs)

	dir       string             // its files: certs/apiserver.crt, its serving certificate
	reachesAt string             // the address at which it reaches the tests' own webhooks; "" is 127.0.0.1
	readersMu sync.Mutex         // guards readers
	readers   map[string]*reader // by webhook binary, how it reads the cluster (webhookCredentials)
}

// startAPIServer starts kube-apiserver against etcdURL, keeping its files in
// dir. extraArgs are added last (e.g. --admission-control-config-file).
// Authorization is RBAC unless extraArgs has --authorization-config, which
// the apiserver refuses beside --authorization-mode.
func startAPIServer(bin, etcdURL, dir string, extraArgs []string) (*apiServer, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return startRetrying("kube-apiserver "+filepath.Base(dir), freePort, func(pick func() (int, error)) (*apiServer, *process, error) {
		a, err := startAPIServerOn(bin, etcdURL, dir, extraArgs, pick)
		if a == nil {
			return a, nil, err
		}
		return a, a.process, err
	})
}

// startOwnAPIServer starts a kube-apiserver of a test's own, named name
// (its directory under workDir, and its etcd prefix), with extraArgs, on
// the suite's etcd. It is stopped when the test ends, its log shown if the
// test failed. The error is startAPIServer's: the apiserver exited, or was
// not ready in time; the apiServer is nil only when nothing started.
func startOwnAPIServer(t *testing.T, name string, extraArgs []string) (*apiServer, error) {
	t.Helper()
	a, err := startAPIServer(kubeAPIServer, etcdURL, filepath.Join(workDir, name), extraArgs)
	if a != nil {
		t.Cleanup(func() {
			a.stop()
			if t.Failed() {
				a.dumpLog(os.Stderr)
			}
		})
	}
	return a, err
}

// startAPIServerOn is one attempt of startAPIServer, on a port pick picks.
func startAPIServerOn(bin, etcdURL, dir string, extraArgs []string, pick func() (int, error)) (*apiServer, error) {
	port, err := pick()
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
		// Loopback ClusterIPs, which a test can listen on (Linux routes
		// all of 127/8 to lo): service_test.go plays kube-proxy on a
		// Service's, which the apiserver calls for a webhook registered
		// by service: (pkg/util/proxy ResolveCluster).
		"--service-cluster-ip-range", serviceClusterIPRange,
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
	a := &apiServer{process: p, config: cfg, client: client, dynamic: dyn, dir: dir}
	return a, waitFor(p, startTimeout, func() bool {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		return err == nil && string(body) == "ok"
	})
}

// testsAddress is the address a test's own webhook listens on for this
// apiserver to call it: loopback for the suite's, the machine's end of the
// link for the node's, which runs in a network namespace of its own.
func (a *apiServer) testsAddress() string {
	if a.reachesAt == "" {
		return "127.0.0.1"
	}
	return a.reachesAt
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

// TestTakenPortIsRetried: a port chosen for etcd and taken by another
// socket before etcd binds it, as can happen on a busy machine, does not
// fail the suite: etcd starts again on other ports, and the failed attempt
// names the port and what held it. Nor does freePort hand a port out twice.
func TestTakenPortIsRetried(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("freePort returned %d twice", port)
		}
		seen[port] = true
	}

	thief, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer thief.Close()
	taken := thief.Addr().(*net.TCPAddr).Port
	picks := 0
	pick := func() (int, error) {
		if picks++; picks == 1 {
			return taken, nil // what freePort returned before the thief took it
		}
		return freePort()
	}
	e, err := startEtcdOn(etcdBinary, filepath.Join(t.TempDir(), "etcd"), pick)
	if e != nil {
		defer e.stop()
	}
	if err != nil {
		t.Fatalf("etcd with its client port taken: %v, want it started on another", err)
	}
	if picks < 4 {
		t.Errorf("etcd started after %d ports were picked, want a second attempt (4 or more): was port %d free after all?", picks, taken)
	}
	if holder := portHolder(taken); !strings.Contains(holder, fmt.Sprint(os.Getpid())) {
		t.Errorf("portHolder(%d) = %q, want this test's process, pid %d", taken, holder, os.Getpid())
	}
}

// loadAverage is the machine's load over the last minute, for a figure's
// log line: what a timing was measured beside.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}
