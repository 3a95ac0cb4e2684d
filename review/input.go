package review

// Reading the manifests: files, directories and stdin, YAML or JSON,
// several documents each, Lists as kubectl prints them, in memory bounded
// by the largest object, not by the input.
//
// A file is split as kubectl's decoder splits it
// (k8s.io/apimachinery/pkg/util/yaml, NewYAMLOrJSONDecoder): a stream that
// begins with "{" is JSON, any other YAML, whose documents a line "---"
// separates (YAMLReader.Read). Unlike that decoder, which stops at the
// first document it cannot read, each document here is read on its own,
// so one that cannot be read is reported and the next ones are still
// reviewed. A List is one document; its items are found in the text and
// read one at a time, so that a List of 50 MB is never held whole: in
// YAML, the entries of its top-level `items:` block sequence (each line
// that begins with "- " at the sequence's indentation begins one); in
// JSON, the elements of its top-level "items" array.
//
// The input is read twice. The first pass only splits it, and reads no
// more than the documents that may be a CustomResourceDefinition or a
// Namespace (whose text names one), and each List's kind: the second, the
// review, then knows every kind's scope and every namespace's labels
// before the first object, whichever order the input has them in, and a
// List's kind for items that leave theirs out, though kubectl prints
// `kind: List` after the items. Stdin is copied to a temporary file on the
// first pass.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/example/webhook/jsonfield"
)

// maxLineBytes bounds one line of a YAML file: a line is read whole, and
// the apiserver takes no object over 3 MiB.
const maxLineBytes = 4 << 20

// unit is one object to review, as read: a document, or an item of a
// List; or a document that cannot be read, or a note that a file or a
// List holds nothing.
type unit struct {
	source string // file#n, and [i] for an item of a List
	file   string
	line   int    // the line of the file it begins on
	raw    []byte // its text, YAML or JSON
	isJSON bool
	// listKind and listAPIVersion are those of the List it is an item
	// of, for an item that leaves its own out.
	listKind, listAPIVersion string
	err                      error  // why it cannot be read
	empty                    string // a file or a List that holds no object: what it is
}

// listPlan is what the first pass learns of a document that has items: the
// kind and apiVersion of its top level, whether items is a key of it more
// than once, whether an item names an anchor (a YAML alias, *name), which
// may be another item's or the top level's, and whether an item is itself
// a List (isListItem).
type listPlan struct {
	kind, apiVersion string
	itemsTwice       bool
	aliases          bool
	listInList       bool
	// jsonValues, of a file's plan 0 alone, is how many values of its
	// JSON stream are read before the rest is read as YAML (readFile).
	jsonValues int
}

// isList reports whether a document of this top level is a List, whose
// items are reviewed one by one: any object with items, whatever its
// kind, as kubectl's decoder takes it (apimachinery's unstructured
// decode: `kind: List`, a DeploymentList, or a kind of a CRD's), once it
// has a kind and an apiVersion, without which it is an error.
func (p listPlan) isList() bool { return p.kind != "" && p.apiVersion != "" }

// streamed reports whether the second pass reads a document's items one
// by one, as it reads a List's. A List is read whole, as kubectl reads
// it, with items twice, where kubectl takes the last (go.yaml.in/yaml/v2
// and encoding/json each keep a key's last value); with aliases, which an
// item read alone could not resolve; and with a List in it, which makes
// the whole List an error (listItems).
func (p listPlan) streamed() bool {
	return p.isList() && !p.itemsTwice && !p.aliases && !p.listInList
}

// inputFile is one file to read: its name as the user gave it (or
// "stdin"), and where it is.
type inputFile struct {
	name, path string
}

// inputs are the files of -f, expanded, and what was wrong with those that
// cannot be read.
type inputs struct {
	files    []inputFile
	problems []unit
	spooled  []string // the copies of stdin and of pipes, removed by close
	// plans are the first pass's, by file name and document number.
	plans map[string]map[int]listPlan
	// skippedFiles are the files -skip-file left out.
	skippedFiles []string
	// bytes is the size of every file, for progress.
	bytes int64
}

// expansion is how -f's paths are expanded: with -R, a directory's files
// below it too (kubectl's -R, --recursive); without the files and
// directories whose name or path skip matches (-skip-file).
type expansion struct {
	recursive bool
	skip      []string
}

// expandInputs lists the files of paths: a file, a directory (its *.yaml,
// *.yml and *.json, and with -R those of the directories below it), or "-"
// for stdin. Stdin, and a file that is not a regular one (a named pipe,
// or /dev/fd/63 of a shell's <(helm template …)), it copies to a temporary
// file, to be read twice, as kubectl reads each once. A path that does not
// exist is a glob pattern, such as manifests/*.yaml, and stands for the
// paths it matches (kubectl's expandIfFilePattern, in cli-runtime's
// builder.go). One that does not exist and matches nothing is an error,
// as kubectl's "the path does not exist": bad usage, not a document that
// cannot be read; so is stdin given twice, as kubectl's "standard input
// cannot be used for multiple arguments", and a URL, which kubectl
// fetches and review does not. Copying stops when ctx is done: a pipe
// with no writer, or a terminal, may never end.
func expandInputs(ctx context.Context, patterns []string, stdin io.Reader, how expansion) (*inputs, error) {
	var paths []string
	for _, pattern := range patterns {
		if strings.HasPrefix(pattern, "http://") || strings.HasPrefix(pattern, "https://") {
			return nil, fmt.Errorf("-f %s: review does not fetch a URL, as kubectl does: download it first (curl -fsSLo FILE URL) and give -f FILE", pattern)
		}
		if _, err := os.Lstat(pattern); pattern == "-" || !errors.Is(err, fs.ErrNotExist) {
			paths = append(paths, pattern)
			continue
		}
		matches, err := filepath.Glob(pattern)
		if err != nil {
			return nil, fmt.Errorf("-f %s: the pattern is not valid: %w", pattern, err)
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("-f %s: no such file or directory", pattern)
		}
		paths = append(paths, matches...)
	}
	in := &inputs{plans: map[string]map[int]listPlan{}}
	stdinRead := false
	for _, path := range paths {
		if path == "-" {
			switch {
			case stdinRead:
				in.close()
				return nil, errors.New("-f - is given twice: stdin can be read once")
			case stdin == nil:
				in.close()
				return nil, errors.New("-f -: there is no stdin to read")
			}
			stdinRead = true
			if err := in.spool(ctx, "stdin", func() (io.Reader, error) { return stdin, nil }); err != nil {
				return nil, fmt.Errorf("-f -: copying stdin: %w", err)
			}
			continue
		}
		info, err := os.Stat(path)
		if err != nil {
			in.close()
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("-f %s: no such file or directory", path)
			}
			return nil, fmt.Errorf("-f %s: %w", path, errors.Unwrap(err))
		}
		if !info.IsDir() {
			if how.skipped(filepath.Base(path), "") {
				in.skippedFiles = append(in.skippedFiles, path)
				continue
			}
			if !info.Mode().IsRegular() {
				if err := in.spool(ctx, path, func() (io.Reader, error) { return os.Open(path) }); err != nil {
					in.close()
					return nil, fmt.Errorf("-f %s: copying it: %w", path, err)
				}
				continue
			}
			in.files = append(in.files, inputFile{name: path, path: path})
			in.bytes += info.Size()
			continue
		}
		found, err := in.walk(path, how)
		if err != nil {
			in.problems = append(in.problems, unit{source: path, file: path, err: err})
			continue
		}
		if !found {
			what := "no *.yaml, *.yml or *.json file"
			if !how.recursive {
				what += " (-R reads those below it)"
			}
			in.problems = append(in.problems, unit{source: path, file: path, err: errors.New("the directory holds " + what)})
		}
	}
	return in, nil
}

