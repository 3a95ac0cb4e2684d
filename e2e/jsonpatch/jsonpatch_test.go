// Package jsonpatch holds the webhook's test applier of JSON Patch
// (github.com/example/webhook/jsonpatch) against the library the
// kube-apiserver applies a mutating webhook's patch with,
// gopkg.in/evanphx/json-patch.v4 at the version kube-apiserver v1.37 is
// built with. It is a package of its own so that fuzzing it does not start
// the e2e suite's apiserver.
package jsonpatch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/example/webhook/jsonpatch"
	evanphx "gopkg.in/evanphx/json-patch.v4"
)

// FuzzApply applies arbitrary patches to arbitrary documents with both, and
// fails where they differ: one applies a patch the other refuses, or they
// give different documents. Its seed corpus is seeds, below; `make fuzz`
// runs it for a while.
func FuzzApply(f *testing.F) {
	// k8s.io/apiserver sets this from JSONPatchMaxCopyBytes at start-up.
	evanphx.AccumulatedCopySizeLimit = 3 << 20
	for _, seed := range seeds {
		f.Add([]byte(seed[0]), []byte(seed[1]))
	}
	f.Fuzz(func(t *testing.T, doc, patch []byte) {
		checkSame(t, doc, patch)
	})
}

// FuzzApplyOps is FuzzApply with patches built from a small vocabulary of
// operations, paths and values, where random bytes seldom reach: each
// group of four bytes of program is one operation (its kind, path, from
// and value), applied to one of a few documents.
func FuzzApplyOps(f *testing.F) {
	evanphx.AccumulatedCopySizeLimit = 3 << 20
	f.Add(uint8(0), []byte{0, 1, 0, 2, 3, 4, 5, 6})
	f.Add(uint8(1), []byte{4, 9, 1, 8, 5, 7, 2, 3, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, doc uint8, program []byte) {
		checkSame(t, []byte(docs[int(doc)%len(docs)]), patchOf(program))
	})
}

var (
	docs  = []string{`{"a":{"b":[1,{"c":null},[]]},"d":null,"e":"x","~/":{}}`, `[{"a":[null,1.0]},"\u0041",{}]`, `{}`}
	kinds = []string{"add", "remove", "replace", "move", "copy", "test", "", "bogus"}
	paths = []string{"", "/", "/a", "/a/b", "/a/b/0", "/a/b/1", "/a/b/1/c", "/a/b/2/-", "/a/b/-1", "/a/b/01", "/a/b/+1", "/a/b/3",
		"/a/b/-4", "/d", "/d/x", "/e", "/e/x", "/~0~1", "/~0~1/y", "/0", "/0/a", "/0/a/0", "/1", "/-", "a/x", "/z", "/z/y", "/a/b/2/0", "/a/b/x"}
	values = []string{"", `null`, `{}`, `[]`, `1`, `1.0`, `"A"`, `"\u0041"`, `[null]`, `{"c":null}`, `[1,{"c":null},[]]`, `{"x":[]}`, `[1]`, `true`}
)

// patchOf turns a program of FuzzApplyOps into a JSON Patch.
func patchOf(program []byte) []byte {
	// Sixteen operations are plenty, and each "copy" can double the
	// document.
	program = program[:min(len(program), 64)]
	var ops []map[string]json.RawMessage
	for i := 0; i+3 < len(program); i += 4 {
		op := map[string]json.RawMessage{}
		if k := kinds[int(program[i])%len(kinds)]; k != "" {
			op["op"], _ = json.Marshal(k)
		}
		if p := int(program[i+1]) % (len(paths) + 1); p < len(paths) {
			op["path"], _ = json.Marshal(paths[p])
		}
		if p := int(program[i+2]) % (len(paths) + 1); p < len(paths) {
			op["from"], _ = json.Marshal(paths[p])
		}
		if v := values[int(program[i+3])%len(values)]; v != "" {
			op["value"] = json.RawMessage(v)
		}
		ops = append(ops, op)
	}
	b, _ := json.Marshal(ops)
	return b
}

