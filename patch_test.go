package main

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestJSONPointer(t *testing.T) {
	tests := []struct {
		tokens []string
		want   string
	}{
		{[]string{"metadata", "annotations"}, "/metadata/annotations"},
		{[]string{"metadata", "labels", "app.kubernetes.io/name"}, "/metadata/labels/app.kubernetes.io~1name"},
		{[]string{"a~b"}, "/a~0b"},
		// "~1" in a key must stay "~1" when read back, not become "/".
		{[]string{"a~1b"}, "/a~01b"},
		{[]string{"~/~/"}, "/~0~1~0~1"},
		{[]string{""}, "/"},
	}
	for _, tc := range tests {
		if got := jsonPointer(tc.tokens...); got != tc.want {
			t.Errorf("jsonPointer(%q) = %q, want %q", tc.tokens, got, tc.want)
		}
		// unescapePointer is the test's reading of RFC 6901.
		if len(tc.tokens) == 1 {
			if back := unescapePointer(tc.want[1:]); back != tc.tokens[0] {
				t.Errorf("unescaping %q gave %q, want %q", tc.want, back, tc.tokens[0])
			}
		}
	}
}

func TestSetMetadataEntries(t *testing.T) {
	want := []keyValue{{"example.com/set", "true"}, {"empty.example.com/value", ""}}
	tests := []struct {
		name string
		meta *objectMetadata
		// The patch as JSON, with FIELD standing for labels or annotations.
		want string
	}{
		{"no metadata", &objectMetadata{Absent: true},
			`[{"op":"add","path":"/metadata","value":{"FIELD":{"empty.example.com/value":"","example.com/set":"true"}}}]`},
		{"no map", &objectMetadata{Name: "x"},
			`[{"op":"add","path":"/metadata/FIELD","value":{"empty.example.com/value":"","example.com/set":"true"}}]`},
		{"empty map", &objectMetadata{Labels: map[string]string{}, Annotations: map[string]string{}},
			`[{"op":"add","path":"/metadata/FIELD/example.com~1set","value":"true"},{"op":"add","path":"/metadata/FIELD/empty.example.com~1value","value":""}]`},
		{"one different, one right", &objectMetadata{
			Labels:      map[string]string{"example.com/set": "false", "empty.example.com/value": "", "other": "kept"},
			Annotations: map[string]string{"example.com/set": "false", "empty.example.com/value": "", "other": "kept"}},
			`[{"op":"add","path":"/metadata/FIELD/example.com~1set","value":"true"}]`},
		{"all there", &objectMetadata{
			Labels:      map[string]string{"example.com/set": "true", "empty.example.com/value": ""},
			Annotations: map[string]string{"example.com/set": "true", "empty.example.com/value": ""}},
			`null`},
	}
	for _, tc := range tests {
		for field, set := range map[string]func(*objectMetadata, []keyValue) []patchOp{"labels": setLabels, "annotations": setAnnotations} {
			t.Run(tc.name+"/"+field, func(t *testing.T) {
				got, err := json.Marshal(set(tc.meta, want))
				if err != nil {
					t.Fatal(err)
				}
				if w := strings.ReplaceAll(tc.want, "FIELD", field); string(got) != w {
					t.Errorf("got %s\nwant %s", got, w)
				}
			})
		}
	}
	// Labels and annotations are set apart: a label does not count as an
	// annotation.
	meta := &objectMetadata{Labels: map[string]string{"k": "v"}, Annotations: map[string]string{}}
	if ops := setAnnotations(meta, []keyValue{{"k", "v"}}); len(ops) != 1 || ops[0].Path != "/metadata/annotations/k" {
		t.Errorf("got %+v, want one add of the annotation", ops)
	}
	if ops := setLabels(&objectMetadata{}, nil); ops != nil {
		t.Errorf("with nothing to set got %v, want no operations", ops)
	}
}

