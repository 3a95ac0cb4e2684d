package main

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/json"

	"github.com/example/webhook/jsonfield"
)

// patchOp is one JSON Patch (RFC 6902) operation, as the kube-apiserver's
// gopkg.in/evanphx/json-patch.v4 accepts it. Value has no omitempty: a
// label may be the empty string, and an "add" without a value is invalid.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// pointerEscaper escapes one reference token of a JSON Pointer (RFC 6901,
// section 3): "~" becomes "~0" and "/" becomes "~1", in one pass, so "~1"
// in a key becomes "~01" and is never read back as "/".
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// jsonPointer joins reference tokens into a JSON Pointer, escaping each one.
// Keys such as "app.kubernetes.io/name" contain "/", so a path must never be
// built by concatenating a raw key.
func jsonPointer(tokens ...string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		pointerEscaper.WriteString(&b, t)
	}
	return b.String()
}

// keyValue is one entry of a string map such as metadata.labels or
// metadata.annotations. Policies keep them in lists, in the order they were
// configured, so that patches and messages are deterministic.
type keyValue struct {
	Key, Value string
}

func (kv keyValue) String() string { return kv.Key + "=" + kv.Value }

// MarshalText writes kv as key=value, as the flags take it: so the JSON
// log shows it as the text log does.
func (kv keyValue) MarshalText() ([]byte, error) { return []byte(kv.String()), nil }

// setLabels returns the operations that make the object whose metadata is
// meta carry every label in want, keeping all its other labels.
func setLabels(meta *objectMetadata, want []keyValue) []patchOp {
	return setMetadataEntries(meta.Absent, "labels", meta.Labels, want)
}

// setAnnotations is setLabels for metadata.annotations.
func setAnnotations(meta *objectMetadata, want []keyValue) []patchOp {
	return setMetadataEntries(meta.Absent, "annotations", meta.Annotations, want)
}

// setMetadataEntries returns the operations that make the string map
// metadata.<field> hold every entry of want while keeping all its others;
// have is the map as the object has it (nil when it has none). RFC 6902
// "add" needs the parent to exist and replaces the target when it does, so:
//   - no metadata: one add of /metadata holding the map;
//   - no metadata.<field>: one add of the whole map (an add of
//     /metadata/<field>/<key> would fail with "doc is missing path");
//   - otherwise: one add per key missing or different (an add of the whole
//     map would delete the entries the object has).
//
// Nothing to change gives no operations: a second pass is a no-op.
func setMetadataEntries(noMetadata bool, field string, have map[string]string, want []keyValue) []patchOp {
	if len(want) == 0 {
		return nil
	}
	if noMetadata {
		return []patchOp{{Op: "add", Path: "/metadata", Value: map[string]any{field: entriesMap(want)}}}
	}
	if have == nil {
		// A field name of metadata needs no escaping, and a plain
		// concatenation costs one allocation where jsonPointer costs three.
		return []patchOp{{Op: "add", Path: "/metadata/" + field, Value: entriesMap(want)}}
	}
	var ops []patchOp
	for _, kv := range want {
		if v, ok := have[kv.Key]; ok && v == kv.Value {
			continue
		}
		ops = append(ops, patchOp{Op: "add", Path: jsonPointer("metadata", field, kv.Key), Value: kv.Value})
	}
	return ops
}