// walk adds the manifests of dir, and with -R of the directories below
// it, in lexical order, and reports whether it found any (skipped or not).
func (in *inputs) walk(dir string, how expansion) (bool, error) {
	found := false
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if path == dir {
			return nil
		}
		if d.IsDir() {
			switch {
			case !how.recursive:
				return fs.SkipDir
			case how.skipped(d.Name(), filepath.ToSlash(rel)):
				in.skippedFiles = append(in.skippedFiles, path+string(filepath.Separator))
				return fs.SkipDir
			}
			return nil
		}
		if ext := filepath.Ext(d.Name()); ext != ".yaml" && ext != ".yml" && ext != ".json" {
			return nil
		}
		found = true
		if how.skipped(d.Name(), filepath.ToSlash(rel)) {
			in.skippedFiles = append(in.skippedFiles, path)
			return nil
		}
		if info, err := d.Info(); err == nil {
			in.bytes += info.Size()
		}
		in.files = append(in.files, inputFile{name: path, path: path})
		return nil
	})
	return found, err
}

// skipped reports whether a file or directory named name, at rel below
// the directory given (slash-separated; "" for a file given itself), is
// one -skip-file leaves out: a pattern without a "/" matches the name, as
// in a .gitignore; one with a "/" matches the end of rel, whole names.
func (how expansion) skipped(name, rel string) bool {
	for _, pattern := range how.skip {
		if !strings.Contains(pattern, "/") {
			if ok, _ := path.Match(pattern, name); ok {
				return true
			}
			continue
		}
		for p := rel; p != ""; {
			if ok, _ := path.Match(strings.TrimPrefix(pattern, "/"), p); ok {
				return true
			}
			_, next, found := strings.Cut(p, "/")
			if !found {
				break
			}
			p = next
		}
	}
	return false
}

// maxSpooledBytes is the most review copies of stdin or of a pipe.
const maxSpooledBytes = 1 << 30

// spool copies what open gives, the input name, to a temporary file, and
// adds it: of one that is not text (a device such as /dev/zero), its first
// 4 KiB, which say so; of any, at most maxSpooledBytes. It returns
// ctx.Err() when ctx is done first: opening a named pipe waits for a
// writer, and reading a terminal for its user, and neither ends for a
// signal.
func (in *inputs) spool(ctx context.Context, name string, open func() (io.Reader, error)) error {
	type copied struct {
		path string
		n    int64
		err  error
	}
	c, err := within(ctx, func() copied {
		path, n, err := spoolFile(open)
		return copied{path, n, err}
	}, func(c copied) {
		if c.path != "" {
			os.Remove(c.path)
		}
	})
	if err != nil {
		in.close()
		return err
	}
	in.bytes += c.n
	if c.path != "" {
		in.spooled = append(in.spooled, c.path)
	}
	if c.err != nil {
		in.close()
		return c.err
	}
	in.files = append(in.files, inputFile{name: name, path: c.path})
	return nil
}

// spoolFile copies what open gives to a temporary file, for spool, and
// returns the file's path (empty when none was made) and how many bytes
// it holds.
func spoolFile(open func() (io.Reader, error)) (path string, n int64, err error) {
	r, err := open()
	if err != nil {
		return "", 0, err
	}
	if c, ok := r.(io.Closer); ok {
		defer c.Close()
	}
	f, err := os.CreateTemp("", "webhook-review-input-")
	if err != nil {
		return "", 0, err
	}
	br := bufio.NewReaderSize(r, 4<<10)
	var from io.Reader = io.LimitReader(br, maxSpooledBytes+1)
	if start, _ := br.Peek(4 << 10); notText(start) != "" && !bytes.HasPrefix(start, []byte("\xff\xfe")) && !bytes.HasPrefix(start, []byte("\xfe\xff")) {
		from = bytes.NewReader(start)
	}
	n, err = io.Copy(f, from)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > maxSpooledBytes {
		err = fmt.Errorf("more than %d bytes: review reads at most that of stdin or a pipe", maxSpooledBytes)
	}
	return f.Name(), n, err
}

// close removes the copies of stdin and pipes.
func (in *inputs) close() {
	for _, path := range in.spooled {
		os.Remove(path)
	}
}

// scan is the first pass: it splits every file, records each List's kind,
// and hands found the units whose text names a CustomResourceDefinition or
// a Namespace (an item only once its document is known to be a List), as
// it reads them: found must not keep a unit's text, whose buffer the next
// unit reuses, and returns what it makes of it. It returns what found
// made, by file in the order of the files. The files are split on every
// CPU, each by one goroutine: found must be safe to call from several.
func (in *inputs) scan(found func(unit) []parsedObject) ([][]parsedObject, error) {
	made := make([][]parsedObject, len(in.files))
	plans := make([]map[int]listPlan, len(in.files))
	errs := make([]error, len(in.files))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(in.files)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				plans[i], made[i], errs[i] = scanFile(in.files[i], found)
			}
		}()
	}
	for i := range in.files {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, f := range in.files {
		if errs[i] != nil {
			return nil, fmt.Errorf("%s: %w", f.name, errs[i])
		}
		in.plans[f.name] = plans[i]
	}
	return made, nil
}

// scanFile is scan of one file.
func scanFile(f inputFile, found func(unit) []parsedObject) (map[int]listPlan, []parsedObject, error) {
	plans := map[int]listPlan{}
	var made []parsedObject
	var items []unit // of the document being read, until it is known to be a List
	itemsOf := 0
	listInList := map[int]bool{} // by document
	err := readFile(f, nil, func(u unit) {
		if u.listKind == "" && u.err == nil && u.empty == "" && mayDefine(u.raw) {
			made = append(made, found(u)...)
		}
	}, func(doc int, item unit) {
		if itemsOf != doc {
			items, itemsOf = items[:0], doc
		}
		if !listInList[doc] && isListItem(item) {
			listInList[doc] = true
		}
		if mayDefine(item.raw) {
			item.raw = bytes.Clone(item.raw) // the splitter reuses its buffer
			items = append(items, item)
		}
	}, func(doc int, plan listPlan) {
		if doc == 0 { // the JSON stream is read again, YAML after its first values
			plans[0], items, itemsOf = plan, items[:0], 0
			for d := range listInList {
				if d > plan.jsonValues {
					delete(listInList, d)
				}
			}
			return
		}
		plan.listInList = listInList[doc]
		plans[doc] = plan
		// A List read whole with aliases: its items that read alone.
		if plan.isList() && !plan.itemsTwice && !plan.listInList && itemsOf == doc {
			for _, it := range items {
				it.listKind, it.listAPIVersion = plan.kind, plan.apiVersion
				made = append(made, found(it)...)
			}
		}
		items = items[:0]
	})
	return plans, made, err
}

// isListItem reports whether an item of a List, as the first pass reads
// it, is itself a List: an object whose items is an array
// (Unstructured.IsList). Only an item whose text names items is read.
func isListItem(item unit) bool {
	if item.err != nil || !bytes.Contains(item.raw, []byte("items")) {
		return false
	}
	doc := item.raw
	if !item.isJSON {
		j, err := yaml.ToJSON(item.raw)
		if err != nil {
			return false
		}
		doc = j
	}
	return itemsArray(doc)
}

// itemsArray reports whether the JSON object doc has a member items whose
// value is an array.
func itemsArray(doc []byte) bool {
	value, found, err := jsonfield.Top(doc, "items")
	return err == nil && found && len(value) > 0 && value[0] == '['
}

// mayDefine reports whether text may be a CustomResourceDefinition or a
// Namespace, which the first pass reads.
func mayDefine(text []byte) bool {
	return bytes.Contains(text, []byte("CustomResourceDefinition")) || bytes.Contains(text, []byte("Namespace"))
}