func TestObjectPatch(t *testing.T) {
	no := false
	runAsNonRoot := func(p *objectPatch) { p.setDefault(true, "spec", "securityContext", "runAsNonRoot") }
	noEscalation := func(containers int) func(p *objectPatch) {
		return func(p *objectPatch) {
			for i := range containers {
				p.setDefault(false, "spec", "containers", strconv.Itoa(i), "securityContext", "allowPrivilegeEscalation")
			}
		}
	}
	toleration := corev1.Toleration{Key: "example.com/gpu", Operator: corev1.TolerationOpExists}
	tests := []struct {
		name   string
		object string
		edit   func(*objectPatch)
		want   string // the patch
		after  string // the object with the patch applied
		again  bool   // whether a second pass over the patched object patches again
	}{
		{"no parent", `{"spec":{}}`, runAsNonRoot,
			`[{"op":"add","path":"/spec/securityContext","value":{"runAsNonRoot":true}}]`,
			`{"spec":{"securityContext":{"runAsNonRoot":true}}}`, false},
		{"null parent", `{"spec":{"securityContext":null}}`, runAsNonRoot,
			`[{"op":"add","path":"/spec/securityContext","value":{"runAsNonRoot":true}}]`,
			`{"spec":{"securityContext":{"runAsNonRoot":true}}}`, false},
		{"no grandparent", `{"kind":"Pod"}`, runAsNonRoot,
			`[{"op":"add","path":"/spec","value":{"securityContext":{"runAsNonRoot":true}}}]`,
			`{"kind":"Pod","spec":{"securityContext":{"runAsNonRoot":true}}}`, false},
		{"parent with other fields", `{"spec":{"securityContext":{"runAsUser":1000}}}`, runAsNonRoot,
			`[{"op":"add","path":"/spec/securityContext/runAsNonRoot","value":true}]`,
			`{"spec":{"securityContext":{"runAsNonRoot":true,"runAsUser":1000}}}`, false},
		{"a default leaves a value", `{"spec":{"securityContext":{"runAsNonRoot":false}}}`, runAsNonRoot,
			`null`, `{"spec":{"securityContext":{"runAsNonRoot":false}}}`, false},
		{"set replaces a value", `{"spec":{"securityContext":{"runAsNonRoot":false}}}`,
			func(p *objectPatch) { p.set(true, "spec", "securityContext", "runAsNonRoot") },
			`[{"op":"replace","path":"/spec/securityContext/runAsNonRoot","value":true}]`,
			`{"spec":{"securityContext":{"runAsNonRoot":true}}}`, false},
		{"each container as it is", `{"spec":{"containers":[{"name":"a"},{"name":"b","securityContext":null},{"name":"c","securityContext":{"runAsUser":1}},{"name":"d","securityContext":{"allowPrivilegeEscalation":true}}]}}`, noEscalation(4),
			`[{"op":"add","path":"/spec/containers/0/securityContext","value":{"allowPrivilegeEscalation":false}},` +
				`{"op":"add","path":"/spec/containers/1/securityContext","value":{"allowPrivilegeEscalation":false}},` +
				`{"op":"add","path":"/spec/containers/2/securityContext/allowPrivilegeEscalation","value":false}]`,
			`{"spec":{"containers":[{"name":"a","securityContext":{"allowPrivilegeEscalation":false}},{"name":"b","securityContext":{"allowPrivilegeEscalation":false}},` +
				`{"name":"c","securityContext":{"allowPrivilegeEscalation":false,"runAsUser":1}},{"name":"d","securityContext":{"allowPrivilegeEscalation":true}}]}}`, false},
		{"a null element", `{"spec":{"containers":[null]}}`, noEscalation(1),
			`[{"op":"replace","path":"/spec/containers/0","value":{"securityContext":{"allowPrivilegeEscalation":false}}}]`,
			`{"spec":{"containers":[{"securityContext":{"allowPrivilegeEscalation":false}}]}}`, false},
		{"a field the webhook does not know is kept", `{"spec":{"containers":[{"name":"a","securityContext":{"futureField":{"x":1},"capabilities":{"drop":["ALL"],"futureToo":true}}}]}}`,
			func(p *objectPatch) {
				p.set(&corev1.SecurityContext{AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}, "spec", "containers", "0", "securityContext")
			},
			`[{"op":"add","path":"/spec/containers/0/securityContext/allowPrivilegeEscalation","value":false}]`,
			`{"spec":{"containers":[{"name":"a","securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"],"futureToo":true},"futureField":{"x":1}}}]}}`, false},
		{"defaults field by field", `{"spec":{"securityContext":{"runAsUser":1000}}}`,
			func(p *objectPatch) {
				p.setDefault(map[string]any{"runAsUser": 1, "runAsNonRoot": true}, "spec", "securityContext")
			},
			`[{"op":"add","path":"/spec/securityContext/runAsNonRoot","value":true}]`,
			`{"spec":{"securityContext":{"runAsNonRoot":true,"runAsUser":1000}}}`, false},
		{"later changes see earlier ones", `{"spec":{}}`,
			func(p *objectPatch) {
				p.set(true, "spec", "securityContext", "runAsNonRoot")
				p.set("RuntimeDefault", "spec", "securityContext", "seccompProfile", "type")
				p.setDefault(false, "spec", "securityContext", "runAsNonRoot")
			},
			`[{"op":"add","path":"/spec/securityContext","value":{"runAsNonRoot":true}},{"op":"add","path":"/spec/securityContext/seccompProfile","value":{"type":"RuntimeDefault"}}]`,
			`{"spec":{"securityContext":{"runAsNonRoot":true,"seccompProfile":{"type":"RuntimeDefault"}}}}`, false},
		{"escaped keys", `{"spec":{"nodeSelector":{"a~b":"c"}}}`,
			func(p *objectPatch) { p.set("linux", "spec", "nodeSelector", "kubernetes.io/os") },
			`[{"op":"add","path":"/spec/nodeSelector/kubernetes.io~1os","value":"linux"}]`,
			`{"spec":{"nodeSelector":{"a~b":"c","kubernetes.io/os":"linux"}}}`, false},
		{"append to no list", `{"spec":{}}`, func(p *objectPatch) { p.appendTo(toleration, "spec", "tolerations") },
			`[{"op":"add","path":"/spec/tolerations","value":[{"key":"example.com/gpu","operator":"Exists"}]}]`,
			`{"spec":{"tolerations":[{"key":"example.com/gpu","operator":"Exists"}]}}`, true},
		{"append to null", `{"spec":{"tolerations":null}}`, func(p *objectPatch) { p.appendTo(toleration, "spec", "tolerations") },
			`[{"op":"add","path":"/spec/tolerations","value":[{"key":"example.com/gpu","operator":"Exists"}]}]`,
			`{"spec":{"tolerations":[{"key":"example.com/gpu","operator":"Exists"}]}}`, true},
		{"append twice", `{"spec":{"tolerations":[{"key":"a"}]}}`,
			func(p *objectPatch) {
				p.appendTo(map[string]string{"key": "b"}, "spec", "tolerations")
				p.appendTo(map[string]string{"key": "c"}, "spec", "tolerations")
			},
			`[{"op":"add","path":"/spec/tolerations/-","value":{"key":"b"}},{"op":"add","path":"/spec/tolerations/-","value":{"key":"c"}}]`,
			`{"spec":{"tolerations":[{"key":"a"},{"key":"b"},{"key":"c"}]}}`, true},
		{"append to a new list twice", `{}`,
			func(p *objectPatch) {
				p.appendTo("b", "spec", "args")
				p.appendTo("c", "spec", "args")
			},
			`[{"op":"add","path":"/spec","value":{"args":["b"]}},{"op":"add","path":"/spec/args/-","value":"c"}]`,
			`{"spec":{"args":["b","c"]}}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ops := editObject(t, tc.object, tc.edit)
			if got, _ := json.Marshal(ops); string(got) != tc.want {
				t.Fatalf("patch of %s:\ngot  %s\nwant %s", tc.object, got, tc.want)
			}
			after := applyPatch(t, json.RawMessage(tc.object), ops)
			if !sameJSON(t, after, []byte(tc.after)) {
				t.Errorf("%s patched:\ngot  %s\nwant %s", tc.object, after, tc.after)
			}
			if again := editObject(t, string(after), tc.edit); (len(again) > 0) != tc.again {
				t.Errorf("a second pass over %s: got patch %v", after, again)
			}
		})
	}
}

func TestObjectPatchErrors(t *testing.T) {
	tests := []struct {
		name, object string
		edit         func(*objectPatch)
		want         string
	}{
		{"through a string", `{"spec":{"securityContext":"x"}}`, func(p *objectPatch) { p.set(true, "spec", "securityContext", "runAsNonRoot") },
			"spec.securityContext is a string, so it has no field runAsNonRoot"},
		{"no such element", `{"spec":{"containers":[{}]}}`, func(p *objectPatch) { p.set(true, "spec", "containers", "1", "x") },
			`spec.containers has 1 elements, so no element "1"`},
		{"set cannot append", `{"spec":{"containers":[]}}`, func(p *objectPatch) { p.set(true, "spec", "containers", "-") },
			`no element "-"`},
		{"an element of no list", `{"spec":{}}`, func(p *objectPatch) { p.appendTo("X", "spec", "containers", "0", "args") },
			"spec.containers is missing, so it has no element 0; appendTo makes a list"},
		{"append to an object", `{"spec":{}}`, func(p *objectPatch) { p.appendTo(1, "spec") },
			"spec is an object, not a list"},
		{"no path", `{}`, func(p *objectPatch) { p.set(1) }, "needs the field's path"},
		{"a value that does not encode", `{}`, func(p *objectPatch) { p.set(func() {}, "x") }, "encoding a value"},
		{"the first error is kept", `{"a":1}`, func(p *objectPatch) { p.set(1, "a", "b"); p.set(1, "c") }, "a is a number"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := patchObject(runtime.RawExtension{Raw: []byte(tc.object)})
			if err != nil {
				t.Fatal(err)
			}
			tc.edit(p)
			ops, err := p.patch()
			if err == nil || !strings.Contains(err.Error(), tc.want) || ops != nil {
				t.Errorf("got %v, %v; want no operations and an error saying %q", ops, err, tc.want)
			}
		})
	}
	for _, object := range []string{``, `null`, `[]`, `"a"`} {
		if _, err := patchObject(runtime.RawExtension{Raw: []byte(object)}); err == nil {
			t.Errorf("patchObject(%q): got no error, want one", object)
		}
	}
}

// editObject returns the operations edit makes on object.
func editObject(t *testing.T, object string, edit func(*objectPatch)) []patchOp {
	t.Helper()
	p, err := patchObject(runtime.RawExtension{Raw: []byte(object)})
	if err != nil {
		t.Fatal(err)
	}
	edit(p)
	ops, err := p.patch()
	if err != nil {
		t.Fatalf("patch of %s: %v", object, err)
	}
	return ops
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(va, vb)
}
