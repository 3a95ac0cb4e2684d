package jsonpatch

import (
	"strings"
	"testing"
)

// TestApply checks what a webhook's patches meet, and json-patch v4's
// readings of RFC 6902. e2e/jsonpatch checks the rest against json-patch
// itself.
func TestApply(t *testing.T) {
	tests := []struct {
		name, doc, patch string
		want             string // the document, or "error: " and part of the error
	}{
		{"add a member", `{"foo":"bar"}`, `[{"op":"add","path":"/baz","value":"qux"}]`, `{"baz":"qux","foo":"bar"}`},
		{"add replaces a member", `{"a":{"x":1}}`, `[{"op":"add","path":"/a","value":{"y":2}}]`, `{"a":{"y":2}}`},
		{"add inserts into an array", `{"foo":["bar","baz"]}`, `[{"op":"add","path":"/foo/1","value":"qux"}]`, `{"foo":["bar","qux","baz"]}`},
		{"add appends with -", `{"foo":["bar"]}`, `[{"op":"add","path":"/foo/-","value":["abc"]}]`, `{"foo":["bar",["abc"]]}`},
		{"add below a missing member", `{"metadata":{}}`, `[{"op":"add","path":"/metadata/annotations/a","value":"b"}]`, `error: doc is missing path`},
		{"add below null", `{"spec":{"securityContext":null}}`, `[{"op":"add","path":"/spec/securityContext/runAsNonRoot","value":true}]`, `error: doc is missing path`},
		{"add past the end", `{"a":[1]}`, `[{"op":"add","path":"/a/2","value":2}]`, `error: invalid index`},
		{"escaped keys", `{"a/b":{"c~d":1}}`, `[{"op":"replace","path":"/a~1b/c~0d","value":2}]`, `{"a/b":{"c~d":2}}`},
		{"remove", `{"foo":["bar","qux","baz"]}`, `[{"op":"remove","path":"/foo/1"}]`, `{"foo":["bar","baz"]}`},
		{"remove a missing member", `{"a":1}`, `[{"op":"remove","path":"/b"}]`, `error: nonexistent key`},
		{"negative index", `{"a":[1,2,3]}`, `[{"op":"remove","path":"/a/-1"}]`, `{"a":[1,2]}`},
		{"replace of a missing member adds it", `{"a":1}`, `[{"op":"replace","path":"/b","value":2}]`, `{"a":1,"b":2}`},
		{"replace past the end", `{"a":[1]}`, `[{"op":"replace","path":"/a/1","value":2}]`, `error: missing key`},
		{"replace the document", `{"a":1}`, `[{"op":"replace","path":"","value":[1]}]`, `[1]`},
		{"add to the document", `{"a":1}`, `[{"op":"add","path":"","value":{}}]`, `error: missing path`},
		{"move", `{"foo":{"waldo":"fred"},"qux":{}}`, `[{"op":"move","from":"/foo/waldo","path":"/qux/thud"}]`, `{"foo":{},"qux":{"thud":"fred"}}`},
		{"move within an array", `{"foo":["all","grass","cows","eat"]}`, `[{"op":"move","from":"/foo/1","path":"/foo/3"}]`, `{"foo":["all","cows","eat","grass"]}`},
		{"move into itself", `{"a":{}}`, `[{"op":"move","from":"/a","path":"/a/b"}]`, `error: missing destination path`},
		{"copy", `{"a":{"b":[1]}}`, `[{"op":"copy","from":"/a/b","path":"/c"},{"op":"add","path":"/c/-","value":2}]`, `{"a":{"b":[1]},"c":[1,2]}`},
		{"copy of a missing member is null", `{"a":1}`, `[{"op":"copy","from":"/b","path":"/c"}]`, `{"a":1,"c":null}`},
		{"test", `{"baz":"qux","foo":["a",2]}`, `[{"op":"test","path":"/baz","value":"qux"},{"op":"test","path":"/foo/1","value":2}]`, `{"baz":"qux","foo":["a",2]}`},
		{"test fails", `{"baz":"qux"}`, `[{"op":"test","path":"/baz","value":"bar"}]`, `error: test failed`},
		{"test compares numbers as written", `{"a":1.0}`, `[{"op":"test","path":"/a","value":1}]`, `error: test failed`},
		{"test of a missing member for null", `{"a":1}`, `[{"op":"test","path":"/b","value":null}]`, `{"a":1}`},
		{"test with null in an array", `{"a":[null]}`, `[{"op":"test","path":"/a","value":[null]}]`, `error: test failed`},
		{"unknown operation", `{"a":1}`, `[{"op":"merge","path":"/a"}]`, `error: Unexpected kind: merge`},
		{"no path", `{"a":1}`, `[{"op":"add","value":1}]`, `error: missing path field`},
		{"not a patch", `{"a":1}`, `{"op":"add"}`, `error: not a JSON Patch`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Apply([]byte(tc.doc), []byte(tc.patch))
			if want, ok := strings.CutPrefix(tc.want, "error: "); ok {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("patch %s of %s: got %s, %v; want an error saying %q", tc.patch, tc.doc, got, err, want)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("patch %s of %s: got %s, %v; want %s", tc.patch, tc.doc, got, err, tc.want)
			}
		})
	}
}
