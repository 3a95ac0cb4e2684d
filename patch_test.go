package main

import (
	"encoding/json"
	"strings"
	"testing"
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
		{"no metadata", &objectMetadata{Missing: true},
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
