package review

// Applying a strategic merge patch, as the apiserver applies one to a
// built-in kind (k8s.io/apimachinery pkg/util/strategicpatch,
// StrategicMergePatch, which reads each field's patchStrategy and
// patchMergeKey from its Go type's tags), for a replay whose log holds a
// PATCH but not its result: kubectl debug's, kubectl apply's (client
// side), kubectl edit's. It knows the kinds of core/v1, apps/v1, batch/v1
// and autoscaling/v1 that strategicfields.go describes, generated from
// k8s.io/api's Go types, and the directives kubectl sends ($patch,
// $setElementOrder, $deleteFromPrimitiveList); anything else it does not
// apply, rather than apply otherwise than the apiserver.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// strategicField is a field of a Go type of k8s.io/api, as strategic
// merge reads it: the Go type of its value, when an object of fields
// (strategicTypes names it); its shape, 'l' a list, 'm' a map of values,
// 0 one value; its patchStrategy and patchMergeKey.
type strategicField struct {
	typ                string
	shape              byte
	strategy, mergeKey string
}

// strategicTable is strategicfields.go's, built the first time a replay
// merges a patch.
var strategicTable = sync.OnceValue(func() struct {
	kinds map[string]string
	types map[string]map[string]strategicField
} {
	return struct {
		kinds map[string]string
		types map[string]map[string]strategicField
	}{strategicKinds(), strategicTypes()}
})

// errNotStrategic is a patch strategicMerge does not apply.
var errNotStrategic = errors.New("not a strategic merge patch review applies")

// strategicMerge applies patch, a strategic merge patch decoded from JSON,
// to doc, an object of kind gvk decoded from JSON, and returns the result;
// doc is the caller's own copy, which it changes.
func strategicMerge(doc, patch map[string]any, gvk schema.GroupVersionKind) (map[string]any, error) {
	typ, ok := strategicTable().kinds[gvk.GroupVersion().String()+"/"+gvk.Kind]
	if !ok {
		return nil, fmt.Errorf("%w: review does not know the fields of %s", errNotStrategic, gvk)
	}
	out, err := mergeStrategic(doc, patch, strategicField{typ: typ})
	if err != nil {
		return nil, err
	}
	if out == nil {
		return nil, fmt.Errorf("%w: it deletes the object", errNotStrategic)
	}
	return out, nil
}

// hasStrategicDirective reports whether a patch holds a key only strategic
// merge reads: one that begins with "$".
func hasStrategicDirective(v any) bool {
	switch v := v.(type) {
	case []any:
		return slices.ContainsFunc(v, hasStrategicDirective)
	case map[string]any:
		for k, e := range v {
			if strings.HasPrefix(k, "$") || hasStrategicDirective(e) {
				return true
			}
		}
	}
	return false
}

// fieldOf is the field of the object of type t (one of strategicTypes)
// whose JSON name is name.
func fieldOf(t string, name string) (strategicField, bool) {
	f, ok := strategicTable().types[t][name]
	return f, ok
}

// mergeStrategic merges patch into original, an object of the fields of
// t.typ or, when t is a map ('m'), a map of such values (of one value when
// t.typ is ""), as strategicpatch's mergeMap does; nil when the patch
// deletes it.
func mergeStrategic(original, patch map[string]any, t strategicField) (map[string]any, error) {
	if original == nil {
		original = map[string]any{}
	}
	switch directive := patch["$patch"]; directive {
	case nil, "merge":
	case "replace":
		out := map[string]any{}
		for k, v := range patch {
			if k != "$patch" {
				out[k] = v
			}
		}
		return out, nil
	case "delete":
		return nil, nil
	default:
		return nil, fmt.Errorf("%w: $patch %v", errNotStrategic, directive)
	}
	if _, ok := patch["$retainKeys"]; ok {
		return nil, fmt.Errorf("%w: $retainKeys", errNotStrategic)
	}
	orders, before := map[string][]any{}, map[string][]any{}
	for k, v := range patch {
		switch {
		case k == "$patch":
		case strings.HasPrefix(k, "$setElementOrder/"):
			list, ok := v.([]any)
			if !ok {
				return nil, fmt.Errorf("%w: %s is not a list", errNotStrategic, k)
			}
			field := strings.TrimPrefix(k, "$setElementOrder/")
			orders[field] = list
			before[field], _ = original[field].([]any)
		case strings.HasPrefix(k, "$deleteFromPrimitiveList/"):
			field := strings.TrimPrefix(k, "$deleteFromPrimitiveList/")
			drop, _ := v.([]any)
			if have, ok := original[field].([]any); ok {
				original[field] = slices.DeleteFunc(slices.Clone(have), func(e any) bool {
					return slices.ContainsFunc(drop, func(d any) bool { return sameScalar(d, e) })
				})
			}
		case strings.HasPrefix(k, "$"):
			return nil, fmt.Errorf("%w: the directive %s", errNotStrategic, k)
		}
	}
	for k, v := range patch {
		if strings.HasPrefix(k, "$") {
			continue
		}
		if v == nil {
			delete(original, k)
			continue
		}
		var ft strategicField
		switch {
		case t.shape == 'm':
			ft = strategicField{typ: t.typ} // a value of the map
		case t.typ != "":
			var ok bool
			if ft, ok = fieldOf(t.typ, k); !ok {
				// The apiserver fails such a patch: it finds no field.
				return nil, fmt.Errorf("%w: %s has no field %s", errNotStrategic, t.typ, k)
			}
		default:
			return nil, fmt.Errorf("%w: %s is not an object", errNotStrategic, k)
		}
		switch pv := v.(type) {
		case map[string]any:
			sub, _ := original[k].(map[string]any)
			if ft.shape == 0 && ft.typ == "" {
				original[k] = pv // a value of its own encoding (a Quantity, raw JSON) merges as a whole
				continue
			}
			if ft.shape == 'l' {
				return nil, fmt.Errorf("%w: an object where %s is a list", errNotStrategic, k)
			}
			merged, err := mergeStrategic(sub, pv, ft)
			if err != nil {
				return nil, err
			}
			if merged == nil {
				delete(original, k)
			} else {
				original[k] = merged
			}
		case []any:
			have, _ := original[k].([]any)
			merged, err := mergeStrategicList(have, pv, ft)
			if err != nil {
				return nil, err
			}
			original[k] = merged
		default:
			original[k] = v
		}
	}
	for field, order := range orders {
		f, _ := fieldOf(t.typ, field)
		list, _ := original[field].([]any)
		original[field] = inPatchOrder(list, order, before[field], f.mergeKey)
	}
	return original, nil
}

