// Command versions runs the e2e suite against every kube-apiserver minor
// the project pins (e2e/kube/v1.*) and prints what each one gave, as the
// Markdown table of docs/versions.md: `make e2e-versions`.
//
//	cd e2e && go run ./versions [-run REGEXP] [1.33 1.34 …]
//
// Each minor is a separate `go test -json` with E2E_KUBE_VERSION set; its
// kube-apiserver is built on first use (about 5 minutes each) and cached.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// features are the table's rows: what a user asks about, and the tests
// that prove it. A cell is "yes" when every one of them passed ("with its
// feature gate on" when a test had to turn one on), "no" when each was
// skipped (the skip says why), "FAIL" when any failed.
var features = []struct {
	name  string
	tests []string
}{
	{"admission webhook, `AdmissionReview` v1", []string{"TestDemonstration/v1"}},
	{"admission webhook, `AdmissionReview` v1beta1", []string{"TestDemonstration/v1beta1"}},
	{"update, `scale`, delete, dry-run, a CRD", []string{"TestDemonstrationOperations"}},
	{"`matchConditions` on admission webhooks", []string{"TestAdmissionMatchConditions"}},
	{"every answer passes the apiserver's checks", []string{"TestContractVerifyAdmissionResponse", "TestCapture"}},
	{"`failurePolicy` when the webhook is down or slow", []string{"TestWebhookDown", "TestWebhookTooSlow"}},
	{"HTTP/2 to a loopback URL", []string{"TestHTTP2"}},
	{"certificate rotation under load", []string{"TestRotationUnderLoad"}},
	{"mTLS: a client certificate from `kubeConfigFile`", []string{"TestMutualTLS"}},
	{"deploy: service mode (dry-run apply), URL mode", []string{"TestDeployManifests", "TestURLMode"}},
	{"`webhook doctor`", []string{"TestDoctor"}},
	{"authorization webhook through `--authorization-config`", []string{"TestAuthorization"}},
	{"`-validation-action` warn and audit: the warning to the user, the annotation in the audit log", []string{"TestValidationActions"}},
	{"a policy's own warning", []string{"TestPolicyWarning"}},
	{"an overloaded webhook's 429 is not retried and its message reaches the user", []string{"TestOverloadAnswer"}},
	{"writes succeed while hostile clients hold the webhook's port", []string{"TestHostileClients"}},
	{"a burst of large writes within the byte budget and the memory limit", []string{"TestMemoryUnderBurst"}},
	{"static manifests (`render.sh static`)", []string{"TestStaticManifests", "TestStaticWebhookDownAtStart", "TestStaticMalformedManifest"}},
	{"the static `admission-config.yaml` refused at start-up", []string{"TestStaticManifestsRefused"}},
}

// result is what one minor's run gave.
type result struct {
	minor   string            // 1.33
	version string            // v1.33.13, from its module's go.mod
	actions map[string]string // test name → pass, fail, skip
	skips   map[string]string // test name → why it skipped
	gated   map[string]bool   // top-level tests that turned a feature gate on
	failed  bool              // the run failed, in a test or before any
	tail    []string          // the run's last output lines, for a failure
	// failures are each failed test's own messages (t.Error, t.Log),
	// without the process logs a failing test dumps after them.
	failures []string
	took     time.Duration
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "versions:", err)
		os.Exit(1)
	}
}

func run() error {
	runRE := flag.String("run", "", "the tests to run on each minor (go test -run); default all")
	flag.Parse()
	minors := flag.Args()
	if len(minors) == 0 {
		var err error
		if minors, err = pinnedMinors(); err != nil {
			return err
		}
	}
	var results []result
	failed := false
	for _, m := range minors {
		r, err := runMinor(m, *runRE)
		if err != nil {
			return err
		}
		failed = failed || r.failed
		results = append(results, r)
	}
	printTable(os.Stdout, results)
	if failed {
		return errors.New("a minor failed; its output is above the table")
	}
	return nil
}

// pinnedMinors returns the minors that have a module under kube/, oldest
// first.
func pinnedMinors() ([]string, error) {
	dirs, err := filepath.Glob(filepath.Join("kube", "v1.*", "go.mod"))
	if err != nil {
		return nil, err
	}
	var minors []int
	for _, d := range dirs {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(filepath.Dir(d)), "v1."))
		if err == nil {
			minors = append(minors, n)
		}
	}
	if len(minors) == 0 {
		return nil, errors.New("no kube/v1.*/go.mod: run this in e2e/")
	}
	slices.Sort(minors)
	var out []string
	for _, n := range minors {
		out = append(out, fmt.Sprintf("1.%d", n))
	}
	return out, nil
}

