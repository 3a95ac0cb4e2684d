package review

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf16"

	"k8s.io/apimachinery/pkg/util/yaml"
)

// TestSummaryOnStderr: in every format the results are on stdout, whole
// and parseable, and the summary (with the request's operation and user)
// on stderr, so that a pipe reads the results alone.
func TestSummaryOnStderr(t *testing.T) {
	files := map[string]string{"d.yaml": deployment("web", "ns", "") + "---\n" + deployment("bad-web", "ns", "")}
	for _, format := range []string{"text", "json", "yaml", "junit"} {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			out, errOut, code := runReplayArgs(t, &fakeWebhook{}, "", "-f", filepath.Join(dir, "d.yaml"), "-o", format)
			if code != exitRefused {
				t.Errorf("got exit %d, want 1", code)
			}
			for _, want := range []string{"2 reviewed: 1 patched, 1 denied", "CREATE as user webhook-review"} {
				if !strings.Contains(errOut, want) || strings.Contains(out, want) {
					t.Errorf("-o %s: %q is not on stderr alone:\nstdout:\n%s\nstderr:\n%s", format, want, out, errOut)
				}
			}
			if !strings.Contains(out, "bad-web") {
				t.Errorf("-o %s: stdout lacks the results:\n%s", format, out)
			}
		})
	}
}

