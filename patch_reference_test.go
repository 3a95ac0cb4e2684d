package main

// fullDecodePatch is objectPatch as it was before it read the object
// lazily (patch.go at 213363d, the names changed and nothing else): the
// whole object decoded into maps at the start, each change applied to
// them. TestObjectPatchMatchesFullDecode and FuzzObjectPatch hold
// objectPatch to it: the same operations and the same errors. It shares
// jsonPointer, isIndex, fieldPath and kindOf with patch.go.

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/json"
)

type fullDecodePatch struct {
	object any // the object as sent, with the operations so far applied
	ops    []patchOp
	err    error
}

// patchObjectFullDecode starts a patch of obj, decoding it whole.
func patchObjectFullDecode(obj runtime.RawExtension) (*fullDecodePatch, error) {
	p := &fullDecodePatch{}
	if err := decodeObject(obj, &p.object); err != nil {
		return nil, err
	}
	if _, ok := p.object.(map[string]any); !ok {
		return nil, errors.New("the object is not a JSON object")
	}
	return p, nil
}

// set makes the field at path hold value, creating missing or null
// parents. An object value is set field by field into an object there,
// keeping its other fields; any other value, a list too, replaces it.
func (p *fullDecodePatch) set(value any, path ...string) { p.change(value, path, false) }

// setDefault is set only where the field is missing or null, field by
// field for an object value: the fields the object has keep their values.
func (p *fullDecodePatch) setDefault(value any, path ...string) { p.change(value, path, true) }

// appendTo appends value to the list at path, creating the list and its
// missing parents when the object has none.
func (p *fullDecodePatch) appendTo(value any, path ...string) {
	v, ok := p.jsonValue(value)
	if !ok || !p.hasPath(path) {
		return
	}
	n, have, err := p.walk(path)
	if err != nil {
		p.err = err
		return
	}
	if n < len(path) {
		p.change([]any{v}, path, false)
		return
	}
	list, ok := have.([]any)
	if !ok {
		p.err = fmt.Errorf("%s is %s, not a list, so nothing can be appended to it", fieldPath(path), kindOf(have))
		return
	}
	p.ops = append(p.ops, patchOp{Op: "add", Path: jsonPointer(path...) + "/-", Value: v})
	p.put(path, append(list, p.copyOf(v)))
}

// patch returns the operations, or the first error met.
func (p *fullDecodePatch) patch() ([]patchOp, error) {
	if p.err != nil {
		return nil, p.err
	}
	return p.ops, nil
}

func (p *fullDecodePatch) change(value any, path []string, onlyIfMissing bool) {
	v, ok := p.jsonValue(value)
	if !ok || !p.hasPath(path) {
		return
	}
	n, have, err := p.walk(path)
	if err != nil {
		p.err = err
		return
	}
	if n < len(path) {
		// path[n] is missing or null: add it, holding the rest.
		for i := len(path) - 1; i > n; i-- {
			if isIndex(path[i]) {
				// Almost surely a list the object lacks, which an
				// object {"0": …} in its place would not be.
				p.err = fmt.Errorf("%s is missing, so it has no element %s; appendTo makes a list", fieldPath(path[:i]), path[i])
				return
			}
			v = map[string]any{path[i]: v}
		}
		op := "add"
		if _, inList := have.([]any); inList {
			// "add" would insert a list element before the null one.
			op = "replace"
		}
		p.ops = append(p.ops, patchOp{Op: op, Path: jsonPointer(path[:n+1]...), Value: v})
		p.put(path[:n+1], p.copyOf(v))
		return
	}
	_, haveObject := have.(map[string]any)
	if valueObject, ok := v.(map[string]any); ok && haveObject {
		// Field by field, so that the object's other fields stay.
		keys := make([]string, 0, len(valueObject))
		for k := range valueObject {
			keys = append(keys, k)
		}
		// Sorted, so that the patch is the same every time.
		slices.Sort(keys)
		for _, k := range keys {
			p.change(valueObject[k], append(slices.Clip(path), k), onlyIfMissing)
		}
		return
	}
	if onlyIfMissing || reflect.DeepEqual(have, v) {
		return
	}
	p.ops = append(p.ops, patchOp{Op: "replace", Path: jsonPointer(path...), Value: v})
	p.put(path, p.copyOf(v))
}