// mergeStrategicList merges the list patch into have, the value of the
// field f: by its patch strategy, a merge list of objects by its merge
// key, a merge list of values as a set, or, without "merge", replaced.
func mergeStrategicList(have, patch []any, f strategicField) ([]any, error) {
	mergeKey := f.mergeKey
	if f.shape != 'l' {
		return nil, fmt.Errorf("%w: a list where the field is not one", errNotStrategic)
	}
	if !slices.Contains(strings.Split(f.strategy, ","), "merge") {
		if hasStrategicDirective(patch) {
			return nil, fmt.Errorf("%w: a directive in a list that is replaced", errNotStrategic)
		}
		return patch, nil
	}
	elem := strategicField{typ: f.typ}
	if mergeKey == "" {
		out := slices.Clone(have)
		for _, v := range patch {
			if _, isMap := v.(map[string]any); isMap {
				return nil, fmt.Errorf("%w: a list of objects without a merge key", errNotStrategic)
			}
			if !slices.ContainsFunc(out, func(e any) bool { return sameScalar(e, v) }) {
				out = append(out, v)
			}
		}
		return inPatchOrder(out, patch, have, ""), nil
	}
	out := slices.Clone(have)
	var order []any // the patch's elements but its directives, for their order
	for _, v := range patch {
		pm, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: a value in a list merged by %s", errNotStrategic, mergeKey)
		}
		if pm["$patch"] == "replace" {
			// The whole list replaced by the rest of the patch's.
			var rest []any
			for _, e := range patch {
				if m, ok := e.(map[string]any); !ok || m["$patch"] != "replace" {
					rest = append(rest, e)
				}
			}
			return rest, nil
		}
		key, hasKey := pm[mergeKey]
		if !hasKey {
			return nil, fmt.Errorf("%w: an element without its merge key %s", errNotStrategic, mergeKey)
		}
		i := slices.IndexFunc(out, func(e any) bool { m, ok := e.(map[string]any); return ok && sameScalar(m[mergeKey], key) })
		if pm["$patch"] == "delete" {
			if i >= 0 {
				out = slices.Delete(out, i, i+1)
			}
			continue
		}
		order = append(order, pm)
		var base map[string]any
		if i >= 0 {
			base, _ = out[i].(map[string]any)
		}
		merged, err := mergeStrategic(base, pm, elem)
		if err != nil {
			return nil, err
		}
		if i >= 0 {
			out[i] = merged
		} else {
			out = append(out, merged)
		}
	}
	return inPatchOrder(out, order, have, mergeKey), nil
}

// inPatchOrder orders a merged list as strategicpatch's
// normalizeElementOrder does: the elements order names (the patch's, or
// $setElementOrder's) in its order, the others (the server's) in
// original's, the two interleaved by original's order (mergeSortedSlice):
// a server's element goes before a patch's when original has it first.
func inPatchOrder(merged, order, original []any, mergeKey string) []any {
	keyOf := func(e any) any {
		if m, ok := e.(map[string]any); ok && mergeKey != "" {
			return m[mergeKey]
		}
		return e
	}
	indexIn := func(list []any, e any) int {
		k := keyOf(e)
		return slices.IndexFunc(list, func(o any) bool { return sameScalar(keyOf(o), k) })
	}
	var named, serverOnly []any
	for _, e := range merged {
		if indexIn(order, e) >= 0 {
			named = append(named, e)
		} else {
			serverOnly = append(serverOnly, e)
		}
	}
	slices.SortStableFunc(named, func(a, b any) int { return indexIn(order, a) - indexIn(order, b) })
	slices.SortStableFunc(serverOnly, func(a, b any) int { return indexIn(original, a) - indexIn(original, b) })
	out := make([]any, 0, len(merged))
	i, j := 0, 0
	for i < len(serverOnly) || j < len(named) {
		switch {
		case j >= len(named):
			out, i = append(out, serverOnly[i]), i+1
		case i >= len(serverOnly):
			out, j = append(out, named[j]), j+1
		default:
			li, ri := indexIn(original, serverOnly[i]), indexIn(original, named[j])
			if li >= 0 && ri >= 0 && li < ri {
				out, i = append(out, serverOnly[i]), i+1
			} else {
				out, j = append(out, named[j]), j+1
			}
		}
	}
	return out
}

// sameScalar reports whether a and b are one JSON scalar: a string, a
// number or a bool, never an object or a list, which == cannot compare.
// A number is compared by its text, as json.Number or float64 holds it.
func sameScalar(a, b any) bool {
	switch a.(type) {
	case map[string]any, []any:
		return false
	}
	switch b.(type) {
	case map[string]any, []any:
		return false
	}
	return fmt.Sprint(a) == fmt.Sprint(b)
}