// TestOutputFormats: -o yaml is the same array as -o json, written as a
// YAML block sequence that go.yaml.in/yaml (kubectl's) reads back; -o
// junit is a JUnit report, a testsuite per file and a testcase per
// document, each failure, error and skip counted.
func TestOutputFormats(t *testing.T) {
	cm := func(name, annotation string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: ns\n  annotations: {note: " + annotation + "}\n"
	}
	files := map[string]string{
		"a.yaml": strings.Join([]string{deployment("web", "ns", ""), deployment("bad-web", "ns", ""),
			// Strings YAML would read otherwise, unquoted: a bool, a
			// number, a null, a colon, a leading dash, a newline.
			cm(`"yes"`, `"no"`), cm("quoted", `"1e3"`), cm("odd", `"a: b # c\n- d"`)}, "---\n"),
		"b.yaml": "kind: [unclosed\n---\n" + deployment("other", "ns", ""),
	}
	args := []string{"-f", "DIR/a.yaml", "-f", "DIR/b.yaml"}
	jsonOut, _, _, dir := reviewRun(t, &fakeWebhook{}, "", files, append(args, "-o", "json")...)
	yamlOut, _, code, _ := reviewRun(t, &fakeWebhook{}, "", files, "-f", filepath.Join(dir, "a.yaml"), "-f", filepath.Join(dir, "b.yaml"), "-o", "yaml")
	if code != exitUsage {
		t.Errorf("-o yaml: got exit %d, want 2 (a document cannot be read)", code)
	}
	asJSON, err := yaml.ToJSON([]byte(yamlOut))
	if err != nil {
		t.Fatalf("-o yaml does not read back: %v\n%s", err, yamlOut)
	}
	var fromYAML, fromJSON []map[string]any
	if err := json.Unmarshal(asJSON, &fromYAML); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(jsonOut), &fromJSON); err != nil {
		t.Fatal(err)
	}
	// The uids differ between runs; every other field is the same.
	norm := func(v []map[string]any) string {
		b, _ := json.Marshal(v)
		return regexp.MustCompile(`"uid":"[^"]*"`).ReplaceAllString(string(b), "")
	}
	if len(fromYAML) != 7 || norm(fromYAML) != norm(fromJSON) {
		t.Errorf("-o yaml reads back as\n%s\nwant -o json's\n%s", norm(fromYAML), norm(fromJSON))
	}

	junitOut, _, _, _ := reviewRun(t, &fakeWebhook{}, "", files, append(args, "-o", "junit")...)
	var report struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Errors   int `xml:"errors,attr"`
		Suites   []struct {
			Name  string `xml:"name,attr"`
			Cases []struct {
				Name    string    `xml:"name,attr"`
				Failure *struct{} `xml:"failure"`
				Error   *struct{} `xml:"error"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal([]byte(junitOut), &report); err != nil {
		t.Fatalf("-o junit is not XML: %v\n%s", err, junitOut)
	}
	if report.Tests != 7 || report.Failures != 1 || report.Errors != 1 || len(report.Suites) != 2 ||
		!strings.HasSuffix(report.Suites[0].Name, "a.yaml") || report.Suites[0].Cases[1].Failure == nil || report.Suites[1].Cases[0].Error == nil {
		t.Errorf("-o junit: got %+v, want 7 tests in 2 suites, the denial a failure and the unreadable document an error:\n%s", report, junitOut)
	}
	if !strings.HasPrefix(junitOut, xml.Header) {
		t.Errorf("-o junit does not begin with the XML header:\n%.200s", junitOut)
	}

	// Nothing reviewed: still an array.
	empty, _, _, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"e.yaml": ""}, "-f", "DIR/e.yaml", "-o", "yaml")
	if strings.TrimSpace(empty) != "[]" {
		t.Errorf("-o yaml of nothing: got %q, want []", empty)
	}
}

// TestQuiet: -q writes only what fails, in every format; the summary
// still counts everything, and says how much it left out.
func TestQuiet(t *testing.T) {
	files := map[string]string{"d.yaml": strings.Join([]string{deployment("web", "ns", ""), deployment("bad-web", "ns", ""), deployment("also", "ns", "")}, "---\n"),
		"e.yaml": ""}
	out, errOut, code, _ := reviewRun(t, &fakeWebhook{}, "", files, "-f", "DIR/d.yaml", "-f", "DIR/e.yaml", "-q", "-o", "text")
	if code != exitRefused || strings.Contains(out, "ns/web") || strings.Contains(out, "ns/also") || strings.Contains(out, "no object") ||
		!strings.Contains(out, "Deployment ns/bad-web: denied") || !strings.Contains(errOut, "3 reviewed: 2 patched, 1 denied") || !strings.Contains(errOut, "-q: 1 written, 2 that pass left out") {
		t.Errorf("-q: got exit %d:\nstdout:\n%s\nstderr:\n%s\nwant the denial alone, and the summary of all", code, out, errOut)
	}
	out, _, _, _ = reviewRun(t, &fakeWebhook{}, "", files, "-f", "DIR/d.yaml", "-q", "-o", "json")
	var results []result
	if err := json.Unmarshal([]byte(out), &results); err != nil || len(results) != 1 || results[0].Name != "bad-web" {
		t.Errorf("-q -o json: got %v, %s; want the denial alone", err, out)
	}
}

// TestRecursiveAndSkipped: -R reads the directories below -f's, as
// kubectl's -R; -skip-file leaves out files and directories by name or
// path pattern, -skip-kind documents by kind, and the summary counts each;
// a file that does not exist is bad usage, reviewed nothing.
func TestRecursiveAndSkipped(t *testing.T) {
	files := map[string]string{
		"top.yaml":                         deployment("top", "ns", ""),
		"app/deep.yaml":                    deployment("deep", "ns", ""),
		"app/kustomization.yaml":           "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [deep.yaml]\n",
		"app/chart/values.yaml":            "replicaCount: 1\n",
		"app/chart/templates/svc.yaml":     "apiVersion: v1\nkind: Service\nmetadata: {name: {{ .Release.Name }}}\n",
		"app/chart/Chart.yaml":             "apiVersion: v2\nname: chart\n",
		".github/workflows/ci.yml":         "on: push\njobs: {}\n",
		"app/policy.yaml":                  "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\n",
		"app/notes.txt":                    "not read\n",
		"app/chart/templates/NOTES.txt":    "not read\n",
		"app/chart/templates/_helpers.tpl": "not read\n",
	}
	out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", files, "-f", "DIR")
	if code != 0 || !strings.Contains(out, "top.yaml#1: Deployment ns/top: patched") || strings.Contains(out, "deep") {
		t.Errorf("without -R: got exit %d:\n%s\nwant the top directory's file alone", code, out)
	}
	out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", files, "-f", "DIR", "-R")
	if code != exitUsage || !strings.Contains(out, "deep.yaml#1: Deployment ns/deep: patched") || !strings.Contains(out, "ci.yml#1: error") {
		t.Errorf("-R: got exit %d:\n%s\nwant every manifest below, the workflow an error", code, out)
	}
	out, errOut, code, _ := reviewRun(t, &fakeWebhook{}, "", files, "-f", "DIR", "-R", "-o", "text",
		"-skip-file", "values*.yaml", "-skip-file", "Chart.yaml", "-skip-file", ".github", "-skip-file", "chart/templates/*.yaml",
		"-skip-kind", "Kustomization", "-skip-kind", "audit.k8s.io/v1/Policy")
	if code != 0 || strings.Contains(out, "values") || strings.Contains(out, "ci.yml") || strings.Contains(out, "svc.yaml") ||
		!strings.Contains(out, "kustomization.yaml#1: Kustomization: skipped: -skip-kind Kustomization") ||
		!strings.Contains(errOut, "2 reviewed: 2 patched; skipped: 4 files by -skip-file, 2 documents by -skip-kind") {
		t.Errorf("-R with -skip-file and -skip-kind: got exit %d:\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	out, errOut, code, _ = reviewRun(t, &fakeWebhook{}, "", files, "-f", "DIR/top.yaml", "-f", "DIR/nosuch.yaml")
	if code != exitUsage || strings.Contains(out, "reviewed") || !strings.Contains(out+errOut, "-f DIR/nosuch.yaml: no such file or directory") && !strings.Contains(out+errOut, "nosuch.yaml: no such file or directory") {
		t.Errorf("a file that does not exist: got exit %d:\n%s%s\nwant 2, bad usage, nothing reviewed", code, out, errOut)
	}
}

// TestGlobAndURL: a path that does not exist is a glob pattern, as
// kubectl's -f expands it; one matching nothing is bad usage, and a URL,
// which kubectl fetches, is refused saying so, not "no such file".
func TestGlobAndURL(t *testing.T) {
	files := map[string]string{"a.yaml": deployment("a", "ns", ""), "b.yaml": deployment("b", "ns", ""), "c.json.txt": "not read\n"}
	out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", files, "-f", "DIR/*.yaml")
	if code != 0 || !strings.Contains(out, "a.yaml#1: Deployment ns/a: patched") || !strings.Contains(out, "b.yaml#1: Deployment ns/b: patched") || strings.Contains(out, "c.json") {
		t.Errorf("-f DIR/*.yaml: got exit %d:\n%s\nwant a.yaml and b.yaml reviewed", code, out)
	}
	out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", files, "-f", "DIR/*.yml")
	if code != exitUsage || !strings.Contains(out, "*.yml: no such file or directory") {
		t.Errorf("-f DIR/*.yml, matching nothing: got exit %d:\n%s\nwant 2, no such file", code, out)
	}
	out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", files, "-f", "https://example.com/x.yaml")
	if code != exitUsage || !strings.Contains(out, "review does not fetch a URL") {
		t.Errorf("-f a URL: got exit %d:\n%s\nwant 2, saying review does not fetch it", code, out)
	}
}

// TestNamespaceGivenDiffers: with -namespace given, a namespaced object
// that names another namespace is an error, as kubectl -n refuses it; one
// that names none is reviewed in it, and without -namespace each is
// reviewed in its own.
func TestNamespaceGivenDiffers(t *testing.T) {
	files := map[string]string{"shop.yaml": deployment("web", "shop", ""), "none.yaml": strings.Replace(deployment("api", "x", ""), "  namespace: x\n", "", 1)}
	out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", files, "-namespace", "other", "-f", "DIR/shop.yaml", "-f", "DIR/none.yaml")
	if code != exitRefused || !strings.Contains(out, `shop.yaml#1: Deployment shop/web: error: the namespace from the provided object "shop" does not match the namespace "other"`) ||
		!strings.Contains(out, "none.yaml#1: Deployment other/api: patched") {
		t.Errorf("-namespace other: got exit %d:\n%s\nwant shop.yaml an error, none.yaml reviewed in other", code, out)
	}
	out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", files, "-f", "DIR/shop.yaml", "-f", "DIR/none.yaml")
	if code != 0 || !strings.Contains(out, "shop.yaml#1: Deployment shop/web: patched") || !strings.Contains(out, "none.yaml#1: Deployment default/api: patched") {
		t.Errorf("without -namespace: got exit %d:\n%s\nwant shop/web and default/api reviewed", code, out)
	}
}

// TestConfigNotServed: a -config of admissionregistration.k8s.io/v1beta1,
// which no apiserver since 1.21 serves, is bad usage saying so, not
// matched as if it were v1.
func TestConfigNotServed(t *testing.T) {
	files := map[string]string{"d.yaml": deployment("d", "ns", ""), "config.yaml": `apiVersion: admissionregistration.k8s.io/v1beta1
kind: ValidatingWebhookConfiguration
metadata: {name: old}
webhooks:
- name: v.example.com
  clientConfig: {url: "https://127.0.0.1:8443/validate"}
  rules: [{apiGroups: ["*"], apiVersions: ["*"], operations: ["*"], resources: ["*"]}]
`}
	out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", files, "-config", "DIR/config.yaml", "-f", "DIR/d.yaml")
	if code != exitUsage || !strings.Contains(out, `ValidatingWebhookConfiguration old: apiVersion "admissionregistration.k8s.io/v1beta1", want admissionregistration.k8s.io/v1`) || strings.Contains(out, "reviewed") {
		t.Errorf("got exit %d:\n%s\nwant 2, the apiVersion named, nothing reviewed", code, out)
	}
	// A List's items, as a typed client writes them, name no apiVersion.
	files["config.yaml"] = `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfigurationList","items":[{"kind":"ValidatingWebhookConfiguration",` +
		`"metadata":{"name":"v"},"webhooks":[{"name":"v.example.com","clientConfig":{"url":"https://127.0.0.1:8443/validate"},"rules":[{"apiGroups":["*"],"apiVersions":["*"],"operations":["*"],"resources":["*"]}]}]}]}`
	out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", files, "-config", "DIR/config.yaml", "-f", "DIR/d.yaml")
	if code != 0 || !strings.Contains(out, "Deployment ns/d: admitted") {
		t.Errorf("a List's item without apiVersion: got exit %d:\n%s\nwant it read, the Deployment admitted", code, out)
	}
}

// TestGeneratedNameSentToValidatingWebhooks: a manifest with generateName
// alone is sent to the mutating webhooks with no name, and to the
// validating ones with the name the apiserver generates before them
// (rest.BeforeCreate), its random characters as "xxxxx". Before, the
// validating ones got no name either.
func TestGeneratedNameSentToValidatingWebhooks(t *testing.T) {
	f := &fakeWebhook{}
	doc := strings.Replace(deployment("x", "ns", ""), "  name: x\n", "  generateName: web-\n", 1)
	if _, _, code, _ := reviewRun(t, f, "", map[string]string{"d.yaml": doc}, "-f", "DIR/d.yaml"); code != 0 {
		t.Fatalf("got exit %d", code)
	}
	got := map[string]string{}
	for i, r := range f.requests {
		var o struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if err := json.Unmarshal(r.Object.Raw, &o); err != nil {
			t.Fatal(err)
		}
		got[f.routes[i]] = r.Name + "," + o.Metadata.Name
	}
	if got["/mutate"] != "," || got["/validate"] != "web-xxxxx,web-xxxxx" {
		t.Errorf("got the name, and the object's, by route: %q; want none to /mutate, web-xxxxx to /validate", got)
	}
}

// TestCreateWithoutSystemFields: an object as kubectl get prints it is
// created without the metadata the apiserver sets: it wipes uid,
// creationTimestamp, deletionTimestamp, deletionGracePeriodSeconds and
// selfLink before admission. Before, the webhooks were sent them.
func TestCreateWithoutSystemFields(t *testing.T) {
	f := &fakeWebhook{}
	got := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"shop","uid":"0b1c2d3e-0000-4000-8000-000000000001",` +
		`"creationTimestamp":"2024-01-01T00:00:00Z","deletionTimestamp":"2024-01-02T00:00:00Z","deletionGracePeriodSeconds":30,"selfLink":"/api/v1/namespaces/shop/configmaps/cm","labels":{"a":"b"}},"data":{"a":"b"}}`
	if _, _, code, _ := reviewRun(t, f, "", map[string]string{"cm.json": got}, "-f", "DIR/cm.json"); code != 0 {
		t.Fatalf("got exit %d", code)
	}
	for _, r := range f.requests {
		for _, field := range []string{"uid", "creationTimestamp\":\"", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"} {
			if strings.Contains(string(r.Object.Raw), field) {
				t.Errorf("%s was sent %s", field, r.Object.Raw)
			}
		}
		if !strings.Contains(string(r.Object.Raw), `"labels":{"a":"b"}`) {
			t.Errorf("sent %s, want the rest of the object kept", r.Object.Raw)
		}
	}
	if len(f.requests) == 0 {
		t.Error("nothing sent")
	}
}

// TestNotText: a binary file (a PNG, whose bytes hold "{{") is not text,
// said once, not a Helm template; the files beside it are reviewed.
func TestNotText(t *testing.T) {
	png := "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR{{ x }}\n"
	for name, content := range map[string]string{"logo.yaml": png, "utf16.yaml": "a\x00p\x00i\x00"} { // UTF-16 without a byte-order mark
		out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{name: content, "ok.yaml": deployment("ok", "ns", "")}, "-f", "DIR/"+name, "-f", "DIR/ok.yaml")
		if code != exitUsage || !strings.Contains(out, name+"#1: error: line 1: not text (") || strings.Contains(out, "Helm") || strings.Count(out, name+"#") != 1 ||
			!strings.Contains(out, "ok.yaml#1: Deployment ns/ok: patched") {
			t.Errorf("%s: got exit %d:\n%s\nwant it not text, once, and the other file reviewed", name, code, out)
		}
	}
	if notText([]byte("kind: ConfigMap # é ü 日本")) != "" || notText([]byte("a: é")[:5]) != "" {
		t.Error("UTF-8 text, or text whose last character the peek cut, is said to be not text")
	}
}

// TestByteOrderMark: a file that begins with a byte-order mark is read
// as kubectl reads it (FileVisitor's unicode.BOMOverride): past UTF-8's,
// as JSON when JSON follows, every document of it; UTF-16, either way
// round, as text. Before, the mark made JSON read as YAML, which took
// the first object alone, and UTF-16 was not text.
func TestByteOrderMark(t *testing.T) {
	utf16Text := func(s string, bigEndian bool) string {
		var b strings.Builder
		for _, u := range append([]uint16{0xfeff}, utf16.Encode([]rune(s))...) {
			if bigEndian {
				b.WriteByte(byte(u >> 8))
				b.WriteByte(byte(u))
			} else {
				b.WriteByte(byte(u))
				b.WriteByte(byte(u >> 8))
			}
		}
		return b.String()
	}
	twoJSON := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"}}` + "\n" +
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b","namespace":"ns","annotations":{"u":"http:\/\/x"}}}` + "\n"
	for name, content := range map[string]string{
		"utf8.json":    "\xef\xbb\xbf" + twoJSON,
		"utf16le.yaml": utf16Text(deployment("a", "ns", "")+"---\n"+deployment("b", "ns", ""), false),
		"utf16be.yaml": utf16Text(deployment("a", "ns", "")+"---\n"+deployment("b", "ns", ""), true),
		"utf16le.json": utf16Text(twoJSON, false),
	} {
		out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{name: content}, "-f", "DIR/"+name)
		if code != 0 || !strings.Contains(out, "2 reviewed: 2 patched") || !strings.Contains(out, "ns/b: patched") {
			t.Errorf("%s: got exit %d:\n%s\nwant both objects reviewed", name, code, out)
		}
	}
}

