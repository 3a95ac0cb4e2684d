package e2e

// Which kube-apiserver the suite runs against, and what each minor has.
//
// Every minor the project supports has a module of its own under e2e/kube,
// written by e2e/kube/pin.sh: e2e/kube/v1.33 builds the patch its go.mod
// requires (v1.33.13), and so on. -kube-version (or E2E_KUBE_VERSION)
// chooses one; the default is the newest. The binaries are cached by exact
// version beside the shared etcd.
//
// A test of something not every minor has starts with requireFeature, which
// asks the running apiserver its version through discovery, so a skip is
// true of what ran, not of what was asked for.

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var kubeVersionFlag = flag.String("kube-version", os.Getenv("E2E_KUBE_VERSION"),
	"the kube-apiserver minor to run against, such as 1.33 (the module e2e/kube/v1.33); default the newest there (also E2E_KUBE_VERSION)")

// kubernetesVersion is the exact kube-apiserver version the suite builds
// and runs, and kubeModule its module's directory under e2e/; both are set
// by chooseKubernetes.
var kubernetesVersion, kubeModule string

var (
	// kubeModuleDir is a minor's module directory under e2e/kube.
	kubeModuleDir = regexp.MustCompile(`^v1\.(\d+)$`)
	// requireLine is the go.mod line of the kube-apiserver a module builds.
	requireLine = regexp.MustCompile(`^require k8s\.io/kubernetes (v1\.(\d+)\.\d+)$`)
)

// chooseKubernetes picks the module of the minor -kube-version names, or
// the newest, and reads which patch it builds from its go.mod.
func chooseKubernetes() error {
	entries, err := os.ReadDir(filepath.Join(repoRoot, "e2e", "kube"))
	if err != nil {
		return err
	}
	var minors []int
	for _, e := range entries {
		if m := kubeModuleDir.FindStringSubmatch(e.Name()); e.IsDir() && m != nil {
			n, _ := strconv.Atoi(m[1])
			minors = append(minors, n)
		}
	}
	if len(minors) == 0 {
		return fmt.Errorf("no kube-apiserver module in e2e/kube: write one with e2e/kube/pin.sh vX.Y.Z")
	}
	minor, patch := slices.Max(minors), ""
	if want := *kubeVersionFlag; want != "" {
		m := regexp.MustCompile(`^v?(1\.(\d+)(\.\d+)?)$`).FindStringSubmatch(want)
		if m == nil {
			return fmt.Errorf("-kube-version %q: want a minor such as 1.33", want)
		}
		minor, _ = strconv.Atoi(m[2])
		if !slices.Contains(minors, minor) {
			return fmt.Errorf("-kube-version %s: no module e2e/kube/v1.%d (there are %v); write one with e2e/kube/pin.sh", want, minor, minors)
		}
		if m[3] != "" {
			patch = "v" + m[1]
		}
	}
	kubeModule = filepath.Join("kube", fmt.Sprintf("v1.%d", minor))
	data, err := os.ReadFile(filepath.Join(repoRoot, "e2e", kubeModule, "go.mod"))
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if m := requireLine.FindStringSubmatch(strings.TrimSpace(line)); m != nil && m[2] == strconv.Itoa(minor) {
			kubernetesVersion = m[1]
		}
	}
	switch {
	case kubernetesVersion == "":
		return fmt.Errorf("e2e/%s/go.mod has no line \"require k8s.io/kubernetes v1.%d.N\"", kubeModule, minor)
	case patch != "" && patch != kubernetesVersion:
		// The binary is cached by the version it reports: a patch other
		// than the pinned one would be a lie.
		return fmt.Errorf("-kube-version %s: e2e/%s builds %s; move it with e2e/kube/pin.sh %s", patch, kubeModule, kubernetesVersion, patch)
	}
	return nil
}

// feature is something the webhook works with that not every supported
// kube-apiserver minor has.
type feature struct {
	name  string // as docs/versions.md names it
	since int    // the first minor that has it on by default
	// gate, when set, is the feature gate that turns it on from gateSince,
	// before it is on by default; the tests turn it on there.
	gate      string
	gateSince int
	source    string // where the minors were read, for the skip message
}

// staticManifests is manifest-based admission configuration: webhook
// configurations loaded from the directory an AdmissionConfiguration's
// WebhookAdmissionConfiguration names in staticManifestsDir. The gate is
// alpha (off) in 1.36 and beta (on) in 1.37, as k8s.io/apiserver
// v0.36.3 and v0.37.2 pkg/features/kube_features.go declare it.
var staticManifests = feature{
	name:      "static webhook manifests (staticManifestsDir)",
	since:     37,
	gate:      "ManifestBasedAdmissionControlConfig",
	gateSince: 36,
	source:    "feature gate ManifestBasedAdmissionControlConfig: alpha and off in 1.36, beta and on in 1.37",
}

// authorizationCacheSwitches are cacheAuthorizedRequests and
// cacheUnauthorizedRequests in an AuthorizationConfiguration's webhook:
// absent from k8s.io/apiserver v0.33.13 pkg/apis/apiserver/v1/types.go,
// present from v0.34.4. The 1.33 apiserver's strict decoding refuses a file
// that has them ("unknown field"), so the tests leave them out there and
// wait out the short TTLs instead.
var authorizationCacheSwitches = feature{
	name:   "cacheAuthorizedRequests and cacheUnauthorizedRequests in AuthorizationConfiguration",
	since:  34,
	source: "k8s.io/apiserver pkg/apis/apiserver/v1: added in 1.34",
}

// has reports whether the running apiserver has f on by default.
func has(t *testing.T, f feature) bool {
	t.Helper()
	return runningVersion(t).minor >= f.since
}

