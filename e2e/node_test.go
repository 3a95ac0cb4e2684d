package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The node: a cluster of the suite's own, on which kubelet runs the
// webhook's image as a user's cluster runs it. Everything it needs but the
// suite's tests lives in a network namespace the suite makes (whe2e-PID):
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy
// (iptables), containerd with runc and a CNI bridge, and kubelet. The
// suite reaches its apiserver over a veth pair, a /30 of nodeLinkPrefix;
// nothing in the namespace can reach further, as nothing is forwarded out
// of it. A second run on the machine makes a namespace of its own, so
// kube-proxy's rules, the bridge and the node's ports never meet.
const (
	// nodeName is the node's name, and its kubelet's hostname.
	nodeName = "node-0"
	// nodeAPIPort is the node's kube-apiserver's port, in its namespace.
	nodeAPIPort = 6443
	// nodePodCIDR is the Pods' addresses, on the bridge in the namespace.
	nodePodCIDR = "10.244.0.0/24"
	// nodeServiceCIDR is the ClusterIPs, which kube-proxy serves.
	nodeServiceCIDR = "10.96.0.0/24"
	// nodeLinkPrefix is where each run's veth pair takes a /30: the
	// machine's end, then the namespace's.
	nodeLinkPrefix = "10.201."
	// nodePauseImage is the sandbox image containerd starts in every Pod,
	// built here (ociimage -pause): images cannot be pulled.
	nodePauseImage = "localhost/webhook-e2e/pause:1"
	// nodeStartTimeout bounds the node's start once its binaries exist:
	// about 20 s here.
	nodeStartTimeout = 3 * time.Minute
	// nodeTools are the programs the node runs from the machine's
	// packages (make node-tools installs them).
	nodeTools = "containerd ctr runc iptables nsenter ip kubectl"
)

// nodeComponents are built from k8s.io/kubernetes of the suite's version,
// in one go build, and cached beside kube-apiserver.
var nodeComponents = []string{"kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy"}

// node is the node cluster: its apiserver as the cluster-admin sees it,
// and what the tests need of the node itself.
type node struct {
	*apiServer
	dir        string // its files: /tmp/whe2e-PID
	netns      string // the network namespace, whe2e-PID
	hostIP     string // the machine's end of the link
	nodeIP     string // the namespace's end: the apiserver's and the node's address
	kubeconfig string // the cluster-admin's, for kubectl
	containerd string // containerd's socket
	cgroup     string // every Pod's cgroups are below it, in each hierarchy
	podLogs    string // kubelet's /var/log/pods

	procs []*process // in start order
}

var (
	nodeOnce    sync.Once
	theNodeErr  error
	theNodeSkip string
	nodeCluster *node
)

// theNode returns the node, started on first use and stopped when the
// suite ends; a test that cannot have one skips (not root) or fails
// (a tool missing, or the node did not start), saying why.
func theNode(t *testing.T) *node {
	t.Helper()
	nodeOnce.Do(func() {
		if os.Geteuid() != 0 {
			theNodeSkip = "the node needs root: kubelet mounts volumes and containerd makes namespaces (CI runs as root)"
			return
		}
		var missing []string
		for _, tool := range strings.Fields(nodeTools) {
			if _, err := exec.LookPath(tool); err != nil {
				missing = append(missing, tool)
			}
		}
		if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
			missing = append(missing, "/usr/lib/cni/bridge")
		}
		if len(missing) > 0 {
			theNodeErr = fmt.Errorf("the node needs %s: run make node-tools (apt-get install containerd runc containernetworking-plugins iptables kubectl)", strings.Join(missing, ", "))
			return
		}
		start := time.Now()
		n, err := startNode()
		if n != nil {
			suiteCleanups = append(suiteCleanups, n.stop)
		}
		nodeCluster, theNodeErr = n, err
		if err == nil {
			fmt.Fprintf(os.Stderr, "e2e: the node started in %s (kubelet %s, containerd and runc of the machine's packages)\n", time.Since(start).Round(time.Second), kubernetesVersion)
		}
	})
	switch {
	case theNodeSkip != "":
		t.Skip(theNodeSkip)
	case theNodeErr != nil:
		t.Fatalf("the node: %v", theNodeErr)
	}
	return nodeCluster
}

