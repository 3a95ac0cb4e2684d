package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAdmissionMatchConditions registers a webhook with a matchCondition
// (CEL over the AdmissionRequest, GA in 1.30) that leaves out objects whose
// name starts with "skipped-": the apiserver must call it for the others
// only. A minor without matchConditions would drop the field and call the
// webhook for every object, which this test sees. The webhook is a recorder
// that admits everything, so no policy decides the outcome.
func TestAdmissionMatchConditions(t *testing.T) {
	ctx := context.Background()
	rec, srv, caPEM := startRecorder(t)
	// saw reports whether the recorder was sent a review of name.
	var names []string
	saw := func(name string, _ error) bool {
		for _, body := range rec.take() {
			var review struct {
				Request struct {
					Name string `json:"name"`
				} `json:"request"`
			}
			if err := json.Unmarshal(body, &review); err != nil {
				t.Errorf("the recorder was sent %q: %v", body, err)
			}
			names = append(names, review.Request.Name)
		}
		return slices.Contains(names, name)
	}

	scope := newScope(t, "match-conditions")
	o := hookOptions{name: "match-conditions.example.com", url: srv.URL + "/validate", caBundle: caPEM, scope: scope, seen: saw}
	// The rules and admitted request of /validate, or of /mutate for a
	// policy that registers only that route: the recorder admits either.
	route := o.routeFor(t, validateRoute)
	s := o.spec(t, route)
	conditions := []admissionregistrationv1.MatchCondition{{
		Name: "not-skipped",
		// request.name, not object.metadata.name: object is null on DELETE.
		Expression: `!request.name.startsWith("skipped-")`,
	}}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: o.name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: o.name, ClientConfig: o.clientConfig(), Rules: s.rules, FailurePolicy: s.failurePolicy,
			NamespaceSelector: s.namespaceSelector, ObjectSelector: s.objectSelector,
			SideEffects: &s.sideEffects, TimeoutSeconds: s.timeout, AdmissionReviewVersions: s.versions,
			MatchConditions: conditions,
		}},
	}
	api := apiserver.client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	stored, err := api.Create(ctx, cfg, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("registering %s with matchConditions: %v", o.name, err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), o.name, metav1.DeleteOptions{}) })
	if got := stored.Webhooks[0].MatchConditions; len(got) != 1 || got[0] != conditions[0] {
		t.Fatalf("the apiserver stored matchConditions %v, want %v", got, conditions)
	}
	waitForHookActive(t, o, route)

	// The one in the middle is left out; the last shows the webhook was
	// still being called after it.
	for _, base := range []string{"called-1", "skipped-1", "called-2"} {
		if err := scope.sendAdmitted(ctx, route, base); err != nil {
			t.Fatalf("sending the admitted request %s: %v", scope.name(base), err)
		}
	}
	for base, want := range map[string]bool{"called-1": true, "skipped-1": false, "called-2": true} {
		if got := saw(scope.name(base), nil); got != want {
			t.Errorf("the webhook was called for %s: got %v, want %v (matchConditions %s)", scope.name(base), got, want, conditions[0].Expression)
		}
	}
}
