package jsonfield

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

func TestTop(t *testing.T) {
	for _, tc := range []struct {
		doc, want string
		found     bool
		err       error
	}{
		{`{"metadata":{"name":"a"},"spec":{"x":[1,2,{"y":"}"}]}}`, `{"name":"a"}`, true, nil},
		{` { "spec" : {"a":"\"}{"} , "metadata" : {"n":1} } `, `{"n":1}`, true, nil},
		{`{"spec":[1,"]",{"metadata":{}}],"metadata":null}`, `null`, true, nil},
		{`{"metad\u0061ta":{"a":1}}`, `{"a":1}`, true, nil},
		{`{"Metadata":{"a":1}}`, ``, false, nil},
		{`{}`, ``, false, nil},
		{`{"a":1,"b":true,"c":null,"d":-1.5e3}`, ``, false, nil},
		{`{"metadata":"x"}`, `"x"`, true, nil},
		// What comes after the member is not read.
		{`{"metadata":{"a":1},"spec":{this is not read`, `{"a":1}`, true, nil},
		{`[1,2]`, ``, false, ErrNotObject},
		{`"a"`, ``, false, ErrNotObject},
		{``, ``, false, ErrNotObject},
		{`{"spec":{"a":1}`, ``, false, errSyntax},
		{`{"spec":"unterminated`, ``, false, errSyntax},
	} {
		got, found, err := Top([]byte(tc.doc), "metadata")
		if string(got) != tc.want || found != tc.found || !errors.Is(err, tc.err) {
			t.Errorf("Top(%s) = %s, %v, %v; want %s, %v, %v", tc.doc, got, found, err, tc.want, tc.found, tc.err)
		}
	}
}

// FuzzTop holds Top to a full decode: for a JSON object without a
// repeated member, it finds the member the decoder finds, as written.
func FuzzTop(f *testing.F) {
	for _, s := range []string{`{"metadata":{"name":"a"},"spec":{}}`, `{"spec":[{"metadata":1}],"metadata":[]}`, `{"a":"\"metadata\":"}`, `{"metad\u0061ta":0}`, `{}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		got, found, err := Top(doc, "metadata")
		var members map[string]json.RawMessage
		if !json.Valid(doc) || json.Unmarshal(doc, &members) != nil {
			if err == nil && json.Valid(doc) {
				t.Errorf("Top(%s) found %s, %v; a decoder refuses it as not an object", doc, got, found)
			}
			return
		}
		if repeated(doc) {
			return // the decoder keeps the last, Top the first
		}
		want, ok := members["metadata"]
		if err != nil || found != ok || (ok && !bytes.Equal(got, bytes.TrimSpace(want))) {
			t.Errorf("Top(%s) = %s, %v, %v; a decoder finds %s, %v", doc, got, found, err, want, ok)
		}
	})
}

// repeated reports whether the object doc has a top-level member twice.
func repeated(doc []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(doc))
	if _, err := dec.Token(); err != nil {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return false
		}
		if seen[key.(string)] {
			return true
		}
		seen[key.(string)] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return false
}

func TestMembers(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want []string // of "name", "labels"; "-" for absent
		err  error
	}{
		{`{"name":"a","managedFields":[{"f:x":{}}],"labels":{"k":"v"}}`, []string{`"a"`, `{"k":"v"}`}, nil},
		{` { "labels" : null , "n\u0061me" : "b" } `, []string{`"b"`, `null`}, nil},
		{`{"uid":"x"}`, []string{"-", "-"}, nil},
		{`{}`, []string{"-", "-"}, nil},
		// A member written twice: the last, as a decoder keeps.
		{`{"name":"first","name":"last"}`, []string{`"last"`, "-"}, nil},
		{`{"Name":"a"}`, []string{"-", "-"}, nil},
		{`[]`, nil, ErrNotObject},
		{`"a"`, nil, ErrNotObject},
		{`{"name":"a"`, nil, errSyntax},
		{`{"name":"a",}`, nil, errSyntax},
		{`{"name" "a"}`, nil, errSyntax},
	} {
		got, err := Members([]byte(tc.doc), "name", "labels")
		if !errors.Is(err, tc.err) {
			t.Errorf("Members(%s) error = %v; want %v", tc.doc, err, tc.err)
			continue
		}
		if tc.err != nil {
			continue
		}
		for i, want := range tc.want {
			if (want == "-") != (got[i] == nil) || (got[i] != nil && string(got[i]) != want) {
				t.Errorf("Members(%s)[%d] = %q; want %s", tc.doc, i, got[i], want)
			}
		}
	}
}

func TestOpen(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want any // of Raw as strings: map[string]any or []any of string or nil
		err  error
	}{
		{`{"spec":{"containers":[{"name":"a"}]},"kind":"Pod"}`, map[string]any{"spec": `{"containers":[{"name":"a"}]}`, "kind": `"Pod"`}, nil},
		{` { "a" : null , "b\u0022c" : [ 1 , 2 ] } `, map[string]any{"a": nil, `b"c`: `[ 1 , 2 ]`}, nil},
		// A member written twice: the last, as a decoder keeps.
		{`{"a":1,"a":2}`, map[string]any{"a": `2`}, nil},
		{`{}`, map[string]any{}, nil},
		{`[{"name":"a"}, null ,"]",-1.5e3,true]`, []any{`{"name":"a"}`, nil, `"]"`, `-1.5e3`, `true`}, nil},
		{` [ ] `, []any{}, nil},
		{`[[1,[2]],{}]`, []any{`[1,[2]]`, `{}`}, nil},
		{`"a"`, nil, ErrNotObject},
		{`null`, nil, ErrNotObject},
		{``, nil, ErrNotObject},
		{`{"a":1`, nil, errSyntax},
		{`{"a":1,}`, nil, errSyntax},
		{`[1,]`, nil, errSyntax},
		{`[,1]`, nil, errSyntax},
		{`[1 2]`, nil, errSyntax},
		{`[1`, nil, errSyntax},
		{`{"a\x":1}`, nil, errSyntax},
	} {
		got, err := Open([]byte(tc.doc))
		if !errors.Is(err, tc.err) {
			t.Errorf("Open(%s) error = %v; want %v", tc.doc, err, tc.err)
			continue
		}
		if tc.err == nil && !reflect.DeepEqual(asStrings(got), tc.want) {
			t.Errorf("Open(%s) = %#v; want %#v", tc.doc, asStrings(got), tc.want)
		}
	}
}

// asStrings is what Open returned with each Raw as a string.
func asStrings(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := map[string]any{}
		for k, e := range v {
			m[k] = asStrings(e)
		}
		return m
	case []any:
		l := []any{}
		for _, e := range v {
			l = append(l, asStrings(e))
		}
		return l
	case Raw:
		return string(v)
	}
	return v
}

