// Package jsonfield reads parts of a JSON document without decoding the
// rest: the webhook reads an object's metadata, which the apiserver writes
// before its spec and status, and need not scan a megabyte of them to get
// it; a patch of one field of a Pod opens only the objects and lists on
// that field's path.
package jsonfield

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// ErrNotObject is returned for a document that is not a JSON object.
var ErrNotObject = errors.New("not a JSON object")

// errSyntax is returned for a document that ends, or breaks, before the
// member is found.
var errSyntax = errors.New("malformed JSON")

// Top returns the value of the member key of the JSON object doc, as it is
// written, reading doc only as far as the end of that value: the members
// before it are skipped, not decoded, and those after it are not read. It
// reports found false when the object has no such member. Keys are
// compared exactly, after unescaping, as a case-sensitive decoder does.
// Where a member appears twice, the first is returned (a decoder keeps the
// last); a serializer of Go structs, such as the apiserver's, writes each
// once.
func Top(doc []byte, key string) (value []byte, found bool, err error) {
	err = walk(doc, func(k, v []byte) (stop bool) {
		if keyIs(k, key) {
			value, found = v, true
		}
		return found
	})
	if err != nil {
		return nil, false, err
	}
	return value, found, nil
}

// Members returns the values of the members keys of the JSON object doc,
// as written, each nil when absent; of a member written twice, the last,
// as a decoder keeps. It reads doc to its end and decodes none of it.
func Members(doc []byte, keys ...string) ([][]byte, error) {
	values := make([][]byte, len(keys))
	err := walk(doc, func(k, v []byte) (stop bool) {
		for i, want := range keys {
			if keyIs(k, want) {
				values[i] = v
			}
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	return values, nil
}

// Raw is a JSON value as written, not decoded: a member or element that
// Open leaves for its reader to decode, or to open in turn.
type Raw []byte

// MarshalJSON returns r as written, so that a value holding parts of a
// document not decoded encodes as the document has them.
func (r Raw) MarshalJSON() ([]byte, error) { return r, nil }

// Open reads one level of the JSON object or array doc: an object becomes
// a map[string]any and an array a []any, each member or element a Raw as
// written, or nil where it is null, as a decoder reads null. Keys are
// unescaped as a decoder unescapes them and, of a member written twice,
// the last is kept, as a decoder keeps it. Nothing below the first level
// is decoded: the cost is one pass over doc's bytes and an entry for each
// member or element. A doc that is neither gives ErrNotObject.
func Open(doc []byte) (any, error) {
	i := skipSpace(doc, 0)
	if i < len(doc) && doc[i] == '[' {
		list := []any{}
		err := walkArray(doc, i+1, func(v []byte) { list = append(list, orNil(v)) })
		if err != nil {
			return nil, err
		}
		return list, nil
	}
	object := map[string]any{}
	var keyErr error
	err := walk(doc, func(k, v []byte) (stop bool) {
		key, err := unquote(k)
		if err != nil {
			keyErr = err
			return true
		}
		object[key] = orNil(v)
		return false
	})
	if err == nil {
		err = keyErr
	}
	if err != nil {
		return nil, err
	}
	return object, nil
}

// Opened returns v, a member or element of what Open returned, opened in
// turn if it is an object or array not read yet; anything else as it is.
func Opened(v any) (any, error) {
	if raw, ok := v.(Raw); ok && (raw[0] == '{' || raw[0] == '[') {
		return Open(raw)
	}
	return v, nil
}

// orNil is value as Open holds it: nil for null, else a Raw.
func orNil(value []byte) any {
	if string(value) == "null" {
		return nil
	}
	return Raw(value)
}

// unquote returns the JSON string s, quoted, as a decoder reads it.
func unquote(s []byte) (string, error) {
	if bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		return string(s[1 : len(s)-1]), nil
	}
	// Escapes, or bytes a decoder replaces with U+FFFD: the decoder's own
	// rules.
	var k string
	if err := json.Unmarshal(s, &k); err != nil {
		return "", errSyntax
	}
	return k, nil
}

// walkArray calls visit with each element of the JSON array doc in turn,
// as written, skipping each without decoding it; doc[i-1] is the array's
// '['. walk does the same for an object's members, apart so that the
// metadata's reading on every review is as it was.
func walkArray(doc []byte, i int, visit func(value []byte)) error {
	i = skipSpace(doc, i)
	if i < len(doc) && doc[i] == ']' {
		return nil
	}
	for i < len(doc) {
		end, err := skipValue(doc, i)
		if err != nil {
			return err
		}
		visit(doc[i:end])
		i = skipSpace(doc, end)
		if i == len(doc) {
			return errSyntax
		}
		switch doc[i] {
		case ']':
			return nil
		case ',':
			i = skipSpace(doc, i+1)
		default:
			return errSyntax
		}
	}
	return errSyntax
}

// walk calls visit with each member of the JSON object doc in turn, its
// key as written (quoted) and its value, skipping each value without
// decoding it, until visit says stop; what comes after is not read.
func walk(doc []byte, visit func(key, value []byte) (stop bool)) error {
	i := skipSpace(doc, 0)
	if i == len(doc) || doc[i] != '{' {
		return ErrNotObject
	}
	i = skipSpace(doc, i+1)
	if i < len(doc) && doc[i] == '}' {
		return nil
	}
	for i < len(doc) {
		if doc[i] != '"' {
			return errSyntax
		}
		end, err := skipString(doc, i)
		if err != nil {
			return err
		}
		key := doc[i:end]
		i = skipSpace(doc, end)
		if i == len(doc) || doc[i] != ':' {
			return errSyntax
		}
		start := skipSpace(doc, i+1)
		if end, err = skipValue(doc, start); err != nil {
			return err
		}
		if visit(key, doc[start:end]) {
			return nil
		}
		i = skipSpace(doc, end)
		if i == len(doc) {
			return errSyntax
		}
		switch doc[i] {
		case '}':
			return nil
		case ',':
			i = skipSpace(doc, i+1)
		default:
			return errSyntax
		}
	}
	return errSyntax
}

// keyIs reports whether the quoted JSON string s is key.
func keyIs(s []byte, key string) bool {
	if bytes.IndexByte(s, '\\') < 0 {
		return string(s[1:len(s)-1]) == key
	}
	var k string
	return json.Unmarshal(s, &k) == nil && k == key
}

func skipSpace(doc []byte, i int) int {
	for i < len(doc) && (doc[i] == ' ' || doc[i] == '\t' || doc[i] == '\n' || doc[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index past the string that begins at doc[i].
func skipString(doc []byte, i int) (int, error) {
	for i++; i < len(doc); i++ {
		switch doc[i] {
		case '\\':
			i++
		case '"':
			return i + 1, nil
		}
	}
	return 0, errSyntax
}

// skipValue returns the index past the value that begins at doc[i]: a
// string, or an object or array by its depth (strings within them
// skipped), or a number or literal up to the next delimiter.
func skipValue(doc []byte, i int) (int, error) {
	if i == len(doc) {
		return 0, errSyntax
	}
	switch doc[i] {
	case '"':
		return skipString(doc, i)
	case '{', '[':
		depth := 0
		for ; i < len(doc); i++ {
			switch doc[i] {
			case '"':
				end, err := skipString(doc, i)
				if err != nil {
					return 0, err
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1, nil
				}
			}
		}
		return 0, errSyntax
	}
	start := i
	for i < len(doc) && doc[i] != ',' && doc[i] != '}' && doc[i] != ']' && doc[i] != ' ' && doc[i] != '\t' && doc[i] != '\n' && doc[i] != '\r' {
		i++
	}
	if i == start {
		return 0, errSyntax
	}
	return i, nil
}
