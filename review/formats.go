package review

// The formats of -o besides text: an array, written an element at a time
// as the results come (json, yaml), and a JUnit report for CI (junit);
// and the progress written to a terminal.

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// elements writes the results as one array, each element as soon as it
// comes: JSON (`[`, elements, `]`), or YAML (a block sequence, `- `
// before each element; `[]` when there is none), which yq and
// kubectl-minded tools read as the same array.
type elements struct {
	w       io.Writer
	yaml    bool
	written int
}

func newElements(w io.Writer, format string) *elements {
	return &elements{w: w, yaml: format == "yaml"}
}

func (e *elements) begin() {
	if !e.yaml {
		fmt.Fprint(e.w, "[")
	}
}

// add writes v, JSON-encodable, as the next element: indented JSON for
// the results of manifests (readable), compact for a replay's many.
func (e *elements) add(v any) error {
	return e.addIndented(v, true)
}

func (e *elements) addIndented(v any, indent bool) error {
	var out []byte
	var err error
	if indent && !e.yaml {
		out, err = json.MarshalIndent(v, "  ", "  ")
	} else {
		out, err = json.Marshal(v)
	}
	if err != nil {
		return err
	}
	if e.yaml {
		var b bytes.Buffer
		if err := writeYAMLItem(&b, out); err != nil {
			return err
		}
		e.written++
		_, err = e.w.Write(b.Bytes())
		return err
	}
	sep := ",\n"
	if indent {
		sep += "  "
	}
	if e.written == 0 {
		sep = sep[1:]
	}
	e.written++
	_, err = fmt.Fprintf(e.w, "%s%s", sep, out)
	return err
}

func (e *elements) end() error {
	switch {
	case e.yaml && e.written == 0:
		_, err := fmt.Fprint(e.w, "[]\n")
		return err
	case e.yaml:
		return nil
	case e.written > 0:
		_, err := fmt.Fprint(e.w, "\n]\n")
		return err
	}
	_, err := fmt.Fprint(e.w, "]\n")
	return err
}

// yamlNode is a JSON value with its keys in the order they were written,
// for writing it as YAML.
type yamlNode struct {
	keys   []string
	values []*yamlNode
	items  []*yamlNode
	kind   byte   // '{' an object, '[' an array, 0 a scalar
	scalar string // a scalar's YAML: plain or double-quoted
}