func (p *fullDecodePatch) hasPath(path []string) bool {
	if len(path) == 0 && p.err == nil {
		p.err = errors.New("a patch of a field needs the field's path; to replace the whole object, deny it instead")
	}
	return p.err == nil
}

// walk follows path through the object as far as it exists and is not
// null. It returns how many tokens it followed and the node it reached.
func (p *fullDecodePatch) walk(path []string) (int, any, error) {
	node := p.object
	for i, token := range path {
		var child any
		switch n := node.(type) {
		case map[string]any:
			child = n[token]
		case []any:
			j, _ := strconv.Atoi(token)
			if !isIndex(token) || j >= len(n) {
				return i, node, fmt.Errorf("%s has %d elements, so no element %q", fieldPath(path[:i]), len(n), token)
			}
			child = n[j]
		default:
			return i, node, fmt.Errorf("%s is %s, so it has no field %s", fieldPath(path[:i]), kindOf(node), token)
		}
		if child == nil {
			return i, node, nil
		}
		node = child
	}
	return len(path), node, nil
}

// put sets the node at path in p.object, whose parent walk has found.
func (p *fullDecodePatch) put(path []string, v any) {
	_, parent, _ := p.walk(path[:len(path)-1])
	last := path[len(path)-1]
	switch n := parent.(type) {
	case map[string]any:
		n[last] = v
	case []any:
		j, _ := strconv.Atoi(last)
		n[j] = v
	}
}

// jsonValue is value as JSON decodes it (map[string]any, []any, string,
// int64, float64, bool, nil), which the object is compared with.
func (p *fullDecodePatch) jsonValue(value any) (any, bool) {
	if p.err != nil {
		return nil, false
	}
	// A fresh variable: decoding into one that holds a pointer would
	// decode into what it points to.
	var out any
	b, err := json.Marshal(value)
	if err == nil {
		err = json.Unmarshal(b, &out)
	}
	if err != nil {
		p.err = fmt.Errorf("encoding a value of the patch: %w", err)
		return nil, false
	}
	return out, true
}

// copyOf copies a value for p.object, so that a later change to the
// object never changes an operation already made.
func (p *fullDecodePatch) copyOf(v any) any {
	c, _ := p.jsonValue(v)
	return c
}

// patchBuilder is what objectPatch and fullDecodePatch both offer.
type patchBuilder interface {
	set(value any, path ...string)
	setDefault(value any, path ...string)
	appendTo(value any, path ...string)
	patch() ([]patchOp, error)
}

// patchStep is one call of a policy on a patch builder.
type patchStep struct {
	call  string // "set", "setDefault" or "appendTo"
	value any
	path  []string
}

func (s patchStep) String() string {
	v, _ := json.Marshal(s.value)
	return fmt.Sprintf("%s(%s, %q)", s.call, v, s.path)
}

// patchWith makes each step on b and returns its patch.
func patchWith(b patchBuilder, steps []patchStep) ([]patchOp, error) {
	for _, s := range steps {
		switch s.call {
		case "set":
			b.set(s.value, s.path...)
		case "setDefault":
			b.setDefault(s.value, s.path...)
		case "appendTo":
			b.appendTo(s.value, s.path...)
		}
	}
	return b.patch()
}

// checkSameAsFullDecode fails unless objectPatch and fullDecodePatch make
// the same operations, or the same error, from steps on object, and
// objectPatch leaves the bytes of object as they were. One
// difference is meant: of an object that the full decode refuses,
// objectPatch reads only what the steps reach, so it may take it, and
// patch where the steps never meet what is wrong (a number out of range, or
// JSON broken, off their paths; the review's decoder has refused broken
// JSON before a policy runs). Anything else the full decode refuses, it
// refuses, with the same message where the object decodes (not an object,
// or none).
func checkSameAsFullDecode(t *testing.T, object []byte, steps []patchStep) {
	t.Helper()
	obj := runtime.RawExtension{Raw: object}
	sent := bytes.Clone(object)
	defer func() {
		if !bytes.Equal(object, sent) {
			t.Errorf("objectPatch wrote into the object it was given: %s became %s", sent, object)
		}
	}()
	ref, refErr := patchObjectFullDecode(obj)
	p, err := patchObject(obj)
	if refErr != nil {
		switch {
		case err == nil && !bytes.HasPrefix(bytes.TrimSpace(object), []byte("{")):
			t.Fatalf("patchObject(%s) took it; a full decode refuses it: %v", object, refErr)
		case err == nil:
			patchWith(p, steps) // whatever it makes, it must not panic
		case !strings.HasPrefix(refErr.Error(), "the object does not decode") && err.Error() != refErr.Error():
			t.Fatalf("patchObject(%s): %v; a full decode refuses it with %v", object, err, refErr)
		}
		return
	}
	if err != nil {
		t.Fatalf("patchObject(%s): %v; a full decode takes it", object, err)
	}
	want, wantErr := patchWith(ref, steps)
	got, gotErr := patchWith(p, steps)
	wantJSON, _ := json.Marshal(want)
	gotJSON, _ := json.Marshal(got)
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || string(gotJSON) != string(wantJSON) {
		t.Fatalf("on %s, %v:\ngot  %s, %v\nwant %s, %v (the full decode)", object, steps, gotJSON, gotErr, wantJSON, wantErr)
	}
}