// FuzzOpen holds Open to a full decode: for a JSON object or array, it
// finds the members (the last of one written twice) or elements the
// decoder finds, each as written, nil where null; for any other JSON
// value, ErrNotObject. Whatever the input, it never panics.
func FuzzOpen(f *testing.F) {
	for _, s := range []string{`{"spec":{"containers":[{"name":"a"}]},"kind":"Pod"}`, `[{"a":1},null,"]",[[]],-1e3]`, `{"a":1,"a":null}`,
		`{"metad\u0061ta":0,"\u00e9":[]}`, "{\"\xff\":1}", `{}`, `[]`, `"a"`, `1`, `{"a":[}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		got, err := Open(doc)
		if !json.Valid(doc) {
			return
		}
		var value any
		if json.Unmarshal(doc, &value) != nil {
			return // valid, yet too deep for the decoder
		}
		var want any
		switch value.(type) {
		case map[string]any:
			var members map[string]json.RawMessage
			if err := json.Unmarshal(doc, &members); err != nil {
				t.Fatal(err)
			}
			m := map[string]any{}
			for k, v := range members {
				m[k] = rawOrNil(v)
			}
			want = m
		case []any:
			var elements []json.RawMessage
			if err := json.Unmarshal(doc, &elements); err != nil {
				t.Fatal(err)
			}
			l := []any{}
			for _, v := range elements {
				l = append(l, rawOrNil(v))
			}
			want = l
		default:
			if !errors.Is(err, ErrNotObject) {
				t.Errorf("Open(%s) = %v, %v; want ErrNotObject", doc, got, err)
			}
			return
		}
		if err != nil || !reflect.DeepEqual(asStrings(got), want) {
			t.Errorf("Open(%s) = %#v, %v; a decoder finds %#v", doc, asStrings(got), err, want)
		}
	})
}

func rawOrNil(v json.RawMessage) any {
	if v := bytes.TrimSpace(v); string(v) != "null" {
		return string(v)
	}
	return nil
}

func TestOpened(t *testing.T) {
	for _, tc := range []struct {
		v, want any
	}{
		{Raw(`{"a":{"b":1}}`), map[string]any{"a": `{"b":1}`}},
		{Raw(`[1,null]`), []any{`1`, nil}},
		{Raw(`"a"`), `"a"`},
		{Raw(`1`), `1`},
		{map[string]any{"a": Raw(`1`)}, map[string]any{"a": `1`}},
		{"decoded", "decoded"},
		{nil, nil},
	} {
		got, err := Opened(tc.v)
		if err != nil || !reflect.DeepEqual(asStrings(got), tc.want) {
			t.Errorf("Opened(%#v) = %#v, %v; want %#v", tc.v, asStrings(got), err, tc.want)
		}
	}
	// Encoded, what Open read is the document again.
	doc := `{"a":[1,{"b":"c"},null],"d":"\u00e9"}`
	v, err := Open([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if v.(map[string]any)["a"], err = Opened(v.(map[string]any)["a"]); err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(v)
	var a, b any
	if err != nil || json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(doc), &b) != nil || !reflect.DeepEqual(a, b) {
		t.Errorf("%s opened and encoded: got %s, %v", doc, got, err)
	}
}
