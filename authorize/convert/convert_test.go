package convert

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	authorizationv1 "k8s.io/api/authorization/v1"
	authorizationv1beta1 "k8s.io/api/authorization/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The tests fill every field of what is converted, however deep, by
// reflection (fill), and compare the JSON before and after: a field added
// to k8s.io/api in both versions is filled as soon as the module is
// updated, and fails the test until the conversion copies it. Nothing is
// set by hand, so nothing can be forgotten here either.

// TestAdmissionReviewV1beta1IsV1 holds the premise on which the webhook
// decodes an admission.k8s.io/v1beta1 AdmissionReview into v1's type, and
// answers it with v1's (handler.go, admissionDecoder): each version's,
// every field set, decodes into the other's type and encodes as it was.
func TestAdmissionReviewV1beta1IsV1(t *testing.T) {
	for _, c := range []struct{ in, out any }{
		{&admissionv1beta1.AdmissionReview{}, &admissionv1.AdmissionReview{}},
		{&admissionv1.AdmissionReview{}, &admissionv1beta1.AdmissionReview{}},
	} {
		fill(reflect.ValueOf(c.in).Elem(), "review")
		b, err := json.Marshal(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, c.out); err != nil {
			t.Fatal(err)
		}
		compareJSON(t, fmt.Sprintf("%T", c.in), c.in, c.out, nil)
	}
}

func TestSpecFromV1beta1(t *testing.T) {
	var in authorizationv1beta1.SubjectAccessReviewSpec
	fill(reflect.ValueOf(&in).Elem(), "spec")
	// v1beta1 spells spec.groups "group"; otherwise the JSON is the same.
	compareJSON(t, "spec", &in, SpecFromV1beta1(&in), map[string]string{"group": "groups"})
}

func TestStatusToV1beta1(t *testing.T) {
	var in authorizationv1.SubjectAccessReviewStatus
	fill(reflect.ValueOf(&in).Elem(), "status")
	compareJSON(t, "status", in, StatusToV1beta1(in), nil)
}

// compareJSON checks that out encodes as in does, once in's top-level keys
// are renamed by renamed. Every field of in is set (fill), so a field the
// conversion dropped shows as a missing key, and one it mixed up as a
// value of another field's path.
func compareJSON(t *testing.T, what string, in, out any, renamed map[string]string) {
	t.Helper()
	var want, got map[string]any
	decode := func(v any, into *map[string]any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	decode(in, &want)
	decode(out, &got)
	for from, to := range renamed {
		want[to] = want[from]
		delete(want, from)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s changed in conversion:\n got %v\nwant %v", what, got, want)
	}
}

// fill sets every exported field of v, recursively, to a value that is
// not zero and that names its path (strings), so that two fields never
// hold the same value: a pointer to a filled value, one element of a
// slice, one entry of a map. A RawExtension gets a JSON object naming its
// path, as it must hold JSON to encode.
func fill(v reflect.Value, path string) {
	if v.Type() == reflect.TypeFor[runtime.RawExtension]() {
		v.Set(reflect.ValueOf(runtime.RawExtension{Raw: []byte(`{"path":"` + path + `"}`)}))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(path)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(len(path)))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(len(path)))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(len(path)))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), path)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0), path+"[0]")
	case reflect.Map:
		key := reflect.New(v.Type().Key()).Elem()
		fill(key, path+".key")
		value := reflect.New(v.Type().Elem()).Elem()
		fill(value, path+".value")
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(key, value)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				fill(v.Field(i), path+"."+f.Name)
			}
		}
	case reflect.Interface:
		// runtime.RawExtension.Object, which is not encoded: left nil.
	default:
		panic("fill: no value for " + v.Type().String() + " at " + path)
	}
}

// TestFillSetsEverything: fill leaves no field zero, the premise of the
// tests above.
func TestFillSetsEverything(t *testing.T) {
	for _, v := range []any{&admissionv1beta1.AdmissionReview{}, &admissionv1.AdmissionReview{}, &authorizationv1beta1.SubjectAccessReviewSpec{}, &authorizationv1.SubjectAccessReviewStatus{}} {
		rv := reflect.ValueOf(v).Elem()
		fill(rv, "x")
		checkSet(t, rv, rv.Type().Name())
	}
}

func checkSet(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() && f.Type.Kind() != reflect.Interface {
				checkSet(t, v.Field(i), path+"."+f.Name)
			}
		}
	case reflect.Pointer:
		if v.IsNil() {
			t.Errorf("%s is nil", path)
			return
		}
		checkSet(t, v.Elem(), path)
	default:
		if v.IsZero() {
			t.Errorf("%s is not set", path)
		}
	}
}