// TestObjectPatchMatchesFullDecode holds objectPatch, which reads the
// object only along the paths it changes, to fullDecodePatch: sequences
// of changes where a later one must see an earlier one, objects written
// in every way JSON allows, and each error.
func TestObjectPatchMatchesFullDecode(t *testing.T) {
	no := false
	type steps = []patchStep
	set := func(v any, path ...string) patchStep { return patchStep{"set", v, path} }
	def := func(v any, path ...string) patchStep { return patchStep{"setDefault", v, path} }
	add := func(v any, path ...string) patchStep { return patchStep{"appendTo", v, path} }
	pod := `{"kind":"Pod","metadata":{"name":"a","labels":{"x":"1"}},"spec":{"securityContext":{"runAsUser":1000},` +
		`"containers":[{"name":"a","env":[{"name":"A","value":"1"}],"securityContext":null},{"name":"b","volumeMounts":[]}],` +
		`"volumes":null,"nodeSelector":{"a~b":"c","d/e":"f"}},"status":{"phase":"Pending"}}`
	tests := []struct {
		name, object string
		steps        steps
	}{
		{"a default deep in the spec", pod, steps{def(true, "spec", "securityContext", "runAsNonRoot")}},
		{"a default where a value is", pod, steps{def(5, "spec", "securityContext", "runAsUser")}},
		{"set where the same value is", pod, steps{set(1000, "spec", "securityContext", "runAsUser")}},
		{"set where another value is", pod, steps{set(1001, "spec", "securityContext", "runAsUser")}},
		{"set of a float where an int is", `{"a":1,"b":1.0,"c":1e2,"d":-0}`, steps{set(1.0, "a"), set(1, "b"), set(100, "c"), set(0, "d")}},
		{"each container", pod, steps{
			def(false, "spec", "containers", "0", "securityContext", "allowPrivilegeEscalation"),
			def(false, "spec", "containers", "1", "securityContext", "allowPrivilegeEscalation")}},
		{"a typed value field by field", pod, steps{
			set(&corev1.SecurityContext{AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}, "spec", "securityContext")}},
		{"an object value the object has", pod, steps{set(map[string]any{"name": "A", "value": "1"}, "spec", "containers", "0", "env", "0")}},
		{"a list value the object has", pod, steps{set([]any{map[string]any{"name": "A", "value": "1"}}, "spec", "containers", "0", "env")}},
		{"a list value the object has not", pod, steps{set([]any{"x"}, "spec", "containers", "0", "env")}},
		{"a whole object compared", pod, steps{set(map[string]any{"x": "1"}, "metadata", "labels"), set(map[string]any{"phase": "Pending"}, "status")}},
		{"escaped keys", pod, steps{set("g", "spec", "nodeSelector", "d/e"), set("c", "spec", "nodeSelector", "a~b"), set("h", "spec", "nodeSelector", "i~1j")}},
		{"keys written with escapes", `{"sp\u0065c":{"a\/b":1,"\u00e9":2}}`, steps{set(1, "spec", "a/b"), set(3, "spec", "é")}},
		{"a member written twice", `{"spec":{"a":1},"spec":{"b":2}}`, steps{set(2, "spec", "b"), set(1, "spec", "a")}},
		{"written with spaces", " {\n \"spec\" : { \"containers\" : [ { \"name\" : \"a\" } , null ] } \n} ", steps{
			set("b", "spec", "containers", "0", "name"), def(true, "spec", "containers", "1", "x"), add("c", "spec", "containers", "0", "args")}},

		// A later change sees an earlier one.
		{"a change below a parent the first made", `{"spec":{}}`, steps{
			set(true, "spec", "securityContext", "runAsNonRoot"), set("RuntimeDefault", "spec", "securityContext", "seccompProfile", "type")}},
		{"set then setDefault", pod, steps{set(1, "spec", "x"), def(2, "spec", "x"), set(true, "spec", "securityContext", "runAsNonRoot"), def(false, "spec", "securityContext", "runAsNonRoot")}},
		{"two changes in one element", pod, steps{
			set(true, "spec", "containers", "0", "securityContext", "privileged"), set(false, "spec", "containers", "0", "securityContext", "readOnlyRootFilesystem")}},
		{"setDefault then set", pod, steps{def(1, "spec", "x"), set(2, "spec", "x")}},
		{"set twice", pod, steps{set(1, "spec", "x"), set(1, "spec", "x"), set(map[string]any{"y": 1}, "spec", "x")}},
		{"appended, then indexed", pod, steps{
			add(map[string]any{"name": "c"}, "spec", "containers"),
			set("img", "spec", "containers", "2", "image"),
			add("-v", "spec", "containers", "2", "args"),
			def(map[string]any{"name": "d"}, "spec", "containers", "2")}},
		{"appended to a new list, then indexed", pod, steps{
			add(map[string]any{"name": "v"}, "spec", "volumes"), add(map[string]any{"name": "w"}, "spec", "volumes"),
			set(map[string]any{"medium": "Memory"}, "spec", "volumes", "1", "emptyDir")}},
		{"appended to an empty list", pod, steps{add(map[string]any{"name": "m"}, "spec", "containers", "1", "volumeMounts"), set("/m", "spec", "containers", "1", "volumeMounts", "0", "mountPath")}},
		{"a null element replaced, then changed", pod, steps{
			add(nil, "spec", "containers"), set(1, "spec", "containers", "2", "a"), set(2, "spec", "containers", "2", "b")}},
		{"a value put, then compared", pod, steps{set([]any{1, 2}, "spec", "l"), set([]any{1, 2}, "spec", "l"), add(3, "spec", "l"), set([]any{1, 2, 3}, "spec", "l")}},
		{"null set, then set below", pod, steps{set(nil, "spec", "securityContext"), set(true, "spec", "securityContext", "runAsNonRoot")}},
		{"the sidecar injector", pod, steps{
			add(benchSidecarMount, "spec", "containers", "0", "volumeMounts"), add(benchSidecarMount, "spec", "containers", "1", "volumeMounts"),
			add(benchSidecarContainer, "spec", "containers"), add(benchSidecarVolume, "spec", "volumes")}},

		// Errors, each returned once.
		{"through a string", pod, steps{set(1, "kind", "x")}},
		{"through a number", pod, steps{set(1, "spec", "securityContext", "runAsUser", "x")}},
		{"through a boolean", `{"a":true,"b":[false]}`, steps{set(1, "a", "x"), set(1, "b", "0", "x")}},
		{"no such element", pod, steps{set(1, "spec", "containers", "2", "x")}},
		{"not an index", pod, steps{set(1, "spec", "containers", "-"), set(1, "spec", "containers", "01")}},
		{"an element of no list", pod, steps{add("x", "spec", "initContainers", "0", "args")}},
		{"append to an object", pod, steps{add(1, "spec", "securityContext")}},
		{"append to a string", pod, steps{add(1, "kind")}},
		{"no path", pod, steps{set(1)}},
		{"a value that does not encode", pod, steps{set(func() {}, "x")}},
		{"the first error is kept", pod, steps{set(1, "kind", "x"), set(1, "spec", "x"), add(1, "spec")}},

		// The object itself.
		{"no object", ``, steps{set(1, "x")}},
		{"null", `null`, steps{set(1, "x")}},
		{"a list", `[{"a":1}]`, steps{set(1, "0", "a")}},
		{"a string", `"a"`, steps{set(1, "x")}},
		{"not JSON", `{"a":`, steps{set(1, "x")}},
		{"a number out of range off the path", `{"a":1e999,"spec":{}}`, steps{set(1, "spec", "x")}},
		{"a number out of range on the path", `{"a":1e999}`, steps{set(1, "a")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkSameAsFullDecode(t, []byte(tc.object), tc.steps) })
	}
}