// TestManifestProgress: on a terminal, a review writes how far it has
// come, on one line it rewrites, and clears it.
func TestManifestProgress(t *testing.T) {
	var term bytes.Buffer
	w := newWriter(&bytes.Buffer{}, &bytes.Buffer{}, options{output: "text"}, "CREATE", &inputs{bytes: 4 << 20})
	w.progress.w = &term // as on a terminal: TestProgressOnlyOnATerminal says when it is one
	for range 3 {
		if err := w.write(result{Source: "f#1", Verdict: "admitted"}, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	w.progress.done()
	if got := term.String(); !strings.HasPrefix(got, "\rreviewing: 1 objects, 1.0 MiB of 4.0 MiB (25 %)") || !strings.HasSuffix(got, "\r\033[K") {
		t.Errorf("progress wrote %q", got)
	}
}

// TestStdinTwice: -f - given twice is bad usage, as kubectl's "standard
// input cannot be used for multiple arguments", not stdin reviewed twice.
func TestStdinTwice(t *testing.T) {
	out, _, code, _ := reviewRun(t, &fakeWebhook{}, deployment("web", "shop", ""), nil, "-f", "-", "-f", "-")
	if code != 2 || !strings.Contains(out, "-f - is given twice") {
		t.Errorf("got exit %d:\n%s\nwant 2, saying -f - is given twice", code, out)
	}
}

// TestLargerThanTheAPIServerReads: an object over the 3 MiB of a request
// body the apiserver reads is refused (413) before any webhook, as the
// apiserver refuses it; one just under is reviewed. Before, both were.
// A document past maxDocumentBytes is not decoded at all: before, one of
// 224 MB took 1.5 GB and 77 s to be refused.
func TestLargerThanTheAPIServerReads(t *testing.T) {
	configMap := func(value int) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big, namespace: ns}\ndata:\n  v: " + strings.Repeat("x", value) + "\n"
	}
	var huge strings.Builder // in lines of 1 KB: a line over 4 MiB is refused on its own
	huge.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: huge, namespace: ns}\ndata:\n")
	for i := 0; huge.Len() <= maxDocumentBytes; i++ {
		fmt.Fprintf(&huge, "  k%d: %s\n", i, strings.Repeat("x", 1<<10))
	}
	files := map[string]string{"over.yaml": configMap(maxRequestBodyBytes), "under.yaml": configMap(maxRequestBodyBytes - 200), "huge.yaml": huge.String()}
	out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", files, "-f", "DIR/over.yaml", "-f", "DIR/under.yaml", "-f", "DIR/huge.yaml")
	if code == 0 || !strings.Contains(out, "over.yaml#1: ConfigMap ns/big: error: the object is") || !strings.Contains(out, "(413 Request Entity Too Large) before any webhook") ||
		!strings.Contains(out, "under.yaml#1: ConfigMap ns/big: patched") || !strings.Contains(out, "huge.yaml#1: error: line 1: the document is") {
		t.Errorf("got exit %d:\n%s\nwant the larger refused with 413, the other reviewed", code, truncate(out, 2000))
	}
}

