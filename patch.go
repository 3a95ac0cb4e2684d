package main

import "strings"

// patchOp is one JSON Patch (RFC 6902) operation. The kube-apiserver applies
// the list with gopkg.in/evanphx/json-patch.v4, so only what that library
// accepts is built here.
//
// Value has no omitempty: an annotation may be the empty string, and an
// "add" without a value is an invalid operation.
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
// Annotation keys such as "webhook.example.com/allow" contain "/", so a path
// must never be built by concatenating a raw key.
func jsonPointer(tokens ...string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		pointerEscaper.WriteString(&b, t)
	}
	return b.String()
}

// annotation is one key=value pair of the policy, in the order it was
// configured so that patches and messages are deterministic.
type annotation struct {
	Key, Value string
}

func (a annotation) String() string { return a.Key + "=" + a.Value }

// annotationPatch returns the operations that make meta carry every wanted
// annotation while keeping all others. meta is nil when the object has no
// metadata at all.
//
// The shape of the patch depends on what the object already has, because
// RFC 6902 "add" needs the parent to exist and replaces the target when it
// does:
//   - no metadata: one add of /metadata holding the annotations;
//   - no metadata.annotations: one add of the whole map (an add of
//     /metadata/annotations/<key> would fail with "missing path");
//   - otherwise: one add per key that is missing or different, which leaves
//     every other annotation alone. (An add of the whole map here would
//     replace, and so delete, the annotations the object already has.)
//
// Nothing to change gives no operations, so a second pass over the patched
// object is a no-op.
func annotationPatch(meta *objectMetadata, want []annotation) []patchOp {
	if len(want) == 0 {
		return nil
	}
	if meta == nil {
		return []patchOp{{Op: "add", Path: "/metadata", Value: map[string]any{"annotations": annotationMap(want)}}}
	}
	if meta.Annotations == nil {
		return []patchOp{{Op: "add", Path: "/metadata/annotations", Value: annotationMap(want)}}
	}
	var ops []patchOp
	for _, a := range want {
		if v, ok := meta.Annotations[a.Key]; ok && v == a.Value {
			continue
		}
		ops = append(ops, patchOp{Op: "add", Path: jsonPointer("metadata", "annotations", a.Key), Value: a.Value})
	}
	return ops
}

func annotationMap(as []annotation) map[string]string {
	m := make(map[string]string, len(as))
	for _, a := range as {
		m[a.Key] = a.Value
	}
	return m
}
