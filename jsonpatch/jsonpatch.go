// Package jsonpatch applies a JSON Patch (RFC 6902) to a JSON document as
// the kube-apiserver applies a mutating webhook's patch: with
// gopkg.in/evanphx/json-patch.v4, as k8s.io/apiserver v0.37 calls it
// (mutating/dispatcher.go: DecodePatch, then Apply to the object), and
// with its error texts. The webhook's tests apply every patch they check
// with it, so a patch that passes them is one the apiserver accepts;
// webhook doctor applies a live webhook's patch with it; and e2e/jsonpatch
// fuzzes it against that library so the two cannot drift apart.
//
// It depends on the standard library only, so the root module stays free
// of dependencies; the server itself never applies a patch.
//
// Where json-patch v4 departs from RFC 6902, this does as json-patch does,
// because that is what a webhook's patch meets:
//   - an array index may be negative, counting from the end, and is read
//     with strconv.Atoi ("+1" and "01" are 1);
//   - "add" to the whole document ("") fails; "replace" of "" takes an
//     object or an array only;
//   - "replace" of a missing member of an object adds it;
//   - "copy" from a missing member of an object copies null;
//   - "test" compares numbers and strings as written ("1.0" is not "1"),
//     and a missing member passes a test for null;
//   - a path that does not start with "/" loses its first token;
//   - a member or element that is null cannot be walked into, and nor can
//     a null that "copy" made, which is also never written to;
//   - "copy" may add at most maxCopyBytes in all.
//
// Where json-patch panics (a "test" of the whole document with no value, a
// "test" that meets null inside an array, a write below a copied null),
// the apiserver answers the request with an internal error; Apply returns
// an error.
package jsonpatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// maxCopyBytes caps what "copy" operations may add to a document, as
// k8s.io/apiserver's JSONPatchMaxCopyBytes (3 MiB, twice the largest object
// etcd stores) caps json-patch's AccumulatedCopySizeLimit.
const maxCopyBytes = 3 << 20

// A node of the document is one of:
//   - nil: null as it was in the document or in a value;
//   - addedNull: the value null of an operation ("value": null), which
//     json-patch keeps apart from a null inside a value;
//   - map[string]any: an object; when nil, a null that json-patch reads as
//     an object with no members and panics writing to: what "copy" makes
//     of an addedNull, or a document that is null;
//   - *[]any: an array, by pointer so that it grows and shrinks in place;
//   - unread: an object or an array not walked into yet, as written;
//   - json.RawMessage: a string, number or boolean, as written.
//
// An object or an array is read one level at a time, when a path walks
// into it, as json-patch's lazyNode does: a patch of one annotation of a
// 1 MB object decodes the members on its path, not the whole object.
type addedNull struct{}

// unread is an object or an array, as written, that no path has walked
// into: it is written back as it was.
type unread json.RawMessage

func (u unread) MarshalJSON() ([]byte, error) { return u, nil }

// read reads u one level: its members or elements stay unread.
func (u unread) read() any { return parse(json.RawMessage(u)) }

func (addedNull) MarshalJSON() ([]byte, error) { return []byte("null"), nil }

// errPanic marks what json-patch panics on.
var errPanic = errors.New("gopkg.in/evanphx/json-patch.v4 panics here, which the apiserver answers with an internal error")

// Apply returns doc, a JSON object or array, with patch applied, or the
// error that makes the apiserver refuse the patch.
func Apply(doc, patch []byte) ([]byte, error) {
	var ops []map[string]*json.RawMessage
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, fmt.Errorf("the patch is not a JSON Patch: %w", err)
	}
	if len(doc) == 0 {
		return doc, nil
	}
	var root any
	var err error
	if doc[0] == '[' {
		var a []*json.RawMessage
		err = json.Unmarshal(doc, &a)
		root = parseArray(a)
	} else {
		var m map[string]*json.RawMessage
		err = json.Unmarshal(doc, &m)
		root = parseObject(m)
	}
	if err != nil {
		return nil, err
	}
	var copied int
	for _, op := range ops {
		if root, err = apply(root, op, &copied); err != nil {
			return nil, err
		}
	}
	return json.Marshal(root)
}