// TestJSONStreamNull: a null between the objects of a JSON stream is
// skipped, as kubectl's StreamVisitor skips it; before, it ended the file.
func TestJSONStreamNull(t *testing.T) {
	cm := func(name string) string {
		return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `","namespace":"ns"}}`
	}
	out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"s.json": cm("a") + "\nnull\n" + cm("b") + "\nnull"}, "-f", "DIR/s.json")
	if code != 0 || !strings.Contains(out, "s.json#2: ConfigMap ns/b: patched") || !strings.Contains(out, "2 reviewed: 2 patched") {
		t.Errorf("got exit %d:\n%s\nwant both objects reviewed, the nulls skipped", code, out)
	}
}

// TestListItemKindOrAPIVersionAlone: a List's item that leaves out both
// its kind and apiVersion is the List's; one that leaves out only one is
// an error, as apimachinery's decodeToList fills in both or neither.
// Before, the missing one was filled in.
func TestListItemKindOrAPIVersionAlone(t *testing.T) {
	item := func(head, name string) string {
		return head + `"metadata":{"name":"` + name + `","namespace":"ns"},"spec":{"selector":{"matchLabels":{"app":"x"}},"template":{"metadata":{"labels":{"app":"x"}},"spec":{"containers":[{"name":"x","image":"nginx"}]}}}}`
	}
	list := `{"apiVersion":"apps/v1","kind":"DeploymentList","items":[` + item(`{"apiVersion":"apps/v1",`, "a") + "," + item(`{"kind":"Deployment",`, "b") + "," + item("{", "c") + `]}`
	out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"l.json": list}, "-f", "DIR/l.json")
	if code == 0 || !strings.Contains(out, "l.json#1[0]: error: line 1: the document has no kind") || !strings.Contains(out, "l.json#1[1]: error: line 1: the document has no apiVersion") ||
		!strings.Contains(out, "l.json#1[2]: Deployment ns/c: patched") {
		t.Errorf("got exit %d:\n%s\nwant the first two errors, the third a Deployment", code, out)
	}
}