// nodeBinaries builds kubelet, kube-controller-manager, kube-scheduler and
// kube-proxy once per version into the cache, and returns their directory.
func nodeBinaries() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "webhook-e2e", "node-"+kubernetesVersion)
	marker := filepath.Join(dir, ".complete")
	err = buildOnce(marker, func(tmp string) error {
		if err := enoughTimeToBuild(); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "e2e: building %s %s into %s (once per version: about 3 minutes after kube-apiserver)\n", strings.Join(nodeComponents, ", "), kubernetesVersion, dir)
		start := time.Now()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		build, err := os.MkdirTemp(dir, ".build-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(build)
		args := []string{"build", "-o", build + "/", "-ldflags", "-s -w " + versionLDFlags()}
		for _, c := range nodeComponents {
			args = append(args, "k8s.io/kubernetes/cmd/"+c)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = filepath.Join(repoRoot, "e2e", kubeModule)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building the node's binaries: %w\n%s", err, out)
		}
		for _, c := range nodeComponents {
			if err := os.Rename(filepath.Join(build, c), filepath.Join(dir, c)); err != nil {
				return err
			}
		}
		fmt.Fprintf(os.Stderr, "e2e: built the node's binaries in %s\n", time.Since(start).Round(time.Second))
		return os.WriteFile(tmp, nil, 0o644)
	})
	return dir, err
}

// versionLDFlags is what makes a binary of k8s.io/kubernetes report the
// suite's version rather than v0.0.0.
func versionLDFlags() string {
	return "-X k8s.io/component-base/version.gitVersion=" + kubernetesVersion +
		" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=" + strings.Split(kubernetesVersion, ".")[1]
}