func apply(root any, op map[string]*json.RawMessage, copied *int) (any, error) {
	kind := "unknown"
	if raw := op["op"]; raw != nil {
		if json.Unmarshal(*raw, &kind) != nil {
			kind = "unknown"
		}
	}
	path, err := stringField(op, "path")
	if err != nil && kind != "unknown" {
		return nil, fmt.Errorf("%s operation failed to decode path: %w", kind, err)
	}
	value, hasValue := op["value"]
	switch kind {
	case "add":
		c, key := find(root, path)
		if c == nil {
			return nil, fmt.Errorf("add operation does not apply: doc is missing path: %q: missing value", path)
		}
		if err := c.add(key, valueNode(value, hasValue)); err != nil {
			return nil, fmt.Errorf("error in add for path: '%s': %w", path, err)
		}
		return root, nil
	case "remove":
		c, key := find(root, path)
		if c == nil {
			return nil, fmt.Errorf("remove operation does not apply: doc is missing path: %q: missing value", path)
		}
		if err := c.remove(key); err != nil {
			return nil, fmt.Errorf("error in remove for path: '%s': %w", path, err)
		}
		return root, nil
	case "replace":
		if path == "" {
			switch v := valueNode(value, hasValue).(type) {
			case map[string]any, *[]any:
				return v, nil
			case nil:
				return nil, errPanic
			}
			return nil, errors.New("replace operation value must be object or array")
		}
		c, key := find(root, path)
		if c == nil {
			return nil, fmt.Errorf("replace operation does not apply: doc is missing path: %s: missing value", path)
		}
		if _, err := c.get(key); err != nil {
			return nil, fmt.Errorf("replace operation does not apply: doc is missing key: %s: missing value", path)
		}
		if err := c.set(key, valueNode(value, hasValue)); err != nil {
			// json-patch's own words, remove included.
			return nil, fmt.Errorf("error in remove for path: '%s': %w", path, err)
		}
		return root, nil
	case "move", "copy":
		from, err := stringField(op, "from")
		if err != nil {
			return nil, fmt.Errorf("%s operation failed to decode from: %w", kind, err)
		}
		c, key := find(root, from)
		if c == nil {
			return nil, fmt.Errorf("%s operation does not apply: doc is missing from path: %s: missing value", kind, from)
		}
		v, err := c.get(key)
		if err != nil {
			return nil, fmt.Errorf("error in %s for path: %q: %w", kind, key, err)
		}
		if kind == "move" {
			if err := c.remove(key); err != nil {
				return nil, fmt.Errorf("error in move for path: '%s': %w", key, err)
			}
		} else {
			var size int
			if v, size = deepCopy(v); size > maxCopyBytes-*copied {
				return nil, fmt.Errorf("unable to complete the copy: it adds more than %d bytes", maxCopyBytes)
			}
			*copied += size
		}
		if c, key = find(root, path); c == nil {
			return nil, fmt.Errorf("%s operation does not apply: doc is missing destination path: %s: missing value", kind, path)
		}
		if err := c.add(key, v); err != nil {
			if kind == "move" {
				return nil, fmt.Errorf("error in move for path: '%s': %w", path, err)
			}
			return nil, fmt.Errorf("error while adding value during copy: %w", err)
		}
		return root, nil
	case "test":
		want := valueNode(value, hasValue)
		if path == "" {
			if !hasValue {
				return nil, errPanic
			}
			return root, testResult(equal(root, want), path)
		}
		c, key := find(root, path)
		if c == nil {
			return nil, fmt.Errorf("test operation does not apply: is missing path: %s: missing value", path)
		}
		got, err := c.get(key)
		if err != nil {
			return nil, fmt.Errorf("error in test for path: %q: %w", path, err)
		}
		if got == nil {
			// A missing member passes a test for null.
			_, isNull := want.(addedNull)
			return root, testResult(!hasValue || isNull, path)
		}
		return root, testResult(hasValue && equal(got, want), path)
	}
	return nil, fmt.Errorf("Unexpected kind: %s", kind)
}

