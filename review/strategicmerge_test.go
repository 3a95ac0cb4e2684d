package review

import (
	"encoding/json"
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestStrategicMerge applies the strategic merge patches kubectl sends to
// a Pod as k8s.io/apimachinery's strategicpatch applies them, by the
// patch strategies of k8s.io/api's Go types: containers and their env
// merged by name, finalizers as a set, a list without a strategy
// replaced, $patch delete and replace, $deleteFromPrimitiveList,
// $setElementOrder; and refuses what it does not apply as the apiserver
// would: $retainKeys, a field the kind does not have, a kind it does not
// know.
func TestStrategicMerge(t *testing.T) {
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","finalizers":["a"],"labels":{"x":"1","y":"2"}},
		"spec":{"containers":[{"name":"app","image":"nginx","env":[{"name":"A","value":"1"},{"name":"B","value":"2"}],"args":["-v"]},{"name":"side","image":"envoy"}],
		"tolerations":[{"key":"k"}]}}`
	pods := schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	for _, tc := range []struct {
		name, patch, want string
		refused           bool
	}{
		{"containers merged by name, env by name, args replaced",
			`{"spec":{"containers":[{"name":"app","image":"nginx:2","env":[{"name":"B","value":"3"},{"name":"C","value":"4"}],"args":["-q"]}]}}`,
			`{"apiVersion":"v1","kind":"Pod","metadata":{"finalizers":["a"],"labels":{"x":"1","y":"2"},"name":"p"},"spec":{"containers":[{"args":["-q"],"env":[{"name":"A","value":"1"},{"name":"B","value":"3"},{"name":"C","value":"4"}],"image":"nginx:2","name":"app"},{"image":"envoy","name":"side"}],"tolerations":[{"key":"k"}]}}`, false},
		{"a finalizer added to the set, a label removed",
			`{"metadata":{"finalizers":["b","a"],"labels":{"y":null}}}`,
			`{"apiVersion":"v1","kind":"Pod","metadata":{"finalizers":["b","a"],"labels":{"x":"1"},"name":"p"},"spec":{"containers":[{"args":["-v"],"env":[{"name":"A","value":"1"},{"name":"B","value":"2"}],"image":"nginx","name":"app"},{"image":"envoy","name":"side"}],"tolerations":[{"key":"k"}]}}`, false},
		{"$patch delete of an element, tolerations replaced (no strategy)",
			`{"spec":{"containers":[{"name":"side","$patch":"delete"}],"tolerations":[{"key":"other"}]}}`,
			`{"apiVersion":"v1","kind":"Pod","metadata":{"finalizers":["a"],"labels":{"x":"1","y":"2"},"name":"p"},"spec":{"containers":[{"args":["-v"],"env":[{"name":"A","value":"1"},{"name":"B","value":"2"}],"image":"nginx","name":"app"}],"tolerations":[{"key":"other"}]}}`, false},
		{"$patch replace of a map, $deleteFromPrimitiveList",
			`{"metadata":{"labels":{"$patch":"replace","z":"3"},"$deleteFromPrimitiveList/finalizers":["a"]}}`,
			`{"apiVersion":"v1","kind":"Pod","metadata":{"finalizers":[],"labels":{"z":"3"},"name":"p"},"spec":{"containers":[{"args":["-v"],"env":[{"name":"A","value":"1"},{"name":"B","value":"2"}],"image":"nginx","name":"app"},{"image":"envoy","name":"side"}],"tolerations":[{"key":"k"}]}}`, false},
		{"$setElementOrder",
			`{"spec":{"$setElementOrder/containers":[{"name":"side"},{"name":"app"}],"containers":[{"name":"side","image":"envoy:2"}]}}`,
			`{"apiVersion":"v1","kind":"Pod","metadata":{"finalizers":["a"],"labels":{"x":"1","y":"2"},"name":"p"},"spec":{"containers":[{"image":"envoy:2","name":"side"},{"args":["-v"],"env":[{"name":"A","value":"1"},{"name":"B","value":"2"}],"image":"nginx","name":"app"}],"tolerations":[{"key":"k"}]}}`, false},
		{"$retainKeys", `{"spec":{"$retainKeys":["containers"]}}`, "", true},
		{"a field the kind does not have", `{"spec":{"replicas":3}}`, "", true},
		{"an element without its merge key", `{"spec":{"containers":[{"image":"x"}]}}`, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var doc, patch map[string]any
			if err := json.Unmarshal([]byte(pod), &doc); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.patch), &patch); err != nil {
				t.Fatal(err)
			}
			got, err := strategicMerge(doc, patch, pods)
			if tc.refused {
				if !errors.Is(err, errNotStrategic) {
					t.Errorf("got %v, %v; want it refused", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := json.Marshal(got); string(b) != tc.want {
				t.Errorf("got\n%s\nwant\n%s", b, tc.want)
			}
		})
	}
	if _, err := strategicMerge(map[string]any{}, map[string]any{"spec": map[string]any{}}, schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}); !errors.Is(err, errNotStrategic) {
		t.Errorf("a kind review does not know: got %v, want it refused", err)
	}
}