// TestListItemsTwice: a List whose items key comes twice has the last
// one's items, as kubectl reads it (go.yaml.in/yaml/v2, encoding/json);
// before, the first block's were reviewed, or both's.
func TestListItemsTwice(t *testing.T) {
	cm := func(name string) string {
		return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `","namespace":"ns"}}`
	}
	yamlItem := func(name string) string {
		return "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: " + name + "\n    namespace: ns\n"
	}
	for _, tc := range []struct{ name, content, want string }{
		{"blocks.yaml", "apiVersion: v1\nkind: List\nitems:\n" + yamlItem("first") + "items:\n" + yamlItem("last"), "blocks.yaml#1[0]: ConfigMap ns/last: patched"},
		{"block-then-empty.yaml", "apiVersion: v1\nkind: List\nitems:\n" + yamlItem("first") + "items: []\n", "no object: an empty List"},
		{"arrays.json", `{"apiVersion":"v1","kind":"List","items":[` + cm("first") + `],"items":[` + cm("last") + `]}`, "arrays.json#1[0]: ConfigMap ns/last: patched"},
		{"array-then-null.json", `{"apiVersion":"v1","kind":"List","items":[` + cm("first") + `],"items":null}`, "no object: an empty List"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, _, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{tc.name: tc.content}, "-f", "DIR/"+tc.name)
			if !strings.Contains(out, tc.want) || strings.Contains(out, "ns/first") {
				t.Errorf("got:\n%s\nwant %q, and the first items not reviewed", out, tc.want)
			}
		})
	}
}

// TestUTF16Surrogates: a surrogate that is not half of a pair is U+FFFD,
// and the unit after it is kept, as golang.org/x/text's decoder (kubectl's)
// reads them.
func TestUTF16Surrogates(t *testing.T) {
	for _, tc := range []struct {
		units []uint16
		want  string
	}{
		{[]uint16{'x', 0xd83d, 0xde00, 'y'}, "x😀y"},
		{[]uint16{'x', 0xd800, 'y', '\n'}, "x\ufffdy\n"},
		{[]uint16{'x', 0xdc00, 'y'}, "x\ufffdy"},
		{[]uint16{'x', 0xd800, 0xd83d, 0xde00}, "x\ufffd😀"},
		{[]uint16{'x', 0xd800}, "x\ufffd"},
	} {
		var le []byte
		for _, u := range tc.units {
			le = append(le, byte(u), byte(u>>8))
		}
		got, err := io.ReadAll(&utf16Reader{r: bytes.NewReader(le), next: -1})
		if err != nil || string(got) != tc.want {
			t.Errorf("%04x: got %q, %v; want %q", tc.units, got, err, tc.want)
		}
	}
}

// TestListAliasAcrossItems: an item of a YAML List may name an anchor of
// another item, or of the List's top level, as kubectl reads the List
// whole (go.yaml.in/yaml/v2 resolves the alias); before, such an item was
// read alone and was "unknown anchor".
func TestListAliasAcrossItems(t *testing.T) {
	item := func(name, metadataRest string) string {
		return "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: " + name + "\n    namespace: ns\n" + metadataRest
	}
	for _, tc := range []struct{ name, content string }{
		{"item.yaml", "apiVersion: v1\nkind: List\nitems:\n" + item("a", "    labels: &l\n      team: x\n") + item("b", "    labels: *l\n")},
		{"top.yaml", "apiVersion: v1\nkind: List\nbase: &base\n  team: x\nitems:\n" + item("a", "    labels: *base\n") + item("b", "    labels:\n      <<: *base\n      tier: web\n")},
		{"flow.yaml", "apiVersion: v1\nkind: List\nitems:\n" + item("a", "    labels: {team: &t x}\n") + item("b", "    labels: {team: *t, tier: web}\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{tc.name: tc.content}, "-f", "DIR/"+tc.name)
			if code != 0 || !strings.Contains(out, "ConfigMap ns/a: patched") || !strings.Contains(out, "ConfigMap ns/b: patched") {
				t.Errorf("got exit %d:\n%s\nwant both items reviewed", code, out)
			}
		})
	}
}