// pinnedVersion reads the kube-apiserver version minor's module builds.
func pinnedVersion(minor string) (string, error) {
	data, err := os.ReadFile(filepath.Join("kube", "v"+minor, "go.mod"))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^require k8s\.io/kubernetes (v\S+)$`).FindSubmatch(data)
	if m == nil {
		return "", fmt.Errorf("kube/v%s/go.mod requires no k8s.io/kubernetes", minor)
	}
	return string(m[1]), nil
}

// event is a line of `go test -json` (cmd/test2json).
type event struct {
	Action string
	Test   string
	Output string
}

// testMessage is a line t.Skip, t.Error or t.Log wrote in a test's
// output: "    file_test.go:12: why".
var testMessage = regexp.MustCompile(`^\s+\w+_test\.go:\d+: (.*)$`)

func runMinor(minor, runRE string) (result, error) {
	version, err := pinnedVersion(minor)
	if err != nil {
		return result{}, err
	}
	r := result{minor: minor, version: version, actions: map[string]string{}, skips: map[string]string{}, gated: map[string]bool{}}
	args := []string{"test", "-count=1", "-json", "-timeout", "30m"}
	if runRE != "" {
		args = append(args, "-run", runRE)
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Env = append(os.Environ(), "E2E_KUBE_VERSION="+minor)
	cmd.Stderr = os.Stderr // building the apiserver says so there
	out, err := cmd.StdoutPipe()
	if err != nil {
		return r, err
	}
	fmt.Fprintf(os.Stderr, "versions: kube-apiserver %s (e2e/kube/v%s)…\n", version, minor)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return r, err
	}
	outputs := map[string][]string{}
	s := bufio.NewScanner(out)
	s.Buffer(make([]byte, 1<<20), 16<<20)
	for s.Scan() {
		var e event
		if json.Unmarshal(s.Bytes(), &e) != nil {
			continue
		}
		switch e.Action {
		case "output":
			outputs[e.Test] = append(outputs[e.Test], strings.TrimRight(e.Output, "\n"))
			r.tail = append(r.tail, strings.TrimRight(e.Output, "\n"))
			if len(r.tail) > 40 {
				r.tail = r.tail[1:]
			}
			// gateArgs's log line: the feature was not on by default.
			if strings.Contains(e.Output, "turning on the feature gate") {
				r.gated[strings.Split(e.Test, "/")[0]] = true
			}
		case "pass", "fail", "skip":
			if e.Test == "" {
				break
			}
			r.actions[e.Test] = e.Action
			if e.Action == "fail" {
				r.failures = append(r.failures, e.Test+":")
				r.failures = append(r.failures, messages(outputs[e.Test])...)
			}
			if e.Action == "skip" {
				for _, line := range outputs[e.Test] {
					if m := testMessage.FindStringSubmatch(line); m != nil {
						r.skips[e.Test] = m[1]
					}
				}
			}
		}
	}
	err = cmd.Wait()
	r.took = time.Since(start).Round(time.Second)
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return r, err
	}
	r.failed = err != nil
	pass, skip, fail := r.count()
	fmt.Fprintf(os.Stderr, "versions: kube-apiserver %s: %d passed, %d skipped, %d failed, in %s\n", version, pass, skip, fail, r.took)
	switch {
	case len(r.failures) > 0:
		fmt.Fprintf(os.Stderr, "versions: kube-apiserver %s failed:\n%s\n", version, strings.Join(r.failures, "\n"))
	case r.failed:
		// Before any test, or in one that wrote no message.
		fmt.Fprintf(os.Stderr, "versions: kube-apiserver %s failed; the end of its output:\n%s\n", version, strings.Join(r.tail, "\n"))
	}
	return r, nil
}

// messages returns a test's own lines in its output, each with the
// indented lines that continue it; a failing test dumps its processes'
// logs after them, which they leave out.
func messages(output []string) []string {
	var out []string
	in := false
	for _, line := range output {
		switch {
		case testMessage.MatchString(line):
			in = true
		case in && strings.HasPrefix(line, "        "):
		default:
			in = false
			continue
		}
		out = append(out, line)
	}
	return out
}

// count counts the top-level tests by outcome.
func (r result) count() (pass, skip, fail int) {
	for name, a := range r.actions {
		if strings.Contains(name, "/") {
			continue
		}
		switch a {
		case "pass":
			pass++
		case "skip":
			skip++
		case "fail":
			fail++
		}
	}
	return pass, skip, fail
}

// cell is one feature on one minor.
func (r result) cell(tests []string) string {
	var got []string
	for _, t := range tests {
		got = append(got, r.actions[t])
	}
	switch {
	case slices.Contains(got, "fail"):
		return "**FAIL**"
	case slices.Contains(got, ""):
		if r.failed && len(r.actions) == 0 {
			return "**FAIL**"
		}
		return "not run"
	case !slices.ContainsFunc(got, func(a string) bool { return a != "pass" }):
		if slices.ContainsFunc(tests, func(t string) bool { return r.gated[t] }) {
			return "yes, with its feature gate on"
		}
		return "yes"
	case !slices.ContainsFunc(got, func(a string) bool { return a != "skip" }):
		return "no"
	}
	return "partly"
}

func printTable(w io.Writer, results []result) {
	fmt.Fprint(w, "\n| feature | tests |")
	for _, r := range results {
		fmt.Fprintf(w, " %s |", r.version)
	}
	fmt.Fprint(w, "\n|---|---|")
	for range results {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, f := range features {
		fmt.Fprintf(w, "| %s | %s |", f.name, "`"+strings.Join(f.tests, "`, `")+"`")
		for _, r := range results {
			fmt.Fprintf(w, " %s |", r.cell(f.tests))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, "| *tests passed / skipped / failed* | |")
	for _, r := range results {
		pass, skip, fail := r.count()
		fmt.Fprintf(w, " %d / %d / %d |", pass, skip, fail)
	}
	fmt.Fprint(w, "\n| *time (go test)* | |")
	for _, r := range results {
		fmt.Fprintf(w, " %s |", r.took)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	for _, r := range results {
		// One line per reason, naming every test it skipped.
		byReason := map[string][]string{}
		for name, why := range r.skips {
			byReason[why] = append(byReason[why], "`"+name+"`")
		}
		reasons := make([]string, 0, len(byReason))
		for why := range byReason {
			reasons = append(reasons, why)
		}
		slices.Sort(reasons)
		for _, why := range reasons {
			slices.Sort(byReason[why])
			fmt.Fprintf(w, "- %s skipped %s: %s\n", r.version, strings.Join(byReason[why], ", "), why)
		}
	}
}