// FuzzObjectPatch holds objectPatch to fullDecodePatch (as
// checkSameAsFullDecode does) on any object and any sequence of changes.
// script picks each change from a vocabulary, where random bytes seldom
// reach: one byte for the call and the path's length (up to 4 tokens), one
// for each token, among the object's own keys and tokens that matter to a
// patch ("0", "-", "01", "a/b", …), and one for the value, among the
// object's own values (so that a value already there is met) and values of
// every kind.
func FuzzObjectPatch(f *testing.F) {
	pod := string(toolboxPods(f)[0].object.Raw) // the plumbing's Pod, 3 KB
	for _, seed := range []struct{ object, script string }{
		// setDefault(true, spec.securityContext.runAsNonRoot), appendTo a
		// Toleration to spec.containers, set spec.containers.2.a, then
		// setDefault of an object at spec.containers.0.securityContext.
		{pod, "\x0a\x00\x02\x03\x00" + "\x08\x00\x01\x0f" + "\x0c\x00\x01\x07\x0b\x06" + "\x0d\x00\x01\x05\x02\x0e"},
		// set below a null element, appendTo a list that is not there.
		{`{"spec":{"containers":[{"name":"a"},null]}}`, "\x0c\x00\x01\x06\x0b\x03" + "\x0e\x00\x01\x05\x04\x06"},
		// appendTo a new list twice, then set its second element.
		{`{"spec":{}}`, "\x08\x00\x0b\x06" + "\x08\x00\x0b\x07" + "\x09\x00\x0b\x06\x03"},
		// A member written twice, escaped keys, a path through a string,
		// no path.
		{`{"a":{"b":[1,{"c":"d"}]},"a":null}`, "\x06\x0b\x0c\x03"},
		{`{"sp\u0065c":{"x/y":1.0,"~":true}}`, "\x06\x00\x0e\x03" + "\x07\x00\x0f\x01"},
		{`{"a":"s"}`, "\x06\x0b\x0c\x03"},
		{`{}`, "\x00\x01"},
	} {
		f.Add([]byte(seed.object), []byte(seed.script))
	}
	f.Fuzz(func(t *testing.T, object, script []byte) {
		tokens := []string{"spec", "containers", "securityContext", "runAsNonRoot", "env", "0", "1", "2", "-", "01", "", "a", "b", "c", "x/y", "~"}
		values := []any{true, false, 0, 1, 1.5, int64(1) << 60, "x", "", nil, map[string]any{}, []any{}, []any{1, "x"},
			map[string]any{"a": 1, "b": map[string]any{"c": true}}, map[string]any{"a": nil}, map[string]any{"runAsNonRoot": true, "runAsUser": 1000},
			corev1.Toleration{Key: "example.com/gpu", Operator: corev1.TolerationOpExists}, func() {}}
		var decoded any
		if json.Unmarshal(object, &decoded) == nil {
			tokens, values = appendParts(decoded, tokens, values)
		}
		var steps []patchStep
		for len(script) > 0 && len(steps) < 8 {
			call, n := int(script[0])%3, int(script[0])/3%5
			script = script[1:]
			if len(script) < n+1 {
				break
			}
			var path []string
			for _, b := range script[:n] {
				path = append(path, tokens[int(b)%len(tokens)])
			}
			steps = append(steps, patchStep{[]string{"set", "setDefault", "appendTo"}[call], values[int(script[n])%len(values)], path})
			script = script[n+1:]
		}
		checkSameAsFullDecode(t, object, steps)
	})
}

// appendParts appends v's keys to tokens and its values, v itself among
// them, to values, in a fixed order, each at most 64.
func appendParts(v any, tokens []string, values []any) ([]string, []any) {
	if len(values) < 64 {
		values = append(values, v)
	}
	switch v := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if len(tokens) < 64 {
				tokens = append(tokens, k)
			}
			tokens, values = appendParts(v[k], tokens, values)
		}
	case []any:
		for _, e := range v {
			tokens, values = appendParts(e, tokens, values)
		}
	}
	return tokens, values
}