func stringField(op map[string]*json.RawMessage, name string) (string, error) {
	raw := op[name]
	if raw == nil {
		return "unknown", fmt.Errorf("operation missing %s field: missing value", name)
	}
	var s string
	if err := json.Unmarshal(*raw, &s); err != nil {
		return "unknown", err
	}
	return s, nil
}

func testResult(ok bool, path string) error {
	if ok {
		return nil
	}
	return fmt.Errorf("testing value %s failed: test failed", path)
}

// valueNode is an operation's value: nil when it has none, addedNull for
// null.
func valueNode(raw *json.RawMessage, ok bool) any {
	switch {
	case !ok:
		return nil
	case raw == nil:
		return addedNull{}
	}
	return parse(*raw)
}

// parse turns JSON the decoder has checked into a node, one level deep:
// the members of an object and the elements of an array that are objects
// or arrays themselves are left unread.
func parse(raw json.RawMessage) any {
	switch raw[0] {
	case '{':
		var m map[string]*json.RawMessage
		_ = json.Unmarshal(raw, &m)
		return parseObject(m)
	case '[':
		var a []*json.RawMessage
		_ = json.Unmarshal(raw, &a)
		return parseArray(a)
	}
	return raw
}

func parseObject(m map[string]*json.RawMessage) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = nil
		if v != nil {
			out[k] = member(*v)
		}
	}
	return out
}

func parseArray(a []*json.RawMessage) *[]any {
	out := make([]any, len(a))
	for i, v := range a {
		if v != nil {
			out[i] = member(*v)
		}
	}
	return &out
}

// member is a member or an element as parse leaves it: an object or an
// array unread, anything else as written.
func member(raw json.RawMessage) any {
	if raw[0] == '{' || raw[0] == '[' {
		return unread(raw)
	}
	return raw
}

// whole is n with every unread object and array below it read, for a
// comparison.
func whole(n any) any {
	switch v := n.(type) {
	case unread:
		return whole(v.read())
	case map[string]any:
		for k, e := range v {
			v[k] = whole(e)
		}
	case *[]any:
		for i, e := range *v {
			(*v)[i] = whole(e)
		}
	}
	return n
}

// deepCopy copies v as json-patch does, through its JSON, and returns the
// size of that JSON.
func deepCopy(v any) (any, int) {
	if v == nil {
		return nil, 0
	}
	b, _ := json.Marshal(v)
	if bytes.Equal(b, []byte("null")) {
		return map[string]any(nil), len(b)
	}
	return parse(b), len(b)
}

// container is the object or array an operation changes: the node that
// holds the last token of its path.
type container interface {
	get(key string) (any, error)
	set(key string, v any) error
	add(key string, v any) error
	remove(key string) error
}

// find walks path up to its last token, returning the container there and
// that token, or nil where json-patch finds the path missing.
func find(root any, path string) (container, string) {
	tokens := strings.Split(path, "/")
	if len(tokens) < 2 {
		return nil, ""
	}
	c := asContainer(root)
	for _, t := range tokens[1 : len(tokens)-1] {
		next, err := c.get(unescape(t))
		if err != nil {
			return nil, ""
		}
		if c = asContainer(next); c == nil {
			return nil, ""
		}
	}
	return c, unescape(tokens[len(tokens)-1])
}

// unescape reads an RFC 6901 reference token in one pass, so "~01" is "~1".
var unescape = strings.NewReplacer("~1", "/", "~0", "~").Replace

func asContainer(n any) container {
	switch n := n.(type) {
	case map[string]any:
		return object(n)
	case *[]any:
		return array{n}
	}
	return nil
}