func entriesMap(kvs []keyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// objectPatch builds a JSON Patch that changes fields anywhere in an
// object, below metadata too: a default deep in the spec, an entry
// appended to a list, a field of the i-th container. Make one with
// patchObject(req.Object), call set, setDefault and appendTo, and end with
// patch:
//
//	edit, err := patchObject(req.Object)
//	if err != nil {
//		return errored(http.StatusBadRequest, err)
//	}
//	edit.setDefault(true, "spec", "securityContext", "runAsNonRoot")
//	for i := range pod.Spec.Containers {
//		edit.setDefault(false, "spec", "containers", strconv.Itoa(i), "securityContext", "allowPrivilegeEscalation")
//	}
//	edit.appendTo(corev1.Toleration{Key: "example.com/gpu", Operator: corev1.TolerationOpExists}, "spec", "tolerations")
//	ops, err := edit.patch()
//
// A path is the field names from the top of the object, as in YAML; a
// decimal token selects an element of a list the object has
// (strconv.Itoa(i)); appendTo makes a list it lacks. It reads the object
// as sent, only along the paths it changes, and applies each change to
// what it read as it goes, so that every patch applies whatever the object
// has:
//   - the innermost parent missing or null is created by one "add" holding
//     the rest (an "add" below it would fail with "doc is missing path");
//   - a parent the object has is never replaced, so its other fields stay,
//     those the webhook's k8s.io/api does not know among them: an object
//     value, such as a typed corev1.SecurityContext, is set field by field;
//   - a value the object already has gives no operation: a second pass
//     over the patched object is a no-op.
//
// A value is anything encoding/json encodes: typed structs from k8s.io/api
// (empty omitempty fields left out, but an empty struct written, as
// "resources": {}), maps, strings, numbers and booleans. Errors, such
// as a path through a string, are kept and returned by patch, so a policy
// checks once.
type objectPatch struct {
	// object is the object as sent, with the operations so far applied,
	// read only as far as the paths changed so far: each object or list
	// on them is a map[string]any or []any, and what no path has reached
	// is a jsonfield.Raw, as written, decoded only to be compared.
	object any
	ops    []patchOp
	err    error
}

// patchObject starts a patch of obj, req.Object. It reads the object's
// top level, not what is below (docs/patching.md gives the costs).
func patchObject(obj runtime.RawExtension) (*objectPatch, error) {
	if len(obj.Raw) == 0 || bytes.Equal(obj.Raw, []byte("null")) {
		return nil, errors.New("the request carries no object to admit")
	}
	object, err := jsonfield.Open(obj.Raw)
	if err != nil && !errors.Is(err, jsonfield.ErrNotObject) {
		return nil, fmt.Errorf("the object does not decode as a Kubernetes object: %w", err)
	}
	if _, ok := object.(map[string]any); !ok {
		return nil, errors.New("the object is not a JSON object")
	}
	return &objectPatch{object: object}, nil
}

// set makes the field at path hold value, creating missing or null
// parents. An object value is set field by field into an object there,
// keeping its other fields; any other value, a list too, replaces it.
func (p *objectPatch) set(value any, path ...string) { p.change(value, path, false) }

// setDefault is set only where the field is missing or null, field by
// field for an object value: the fields the object has keep their values.
func (p *objectPatch) setDefault(value any, path ...string) { p.change(value, path, true) }

// appendTo appends value to the list at path, creating the list and its
// missing parents when the object has none.
func (p *objectPatch) appendTo(value any, path ...string) {
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
func (p *objectPatch) patch() ([]patchOp, error) {
	if p.err != nil {
		return nil, p.err
	}
	return p.ops, nil
}

func (p *objectPatch) change(value any, path []string, onlyIfMissing bool) {
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
	if onlyIfMissing {
		return
	}
	// Decoded whole, as the value is: an object or list there may hold
	// members still as written.
	if whole, ok := p.jsonValue(have); !ok || reflect.DeepEqual(whole, v) {
		return
	}
	p.ops = append(p.ops, patchOp{Op: "replace", Path: jsonPointer(path...), Value: v})
	p.put(path, p.copyOf(v))
}

func (p *objectPatch) hasPath(path []string) bool {
	if len(path) == 0 && p.err == nil {
		p.err = errors.New("a patch of a field needs the field's path; to replace the whole object, deny it instead")
	}
	return p.err == nil
}

// walk follows path through the object as far as it exists and is not
// null, opening each object or list on the way the first time. It returns
// how many tokens it followed and the node it reached.
func (p *objectPatch) walk(path []string) (int, any, error) {
	node := p.object
	for i, token := range path {
		var child any
		var err error
		switch n := node.(type) {
		case map[string]any:
			if c, ok := n[token]; ok {
				child, err = jsonfield.Opened(c)
				n[token] = child
			}
		case []any:
			j, _ := strconv.Atoi(token)
			if !isIndex(token) || j >= len(n) {
				return i, node, fmt.Errorf("%s has %d elements, so no element %q", fieldPath(path[:i]), len(n), token)
			}
			child, err = jsonfield.Opened(n[j])
			n[j] = child
		default:
			return i, node, fmt.Errorf("%s is %s, so it has no field %s", fieldPath(path[:i]), kindOf(node), token)
		}
		if err != nil {
			return i, node, fmt.Errorf("the object does not decode as a Kubernetes object: %s: %w", fieldPath(path[:i+1]), err)
		}
		if child == nil {
			return i, node, nil
		}
		node = child
	}
	return len(path), node, nil
}

// put sets the node at path in p.object, whose parent walk has found.
func (p *objectPatch) put(path []string, v any) {
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
func (p *objectPatch) jsonValue(value any) (any, bool) {
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
func (p *objectPatch) copyOf(v any) any {
	c, _ := p.jsonValue(v)
	return c
}

// isIndex reports whether token reads as an index of a list.
func isIndex(token string) bool {
	j, err := strconv.Atoi(token)
	return err == nil && j >= 0 && strconv.Itoa(j) == token
}

func fieldPath(path []string) string {
	if len(path) == 0 {
		return "the object"
	}
	return strings.Join(path, ".")
}

func kindOf(v any) string {
	switch v := v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case jsonfield.Raw: // not decoded: its first byte says which
		switch v[0] {
		case '"':
			return "a string"
		case 't', 'f':
			return "a boolean"
		}
	}
	return "a number"
}