// TestHasAlias: a line that names an anchor is seen as one; a "*" inside
// a scalar is not.
func TestHasAlias(t *testing.T) {
	for line, want := range map[string]bool{
		"    labels: *l\n":            true,
		"  - *item\n":                 true,
		"      <<: *base\n":           true,
		"    labels: {team: *t}\n":    true,
		"    args: [a, *b]\n":         true,
		"  - ? *k\n":                  true,
		"*top\n":                      true,
		"    host: a*b\n":             false,
		"    glob: '*.example.com'\n": false,
		"    - \"*\"\n":               false,
		"    schedule: 0 * * * *\n":   false,
		"    note: *\n":               false,
	} {
		if got := hasAlias([]byte(line)); got != want {
			t.Errorf("hasAlias(%q) = %v, want %v", line, got, want)
		}
	}
}

// TestTabBeforeContent: a line of white space with a tab in it is not
// blank to kubectl's YAML library ("found character that cannot start any
// token"): the document it begins, or is in, is an error. Before, a
// document of such lines was no document, and one that began with one
// was read.
func TestTabBeforeContent(t *testing.T) {
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: ns\n"
	for _, tc := range []struct{ name, content, want string }{
		{"tab-only.yaml", cm + "---\n\t\n", "tab-only.yaml#2: error: not YAML or JSON"},
		{"tab-comment.yaml", "\t# note\n---\n" + cm, "tab-comment.yaml#1: error: not YAML or JSON"},
		{"tab-first.yaml", "\t\n" + cm, "tab-first.yaml#1: error: not YAML or JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{tc.name: tc.content}, "-f", "DIR/"+tc.name)
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Errorf("got exit %d:\n%s\nwant %q", code, out, tc.want)
			}
		})
	}
}

// TestKeysCaseSensitive: kubectl and the apiserver read keys case and
// all: metadata's "Namespace" is not its namespace, a List's "Kind" not
// its kind, and "Items" not its items. Before, review read them as
// encoding/json does, whatever their case: the ConfigMap below was
// reviewed in kube-system.
func TestKeysCaseSensitive(t *testing.T) {
	for _, tc := range []struct{ name, content, want, notWant string }{
		{"namespace.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  Namespace: kube-system\n", "ConfigMap default/a", "kube-system"},
		{"kind.yaml", "Kind: List\napiVersion: v1\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a, namespace: ns}\n", "the document has no", "ConfigMap ns/a"},
		{"kind.json", `{"kind":"List","KIND":"ConfigMapList","apiVersion":"v1","items":[{"metadata":{"name":"a","namespace":"ns"}}]}`, "the document has no", "ConfigMap ns/a"},
		{"items.yaml", "apiVersion: v1\nkind: List\nItems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a, namespace: ns}\n", "", "ConfigMap ns/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, _, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{tc.name: tc.content}, "-f", "DIR/"+tc.name)
			if !strings.Contains(out, tc.want) || strings.Contains(out, tc.notWant) {
				t.Errorf("got:\n%s\nwant %q, and not %q", out, tc.want, tc.notWant)
			}
		})
	}
}

// TestLineLongerThanAnyObject: a line longer than maxLineBytes makes the
// document it is in an error, and only that one: before, that document
// was lost without a word and those after it were numbered one too far.
func TestLineLongerThanAnyObject(t *testing.T) {
	cm := func(name, extra string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: ns\n" + extra
	}
	long := "data:\n  k: " + strings.Repeat("x", maxLineBytes+1) + "\n"
	content := cm("a", "") + "---\n" + cm("b", long) + "---\n" + cm("c", "")
	out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"long.yaml": content}, "-f", "DIR/long.yaml")
	for _, want := range []string{"long.yaml#1: ConfigMap ns/a: patched", "long.yaml#2: error: line 13 is longer than 4 MiB", "long.yaml#3: ConfigMap ns/c: patched", "3 reviewed"} {
		if !strings.Contains(out, want) {
			t.Errorf("got exit %d:\n%s\nwant %q", code, out, want)
		}
	}
}

// TestItemsMakeAList: an object with items is a List to kubectl whatever
// its kind (apimachinery's unstructured decode looks for items alone):
// its items are what is sent, and it is not. Before, only a kind named
// *List was.
func TestItemsMakeAList(t *testing.T) {
	secret := "- apiVersion: v1\n  kind: Secret\n  metadata: {name: s, namespace: ns}\n"
	cart := "apiVersion: shop.example.com/v1\nkind: Cart\nmetadata: {name: c, namespace: ns}\n"
	for _, tc := range []struct{ name, content, want string }{
		{"block.yaml", cart + "items:\n" + secret, "block.yaml#1[0]: Secret ns/s: patched"},
		{"flow.yaml", cart + "items: [{apiVersion: v1, kind: Secret, metadata: {name: s, namespace: ns}}]\n", "flow.yaml#1[0]: Secret ns/s: patched"},
		{"array.json", `{"apiVersion":"shop.example.com/v1","kind":"Cart","metadata":{"name":"c","namespace":"ns"},"items":[{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","namespace":"ns"}}]}`, "array.json#1[0]: Secret ns/s: patched"},
		{"empty.yaml", cart + "items: []\n", "no object: an empty Cart"},
		{"null.yaml", cart + "items:\n", "no object: an empty Cart"},
		{"object.yaml", cart + "items: {apple: 1}\n", "object.yaml#1: error: line 1: the Cart's items are not a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, _, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{tc.name: tc.content}, "-f", "DIR/"+tc.name)
			if !strings.Contains(out, tc.want) || strings.Contains(out, "Cart ns/c") {
				t.Errorf("got:\n%s\nwant %q, and the Cart not reviewed", out, tc.want)
			}
		})
	}
}

