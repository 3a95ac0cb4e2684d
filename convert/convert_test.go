package convert

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	authorizationv1 "k8s.io/api/authorization/v1"
	authorizationv1beta1 "k8s.io/api/authorization/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestVersionConversion checks that every field survives the copy between
// v1beta1 and v1, so a field added to both versions cannot be forgotten.
func TestVersionConversion(t *testing.T) {
	dryRun := true
	pt := admissionv1.PatchTypeJSONPatch
	beta := &admissionv1beta1.AdmissionRequest{
		UID: "u", Kind: metav1.GroupVersionKind{Kind: "K"}, Resource: metav1.GroupVersionResource{Resource: "r"},
		SubResource: "s", RequestKind: &metav1.GroupVersionKind{Kind: "RK"}, RequestResource: &metav1.GroupVersionResource{Resource: "rr"},
		RequestSubResource: "rs", Name: "n", Namespace: "ns", Operation: admissionv1beta1.Update, DryRun: &dryRun,
	}
	beta.UserInfo.Username = "user"
	beta.Object.Raw = []byte(`{"o":1}`)
	beta.OldObject.Raw = []byte(`{"o":0}`)
	beta.Options.Raw = []byte(`{"p":1}`)
	compareJSON(t, "request", beta, RequestFromV1beta1(beta))

	v1 := &admissionv1.AdmissionResponse{
		UID: "u", Allowed: true, Result: &metav1.Status{Message: "m"}, Patch: []byte(`[]`), PatchType: &pt,
		AuditAnnotations: map[string]string{"a": "b"}, Warnings: []string{"w"},
	}
	compareJSON(t, "response", v1, ResponseToV1beta1(v1))
}

func compareJSON(t *testing.T, what string, a, b any) {
	t.Helper()
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	var ma, mb map[string]any
	_ = json.Unmarshal(ja, &ma)
	_ = json.Unmarshal(jb, &mb)
	// Every field was set, so a dropped one shows as a missing key.
	if len(ma) != len(mb) || !bytes.Equal(ja, jb) {
		t.Errorf("%s changed in conversion:\n got %s\nwant %s", what, jb, ja)
	}
}

// TestSubjectAccessReviewConversion checks that every field of a v1beta1
// spec survives the copy to v1, so a field added to both versions cannot be
// forgotten: the test fails until the new field is set here, and then
// until it is copied.
func TestSubjectAccessReviewConversion(t *testing.T) {
	beta := &authorizationv1beta1.SubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1beta1.ResourceAttributes{
			Namespace: "ns", Verb: "list", Group: "apps", Version: "v1", Resource: "deployments", Subresource: "scale", Name: "web",
			FieldSelector: &authorizationv1.FieldSelectorAttributes{RawSelector: "a=b", Requirements: []metav1.FieldSelectorRequirement{{Key: "a", Operator: metav1.FieldSelectorOpIn, Values: []string{"b"}}}},
			LabelSelector: &authorizationv1.LabelSelectorAttributes{RawSelector: "c=d", Requirements: []metav1.LabelSelectorRequirement{{Key: "c", Operator: metav1.LabelSelectorOpIn, Values: []string{"d"}}}},
		},
		NonResourceAttributes: &authorizationv1beta1.NonResourceAttributes{Path: "/version", Verb: "get"},
		User:                  "jane",
		Groups:                []string{"group1", "group2"},
		Extra:                 map[string]authorizationv1beta1.ExtraValue{"scopes": {"a", "b"}},
		UID:                   "uid-1",
	}
	for _, v := range []any{*beta, *beta.ResourceAttributes, *beta.NonResourceAttributes} {
		rv := reflect.ValueOf(v)
		for i := range rv.NumField() {
			if rv.Field(i).IsZero() {
				t.Errorf("%s.%s is not set: set it here, and copy it in SpecFromV1beta1", rv.Type().Name(), rv.Type().Field(i).Name)
			}
		}
	}
	got, err := json.Marshal(SpecFromV1beta1(beta))
	if err != nil {
		t.Fatal(err)
	}
	// v1beta1 spells spec.groups "group"; otherwise the JSON is the same.
	want, err := json.Marshal(beta)
	if err != nil {
		t.Fatal(err)
	}
	want = bytes.Replace(want, []byte(`"group":["group1"`), []byte(`"groups":["group1"`), 1)
	var gotMap, wantMap map[string]any
	_ = json.Unmarshal(got, &gotMap)
	_ = json.Unmarshal(want, &wantMap)
	if !reflect.DeepEqual(gotMap, wantMap) {
		t.Errorf("the spec changed in conversion:\n got %s\nwant %s", got, want)
	}

	status := authorizationv1.SubjectAccessReviewStatus{Allowed: true, Denied: true, Reason: "r", EvaluationError: "e"}
	compareJSON(t, "status", status, StatusToV1beta1(status))
}