// each is the second pass: every unit of every file, in order, the
// problems of -f first, and a unit saying so of a file that holds no
// object. It stops early when stop says so.
func (in *inputs) each(visit func(unit), stop func() bool) error {
	for _, p := range in.problems {
		visit(p)
	}
	for _, f := range in.files {
		if stop() {
			return nil
		}
		var any bool
		err := readFile(f, in.plans[f.name], func(u unit) {
			any = true
			if !stop() {
				visit(u)
			}
		}, nil, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		if !any && !stop() {
			visit(unit{source: f.name, file: f.name, empty: "an empty file, or one of comments only"})
		}
	}
	return nil
}

// readFile splits one file into units. With plans (the second pass), a
// List's items are emitted as units; without (the first), item gets them
// and plan each document's top level that had items, and plan 0 how many
// values of a JSON stream come before the rest is YAML, when it is so
// (readFileFrom).
func readFile(f inputFile, plans map[int]listPlan, emit func(unit), item func(doc int, u unit), plan func(doc int, p listPlan)) error {
	jsonValues := -1 // all
	if p, ok := plans[0]; ok {
		jsonValues = p.jsonValues
	}
	for {
		fallBack, err := readFileFrom(f, plans, emit, item, plan, jsonValues)
		if fallBack < 0 || err != nil {
			return err
		}
		// The first pass: the JSON stream broke within its first two
		// values. Read it again, those values as JSON (they have been
		// seen), the rest as YAML.
		plan(0, listPlan{jsonValues: fallBack})
		jsonValues = fallBack
	}
}

// readFileFrom is readFile, the file read as JSON for jsonValues values
// (-1: all) and as YAML after them, as apimachinery v0.37.2's
// YAMLOrJSONDecoder reads it: a stream whose first byte but white space is
// "{" is JSON, and, when its first or second value does not decode, YAML
// from the end of the last one that did (util/yaml/decoder.go, Decode).
// In the first pass (plans nil), it returns the number of values after
// which the stream is YAML when it finds that so; else -1.
func readFileFrom(f inputFile, plans map[int]listPlan, emit func(unit), item func(doc int, u unit), plan func(doc int, p listPlan), jsonValues int) (int, error) {
	fh, err := os.Open(f.path)
	if err != nil {
		emit(unit{source: f.name, file: f.name, err: err})
		return -1, nil
	}
	defer fh.Close()
	br := withoutBOM(bufio.NewReaderSize(fh, 64<<10))
	to := splitTo{name: f.name, plans: plans, emit: emit, item: item, plan: plan}
	// As YAMLOrJSONDecoder decides: JSON when the first byte that is not
	// white space (unicode.IsSpace) is "{"; but not "{{", which no JSON
	// begins with, and a Helm template does: read as YAML, each of its
	// documents says so.
	start, _ := br.Peek(4096)
	if why := notText(start); why != "" {
		emit(unit{source: f.name + "#1", file: f.name, line: 1, err: fmt.Errorf("not text (%s): a binary file, not a manifest; the rest of the file is not read", why)})
		return -1, nil
	}
	br = bufio.NewReaderSize(&validUTF8Reader{r: br}, 64<<10)
	ys := &yamlSplitter{splitTo: to}
	if trimmed := bytes.TrimLeftFunc(start, unicode.IsSpace); len(trimmed) > 0 && trimmed[0] == '{' && !bytes.HasPrefix(trimmed, []byte("{{")) {
		js := &jsonSplitter{splitTo: to, line: 1, maxValues: jsonValues}
		if plans == nil && jsonValues >= 0 {
			// The first pass again: the JSON values have been seen.
			js.splitTo = splitTo{name: f.name, emit: func(unit) {}, item: func(int, unit) {}, plan: func(int, listPlan) {}}
		}
		err := js.run(br)
		switch {
		case err != nil:
			return -1, err
		case plans == nil && js.broken && js.values <= 1:
			return js.values, nil
		case !js.stopped:
			return -1, nil
		}
		// consumeWhitespace: white space, up to and including a newline.
		ys.line, ys.doc = js.line-1, js.doc
		for {
			r, _, err := br.ReadRune()
			if err != nil || !unicode.IsSpace(r) {
				_ = br.UnreadRune()
				break
			}
			if r == '\n' {
				ys.line++
				break
			}
		}
	}
	return -1, ys.run(br)
}

// withoutBOM is br past a byte-order mark, as kubectl reads every file
// (k8s.io/cli-runtime, pkg/resource/visitor.go, FileVisitor.Visit:
// unicode.BOMOverride): UTF-8's is skipped, and a file that begins with
// UTF-16's, as PowerShell 5's > writes one, is read as UTF-8.
func withoutBOM(br *bufio.Reader) *bufio.Reader {
	start, _ := br.Peek(3)
	switch {
	case bytes.HasPrefix(start, []byte("\xef\xbb\xbf")):
		br.Discard(3)
	case bytes.HasPrefix(start, []byte("\xff\xfe")), bytes.HasPrefix(start, []byte("\xfe\xff")):
		br.Discard(2)
		return bufio.NewReaderSize(&utf16Reader{r: br, bigEndian: start[0] == 0xfe, next: -1}, 64<<10)
	}
	return br
}

// validUTF8Reader reads r with each ill-formed UTF-8 sequence replaced by
// U+FFFD, as kubectl reads a file (FileVisitor.Visit's
// unicode.UTF8.NewDecoder, golang.org/x/text): one for each maximal
// subpart of an ill-formed sequence (maximalSubpart), the W3C's way.
type validUTF8Reader struct {
	r    io.Reader
	buf  [32 << 10]byte
	in   []byte // read, not yet checked: an incomplete sequence at its end
	out  []byte // checked, not yet returned
	err  error
	done []byte // out's buffer, for the next
}

func (v *validUTF8Reader) Read(p []byte) (int, error) {
	for len(v.out) == 0 {
		if v.err != nil && len(v.in) == 0 {
			return 0, v.err
		}
		if v.err == nil {
			n, err := v.r.Read(v.buf[:])
			v.in, v.err = append(v.in, v.buf[:n]...), err
		}
		v.out, v.in = appendValidUTF8(v.done[:0], v.in, v.err != nil)
		v.done = v.out
	}
	n := copy(p, v.out)
	v.out = v.out[n:]
	return n, nil
}

// appendValidUTF8 appends src to dst, each ill-formed sequence replaced by
// U+FFFD, and returns what of src's end may be the start of a sequence
// not read whole yet, unless atEOF.
func appendValidUTF8(dst, src []byte, atEOF bool) (out, rest []byte) {
	if utf8.Valid(src) {
		return append(dst, src...), src[:0]
	}
	for i := 0; i < len(src); {
		if src[i] < utf8.RuneSelf {
			i++
			continue
		}
		if !utf8.FullRune(src[i:]) && !atEOF {
			return append(dst, src[:i]...), append(src[:0], src[i:]...)
		}
		if r, size := utf8.DecodeRune(src[i:]); r != utf8.RuneError || size > 1 {
			i += size
			continue
		}
		dst = append(append(dst, src[:i]...), "\uFFFD"...)
		src = src[i+maximalSubpart(src[i:]):]
		i = 0
	}
	return append(dst, src...), src[:0]
}

// maximalSubpart is how many bytes of b, which does not begin with a
// well-formed UTF-8 sequence, make the longest start of one (Unicode's
// "maximal subpart of an ill-formed subsequence"), 1 at least: the first
// byte and the continuation bytes a sequence it starts could have.
func maximalSubpart(b []byte) int {
	lo, hi, need := byte(0x80), byte(0xbf), 0
	switch c := b[0]; {
	case c >= 0xc2 && c <= 0xdf:
		need = 1
	case c == 0xe0:
		need, lo = 2, 0xa0
	case c == 0xed:
		need, hi = 2, 0x9f
	case c >= 0xe1 && c <= 0xef:
		need = 2
	case c == 0xf0:
		need, lo = 3, 0x90
	case c == 0xf4:
		need, hi = 3, 0x8f
	case c >= 0xf1 && c <= 0xf3:
		need = 3
	}
	size := 1
	for size <= need && size < len(b) && b[size] >= lo && b[size] <= hi {
		size, lo, hi = size+1, 0x80, 0xbf
	}
	return size
}

// utf16Reader reads UTF-16 text from r as UTF-8; a surrogate that is
// not half of a pair is U+FFFD, as golang.org/x/text's decoder makes it.
type utf16Reader struct {
	r         io.Reader
	bigEndian bool
	out       []byte // decoded, not yet read
	next      rune   // a unit read after a high surrogate, not its pair; -1: none
}

func (u *utf16Reader) Read(p []byte) (int, error) {
	for len(u.out) == 0 {
		r, err := u.unit()
		if err != nil {
			return 0, err
		}
		if r >= 0xd800 && r < 0xdc00 { // high: a pair's first half
			low, err := u.unit()
			switch {
			case err == io.EOF:
				r = utf8.RuneError
			case err != nil:
				return 0, err
			case low >= 0xdc00 && low < 0xe000:
				r = utf16.DecodeRune(r, low)
			default:
				r, u.next = utf8.RuneError, low
			}
		} else if utf16.IsSurrogate(r) { // a low one alone
			r = utf8.RuneError
		}
		u.out = utf8.AppendRune(u.out[:0], r)
	}
	n := copy(p, u.out)
	u.out = u.out[n:]
	return n, nil
}

// unit reads one 16-bit unit; half of one at the end is U+FFFD.
func (u *utf16Reader) unit() (rune, error) {
	if u.next >= 0 {
		r := u.next
		u.next = -1
		return r, nil
	}
	var b [2]byte
	switch _, err := io.ReadFull(u.r, b[:]); {
	case err == io.ErrUnexpectedEOF:
		return utf8.RuneError, nil
	case err != nil:
		return 0, err
	case u.bigEndian:
		return rune(b[0])<<8 | rune(b[1]), nil
	}
	return rune(b[1])<<8 | rune(b[0]), nil
}

// notText says why the start of a file is not text, as kubectl's YAML
// and JSON decoders read it, or "": a NUL byte, which no UTF-8 text
// holds, or bytes that are not UTF-8 (the start of a PNG, a tarball,
// UTF-16). A character cut at the end of start is not held against it.
func notText(start []byte) string {
	if i := bytes.IndexByte(start, 0); i >= 0 {
		return fmt.Sprintf("a NUL byte at offset %d", i)
	}
	// A few bytes that are not UTF-8 are text in another encoding, such
	// as a Latin-1 comment, which is read as U+FFFD, as kubectl reads it
	// (validUTF8Reader); more than one in eight are not text.
	if utf8.Valid(start) {
		return ""
	}
	bad, first := 0, -1
	for i := 0; i < len(start); {
		r, size := utf8.DecodeRune(start[i:])
		if r == utf8.RuneError && size <= 1 && (utf8.FullRune(start[i:]) || i+utf8.UTFMax <= len(start)) {
			bad++
			if first < 0 {
				first = i
			}
		}
		i += size
	}
	if bad*8 > len(start) {
		return fmt.Sprintf("bytes that are not UTF-8, from offset %d", first)
	}
	return ""
}

// splitTo is what a splitter is given: the file's name, the first pass's
// plans (nil in the first pass), and where it hands each unit (emit), or
// in the first pass each item of a List (item) and each top level of a
// document with items (plan).
type splitTo struct {
	name  string
	plans map[int]listPlan
	emit  func(unit)
	item  func(doc int, u unit)
	plan  func(doc int, p listPlan)
}

// yamlSplitter splits a YAML stream into documents, and a List's into
// items, line by line.
type yamlSplitter struct {
	splitTo

	line int // of the file, from 1

	doc       int    // the number of the document being read, from 1: those with content
	content   bool   // the document being read has content
	docLine   int    // its first line of content
	text      []byte // the document, or with items its top level but them
	badSep    string // the document began with a separator kubectl refuses
	inItems   bool   // reading the items of a List
	itemsDone bool
	itemsKeys int    // top-level items keys seen
	aliases   bool   // an item's line may name an anchor (hasAlias)
	seqIndent int    // the column of the items' "-", once seen; -1 before
	itemText  []byte // the item being read
	inItem    bool
	itemLine  int
	// spareText and spareItem are, in the first pass, the buffers of the
	// last document and item, which were read before this one began: the
	// next take them over.
	spareText, spareItem []byte
	itemCount            int
}

func (s *yamlSplitter) run(br *bufio.Reader) error {
	for {
		if s.content && s.badSep == "" && (!s.inItems || s.itemsDone) && s.bulk(br) {
			continue
		}
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) && len(long) <= maxLineBytes {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			if len(long) > maxLineBytes {
				// Skip the rest of the line: it cannot be part of an
				// object the apiserver takes.
				for errors.Is(err, bufio.ErrBufferFull) {
					_, err = br.ReadSlice('\n')
				}
				s.line++
				if !s.content { // else the document it is in, not the next
					s.startContent()
				}
				s.badSep = fmt.Sprintf("line %d is longer than %d MiB: no object the apiserver takes has one", s.line, maxLineBytes>>20)
				continue
			}
			line = long
		}
		if len(line) > 0 {
			s.line++
			s.take(line)
		}
		if errors.Is(err, io.EOF) {
			s.endDocument()
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// bulk takes at once, inside a document's text, the complete lines
// buffered before the next that take must see alone: one that begins
// with "---" (a separator) or "items:" (a List's items). It reports
// whether it took any. take would append them one by one, as it does
// every line of a List's items.
func (s *yamlSplitter) bulk(br *bufio.Reader) bool {
	buf, _ := br.Peek(br.Buffered())
	end := bytes.LastIndexByte(buf, '\n') + 1
	if end == 0 || bytes.HasPrefix(buf, []byte("---")) || bytes.HasPrefix(buf, []byte("items:")) {
		return false
	}
	buf = buf[:end]
	for _, special := range [][]byte{[]byte("\n---"), []byte("\nitems:")} {
		if i := bytes.Index(buf, special); i >= 0 {
			buf = buf[:i+1]
		}
	}
	s.text = append(s.text, buf...)
	s.line += bytes.Count(buf, []byte("\n"))
	_, _ = br.Discard(len(buf))
	return true
}

// take reads one line, with its newline.
func (s *yamlSplitter) take(line []byte) {
	if bytes.HasPrefix(line, []byte("items:")) {
		s.itemsKeys++
	}
	if bytes.HasPrefix(line, []byte("---")) {
		// A separator, or text kubectl refuses after one (YAMLReader.Read:
		// only spaces and a comment may follow "---").
		rest := strings.TrimSpace(string(line[3:]))
		s.endDocument()
		if rest != "" && rest[0] != '#' {
			s.startContent()
			s.badSep = fmt.Sprintf("line %d: %q follows the document separator, where kubectl takes only a comment", s.line, truncate(rest, 40))
		}
		return
	}
	blank := isBlankOrComment(line)
	if !s.content {
		if blank {
			return
		}
		s.startContent()
	}
	if s.badSep != "" {
		return // the document is reported whole
	}
	if s.inItems && !s.itemsDone {
		s.takeItemLine(line, blank)
		return
	}
	s.text = append(s.text, line...)
	if !s.inItems && isItemsKey(line) && s.listable() {
		s.inItems, s.seqIndent = true, -1
		s.text = s.text[:len(s.text)-len(line)]
		s.text = append(s.text, "items: []\n"...)
	}
}

// listable reports whether the document's items are read one by one: in
// the first pass, any document with a top-level items block; in the
// second, a List's.
func (s *yamlSplitter) listable() bool {
	if s.plans == nil {
		return true
	}
	return s.plans[s.doc].streamed()
}

func (s *yamlSplitter) startContent() {
	s.content = true
	s.doc++
	s.docLine = s.line
	if s.plans == nil {
		s.text, s.spareText = s.spareText[:0], nil
	}
}

// takeItemLine reads a line of a List's items block.
func (s *yamlSplitter) takeItemLine(line []byte, blank bool) {
	if blank {
		if s.inItem {
			s.itemText = append(s.itemText, line...)
		}
		return
	}
	if s.plans == nil && !s.aliases {
		s.aliases = hasAlias(line)
	}
	indent := indentOf(line)
	isEntry := indent < len(line) && line[indent] == '-' && (indent+1 == len(line) || line[indent+1] == ' ' || line[indent+1] == '\n' || line[indent+1] == '\r')
	if s.seqIndent < 0 {
		if !isEntry {
			// items: with no sequence under it: null, no items.
			s.itemsDone = true
			s.text = append(s.text, line...)
			return
		}
		s.seqIndent = indent
	}
	switch {
	case isEntry && indent == s.seqIndent:
		s.endItem()
		if s.plans == nil {
			s.itemText, s.spareItem = s.spareItem[:0], nil
		}
		// The entry's "-" becomes a space, so that the item reads as a
		// document of its own, at the same columns.
		s.itemText = append(s.itemText, line...)
		s.itemText[indent] = ' '
		s.itemLine, s.inItem = s.line, true
	case indent > s.seqIndent:
		s.itemText = append(s.itemText, line...)
	default:
		// The next key of the top level: the items have ended.
		s.endItem()
		s.itemsDone = true
		s.text = append(s.text, line...)
	}
}

func (s *yamlSplitter) endItem() {
	if !s.inItem {
		return
	}
	u := unit{source: fmt.Sprintf("%s#%d[%d]", s.name, s.doc, s.itemCount), file: s.name, line: s.itemLine, raw: s.itemText}
	s.itemCount++
	s.itemText, s.inItem = nil, false
	if s.plans == nil {
		if s.item != nil {
			s.item(s.doc, u) // which copies what it keeps
		}
		s.spareItem = u.raw
		return
	}
	p := s.plans[s.doc]
	u.listKind, u.listAPIVersion = p.kind, p.apiVersion
	s.emit(u)
}

// endDocument emits the document read, or its last item, and gets ready
// for the next.
func (s *yamlSplitter) endDocument() {
	defer func() {
		*s = yamlSplitter{splitTo: s.splitTo, line: s.line, doc: s.doc, spareText: s.spareText, spareItem: s.spareItem}
	}()
	if !s.content {
		return
	}
	source := fmt.Sprintf("%s#%d", s.name, s.doc)
	switch {
	case s.badSep != "":
		s.emit(unit{source: source, file: s.name, line: s.docLine, err: errors.New(s.badSep)})
	case s.inItems:
		s.endItem()
		if s.plans == nil {
			// The first pass: the top level but the items tells the kind.
			var top listPlan
			if j, err := yaml.ToJSON(s.text); err == nil {
				var head listHead
				if utiljson.Unmarshal(j, &head) == nil {
					top = listPlan{kind: head.Kind, apiVersion: head.APIVersion, itemsTwice: s.itemsKeys > 1, aliases: s.aliases}
				}
			}
			if s.plan != nil {
				s.plan(s.doc, top)
			}
			if !top.streamed() {
				// Read whole in the second pass; the first looks for
				// definitions in the whole text no more.
				return
			}
		}
		if s.itemCount == 0 {
			p := s.plans[s.doc]
			s.emit(unit{source: source, file: s.name, line: s.docLine, empty: "an empty " + cmpOr(p.kind, "List")})
		}
	default:
		s.emit(unit{source: source, file: s.name, line: s.docLine, raw: s.text})
		if s.plans == nil {
			s.spareText = s.text // read by now: the first pass reads as it goes
		}
	}
}

// hasAlias reports whether line may name a YAML anchor: a "*" where a
// node may begin, after the indentation, "- ", ": ", "? ", "[", "{" or ",",
// and a name after it. A "*" in a quoted string or a block scalar may be
// taken for one: its List is then read whole, which costs only memory.
func hasAlias(line []byte) bool {
	for i, c := range line {
		if c != '*' || i+1 == len(line) || bytes.IndexByte([]byte(" \t\r\n,]}"), line[i+1]) >= 0 {
			continue
		}
		before := bytes.TrimRight(line[:i], " \t")
		if len(before) == 0 || bytes.IndexByte([]byte("-:?[{,"), before[len(before)-1]) >= 0 {
			return true
		}
	}
	return false
}

// listHead is what the first pass reads of a List's top level: its keys
// as kubectl reads them (utiljson), case and all, where encoding/json
// would take "Kind" for kind.
type listHead struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
}

// isItemsKey reports whether line is the top-level key items with a block
// under it: "items:" and nothing else but a comment.
func isItemsKey(line []byte) bool {
	if !bytes.HasPrefix(line, []byte("items:")) {
		return false
	}
	rest := bytes.TrimSpace(line[len("items:"):])
	return len(rest) == 0 || rest[0] == '#'
}

// isBlankOrComment reports whether line is white space, or a comment
// after it. A tab before its end or its comment makes it neither: to
// go.yaml.in/yaml/v2, kubectl's, such a line "cannot start any token",
// and the document it begins, or is in, does not read.
func isBlankOrComment(line []byte) bool {
	for _, c := range line {
		switch c {
		case '\t':
			return false
		case ' ', '\r', '\n':
		case '#':
			return true
		default:
			return false
		}
	}
	return true
}

func indentOf(line []byte) int {
	n := 0
	for n < len(line) && line[n] == ' ' {
		n++
	}
	return n
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// jsonSplitter splits a JSON stream into its top-level values, and a
// List's into the elements of its "items", scanning bytes: strings,
// escapes and nesting, and the keys of the top level.
type jsonSplitter struct {
	splitTo

	line int
	doc  int
	// values counts the top-level values split, null ones too; run stops
	// at maxValues of them (-1: none), stopped then, and broken when the
	// stream cannot be split further.
	values, maxValues int
	stopped, broken   bool
}

// errJSONEnd is a stream that ends inside a value.
var errJSONEnd = errors.New("unexpected end of JSON input")

// errNotJSON is one of a stream's first two values that does not decode,
// found in the first pass: the stream is YAML from the end of the value
// before it (readFile).
var errNotJSON = errors.New("not JSON: the stream is YAML from here")

// mayFallBack reports whether the value being split is one of the first
// two of the first pass's first reading: one that does not decode makes
// the rest of the stream YAML, which only the first pass finds, by
// checking each.
func (s *jsonSplitter) mayFallBack() bool {
	return s.plans == nil && s.maxValues < 0 && s.values <= 1
}

func (s *jsonSplitter) run(br *bufio.Reader) error {
	for {
		if s.maxValues >= 0 && s.values >= s.maxValues {
			s.stopped = true
			return nil
		}
		c, err := s.skipSpace(br)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if rest, _ := br.Peek(4); c == 'n' && (bytes.Equal(rest, []byte("ull")) || len(rest) == 4 && bytes.HasPrefix(rest, []byte("ull")) && !isJSONWordByte(rest[3])) {
			// A null between objects, which kubectl skips (cli-runtime,
			// visitor.go, StreamVisitor.Visit), as YAML's empty documents.
			br.Discard(3)
			s.values++
			continue
		}
		s.doc++
		source := fmt.Sprintf("%s#%d", s.name, s.doc)
		if c != '{' && c != '[' {
			line := s.line
			rest, _ := s.value(br, c)
			if raw := append([]byte{c}, rest...); json.Valid(raw) {
				// A string, a number or a boolean: kubectl's decoder reads
				// it, and on past it; it is no object (readUnit says so).
				s.emit(unit{source: source, file: s.name, line: line, raw: raw, isJSON: true})
				s.values++
				continue
			}
			s.broken = true
			// Not a value kubectl's decoder reads on from: the rest of the
			// stream cannot be split.
			s.emit(unit{source: source, file: s.name, line: s.line, err: fmt.Errorf("line %d: %q where a JSON object begins: the rest of the file is not read", s.line, string(rune(c)))})
			return nil
		}
		if err := s.document(br, c, source); err != nil {
			s.broken = true
			if errors.Is(err, errJSONEnd) || errors.Is(err, errNotJSON) {
				return nil
			}
			return err
		}
		s.values++
	}
}

// isJSONWordByte reports whether b may continue a JSON literal such as
// null: after one, only white space, a delimiter or the end may come.
func isJSONWordByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

// document reads one top-level value, whose first byte c is read.
func (s *jsonSplitter) document(br *bufio.Reader, c byte, source string) error {
	startLine := s.line
	listable := s.plans == nil || s.plans[s.doc].streamed()
	top := []byte{c} // the document, or a List's top level with its items left out
	if c == '[' || !listable {
		rest, err := s.value(br, c)
		if err != nil {
			s.emit(unit{source: source, file: s.name, line: startLine, err: fmt.Errorf("line %d: %w", s.line, err)})
			return err
		}
		raw := append(top, rest...)
		if s.mayFallBack() && !json.Valid(raw) {
			return errNotJSON
		}
		s.emit(unit{source: source, file: s.name, line: startLine, raw: raw, isJSON: true})
		return nil
	}
	// An object: its members, at depth 1, one at a time.
	items, itemCount, itemsKeys := false, 0, 0
	for {
		c, err := s.skipSpace(br)
		if err != nil {
			s.emit(unit{source: source, file: s.name, line: startLine, err: fmt.Errorf("line %d: %w", s.line, errJSONEnd)})
			return errJSONEnd
		}
		top = append(top, c)
		switch c {
		case '}':
			return s.endObject(source, startLine, top, items, itemCount, itemsKeys > 1)
		case ',':
			continue
		case '"':
			key, err := s.str(br)
			if err != nil {
				s.emit(unit{source: source, file: s.name, line: startLine, err: fmt.Errorf("line %d: %w", s.line, err)})
				return err
			}
			top = append(top, key...)
			c, err := s.skipSpace(br)
			if err != nil || c != ':' {
				return s.fail(br, source, startLine, fmt.Errorf("line %d: no ':' after a key", s.line))
			}
			top = append(top, ':')
			if string(key) == `items"` {
				itemsKeys++
			}
			c, err = s.skipSpace(br)
			if err != nil {
				return s.fail(br, source, startLine, fmt.Errorf("line %d: %w", s.line, errJSONEnd))
			}
			if string(key) == `items"` && c == '[' {
				items = true
				n, err := s.elements(br, source)
				itemCount += n
				if err != nil {
					return err
				}
				top = append(top, "[]"...)
				continue
			}
			v, err := s.value(br, c)
			if err != nil {
				return s.fail(br, source, startLine, fmt.Errorf("line %d: %w", s.line, err))
			}
			top = append(top, c)
			top = append(top, v...)
		default:
			return s.fail(br, source, startLine, fmt.Errorf("line %d: %q where a key or '}' belongs", s.line, string(rune(c))))
		}
	}
}

// endObject ends a top-level object: a List's top level, or a whole
// document.
func (s *jsonSplitter) endObject(source string, line int, top []byte, items bool, itemCount int, itemsTwice bool) error {
	if s.mayFallBack() && !json.Valid(top) {
		return errNotJSON
	}
	if !items {
		s.emit(unit{source: source, file: s.name, line: line, raw: top, isJSON: true})
		return nil
	}
	var head listHead
	_ = utiljson.Unmarshal(top, &head)
	p := listPlan{kind: head.Kind, apiVersion: head.APIVersion, itemsTwice: itemsTwice}
	if s.plans == nil {
		if s.plan != nil {
			s.plan(s.doc, p)
		}
		return nil
	}
	if itemCount == 0 {
		s.emit(unit{source: source, file: s.name, line: line, empty: "an empty " + cmpOr(p.kind, "List")})
	}
	return nil
}

// fail reports a document that does not scan; the rest of the stream
// cannot be split, and is not read.
func (s *jsonSplitter) fail(br *bufio.Reader, source string, line int, err error) error {
	s.emit(unit{source: source, file: s.name, line: line, err: fmt.Errorf("%w: the rest of the file is not read", err)})
	return errJSONEnd
}

// elements reads the elements of a List's items, after its "[", as units.
func (s *jsonSplitter) elements(br *bufio.Reader, source string) (int, error) {
	n := 0
	for {
		c, err := s.skipSpace(br)
		if err != nil {
			s.emit(unit{source: source, file: s.name, line: s.line, err: fmt.Errorf("line %d: %w", s.line, errJSONEnd)})
			return n, errJSONEnd
		}
		switch c {
		case ']':
			return n, nil
		case ',':
			continue
		}
		line := s.line
		v, err := s.value(br, c)
		u := unit{source: fmt.Sprintf("%s[%d]", source, n), file: s.name, line: line, raw: append([]byte{c}, v...), isJSON: true}
		if err != nil {
			u.err = fmt.Errorf("line %d: %w", s.line, err)
		} else if s.mayFallBack() && !json.Valid(u.raw) {
			return n, errNotJSON
		}
		n++
		if s.plans == nil {
			if s.item != nil {
				s.item(s.doc, u)
			}
		} else {
			p := s.plans[s.doc]
			u.listKind, u.listAPIVersion = p.kind, p.apiVersion
			s.emit(u)
		}
		if err != nil {
			return n, errJSONEnd
		}
	}
}

// value reads the rest of a value whose first byte c is read: an object
// or an array to its closing bracket, a string to its quote, anything
// else to the byte that ends it, which is left unread.
func (s *jsonSplitter) value(br *bufio.Reader, c byte) ([]byte, error) {
	switch c {
	case '"':
		return s.str(br)
	case '{', '[':
		return s.scan(br, jsonScan{depth: 1})
	}
	var out []byte
	for {
		b, err := br.ReadByte()
		if err != nil {
			return out, nil
		}
		if b == ',' || b == '}' || b == ']' || b == ' ' || b == '\t' || b == '\r' || b == '\n' {
			_ = br.UnreadByte()
			return out, nil
		}
		out = append(out, b)
	}
}

// str reads the rest of a string after its opening quote, the closing
// quote included.
func (s *jsonSplitter) str(br *bufio.Reader) ([]byte, error) {
	return s.scan(br, jsonScan{inString: true})
}

// jsonScan is where a scan of JSON text is: how deep in objects and
// arrays, and whether in a string, just after a backslash.
type jsonScan struct {
	depth             int
	inString, escaped bool
}

// scan reads from br, a buffer at a time, until the value it is in ends:
// the string, when it starts in one at depth 0, or the object or array of
// depth 1. It counts the lines it reads.
func (s *jsonSplitter) scan(br *bufio.Reader, st jsonScan) ([]byte, error) {
	var out []byte
	for {
		buf, err := br.Peek(max(1, br.Buffered()))
		if len(buf) == 0 {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return nil, errJSONEnd
		}
		n, done := st.advance(buf)
		out = append(out, buf[:n]...)
		s.line += bytes.Count(buf[:n], []byte("\n"))
		_, _ = br.Discard(n)
		if done {
			return out, nil
		}
	}
}

// advance scans buf from st, and says how many bytes it took and whether
// the value ended there.
func (st *jsonScan) advance(buf []byte) (int, bool) {
	for i := 0; i < len(buf); i++ {
		c := buf[i]
		if st.inString {
			switch {
			case st.escaped:
				st.escaped = false
			case c == '\\':
				st.escaped = true
			case c == '"':
				st.inString = false
				if st.depth == 0 {
					return i + 1, true
				}
			}
			continue
		}
		switch c {
		case '"':
			st.inString = true
		case '{', '[':
			st.depth++
		case '}', ']':
			st.depth--
			if st.depth == 0 {
				return i + 1, true
			}
		}
	}
	return len(buf), false
}

// skipSpace returns the next byte that is not white space.
func (s *jsonSplitter) skipSpace(br *bufio.Reader) (byte, error) {
	for {
		b, err := br.ReadByte()
		if err != nil {
			return 0, err
		}
		switch b {
		case '\n':
			s.line++
		case ' ', '\t', '\r':
		default:
			return b, nil
		}
	}
}

// yamlLine is a YAML error's line, counted from the document's start.
var yamlLine = regexp.MustCompile(`line (\d+):`)

// yamlValue is a value as the YAML library quotes it in an error ("cannot
// decode !!str `…` as a !!int"): it may be a Secret's, and is not shown.
var yamlValue = regexp.MustCompile("(?s)`.*`") // from the first backtick to the last: a value may hold one, or a newline

// readError says why a unit's text is not an object, in words a user can
// act on: the line in the file, not in the document; a Helm template for
// what is one; never the YAML library's own types.
func readError(u unit, err error) error {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = yamlValue.ReplaceAllLiteralString(msg, "(a value, not shown)")
	msg = yamlLine.ReplaceAllStringFunc(msg, func(m string) string {
		n, _ := strconv.Atoi(yamlLine.FindStringSubmatch(m)[1])
		return fmt.Sprintf("line %d:", u.line+n-1)
	})
	if i := bytes.Index(u.raw, []byte("{{")); i >= 0 {
		return helmError(u, i)
	}
	if strings.HasPrefix(msg, "invalid map key: ") {
		return fmt.Errorf("the document beginning at line %d has a key that is itself a mapping or a list, which JSON, and so the apiserver, cannot take", u.line)
	}
	if !strings.Contains(msg, "line ") {
		msg = fmt.Sprintf("the document beginning at line %d: %s", u.line, msg)
	}
	return errors.New("not YAML or JSON: " + msg)
}

// helmError says that u, which has "{{" at i, is a Helm template.
func helmError(u unit, i int) error {
	line := u.line + bytes.Count(u.raw[:i], []byte("\n"))
	return fmt.Errorf("line %d: a Helm template ({{ … }}), not a manifest: render it first (helm template), then review what it renders", line)
}

// jsonError says where a JSON syntax error is, by line in the file.
func jsonError(u unit, err error) error {
	if i := bytes.Index(u.raw, []byte("{{")); i >= 0 {
		return helmError(u, i)
	}
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) && syntax.Offset > 0 && int(syntax.Offset) <= len(u.raw) {
		line := u.line + bytes.Count(u.raw[:syntax.Offset-1], []byte("\n"))
		return fmt.Errorf("not JSON: line %d: %s", line, syntax.Error())
	}
	return fmt.Errorf("not JSON: the document beginning at line %d: %w", u.line, err)
}

// parsedObject is a unit read: one object, as canonical JSON (its keys
// sorted, its numbers as written), and what review reads of it.
type parsedObject struct {
	source string
	line   int
	json   []byte
	head   objectHead
	// metaErr is why its metadata does not decode as the apiserver
	// decodes it (a boolean annotation): it refuses the object before
	// any webhook.
	metaErr error
}

// objectHead is what review reads of an object itself; the policy reads
// the rest. Its metadata is decoded as the apiserver decodes an object's,
// into ObjectMeta, so that what it refuses to decode is said here.
type objectHead struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
}

func (o *parsedObject) gvk() schema.GroupVersionKind {
	return schema.FromAPIVersionAndKind(o.head.APIVersion, o.head.Kind)
}

// unreadable is a unit, or an item of it, that is no object to review,
// and why.
type unreadable struct {
	source string
	err    error
}

// parseUnit reads a unit: its object, or the items of a List read whole
// (one whose items are not a block the splitter finds, such as
// `items: [...]`), and what of it cannot be read. An empty document reads
// as nothing; a List of no items, as a unit that says so.
func parseUnit(u unit) ([]parsedObject, []unreadable) {
	objs, bad, _ := parseUnitOrEmpty(u)
	return objs, bad
}

// parseUnitOrEmpty is parseUnit, and what holds nothing: an empty List.
// Every error of what cannot be read names its line in the file.
func parseUnitOrEmpty(u unit) ([]parsedObject, []unreadable, string) {
	objs, bad, empty := readUnit(u)
	for i, b := range bad {
		if u.line > 0 && !strings.Contains(b.err.Error(), "line ") {
			bad[i].err = fmt.Errorf("line %d: %w", u.line, b.err)
		}
	}
	return objs, bad, empty
}

// maxDocumentBytes is the most text of one document, or of one item of a
// List, that review decodes: four times the JSON the apiserver reads of a
// request (maxRequestBodyBytes), room for YAML's indentation and
// comments. Decoding takes several times the text in memory, and a larger
// document could only be refused.
const maxDocumentBytes = 4 * maxRequestBodyBytes

func readUnit(u unit) ([]parsedObject, []unreadable, string) {
	if u.err != nil {
		return nil, []unreadable{{u.source, u.err}}, ""
	}
	if u.empty != "" {
		return nil, nil, u.empty
	}
	if len(u.raw) > maxDocumentBytes {
		return nil, []unreadable{{u.source, fmt.Errorf("the document is %d bytes, more than review decodes of one (%d): the apiserver refuses an object over %d bytes of JSON (413) before any webhook", len(u.raw), maxDocumentBytes, maxRequestBodyBytes)}}, ""
	}
	var doc []byte
	if u.isJSON {
		canonical, err := canonicalJSON(u.raw)
		if err != nil {
			return nil, []unreadable{{u.source, jsonError(u, err)}}, ""
		}
		doc = canonical
	} else {
		j, err := yamlToJSON(u.raw)
		if err != nil {
			return nil, []unreadable{{u.source, readError(u, err)}}, ""
		}
		doc = j
	}
	if string(doc) == "null" {
		if u.listKind != "" {
			return nil, []unreadable{{u.source, fmt.Errorf("the %s's item is null, not an object: kubectl refuses it (invalid object to validate)", u.listKind)}}, ""
		}
		return nil, nil, "" // an empty document, or "~"
	}
	if len(doc) == 0 || doc[0] != '{' {
		return nil, []unreadable{{u.source, fmt.Errorf("the document beginning at line %d is not an object: review reads objects with apiVersion and kind", u.line)}}, ""
	}
	obj := parsedObject{source: u.source, line: u.line, json: doc}
	var headErr error
	obj.metaErr, headErr = readHead(doc, &obj.head)
	if u.listKind != "" && headErr == nil {
		// An item of a *List may leave out both its kind and apiVersion,
		// which are then the List's (a DeploymentList's items are
		// Deployments); one without only one of them is not filled in
		// (apimachinery's unstructured decodeToList).
		head := obj.head
		itemKind := strings.TrimSuffix(u.listKind, "List")
		var add []string
		if head.Kind == "" && head.APIVersion == "" && itemKind != "" {
			add = append(add, `"kind":`+quote(itemKind))
			if u.listAPIVersion != "" {
				add = append(add, `"apiVersion":`+quote(u.listAPIVersion))
			}
		}
		if len(add) > 0 {
			sep := ","
			if len(bytes.TrimSpace(doc[1:])) == 1 { // {}
				sep = ""
			}
			doc = append([]byte("{"+strings.Join(add, ",")+sep), doc[1:]...)
			if canonical, err := canonicalJSON(doc); err == nil {
				doc = canonical
			}
			obj = parsedObject{source: u.source, line: u.line, json: doc}
			obj.metaErr, headErr = readHead(doc, &obj.head)
		}
	}
	if headErr != nil {
		return nil, []unreadable{{u.source, headError(headErr)}}, ""
	}
	if err := checkKind(obj.head); err != nil {
		return nil, []unreadable{{u.source, err}}, ""
	}
	if bytes.Contains(doc, []byte(`"items":`)) {
		_, hasItems, _ := jsonfield.Top(doc, "items")
		switch {
		case u.listKind != "" && itemsArray(doc):
			return nil, []unreadable{{u.source, errListInList}}, ""
		case u.listKind == "" && hasItems:
			return listItems(u, obj)
		}
	}
	return []parsedObject{obj}, nil, ""
}

// errListInList is an item of a List that is itself a List: kubectl's
// FlattenListVisitor (k8s.io/cli-runtime v0.37.2, visitor.go) cannot
// extract the items of a List read as an item (meta.ExtractList: "is not
// a list: no Items field in this object"), and fails the List it is in,
// none of whose items it then sends.
var errListInList = errors.New("a List in a List (an object with items): kubectl reads none of the List it is in (\"is not a list: no Items field in this object\")")

// listItems are the items of a List read whole, or what it is when it
// holds none: items null is no item, as kubectl's decoder reads it (and as
// `items:` with nothing after it is). A List with a List in it is an
// error, whole (errListInList).
func listItems(u unit, list parsedObject) ([]parsedObject, []unreadable, string) {
	var body struct {
		Items json.RawMessage `json:"items"`
	}
	var items []json.RawMessage
	err := utiljson.Unmarshal(list.json, &body) // "Items" is not items
	if err == nil && body.Items == nil {
		return []parsedObject{list}, nil, "" // a kind named *List, with no items
	}
	if err == nil {
		err = utiljson.Unmarshal(body.Items, &items)
	}
	if err != nil {
		return nil, []unreadable{{u.source, fmt.Errorf("the %s's items are not a list", list.head.Kind)}}, ""
	}
	if len(items) == 0 {
		return nil, nil, "an empty " + list.head.Kind
	}
	for i, item := range items {
		if itemsArray(item) {
			return nil, []unreadable{{u.source, fmt.Errorf("its item [%d] is itself a List (an object with items): kubectl reads none of a List with a List in it (\"is not a list: no Items field in this object\")", i)}}, ""
		}
	}
	var objs []parsedObject
	var bad []unreadable
	for i, item := range items {
		iu := unit{source: fmt.Sprintf("%s[%d]", u.source, i), file: u.file, line: u.line, raw: item, isJSON: true,
			listKind: list.head.Kind, listAPIVersion: list.head.APIVersion}
		o, b := parseUnit(iu)
		objs, bad = append(objs, o...), append(bad, b...)
	}
	return objs, bad, ""
}

// yamlToJSON is a YAML document as JSON, as kubectl reads it (with
// go.yaml.in/yaml/v2 and its YAML 1.1 scalars: yes is true), its keys
// sorted. A document that begins with "{" is JSON, or YAML in flow style.
func yamlToJSON(raw []byte) ([]byte, error) {
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		if canonical, err := canonicalJSON(raw); err == nil {
			return canonical, nil
		}
		var m map[string]any
		if err := yaml.Unmarshal(raw, &m); err != nil {
			return nil, err
		}
		return json.Marshal(m)
	}
	return yaml.ToJSON(raw)
}