// startNode starts the node. On an error, the node returned (when not
// nil) holds what did start, for stop.
func startNode() (*node, error) {
	sweepStaleNodes()
	bins, err := nodeBinaries()
	if err != nil {
		return nil, err
	}
	id := fmt.Sprintf("whe2e-%d", os.Getpid())
	n := &node{dir: filepath.Join(os.TempDir(), id), netns: id, cgroup: "/" + id}
	if err := os.RemoveAll(n.dir); err != nil {
		return nil, err
	}
	for _, d := range []string{"etcd", "apiserver", "cni", "cni-ipam", "containerd", "runc", "kubelet", "pod-logs", "images"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	n.podLogs = filepath.Join(n.dir, "pod-logs")
	if err := n.makeNetwork(); err != nil {
		return n, err
	}
	if err := n.makeCgroups(); err != nil {
		return n, err
	}
	images, err := n.buildImages()
	if err != nil {
		return n, err
	}

	// The control plane.
	etcd, err := n.start("node etcd", etcdBinary,
		"--data-dir", filepath.Join(n.dir, "etcd", "data"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "default=http://127.0.0.1:2380", "--log-level", "warn")
	if err != nil {
		return n, err
	}
	_ = etcd
	tokens, err := n.writeTokens()
	if err != nil {
		return n, err
	}
	saKey := filepath.Join(n.dir, "apiserver", "sa.key")
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return n, err
	}
	if err := os.WriteFile(saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return n, err
	}
	certDir := filepath.Join(n.dir, "apiserver", "certs")
	api, err := n.start("node kube-apiserver", kubeAPIServer,
		"--etcd-servers", "http://127.0.0.1:2379",
		"--secure-port", fmt.Sprint(nodeAPIPort),
		"--bind-address", "0.0.0.0",
		"--advertise-address", n.nodeIP,
		"--cert-dir", certDir,
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", saKey,
		"--service-account-signing-key-file", saKey,
		"--token-auth-file", tokens,
		"--service-cluster-ip-range", nodeServiceCIDR,
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		"--kubelet-preferred-address-types", "InternalIP",
	)
	if err != nil {
		return n, err
	}
	cfg := &rest.Config{
		Host:            fmt.Sprintf("https://%s", net.JoinHostPort(n.nodeIP, fmt.Sprint(nodeAPIPort))),
		BearerToken:     adminToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             -1,
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return n, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return n, err
	}
	n.apiServer = &apiServer{process: api, config: cfg, client: client, dynamic: dyn, dir: filepath.Join(n.dir, "apiserver"), reachesAt: n.hostIP}
	if err := waitFor(api, startTimeout, func() bool {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		return err == nil && string(body) == "ok"
	}); err != nil {
		return n, err
	}
	// The apiserver's own serving certificate, with the CA it made after
	// it: what every component, and the Pods' kube-root-ca.crt, trust.
	caFile := filepath.Join(certDir, "apiserver.crt")
	kubeconfig := func(name, token string) (string, error) {
		path := filepath.Join(n.dir, name+".kubeconfig")
		return path, os.WriteFile(path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: node
  cluster: {server: "%s", certificate-authority: "%s"}
users:
- name: %s
  user: {token: "%s"}
contexts:
- name: node
  context: {cluster: node, user: %s}
current-context: node
`, cfg.Host, caFile, name, token, name)), 0o600)
	}
	if n.kubeconfig, err = kubeconfig("admin", adminToken); err != nil {
		return n, err
	}
	controllerKubeconfig, err := kubeconfig("kube-controller-manager", nodeTokens["kube-controller-manager"].token)
	if err != nil {
		return n, err
	}
	if _, err := n.start("node kube-controller-manager", filepath.Join(bins, "kube-controller-manager"),
		"--kubeconfig", controllerKubeconfig,
		"--authentication-kubeconfig", controllerKubeconfig,
		"--authorization-kubeconfig", controllerKubeconfig,
		"--bind-address", "127.0.0.1",
		"--leader-elect=false",
		"--use-service-account-credentials",
		"--root-ca-file", caFile,
		"--service-account-private-key-file", saKey,
		"--cluster-name", "webhook-e2e",
	); err != nil {
		return n, err
	}
	schedulerKubeconfig, err := kubeconfig("kube-scheduler", nodeTokens["kube-scheduler"].token)
	if err != nil {
		return n, err
	}
	if _, err := n.start("node kube-scheduler", filepath.Join(bins, "kube-scheduler"),
		"--kubeconfig", schedulerKubeconfig,
		"--authentication-kubeconfig", schedulerKubeconfig,
		"--authorization-kubeconfig", schedulerKubeconfig,
		"--bind-address", "127.0.0.1",
		"--leader-elect=false",
	); err != nil {
		return n, err
	}

	// The node: containerd, the images, kubelet and kube-proxy.
	if err := n.startContainerd(); err != nil {
		return n, err
	}
	for _, image := range images {
		if err := n.importImage(image); err != nil {
			return n, err
		}
	}
	kubeletKubeconfig, err := kubeconfig("kubelet", nodeTokens["kubelet"].token)
	if err != nil {
		return n, err
	}
	kubeletConfig := filepath.Join(n.dir, "kubelet.yaml")
	if err := os.WriteFile(kubeletConfig, []byte(fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine is cgroup v1, which kubelet 1.35+ refuses unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
# The QoS tree and every Pod's cgroups below the run's own, which stop()
# empties, not the machine's root, which another run shares.
cgroupsPerQOS: true
cgroupRoot: %s
failSwapOn: false
containerRuntimeEndpoint: unix://%s
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
# Inside the node's namespace only the apiserver reaches kubelet.
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
# Secret and ConfigMap volumes are refreshed at each sync: 10 s rather
# than a minute, so that a renewed Secret reaches its Pods within the test.
syncFrequency: 10s
podLogsDir: %s
resolvConf: ""
evictionHard: {memory.available: 100Mi, nodefs.available: 1%%, imagefs.available: 1%%, nodefs.inodesFree: 1%%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, n.cgroup, n.containerd, n.nodeIP, n.podLogs)), 0o644); err != nil {
		return n, err
	}
	if _, err := n.start("node kubelet", filepath.Join(bins, "kubelet"),
		"--config", kubeletConfig,
		"--kubeconfig", kubeletKubeconfig,
		"--root-dir", filepath.Join(n.dir, "kubelet"),
		"--hostname-override", nodeName,
		"--node-ip", n.nodeIP,
	); err != nil {
		return n, err
	}
	proxyKubeconfig, err := kubeconfig("kube-proxy", nodeTokens["kube-proxy"].token)
	if err != nil {
		return n, err
	}
	proxyConfig := filepath.Join(n.dir, "kube-proxy.yaml")
	if err := os.WriteFile(proxyConfig, []byte(fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %s}
mode: iptables
hostnameOverride: %s
clusterCIDR: %s
# A network namespace's conntrack table is the machine's to size.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
`, proxyKubeconfig, nodeName, nodePodCIDR)), 0o644); err != nil {
		return n, err
	}
	if _, err := n.start("node kube-proxy", filepath.Join(bins, "kube-proxy"), "--config", proxyConfig); err != nil {
		return n, err
	}
	return n, n.waitReady()
}