// TestApplySeeds runs the seeds as a test, so that `go test` alone checks
// every case they name.
func TestApplySeeds(t *testing.T) {
	evanphx.AccumulatedCopySizeLimit = 3 << 20
	for _, seed := range seeds {
		checkSame(t, []byte(seed[0]), []byte(seed[1]))
	}
}

func checkSame(t *testing.T, doc, patch []byte) {
	t.Helper()
	want, wantErr := apiserverApply(doc, patch)
	got, err := jsonpatch.Apply(doc, patch)
	switch {
	case (err == nil) != (wantErr == nil):
		t.Fatalf("doc %s patch %s:\ngot  %s, %v\nwant %s, %v (json-patch v4)", doc, patch, got, err, want, wantErr)
	case err == nil && !sameJSON(got, want):
		t.Fatalf("doc %s patch %s:\ngot  %s\nwant %s (json-patch v4)", doc, patch, got, want)
	}
}

// apiserverApply is what mutating/dispatcher.go does with a patch: decode
// it, then apply it. A panic inside json-patch is an error to the
// apiserver, which answers the request with 500.
func apiserverApply(doc, patch []byte) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("json-patch panicked: %v", r)
		}
	}()
	p, err := evanphx.DecodePatch(patch)
	if err != nil {
		return nil, err
	}
	return p.Apply(doc)
}

// sameJSON compares two documents as JSON, numbers as written.
func sameJSON(a, b []byte) bool {
	decode := func(b []byte) (any, error) {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		err := d.Decode(&v)
		return v, err
	}
	va, errA := decode(a)
	vb, errB := decode(b)
	if errA != nil || errB != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(va, vb)
}