// readHead reads apiVersion, kind and metadata of doc, canonical JSON (its
// keys sorted, each once, valid), and no further than the end of
// metadata, which sorts before spec and status. What of metadata does not
// decode is metaErr, the rest of it read; what of apiVersion or kind does
// not, err.
func readHead(doc []byte, head *objectHead) (metaErr, err error) {
	for _, m := range []struct {
		key  string
		into any
	}{{"apiVersion", &head.APIVersion}, {"kind", &head.Kind}, {"metadata", &head.Metadata}} {
		value, found, err := jsonfield.Top(doc, m.key)
		if err != nil {
			return nil, err
		}
		if !found || string(value) == "null" {
			continue
		}
		// Case-sensitive, as kubectl and the apiserver read it: metadata's
		// "Namespace" is not its namespace. encoding/json, which is not,
		// says what failed in the terms headError reads.
		if err := utiljson.Unmarshal(value, m.into); err != nil {
			if plainErr := json.Unmarshal(value, reflect.New(reflect.TypeOf(m.into).Elem()).Interface()); plainErr != nil {
				err = plainErr
			}
			var typeErr *json.UnmarshalTypeError
			if errors.As(err, &typeErr) {
				typeErr.Field = strings.TrimSuffix(m.key+"."+typeErr.Field, ".")
				if key := firstNotString(value, typeErr.Field); key != "" {
					typeErr.Field += "." + key
				}
			} else if m.key == "metadata" {
				err = fmt.Errorf("metadata: %w", err)
			}
			if m.key == "metadata" {
				return err, nil
			}
			return nil, err
		}
	}
	return nil, nil
}