// TestScalarBetweenObjects: a JSON string, number or boolean between
// objects is an error of its own, and the objects after it are read, as
// kubectl's decoder reads on past it. Before, the rest of the file was
// not read.
func TestScalarBetweenObjects(t *testing.T) {
	cm := func(name string) string {
		return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `","namespace":"ns"}}`
	}
	content := cm("a") + " 5 " + cm("b") + "\n\"text\"\ntrue " + cm("c") + " x " + cm("d")
	out, _, _, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"s.json": content}, "-f", "DIR/s.json")
	for _, want := range []string{"s.json#1: ConfigMap ns/a", "s.json#2: error: the document beginning at line 1 is not an object", "s.json#3: ConfigMap ns/b", "s.json#4: error: the document beginning at line 2 is not an object", "s.json#5: error: the document beginning at line 3 is not an object", "s.json#6: ConfigMap ns/c", `s.json#7: error: line 3: "x" where a JSON object begins`} {
		if !strings.Contains(out, want) {
			t.Errorf("got:\n%s\nwant %q", out, want)
		}
	}
	if strings.Contains(out, "ns/d") {
		t.Errorf("got:\n%s\nwant nothing read after the x, which does not decode", out)
	}
}

// TestJSONThenYAML: a stream that begins with "{" is JSON, and, when its
// first or second value does not decode, YAML from the end of the last
// one that did, as apimachinery v0.37.2's YAMLOrJSONDecoder reads it
// (kubectl 1.37). Before, review reported the value that did not decode
// and read no further.
func TestJSONThenYAML(t *testing.T) {
	cm := func(name string) string {
		return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `","namespace":"ns"}}`
	}
	yamlCM := func(name string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: ns\n"
	}
	for _, tc := range []struct {
		name, content string
		want          []string
	}{
		{"then-yaml.json", cm("a") + "\n" + yamlCM("b"), []string{"#1: ConfigMap ns/a", "#2: ConfigMap ns/b"}},
		{"then-separator.json", cm("a") + "\n---\n" + yamlCM("b") + "---\n" + yamlCM("c"), []string{"#1: ConfigMap ns/a", "#2: ConfigMap ns/b", "#3: ConfigMap ns/c"}},
		{"flow.yaml", "{apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: ns}}\n", []string{"#1: ConfigMap ns/a"}},
		{"trailing-comma.json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"},}`, []string{"#1: ConfigMap ns/a"}},
		{"form-feed.json", "\f" + cm("a"), []string{"#1: ConfigMap ns/a"}},
		{"second.json", cm("a") + "\n" + `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b","namespace":"ns"},}` + "\n", []string{"#1: ConfigMap ns/a", "#2: ConfigMap ns/b"}},
		{"third.json", cm("a") + cm("b") + "\n" + yamlCM("c"), []string{"#1: ConfigMap ns/a", "#2: ConfigMap ns/b", "#3: error: line 2:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, _, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{tc.name: tc.content}, "-f", "DIR/"+tc.name)
			for _, want := range tc.want {
				if !strings.Contains(out, tc.name+want) {
					t.Errorf("got:\n%s\nwant %q", out, tc.name+want)
				}
			}
			if strings.Contains(out, "ns/c") && tc.name == "third.json" {
				t.Errorf("got:\n%s\nwant nothing after the third value, JSON's error: two values decoded make the stream JSON", out)
			}
		})
	}
}

