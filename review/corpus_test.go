package review

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/yaml"
)

// corpusResult is what a corpus test reads of each result.
type corpusResult struct {
	Source, Kind, APIVersion, Namespace, Name, Verdict, Error, Unknown string
	Notes                                                              []string
	Requests                                                           []struct{ Namespace string }
}

// reviewCorpus reviews files with the tests' own webhook, as the
// apiserver's would be sent them without -config, and checks what must
// hold of any input: every document is counted, as an object reviewed or
// an error, and every file said; no error shows the YAML library's types;
// an error of a document that cannot be read names its line; a
// cluster-scoped object is sent in no namespace. It returns the results.
func reviewCorpus(t *testing.T, files []string) []corpusResult {
	t.Helper()
	args := []string{"-o", "json"}
	want := 0
	for _, f := range files {
		args = append(args, "-f", f)
		want += documentsIn(t, f)
	}
	start := time.Now()
	out, errOut, code := runReplayArgs(t, &fakeWebhook{}, "", args...)
	took := time.Since(start)
	var results []corpusResult
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatalf("-o json printed %.500s: %v\n%s", out, err, errOut)
	}
	t.Logf("%d files, %d documents: %d results in %s, exit %d", len(files), want, len(results), took.Round(time.Millisecond), code)
	if len(results) != want {
		counted := map[string]int{}
		for _, r := range results {
			counted[strings.SplitN(r.Source, "#", 2)[0]]++
		}
		for _, f := range files {
			if n := documentsIn(t, f); counted[f] != n {
				t.Errorf("%s: %d results, %d documents", f, counted[f], n)
			}
		}
		t.Fatalf("got %d results, want one for each of the %d documents", len(results), want)
	}
	cluster := clusterScopedKinds(t)
	for _, r := range results {
		if strings.Contains(r.Error, "interface {}") || strings.Contains(r.Error, "map[") {
			t.Errorf("%s: the YAML library's types: %s", r.Source, r.Error)
		}
		if r.Verdict == "error" && r.Kind == "" && !regexp.MustCompile(`line \d+`).MatchString(r.Error) {
			t.Errorf("%s: an error that names no line: %s", r.Source, r.Error)
		}
		// A Namespace is sent in its own namespace (createHandler).
		if cluster[r.APIVersion+" "+r.Kind] && r.Namespace != "" {
			t.Errorf("%s: %s %s/%s: a cluster-scoped kind in a namespace", r.Source, r.Kind, r.Namespace, r.Name)
		}
		for _, s := range r.Requests {
			if cluster[r.APIVersion+" "+r.Kind] && s.Namespace != "" && r.Kind != "Namespace" {
				t.Errorf("%s: %s %s sent in namespace %s", r.Source, r.Kind, r.Name, s.Namespace)
			}
		}
	}
	return results
}

// clusterScopedKinds are the built-in kinds the apiserver serves outside
// any namespace, by apiVersion and kind, from apiresources.json.
func clusterScopedKinds(t *testing.T) map[string]bool {
	t.Helper()
	c, err := newCatalog()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for gvk, k := range c.byKind {
		if k.scope == "Cluster" {
			out[gvk.GroupVersion().String()+" "+gvk.Kind] = true
		}
	}
	return out
}

// documentsIn counts the documents of a file as the tests read them, apart
// from review: each document of a YAML stream (split as kubectl splits
// it), or value of a JSON one, that is not empty, or each item of a List,
// whose review is one result each. A document that does not parse is one.
func documentsIn(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	items := func(doc []byte) int {
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return 1
		}
		if m == nil {
			return 0
		}
		kind, _ := m["kind"].(string)
		if list, ok := m["items"].([]any); ok && strings.HasSuffix(kind, "List") {
			return len(list)
		}
		return 1
	}
	trimmed := bytes.TrimLeft(b, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '{' && !bytes.HasPrefix(trimmed, []byte("{{")) {
		dec := json.NewDecoder(bytes.NewReader(b))
		n := 0
		for dec.More() {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return n + 1
			}
			n += items(raw)
		}
		return n
	}
	n := 0
	for _, doc := range regexp.MustCompile(`(?m)^---.*$`).Split(string(b), -1) {
		content := false
		for _, line := range strings.Split(doc, "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				content = true
			}
		}
		if content {
			n += items([]byte(doc))
		}
	}
	return n
}