// fitAuthorizers removes from the Webhook authorizers of a test's
// AuthorizationConfiguration the cache switches a minor without them
// would refuse, logging that it did.
func fitAuthorizers(t *testing.T, authorizers ...map[string]any) {
	t.Helper()
	if has(t, authorizationCacheSwitches) {
		return
	}
	t.Logf("kube-apiserver %s has no %s: the test's authorizers cache for their TTLs", runningVersion(t).git, authorizationCacheSwitches.name)
	for _, a := range authorizers {
		if w, ok := a["webhook"].(map[string]any); ok {
			delete(w, "cacheAuthorizedRequests")
			delete(w, "cacheUnauthorizedRequests")
		}
	}
}

// waitOutAuthorizationCache waits, on a minor whose authorizers cannot be
// told not to cache, until a decision cached under the test's TTL of ttl
// has expired, so the next request asks the webhook (or meets its absence).
func waitOutAuthorizationCache(t *testing.T, ttl time.Duration) {
	t.Helper()
	if !has(t, authorizationCacheSwitches) {
		time.Sleep(ttl + 500*time.Millisecond)
	}
}

// serverVersion is what the suite's apiserver says it is.
type serverVersion struct {
	git   string // v1.33.13
	minor int    // 33
}

var running = sync.OnceValues(func() (serverVersion, error) {
	info, err := apiserver.client.Discovery().ServerVersion()
	if err != nil {
		return serverVersion{}, err
	}
	m := regexp.MustCompile(`^v1\.(\d+)\.`).FindStringSubmatch(info.GitVersion)
	if m == nil {
		return serverVersion{}, fmt.Errorf("the apiserver reports version %q, want v1.N.M", info.GitVersion)
	}
	minor, _ := strconv.Atoi(m[1])
	return serverVersion{git: info.GitVersion, minor: minor}, nil
})

// runningVersion returns the running apiserver's version, asked once.
func runningVersion(t *testing.T) serverVersion {
	t.Helper()
	v, err := running()
	if err != nil {
		t.Fatalf("asking the apiserver its version: %v", err)
	}
	return v
}

// requireFeature skips the test, naming the version and the feature, when
// the running apiserver cannot have f even with its gate turned on.
func requireFeature(t *testing.T, f feature) {
	t.Helper()
	v := runningVersion(t)
	if v.minor >= f.since || (f.gate != "" && v.minor >= f.gateSince) {
		return
	}
	needs := fmt.Sprintf("1.%d", f.since)
	if f.gate != "" {
		needs += fmt.Sprintf(", or 1.%d with --feature-gates=%s=true", f.gateSince, f.gate)
	}
	t.Skipf("kube-apiserver %s has no %s: it needs %s (%s)", v.git, f.name, needs, f.source)
}

// gateArgs returns the apiserver flags that turn f on in the running
// minor: --feature-gates for a minor where f exists but is off by default,
// nothing where it is on.
func gateArgs(t *testing.T, f feature) []string {
	t.Helper()
	if v := runningVersion(t); f.gate != "" && v.minor < f.since && v.minor >= f.gateSince {
		t.Logf("kube-apiserver %s: turning on the feature gate %s for %s", v.git, f.gate, f.name)
		return []string{"--feature-gates=" + f.gate + "=true"}
	}
	return nil
}

// TestStaticManifestsRefused starts each apiserver that has no static
// manifests, or has them behind a gate left off, with the
// admission-config.yaml `deploy/render.sh static` writes: it must exit at
// start-up with the error docs/versions.md quotes, so a user who meets it
// can recognise it. From 1.37, TestStaticManifests runs instead.
func TestStaticManifestsRefused(t *testing.T) {
	v := runningVersion(t)
	if v.minor >= staticManifests.since {
		t.Skipf("kube-apiserver %s has %s; TestStaticManifests tests it", v.git, staticManifests.name)
	}
	// What the apiserver says, by minor, from its code:
	// - up to 1.35 WebhookAdmissionConfiguration has no staticManifestsDir,
	//   and its decoder is not strict, so the field is dropped and the
	//   missing kubeConfigFile is refused (LoadConfig in
	//   k8s.io/apiserver/pkg/admission/plugin/webhook/config/kubeconfig.go);
	// - 1.36 knows the field and refuses it while the gate is off
	//   (manifest.ValidateStaticManifestsDir).
	want := `couldn't init admission plugin "MutatingAdmissionWebhook": kubeConfigFile: Invalid value: "": must be an absolute file path`
	if v.minor >= staticManifests.gateSince {
		want = `staticManifestsDir: Forbidden: staticManifestsDir requires the ManifestBasedAdmissionControlConfig feature gate to be enabled`
	}
	out, _ := renderStatic(t)
	a, err := startOwnAPIServer(t, "apiserver-static-refused", []string{"--admission-control-config-file", filepath.Join(out, "admission-config.yaml")})
	if a == nil {
		t.Fatal(err)
	}
	if err == nil || !a.exited() {
		t.Fatalf("kube-apiserver %s with the static admission-config.yaml: got %v, want it to exit at start-up", v.git, err)
	}
	if got := exitError(a.log.String()); !strings.Contains(got, want) {
		t.Errorf("kube-apiserver %s exited with the static admission-config.yaml with %q, want it to contain %q; its log ends:\n%s", v.git, got, want, lastLines(a.log.String(), 5))
	}
}

// TestServerVersion checks that the apiserver the suite started is the
// one it built, so every result is of the version the tables name.
func TestServerVersion(t *testing.T) {
	info, err := apiserver.client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if info.GitVersion != kubernetesVersion {
		t.Errorf("the apiserver reports %s, want %s, built from e2e/%s", info.GitVersion, kubernetesVersion, kubeModule)
	}
	t.Logf("kube-apiserver %s (e2e/%s)", info.GitVersion, kubeModule)
}