// TestNotUTF8ReadAsKubectl: bytes that are not UTF-8 in a text file, a
// Latin-1 comment or value, are read as U+FFFD, as kubectl reads a file
// (golang.org/x/text's UTF-8 decoder: one for each maximal subpart of an
// ill-formed sequence); a file of mostly such bytes is not text. Before,
// the first was "not text" and the second "incomplete UTF-8 octet
// sequence".
func TestNotUTF8ReadAsKubectl(t *testing.T) {
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: ns\n"
	for _, tc := range []struct{ name, content, want string }{
		{"comment.yaml", "# caf\xe9\n" + cm, "comment.yaml#1: ConfigMap ns/a: patched"},
		{"value.yaml", cm + "data:\n  k: caf\xe9\n", "value.yaml#1: ConfigMap ns/a: patched"},
		{"binary.yaml", strings.Repeat("\x80\x81\x82", 100), "binary.yaml#1: error: line 1: not text (bytes that are not UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, _, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{tc.name: tc.content}, "-f", "DIR/"+tc.name)
			if !strings.Contains(out, tc.want) {
				t.Errorf("got:\n%s\nwant %q", out, tc.want)
			}
		})
	}
	for in, want := range map[string]string{
		"caf\xc3\xa9":        "café",
		"caf\xe9":            "caf\uFFFD",
		"\xe9\xe9":           "\uFFFD\uFFFD",
		"\xe0\x80":           "\uFFFD\uFFFD",
		"\xf0\x90\x80":       "\uFFFD",
		"\xed\xa0\x80":       "\uFFFD\uFFFD\uFFFD",
		"a\xf4\x90\x80\x80b": "a\uFFFD\uFFFD\uFFFD\uFFFDb",
		"\xef\xbf\xbd ok":    "\uFFFD ok",
	} {
		// One byte a read, so that every sequence is cut across reads.
		got, err := io.ReadAll(&validUTF8Reader{r: iotest.OneByteReader(strings.NewReader(in))})
		if err != nil || string(got) != want {
			t.Errorf("%q: got %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestTodaysMatchingEdges: what helper-40 found in the day's changes, each
// failing before its fix. A rule that names only subresources never
// matches an object whose plural review guessed (rules.go: the
// subresource must match too). A -config List's items that name neither
// kind nor apiVersion take the List's (decodeToList): a v1beta1 List is
// refused, a typed v1 List read. -namespace ” is the context's default,
// not given (clientcmd's DirectClientConfig.Namespace).
func TestTodaysMatchingEdges(t *testing.T) {
	octopus := "apiVersion: sea.example.com/v1\nkind: Octopus\nmetadata: {name: o, namespace: prod}\n"
	scaleOnly := validateConfig(`{apiGroups: ["*"], apiVersions: ["*"], operations: [CREATE], resources: ["*/scale", "deployments/status"]}`, "")
	out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"o.yaml": octopus, "c.yaml": scaleOnly}, "-f", "DIR/o.yaml", "-config", "DIR/c.yaml")
	if code != 0 || !strings.Contains(out, "no webhook of -config matches it") {
		t.Errorf("a rule of subresources alone, its plural guessed: got exit %d:\n%s\nwant it not sent", code, out)
	}

	hpa := "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: h, namespace: prod}\nspec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}, maxReplicas: 3}\n"
	item := `{"metadata":{"name":"x"},"webhooks":[{"name":"v.example.com","clientConfig":{"service":{"name":"w","namespace":"w","path":"/validate"}},"rules":[{"apiGroups":["autoscaling"],"apiVersions":["v2"],"operations":["CREATE"],"resources":["horizontalpodautoscalers"]}],"sideEffects":"None","admissionReviewVersions":["v1"]}]}`
	for version, want := range map[string]int{"v1beta1": exitUsage, "v1": 0} {
		list := `{"apiVersion":"admissionregistration.k8s.io/` + version + `","kind":"ValidatingWebhookConfigurationList","items":[` + item + `]}`
		out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"h.yaml": hpa, "c.json": list}, "-f", "DIR/h.yaml", "-config", "DIR/c.json")
		if code != want || strings.Contains(out, "no webhook of -config matches it") {
			t.Errorf("a %s List of items naming neither kind nor apiVersion: got exit %d:\n%s\nwant %d, and the HorizontalPodAutoscaler sent to its webhook", version, code, out, want)
		}
	}

	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: other}\n"
	out, _, code, _ = reviewRun(t, &fakeWebhook{}, "", map[string]string{"cm.yaml": cm}, "-f", "DIR/cm.yaml", "-namespace", "")
	if code != 0 || !strings.Contains(out, "ConfigMap other/c: patched") {
		t.Errorf("-namespace '': got exit %d:\n%s\nwant it reviewed in its own namespace", code, out)
	}
}

// TestGeneratedNamespace: a Namespace with generateName alone is sent to
// the validating webhooks in no namespace (createHandler took its
// namespace from the name before it was generated), labelled with the
// name generated (the namespace strategy's Canonicalize); a
// namespaceSelector reads no name label of it, which it has not yet, at
// the mutating webhooks. Each failed before its fix (helper-40).
func TestGeneratedNamespace(t *testing.T) {
	ns := "apiVersion: v1\nkind: Namespace\nmetadata: {generateName: team-}\n"
	f := &fakeWebhook{}
	if _, _, code, _ := reviewRun(t, f, "", map[string]string{"ns.yaml": ns}, "-f", "DIR/ns.yaml"); code != 0 {
		t.Fatalf("got exit %d", code)
	}
	for i, r := range f.requests {
		if f.routes[i] != "/validate" {
			continue
		}
		if r.Namespace != "" || r.Name != "team-xxxxx" || !strings.Contains(string(r.Object.Raw), `"kubernetes.io/metadata.name":"team-xxxxx"`) {
			t.Errorf("/validate: sent in namespace %q, named %q, the object %s; want no namespace, team-xxxxx, labelled with it", r.Namespace, r.Name, r.Object.Raw)
		}
	}
	mutating := `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: m}
webhooks:
- name: m.example.com
  clientConfig: {service: {name: w, namespace: w, path: /mutate}}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [namespaces]}]
  namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: Exists}]}
  sideEffects: None
  admissionReviewVersions: [v1]
`
	out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", map[string]string{"ns.yaml": ns, "m.yaml": mutating}, "-f", "DIR/ns.yaml", "-config", "DIR/m.yaml")
	if code != 0 || !strings.Contains(out, "no webhook of -config matches it") {
		t.Errorf("a namespaceSelector on the name label, a Namespace not yet named: got exit %d:\n%s\nwant it not sent", code, out)
	}
}

// TestSubresourceCreateWithoutSystemFields: a create of a subresource, an
// Eviction, is wiped of the metadata the apiserver sets, as a whole
// object's is: only pods/binding and serviceaccounts/token keep it
// (rest.SubresourceObjectMetaPreserver). Before, the Eviction's were sent
// (helper-40).
func TestSubresourceCreateWithoutSystemFields(t *testing.T) {
	f := &fakeWebhook{}
	eviction := "apiVersion: policy/v1\nkind: Eviction\nmetadata: {name: p, namespace: prod, uid: abc, creationTimestamp: \"2020-01-01T00:00:00Z\"}\n"
	if _, _, code, _ := reviewRun(t, f, "", map[string]string{"ev.yaml": eviction}, "-f", "DIR/ev.yaml", "-subresource", "eviction"); code != 0 {
		t.Fatalf("got exit %d", code)
	}
	if len(f.requests) == 0 {
		t.Fatal("nothing sent")
	}
	for _, r := range f.requests {
		if strings.Contains(string(r.Object.Raw), "abc") || strings.Contains(string(r.Object.Raw), "2020") {
			t.Errorf("sent %s, with the uid or creationTimestamp the apiserver wipes", r.Object.Raw)
		}
	}
}