// firstNotString is, when field is metadata.labels or .annotations, the
// first key (they are sorted) whose value in metadata is not a string:
// encoding/json names the map, not the key.
func firstNotString(metadata []byte, field string) string {
	name, ok := strings.CutPrefix(field, "metadata.")
	if !ok || (name != "labels" && name != "annotations") {
		return ""
	}
	var m map[string]map[string]json.RawMessage
	_ = json.Unmarshal(metadata, &m)
	keys := slices.Sorted(maps.Keys(m[name]))
	for _, k := range keys {
		if v := bytes.TrimSpace(m[name][k]); len(v) > 0 && v[0] != '"' {
			return k
		}
	}
	return ""
}

// canonicalJSON is raw with its keys sorted and its white space gone, its
// numbers as written: what encoding/json writes, and YAML's conversion
// gives, so that two encodings of one object are equal bytes.
func canonicalJSON(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	return json.Marshal(v)
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// headError says which field of the object the apiserver could not
// decode either.
func headError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Errorf("%s is a JSON %s, where the apiserver takes %s: it refuses the object (400 Bad Request) before any webhook", cmpOr(typeErr.Field, "the document"), typeErr.Value, goTypeWords(typeErr.Type.String()))
	}
	return err
}

// goTypeWords says a Go type of ObjectMeta as a user reads a manifest.
func goTypeWords(t string) string {
	switch {
	case t == "string":
		return "a string"
	case strings.HasPrefix(t, "map["):
		return "a mapping of strings"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case t == "bool":
		return "a boolean"
	}
	return "a mapping"
}