// readYAMLNode reads one JSON value from dec, keeping its keys' order.
func readYAMLNode(dec *json.Decoder) (*yamlNode, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		n := &yamlNode{kind: byte(t)}
		for dec.More() {
			if t == '{' {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := k.(string)
				v, err := readYAMLNode(dec)
				if err != nil {
					return nil, err
				}
				n.keys, n.values = append(n.keys, key), append(n.values, v)
				continue
			}
			v, err := readYAMLNode(dec)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	case string:
		return &yamlNode{scalar: yamlString(t)}, nil
	case json.Number:
		return &yamlNode{scalar: t.String()}, nil
	case bool:
		return &yamlNode{scalar: strconv.FormatBool(t)}, nil
	case nil:
		return &yamlNode{scalar: "null"}, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

// plainYAML is a string YAML reads back as that string when written
// without quotes: it begins with a letter, a digit, '/' or '_', holds no
// ": ", " #" or character YAML gives a meaning, and is no word YAML 1.1
// reads as a bool, a null or a number.
var plainYAML = regexp.MustCompile(`^[A-Za-z0-9_/][A-Za-z0-9_./@+=()-]*( [A-Za-z0-9_./@+=()-]+)*$`)

// yamlString writes s as a YAML scalar: plain when that reads back as s,
// else double-quoted, whose escapes JSON's are a subset of.
func yamlString(s string) string {
	if plainYAML.MatchString(s) && !yamlSpecial(s) {
		return s
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// yamlSpecial reports whether a plain scalar s would not read as a string:
// a YAML 1.1 bool or null (as go.yaml.in/yaml/v2, kubectl's, reads them)
// or a number.
func yamlSpecial(s string) bool {
	switch strings.ToLower(s) {
	case "y", "yes", "n", "no", "true", "false", "on", "off", "null", "~", ".inf", "-.inf", ".nan":
		return true
	}
	if _, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64); err == nil {
		return true
	}
	_, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64)
	return err == nil
}

// writeYAMLItem writes the JSON value raw as an item of a block sequence
// at the top level: "- " and the value.
func writeYAMLItem(b *bytes.Buffer, raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	n, err := readYAMLNode(dec)
	if err != nil {
		return err
	}
	b.WriteString("-")
	n.writeAfterDash(b, 2)
	return nil
}

// writeAfterDash writes n after a sequence item's "-", its mapping's keys
// at indent.
func (n *yamlNode) writeAfterDash(b *bytes.Buffer, indent int) {
	switch {
	case n.kind == '{' && len(n.keys) > 0:
		b.WriteByte(' ')
		n.writeMapping(b, indent, true)
	case n.kind == '[' && len(n.items) > 0:
		b.WriteByte(' ')
		n.writeSequence(b, indent, true)
	default:
		b.WriteByte(' ')
		b.WriteString(n.flow())
		b.WriteByte('\n')
	}
}

// flow is an empty collection or a scalar, on one line.
func (n *yamlNode) flow() string {
	switch n.kind {
	case '{':
		return "{}"
	case '[':
		return "[]"
	}
	return n.scalar
}

// writeMapping writes n's keys at indent; the first on the current line
// when inline.
func (n *yamlNode) writeMapping(b *bytes.Buffer, indent int, inline bool) {
	for i, key := range n.keys {
		if i > 0 || !inline {
			b.WriteString(strings.Repeat(" ", indent))
		}
		b.WriteString(yamlString(key))
		b.WriteByte(':')
		v := n.values[i]
		switch {
		case v.kind == '{' && len(v.keys) > 0:
			b.WriteByte('\n')
			v.writeMapping(b, indent+2, false)
		case v.kind == '[' && len(v.items) > 0:
			// kubectl's habit: a sequence under a key at the key's
			// indentation.
			b.WriteByte('\n')
			v.writeSequence(b, indent, false)
		default:
			b.WriteByte(' ')
			b.WriteString(v.flow())
			b.WriteByte('\n')
		}
	}
}

// writeSequence writes n's items at indent; the first on the current line
// when inline.
func (n *yamlNode) writeSequence(b *bytes.Buffer, indent int, inline bool) {
	for i, item := range n.items {
		if i > 0 || !inline {
			b.WriteString(strings.Repeat(" ", indent))
		}
		b.WriteByte('-')
		item.writeAfterDash(b, indent+2)
	}
}

// junitReport is a JUnit XML report, as CI systems read one (Jenkins,
// GitLab, GitHub's test reporters): a testsuite per file, a testcase per
// document or request, a failure for what is refused, an error for what
// cannot be reviewed, skipped for what is not known or left out. Its
// counts come first in the XML, so it is written at the end.
type junitReport struct {
	name    string
	suites  []*junitSuite // in the input's order
	bySuite map[string]*junitSuite
}

type junitSuite struct {
	XMLName  xml.Name        `xml:"testsuite"`
	Name     string          `xml:"name,attr"`
	Tests    int             `xml:"tests,attr"`
	Failures int             `xml:"failures,attr"`
	Errors   int             `xml:"errors,attr"`
	Skipped  int             `xml:"skipped,attr"`
	Cases    []junitTestCase `xml:"testcase"`
}

type junitTestCase struct {
	ClassName string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	Failure   *junitOutcome `xml:"failure,omitempty"`
	Error     *junitOutcome `xml:"error,omitempty"`
	Skipped   *junitOutcome `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitOutcome struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

// junitOf is the outcome of a result under its label: failure, error,
// skipped, or nil when it passes.
func junitOf(r result, label string) (kind string) {
	switch {
	case r.Verdict == "error" || r.unreadable:
		return "error"
	case r.Verdict == "unknown" || r.Verdict == "skipped":
		return "skipped"
	case r.failed():
		return "failure"
	}
	return ""
}

// add adds the testcase of a result whose source is source ("file#n" or
// "file:line"): its suite is the file.
func (j *junitReport) add(source, line, label string, r result) {
	j.addCase(source, line, label, junitOf(r, label), strings.Join(r.Notes, "\n"))
}

// addCase adds a testcase named line to the suite of source's file, with
// outcome "failure", "error", "skipped" or "" (passed).
func (j *junitReport) addCase(source, line, label, outcome, notes string) {
	file := source
	if i := strings.LastIndexAny(source, "#:"); i > 0 {
		file = source[:i]
	}
	if j.bySuite == nil {
		j.bySuite = map[string]*junitSuite{}
	}
	s := j.bySuite[file]
	if s == nil {
		s = &junitSuite{Name: file}
		j.bySuite[file] = s
		j.suites = append(j.suites, s)
	}
	c := junitTestCase{ClassName: file, Name: source + ": " + line, SystemOut: notes}
	o := &junitOutcome{Message: line, Type: label, Text: line}
	switch outcome {
	case "failure":
		c.Failure, s.Failures = o, s.Failures+1
	case "error":
		c.Error, s.Errors = o, s.Errors+1
	case "skipped":
		c.Skipped, s.Skipped = o, s.Skipped+1
	}
	s.Tests++
	s.Cases = append(s.Cases, c)
}

// write writes the report.
func (j *junitReport) write(w io.Writer) error {
	out := struct {
		XMLName  xml.Name      `xml:"testsuites"`
		Name     string        `xml:"name,attr"`
		Tests    int           `xml:"tests,attr"`
		Failures int           `xml:"failures,attr"`
		Errors   int           `xml:"errors,attr"`
		Skipped  int           `xml:"skipped,attr"`
		Suites   []*junitSuite `xml:"testsuite"`
	}{Name: j.name, Suites: j.suites}
	for _, s := range j.suites {
		out.Tests += s.Tests
		out.Failures += s.Failures
		out.Errors += s.Errors
		out.Skipped += s.Skipped
	}
	b, err := xml.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s%s\n", xml.Header, b)
	return err
}

// progress writes how far a review or a replay has come to stderr, when
// stderr is a terminal, at most every progressEvery, on one line it
// rewrites, and clears it at the end.
type progress struct {
	w            io.Writer // nil when not a terminal
	start, last  time.Time
	wroteAnyLine bool
}

func newProgress(stderr io.Writer) *progress {
	p := &progress{start: time.Now()}
	if f, ok := stderr.(*os.File); ok {
		if info, err := f.Stat(); err == nil && info.Mode()&os.ModeCharDevice != 0 {
			p.w = stderr
		}
	}
	return p
}

// show writes line(), if it is time.
func (p *progress) show(line func() string) {
	if p.w == nil {
		return
	}
	if now := time.Now(); now.Sub(p.last) >= progressEvery {
		p.last = now
		p.wroteAnyLine = true
		fmt.Fprintf(p.w, "\r%s ", line())
	}
}

func (p *progress) done() {
	if p.w != nil && p.wroteAnyLine {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