type object map[string]any

// get returns the member key, read one level if it was unread, and kept
// so: what a path walks into is changed where the object holds it.
func (o object) get(key string) (any, error) {
	v := o[key]
	if u, ok := v.(unread); ok {
		v = u.read()
		o[key] = v
	}
	return v, nil
}

func (o object) set(key string, v any) error { return o.add(key, v) }

func (o object) add(key string, v any) error {
	if o == nil {
		return errPanic
	}
	o[key] = v
	return nil
}

func (o object) remove(key string) error {
	if _, ok := o[key]; !ok {
		return fmt.Errorf("Unable to remove nonexistent key: %s: missing value", key)
	}
	delete(o, key)
	return nil
}

// array is a JSON array, held by pointer so that add and remove change it
// where its parent holds it.
type array struct{ elems *[]any }

// index reads key as json-patch does: strconv.Atoi, and a negative index
// counts back from size.
func index(key string, size int) (int, error) {
	i, err := strconv.Atoi(key)
	if err != nil {
		return 0, err
	}
	if i < 0 {
		if i < -size {
			return 0, fmt.Errorf("Unable to access invalid index: %d: invalid index referenced", i)
		}
		i += size
	}
	return i, nil
}

func (a array) get(key string) (any, error) {
	e := *a.elems
	i, err := index(key, len(e))
	if err != nil {
		return nil, err
	}
	if i >= len(e) {
		return nil, fmt.Errorf("Unable to access invalid index: %d: invalid index referenced", i)
	}
	if u, ok := e[i].(unread); ok {
		e[i] = u.read()
	}
	return e[i], nil
}

// set is only called by "replace", after get found the index.
func (a array) set(key string, v any) error {
	i, err := index(key, len(*a.elems))
	if err != nil {
		return err
	}
	(*a.elems)[i] = v
	return nil
}

func (a array) add(key string, v any) error {
	e := *a.elems
	if key == "-" {
		*a.elems = append(e, v)
		return nil
	}
	i, err := index(key, len(e)+1)
	if err != nil {
		return fmt.Errorf("value was not a proper array index: %q: %w", key, err)
	}
	if i > len(e) {
		return fmt.Errorf("Unable to access invalid index: %d: invalid index referenced", i)
	}
	*a.elems = append(e[:i], append([]any{v}, e[i:]...)...)
	return nil
}

func (a array) remove(key string) error {
	e := *a.elems
	// json-patch checks the upper bound before it reads a negative index.
	if i, err := strconv.Atoi(key); err != nil {
		return err
	} else if i >= len(e) {
		return fmt.Errorf("Unable to access invalid index: %d: invalid index referenced", i)
	}
	i, err := index(key, len(e))
	if err != nil {
		return err
	}
	*a.elems = append(e[:i], e[i+1:]...)
	return nil
}

// equal is json-patch's comparison of a node of the document, got, with a
// test's value, want. Strings and numbers are equal when written the
// same. Where json-patch panics, at null inside an array, it is false: the
// test fails either way.
func equal(got, want any) bool {
	got, want = whole(got), whole(want)
	switch g := got.(type) {
	case addedNull:
		_, ok := want.(addedNull)
		return ok
	case json.RawMessage:
		w, ok := want.(json.RawMessage)
		return ok && bytes.Equal(g, w)
	case map[string]any:
		w, ok := want.(map[string]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for k, gv := range g {
			wv, ok := w[k]
			if !ok || (gv == nil) != (wv == nil) {
				return false
			}
			if gv != nil && !equal(gv, wv) {
				return false
			}
		}
		return true
	case *[]any:
		w, ok := want.(*[]any)
		if !ok || len(*g) != len(*w) {
			return false
		}
		for i := range *g {
			if (*g)[i] == nil || (*w)[i] == nil || !equal((*g)[i], (*w)[i]) {
				return false
			}
		}
		return true
	}
	return false
}