// start starts a process in the node's network namespace, logging to
// memory as every process of the suite does.
func (n *node) start(name, bin string, args ...string) (*process, error) {
	p, err := startProcess(name, n.dir, "nsenter", append([]string{"--net=/var/run/netns/" + n.netns, "--", bin}, args...)...)
	if err != nil {
		return nil, err
	}
	n.procs = append(n.procs, p)
	// Give it a moment to fail on its flags.
	select {
	case <-p.done:
		return p, fmt.Errorf("%s exited at once: %v\n%s", name, p.err, p.log.String())
	case <-time.After(200 * time.Millisecond):
	}
	return p, nil
}

// nodeTokens are the identities of the node's components, as the
// apiserver's --token-auth-file gives them: each has the RBAC the
// apiserver's bootstrap policy binds to its user or group.
var nodeTokens = map[string]struct{ token, user, groups string }{
	"kubelet":                 {"e2e-kubelet-token", "system:node:" + nodeName, "system:nodes"},
	"kube-controller-manager": {"e2e-controller-manager-token", "system:kube-controller-manager", ""},
	"kube-scheduler":          {"e2e-scheduler-token", "system:kube-scheduler", ""},
	"kube-proxy":              {"e2e-proxy-token", "system:kube-proxy", ""},
}

func (n *node) writeTokens() (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s,admin,admin,\"system:masters\"\n", adminToken)
	for name, id := range nodeTokens {
		fmt.Fprintf(&b, "%s,%s,%s,\"%s\"\n", id.token, id.user, name, id.groups)
	}
	path := filepath.Join(n.dir, "apiserver", "tokens.csv")
	return path, os.WriteFile(path, []byte(b.String()), 0o600)
}

// nodeNetworkLock serializes the choice of a link's addresses between runs.
const nodeNetworkLock = "/run/lock/webhook-e2e-network.lock"