// seeds are documents and patches at the edges of RFC 6902 and of
// json-patch v4's reading of it.
var seeds = [][2]string{
	// RFC 6902 appendix A.
	{`{"foo":"bar"}`, `[{"op":"add","path":"/baz","value":"qux"}]`},
	{`{"foo":["bar","baz"]}`, `[{"op":"add","path":"/foo/1","value":"qux"}]`},
	{`{"baz":"qux","foo":"bar"}`, `[{"op":"remove","path":"/baz"}]`},
	{`{"foo":["bar","qux","baz"]}`, `[{"op":"remove","path":"/foo/1"}]`},
	{`{"baz":"qux","foo":"bar"}`, `[{"op":"replace","path":"/baz","value":"boo"}]`},
	{`{"foo":{"bar":"baz","waldo":"fred"},"qux":{"corge":"grault"}}`, `[{"op":"move","from":"/foo/waldo","path":"/qux/thud"}]`},
	{`{"foo":["all","grass","cows","eat"]}`, `[{"op":"move","from":"/foo/1","path":"/foo/3"}]`},
	{`{"baz":"qux","foo":["a",2,"c"]}`, `[{"op":"test","path":"/baz","value":"qux"},{"op":"test","path":"/foo/1","value":2}]`},
	{`{"baz":"qux"}`, `[{"op":"test","path":"/baz","value":"bar"}]`},
	{`{"foo":"bar"}`, `[{"op":"add","path":"/child","value":{"grandchild":{}}}]`},
	{`{"foo":"bar"}`, `[{"op":"add","path":"/baz","value":"qux","xyz":123}]`},
	{`{"foo":"bar"}`, `[{"op":"add","path":"/baz/bat","value":"qux"}]`},
	{`{"/":9,"~1":10}`, `[{"op":"test","path":"/~01","value":10}]`},
	{`{"/":9,"~1":10}`, `[{"op":"test","path":"/~01","value":"10"}]`},
	{`{"foo":["bar"]}`, `[{"op":"add","path":"/foo/-","value":["abc","def"]}]`},
	// What webhooks send.
	{`{"metadata":{"name":"x"}}`, `[{"op":"add","path":"/metadata/annotations","value":{"a.example.com/b":"c"}}]`},
	{`{"metadata":{"name":"x"}}`, `[{"op":"add","path":"/metadata/annotations/a.example.com~1b","value":"c"}]`},
	{`{"spec":{"containers":[{"name":"a"},{"name":"b","securityContext":null}]}}`, `[{"op":"add","path":"/spec/containers/1/securityContext","value":{"runAsNonRoot":true}},{"op":"add","path":"/spec/containers/0/securityContext","value":{}},{"op":"add","path":"/spec/containers/0/securityContext/x","value":1}]`},
	{`{"spec":{"containers":[{"name":"a","securityContext":null}]}}`, `[{"op":"add","path":"/spec/containers/0/securityContext/x","value":1}]`},
	{`{"spec":{}}`, `[{"op":"add","path":"/spec/tolerations/-","value":{}}]`},
	// json-patch v4's own readings.
	{`{"a":[1,2,3]}`, `[{"op":"remove","path":"/a/-1"},{"op":"add","path":"/a/-1","value":9},{"op":"replace","path":"/a/-3","value":0}]`},
	{`{"a":[1,2,3]}`, `[{"op":"add","path":"/a/+1","value":9},{"op":"test","path":"/a/01","value":9}]`},
	{`{"a":[1,2,3]}`, `[{"op":"add","path":"/a/4","value":9}]`},
	{`{"a":[1,2,3]}`, `[{"op":"remove","path":"/a/-4"}]`},
	{`{"a":1}`, `[{"op":"add","path":"","value":{}}]`},
	{`{"a":1}`, `[{"op":"replace","path":"","value":[1]}]`},
	{`{"a":1}`, `[{"op":"replace","path":"","value":1}]`},
	{`{"a":1}`, `[{"op":"replace","path":""}]`},
	{`{"a":1}`, `[{"op":"replace","path":"/b","value":2}]`},
	{`{"a":1}`, `[{"op":"copy","from":"/b","path":"/c"}]`},
	{`{"a":1}`, `[{"op":"test","path":"/b","value":null},{"op":"test","path":"/b"}]`},
	{`{"a":1.0}`, `[{"op":"test","path":"/a","value":1}]`},
	{`{"a":"\u0041"}`, `[{"op":"test","path":"/a","value":"A"}]`},
	{`{"a":1}`, `[{"op":"add","path":"b","value":2}]`},
	{`{"a":1}`, `[{"op":"add","path":"/b","value":null},{"op":"test","path":"/b","value":null},{"op":"copy","from":"/b","path":"/c"},{"op":"test","path":"/c","value":{}}]`},
	{`{"a":1}`, `[{"op":"add","path":"/b","value":null},{"op":"copy","from":"/b","path":"/c"},{"op":"add","path":"/c/d","value":1}]`},
	{`{"a":[null]}`, `[{"op":"test","path":"/a","value":[null]}]`},
	{`{"a":1}`, `[{"op":"test","path":""}]`},
	{`{"a":1}`, `[{"op":"move","from":"/a","path":"/a/b"}]`},
	{`{"a":{"b":1}}`, `[{"op":"move","from":"/a","path":"/c"},{"op":"test","path":"/c/b","value":1}]`},
	{`{"a":1}`, `[{"op":"add","path":"/b"}]`},
	{`{"a":1}`, `[{"op":"frobnicate","path":"/a"}]`},
	{`{"a":1}`, `[{"path":"/a"}]`},
	{`{"a":1}`, `[{"op":"add","value":1}]`},
	{`{"a":1}`, `[{"op":"move","path":"/b"}]`},
	{`{"a":1}`, `[null]`},
	{`{"a":1}`, `null`},
	{`{"a":1}`, `{}`},
	{`[1,2]`, `[{"op":"add","path":"/0","value":0}]`},
	{`null`, `[]`},
	{`null`, `[{"op":"add","path":"/a","value":1}]`},
	{``, `[{"op":"add","path":"/a","value":1}]`},
}
