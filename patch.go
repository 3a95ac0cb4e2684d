package main

import "strings"

// patchOp is one JSON Patch (RFC 6902) operation. The kube-apiserver applies
// the list with gopkg.in/evanphx/json-patch.v4, so only what that library
// accepts is built here.
//
// Value has no omitempty: a label or annotation may be the empty string,
// and an "add" without a value is an invalid operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// pointerEscaper escapes one reference token of a JSON Pointer (RFC 6901,
// section 3): "~" becomes "~0" and "/" becomes "~1". strings.Replacer
// replaces in one pass, so "~1" in a key becomes "~01" and is never read
// back as "/".
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

// setLabels returns the operations that make the object whose metadata is
// meta carry every label in want, keeping all its other labels.
func setLabels(meta *objectMetadata, want []keyValue) []patchOp {
	return setMetadataEntries(meta.Missing, "labels", meta.Labels, want)
}

// setAnnotations is setLabels for metadata.annotations.
func setAnnotations(meta *objectMetadata, want []keyValue) []patchOp {
	return setMetadataEntries(meta.Missing, "annotations", meta.Annotations, want)
}

// setMetadataEntries returns the operations that make the string map
// metadata.<field> hold every entry of want while keeping all its others.
// noMetadata says the object has no metadata at all; have is the map as the
// object has it, nil when it has none.
//
// The shape of the patch depends on what the object already has, because
// RFC 6902 "add" needs the parent to exist and replaces the target when it
// does:
//   - no metadata: one add of /metadata holding the map;
//   - no metadata.<field>: one add of the whole map (an add of
//     /metadata/<field>/<key> would fail with "doc is missing path");
//   - otherwise: one add per key that is missing or different, which leaves
//     every other entry alone. (An add of the whole map here would replace,
//     and so delete, the entries the object already has.)
//
// Nothing to change gives no operations, so a second pass over the patched
// object is a no-op.
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