// checkKind refuses an object the apiserver could not take: one without
// kind or apiVersion.
func checkKind(head objectHead) error {
	var missing []string
	if head.APIVersion == "" {
		missing = append(missing, "apiVersion")
	}
	if head.Kind == "" {
		missing = append(missing, "kind")
	}
	if len(missing) > 0 {
		return fmt.Errorf("the document has no %s", strings.Join(missing, " or "))
	}
	return nil
}

// withoutSchemas is a YAML CustomResourceDefinition with the value of
// each openAPIV3Schema left out: the lines below a line that is that key,
// indented deeper. What is left is the same YAML but for those values,
// which are then null.
func withoutSchemas(raw []byte) []byte {
	out := make([]byte, 0, 4096)
	skipBelow := -1
	for rest := raw; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i+1], rest[i+1:]
		} else {
			rest = nil
		}
		indent := indentOf(line)
		if skipBelow >= 0 {
			if isBlankOrComment(line) || indent > skipBelow {
				continue
			}
			skipBelow = -1
		}
		if bytes.HasPrefix(line[indent:], []byte("openAPIV3Schema:")) && len(bytes.TrimSpace(line[indent+len("openAPIV3Schema:"):])) == 0 {
			skipBelow = indent
		}
		out = append(out, line...)
	}
	return out
}