// TestReviewCorpus reviews review/testdata/manifests, manifests of real
// projects (its README says whose): beside what any input must give, the
// cases the issue names give what the apiserver does, which e2e
// TestReviewCorpusMatchesTheAPIServer holds to a real one.
func TestReviewCorpus(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "manifests", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	results := reviewCorpus(t, files)
	find := func(kind, name string) corpusResult {
		t.Helper()
		i := slices.IndexFunc(results, func(r corpusResult) bool { return r.Kind == kind && r.Name == name })
		if i < 0 {
			t.Fatalf("no result for %s %s", kind, name)
		}
		return results[i]
	}
	if r := find("VolumeSnapshotClass", "csi-hostpath-snapclass"); r.Namespace != "" || r.Verdict != "admitted" || strings.Contains(strings.Join(r.Notes, "\n"), "not known") {
		t.Errorf("the cluster-scoped custom resource, its CustomResourceDefinition in the corpus: got %+v", r)
	}
	if r := find("HorizontalPodAutoscaler", "frontend"); r.APIVersion != "autoscaling/v1" || r.Namespace != "default" || r.Verdict != "admitted" {
		t.Errorf("the autoscaling/v1 HorizontalPodAutoscaler: got %+v", r)
	}
	if r := find("PodDisruptionBudget", "frontend"); r.Verdict != "error" || !strings.Contains(r.Error, "does not serve policy/v1beta1") {
		t.Errorf("the policy/v1beta1 PodDisruptionBudget: got %+v", r)
	}
	if r := find("ValidatingWebhookConfiguration", "pod-security-webhook.kubernetes.io"); r.Verdict != "admitted" || len(r.Requests) != 0 {
		t.Errorf("a ValidatingWebhookConfiguration: got %+v, want it never sent", r)
	}
	i := slices.IndexFunc(results, func(r corpusResult) bool { return strings.Contains(r.Source, "template.yaml#1") })
	if i < 0 || !strings.Contains(results[i].Error, "a Helm template ({{ … }}), not a manifest") {
		t.Errorf("the template: got %+v", results)
	}
}

// TestReviewModuleCacheCorpus reviews the manifests the Go module cache
// holds of Kubernetes' own (k8s.io/kubernetes's test/ and cluster/, once
// e2e has built kube-apiserver; kubectl's testdata, pod-security-
// admission's webhook), some 600 documents no one here wrote, for what
// any input must give. It skips when the module cache holds none.
// (pod-security-admission's testdata, 4,500 generated Pods, would add 20 s
// under the race detector and few shapes.)
func TestReviewModuleCacheCorpus(t *testing.T) {
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
			cache = strings.TrimSpace(string(out))
		}
	}
	var files []string
	for _, dir := range []string{"k8s.io/kubernetes@v1.37.2/test", "k8s.io/kubernetes@v1.37.2/cluster", "k8s.io/kubectl@v0.37.2/testdata", "k8s.io/pod-security-admission@v0.37.2/webhook"} {
		root := filepath.Join(cache, dir)
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				files = append(files, path)
			}
			return nil
		})
	}
	if cache == "" || len(files) == 0 {
		t.Skipf("the module cache (%q) holds no k8s.io/kubernetes@v1.37.2, kubectl or pod-security-admission: the e2e suite's first run fetches them", cache)
	}
	results := reviewCorpus(t, files)
	verdicts := map[string]int{}
	for _, r := range results {
		verdicts[r.Verdict]++
	}
	t.Logf("verdicts: %v", verdicts)
}