// makeNetwork makes the node's network namespace, and a veth pair from the
// machine into it on a /30 of nodeLinkPrefix that no other run holds.
func (n *node) makeNetwork() error {
	if err := os.MkdirAll(filepath.Dir(nodeNetworkLock), 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(nodeNetworkLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	out, err := exec.Command("ip", "-4", "-o", "addr").Output()
	if err != nil {
		return fmt.Errorf("ip -4 addr: %w", err)
	}
	used := map[string]bool{}
	for _, f := range strings.Fields(string(out)) {
		if ip, _, ok := strings.Cut(f, "/"); ok && strings.HasPrefix(ip, nodeLinkPrefix) {
			used[ip] = true
		}
	}
	for i := 0; i < 1<<14 && n.hostIP == ""; i++ {
		host := fmt.Sprintf("%s%d.%d", nodeLinkPrefix, i/64, i%64*4+1)
		if !used[host] {
			n.hostIP, n.nodeIP = host, fmt.Sprintf("%s%d.%d", nodeLinkPrefix, i/64, i%64*4+2)
		}
	}
	if n.hostIP == "" {
		return errors.New("no free /30 left in " + nodeLinkPrefix + "0.0/16")
	}
	hostEnd, nodeEnd := fmt.Sprintf("whe2e%da", os.Getpid()), fmt.Sprintf("whe2e%db", os.Getpid())
	for _, args := range [][]string{
		{"netns", "add", n.netns},
		{"link", "add", hostEnd, "type", "veth", "peer", "name", nodeEnd},
		{"link", "set", nodeEnd, "netns", n.netns},
		{"addr", "add", n.hostIP + "/30", "dev", hostEnd},
		{"link", "set", hostEnd, "up"},
		{"-n", n.netns, "addr", "add", n.nodeIP + "/30", "dev", nodeEnd},
		{"-n", n.netns, "link", "set", nodeEnd, "up"},
		{"-n", n.netns, "link", "set", "lo", "up"},
		// ClusterIPs are kube-proxy's to rewrite as a packet leaves; a
		// route must take them somewhere first. What no rule rewrites goes
		// to the machine, which forwards nothing.
		{"-n", n.netns, "route", "add", nodeServiceCIDR, "dev", nodeEnd},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// cgroupHierarchies are the cgroup v1 hierarchies kubelet and runc use.
func cgroupHierarchies() []string {
	var dirs []string
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		if e.IsDir() && e.Name() != "unified" {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return dirs
}

// makeCgroups makes the run's cgroup in every hierarchy: kubelet refuses a
// cgroupRoot that does not exist.
func (n *node) makeCgroups() error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, n.cgroup)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		if filepath.Base(h) == "cpuset" {
			// A new cpuset has no CPUs and no memory nodes: its parent's.
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// buildImages builds the webhook's image as `make image` does, and the
// sandbox image, into archives for containerd.
func (n *node) buildImages() ([]string, error) {
	pause := filepath.Join(n.dir, "images", "pause.tar")
	cmd := exec.Command("go", "run", "./ociimage", "-pause", "-o", pause, "-name", nodePauseImage)
	cmd.Dir = filepath.Join(repoRoot, "e2e")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the pause image: %w\n%s", err, out)
	}
	return []string{pause}, nil
}

// buildImage builds the webhook's image from the repository at repo with
// `make image`, tagged name, and loads it into the node's containerd.
func (n *node) loadWebhookImage(t *testing.T, repo, name string) {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "webhook-image.tar")
	cmd := exec.Command("make", "-C", repo, "image", "IMAGE="+name, "IMAGE_ARCHIVE="+archive)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	if err := n.importImage(archive); err != nil {
		t.Fatal(err)
	}
}

func (n *node) importImage(archive string) error {
	out, err := exec.Command("ctr", "--address", n.containerd, "-n", "k8s.io", "images", "import", "--snapshotter", "native", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %w\n%s", archive, err, out)
	}
	return nil
}

// startContainerd starts containerd with a configuration of the run's own:
// its state, runc's and the CNI bridge's under n.dir; the native
// snapshotter (overlay cannot mount here); and the OOM score the container
// this machine is cannot lower left alone.
func (n *node) startContainerd() error {
	n.containerd = filepath.Join(n.dir, "containerd", "containerd.sock")
	config := filepath.Join(n.dir, "containerd", "config.toml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`version = 2
root = "%[1]s/containerd/root"
state = "%[1]s/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.overlayfs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "%[2]s"
[ttrpc]
  address = "%[2]s.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "%[1]s/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "%[3]s"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "%[1]s/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "%[1]s/cni"
`, n.dir, n.containerd, nodePauseImage)), 0o644); err != nil {
		return err
	}
	// The Pods' network: a bridge in the node's namespace, with a route to
	// it and nowhere else.
	gateway := strings.TrimSuffix(nodePodCIDR, "0/24") + "1"
	if err := os.WriteFile(filepath.Join(n.dir, "cni", "10-bridge.conflist"), []byte(fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "webhook-e2e",
  "plugins": [{
    "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "%s", "gateway": "%s"}]],
             "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "%s"}
  }, {"type": "portmap", "capabilities": {"portMappings": true}}]
}
`, nodePodCIDR, gateway, filepath.Join(n.dir, "cni-ipam"))), 0o644); err != nil {
		return err
	}
	p, err := n.start("node containerd", "containerd", "--config", config)
	if err != nil {
		return err
	}
	return waitFor(p, startTimeout, func() bool {
		return exec.Command("ctr", "--address", n.containerd, "version").Run() == nil
	})
}

// waitReady waits until the node is Ready: kubelet registered it and its
// runtime and network are up.
func (n *node) waitReady() error {
	deadline := time.Now().Add(nodeStartTimeout)
	var last string
	for time.Now().Before(deadline) {
		for _, p := range n.procs {
			if p.exited() {
				return fmt.Errorf("%s exited: %v", p.name, p.err)
			}
		}
		got, err := n.client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
		if err == nil {
			for _, c := range got.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == corev1.ConditionTrue {
						return nil
					}
					last = c.Reason + ": " + c.Message
				}
			}
		} else {
			last = err.Error()
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("node %s not Ready within %s: %s", nodeName, nodeStartTimeout, last)
}

// kubectl runs kubectl against the node as the cluster-admin.
func (n *node) kubectl(args ...string) (string, error) {
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig", n.kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// stop stops the node and removes everything it made: the Pods' processes
// first (kubelet leaves them running when it stops), then the node's own,
// the mounts kubelet made, the network namespace and the cgroups.
func (n *node) stop(showLogs bool) {
	// kubelet first, so that nothing restarts what is killed below.
	for i := len(n.procs) - 1; i >= 0; i-- {
		if strings.HasSuffix(n.procs[i].name, "kubelet") {
			n.procs[i].stop()
		}
	}
	killContainers(n.dir)
	killCgroup(n.cgroup)
	for i := len(n.procs) - 1; i >= 0; i-- {
		n.procs[i].stop()
	}
	if showLogs {
		for _, p := range n.procs {
			p.dumpLog(os.Stderr)
		}
	}
	cleanNodeRun(n.netns, n.dir)
}

// containerInits are the first processes of a run's containers, by
// container ID, from its containerd's state.
func containerInits(dir string) map[string]int {
	pids := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(dir, "containerd", "state", "io.containerd.runtime.v2.task", "k8s.io", "*", "init.pid"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			pids[filepath.Base(filepath.Dir(f))] = pid
		}
	}
	return pids
}

// killContainers kills every container of a run: each one's first
// process, and with it its PID namespace.
func killContainers(dir string) {
	for _, pid := range containerInits(dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// killCgroup kills every process in the cgroup, in each hierarchy, and
// removes the cgroups below it, deepest first.
func killCgroup(cgroup string) {
	for range 50 {
		alive := 0
		for _, h := range cgroupHierarchies() {
			_ = filepath.WalkDir(filepath.Join(h, cgroup), func(path string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
					return nil
				}
				data, _ := os.ReadFile(path)
				for _, f := range strings.Fields(string(data)) {
					if pid, err := strconv.Atoi(f); err == nil {
						alive++
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				return nil
			})
		}
		if alive == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, h := range cgroupHierarchies() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, cgroup), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	}
}

// cleanNodeRun removes what a run's node leaves once its processes are
// gone: containerd's shims, the mounts under its directory (kubelet's
// volumes, containerd's), the Pods' network namespaces, its own network
// namespace (and with it the veth pair), and its files.
func cleanNodeRun(netns, dir string) {
	// Shims outlive containerd; each names the run's socket.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range procs {
		cmdline, err := os.ReadFile(c)
		if err == nil && strings.Contains(string(cmdline), "containerd-shim") && strings.Contains(string(cmdline), dir+"/") {
			if pid, err := strconv.Atoi(strings.Split(c, "/")[2]); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	// The Pods' network namespaces, which containerd mounts under
	// /var/run/netns: those whose sandbox was of this run.
	for _, ns := range podNetnsOf(dir) {
		_ = syscall.Unmount(ns, syscall.MNT_DETACH)
		_ = os.Remove(ns)
	}
	unmountUnder(dir)
	_ = exec.Command("ip", "netns", "del", netns).Run()
	_ = os.RemoveAll(dir)
}

// podNetnsOf lists the Pod network namespaces a run's containerd made, from
// the sandboxes' specs in its state directory.
func podNetnsOf(dir string) []string {
	var found []string
	specs, _ := filepath.Glob(filepath.Join(dir, "containerd", "state", "io.containerd.runtime.v2.task", "k8s.io", "*", "config.json"))
	for _, spec := range specs {
		data, err := os.ReadFile(spec)
		if err != nil {
			continue
		}
		for _, path := range strings.Split(string(data), `"path":"`)[1:] {
			path, _, _ = strings.Cut(path, `"`)
			if strings.HasPrefix(path, "/var/run/netns/cni-") {
				found = append(found, path)
			}
		}
	}
	return found
}

// unmountUnder unmounts everything mounted under dir, deepest first.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var mounts []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			mounts = append(mounts, fields[4])
		}
	}
	f.Close()
	for i := len(mounts) - 1; i >= 0; i-- {
		_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
	}
}

// sweepStaleNodes cleans up after runs that ended without stopping their
// node (killed, or a panic): a network namespace named after a process
// that no longer exists.
func sweepStaleNodes() {
	entries, _ := os.ReadDir("/var/run/netns")
	for _, e := range entries {
		pid, ok := strings.CutPrefix(e.Name(), "whe2e-")
		if !ok {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue // its run is alive
		}
		fmt.Fprintf(os.Stderr, "e2e: removing the node of a run that ended without stopping it (pid %s)\n", pid)
		killContainers(filepath.Join(os.TempDir(), e.Name()))
		killCgroup("/" + e.Name())
		cleanNodeRun(e.Name(), filepath.Join(os.TempDir(), e.Name()))
	}
}
