package main

import (
	"encoding/json"
	"testing"
)

func TestJSONPointer(t *testing.T) {
	tests := []struct {
		tokens []string
		want   string
	}{
		{[]string{"metadata", "annotations"}, "/metadata/annotations"},
		{[]string{"metadata", "annotations", "webhook.example.com/allow"}, "/metadata/annotations/webhook.example.com~1allow"},
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

func TestAnnotationPatch(t *testing.T) {
	want := []annotation{{"webhook.example.com/allow", "true"}, {"empty.example.com/value", ""}}
	tests := []struct {
		name string
		meta *objectMetadata
		want string // the patch as JSON
	}{
		{"no metadata", nil,
			`[{"op":"add","path":"/metadata","value":{"annotations":{"empty.example.com/value":"","webhook.example.com/allow":"true"}}}]`},
		{"no annotations", &objectMetadata{Name: "x"},
			`[{"op":"add","path":"/metadata/annotations","value":{"empty.example.com/value":"","webhook.example.com/allow":"true"}}]`},
		{"empty annotations", &objectMetadata{Annotations: map[string]string{}},
			`[{"op":"add","path":"/metadata/annotations/webhook.example.com~1allow","value":"true"},{"op":"add","path":"/metadata/annotations/empty.example.com~1value","value":""}]`},
		{"one different, one right", &objectMetadata{Annotations: map[string]string{"webhook.example.com/allow": "false", "empty.example.com/value": "", "other": "kept"}},
			`[{"op":"add","path":"/metadata/annotations/webhook.example.com~1allow","value":"true"}]`},
		{"all there", &objectMetadata{Annotations: map[string]string{"webhook.example.com/allow": "true", "empty.example.com/value": ""}},
			`null`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(annotationPatch(tc.meta, want))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got %s\nwant %s", got, tc.want)
			}
		})
	}
	if ops := annotationPatch(nil, nil); ops != nil {
		t.Errorf("with nothing to annotate got %v, want no operations", ops)
	}
}

func TestCountPatchOps(t *testing.T) {
	tests := []struct {
		patch string
		want  int
	}{
		{``, 0},
		{`[]`, 0},
		{`[{"op":"add","path":"/metadata/annotations","value":{"a":"{[","b":"]}"}}]`, 1},
		{`[{"op":"add","path":"/a","value":"x\\"}, {"op":"add","path":"/b","value":["{"]}]`, 2},
		{`[{"op":"add","path":"/a~1b","value":"\\\"{"},{"op":"add","path":"/c","value":{}},{"op":"add","path":"/d","value":[]}]`, 3},
	}
	for _, tc := range tests {
		if got := countPatchOps([]byte(tc.patch)); got != tc.want {
			t.Errorf("countPatchOps(%s) = %d, want %d", tc.patch, got, tc.want)
		}
		if tc.patch != "" {
			var ops []json.RawMessage
			if err := json.Unmarshal([]byte(tc.patch), &ops); err != nil || len(ops) != tc.want {
				t.Errorf("the test's patch %s is wrong: %d ops, %v", tc.patch, len(ops), err)
			}
		}
	}
}
