package e2e

// The demonstration policy's end-to-end tests, and the requests every
// other e2e test sends: admittedRequest, one for each deployed webhook,
// and deniedRequest, the one the rollout tests send. This is the e2e file
// to change with policy.go: the plumbing tests in the other files register
// the webhooks of deploy/webhooks.yaml with its rules and send only these
// requests, so they pass unchanged whatever the policy decides once this
// file agrees with it. docs/testing.md#the-requests-the-suite-sends says
// what a request can be: any operation, on any kind, namespaced or
// cluster-scoped, a subresource included, as any user, with what must be
// stored first.
//
//	cd e2e && go test -run TestDemonstration .   # these tests alone

import (
	"context"
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
)

// The demonstration's annotation: /mutate sets it, /validate requires it.
const (
	allowKey   = "webhook.example.com/allow"
	allowValue = "true"
)

// admittedRequest returns, for the webhook at route ("/mutate" or
// "/validate"), a request that the rules deploy/webhooks.yaml gives that
// webhook send to it, and that the policy admits once every deployed
// webhook it reaches has run. Name the object it acts on name (unique in
// the run; a Namespace's name too). With padding, its object carries about
// that many more bytes where the policy does not look, for the tests of
// large reviews (as far as the kind can: a Namespace's annotations hold
// 256 KiB in all). Only the routes deploy/webhooks.yaml registers are
// asked for. When both routes act on the same request, give the same one:
// a single request then goes through both webhooks.
//
// What it stores first (Stored, Before) goes through the webhooks too, so
// the policy must admit that as well, through /validate alone. The suite
// puts each object of a namespaced kind in the test's namespace and labels
// the objects; the user is the suite's admin unless the request says (as).
//
// The demonstration creates a Deployment on both routes.
func admittedRequest(route, name string, padding int) request {
	d := nginxDeployment(name, nil)
	d.Spec.Template.Spec.Containers[0].Env = paddingEnv(padding)
	return createRequest(d)
}

// deniedRequest returns a request that the rules send to /validate and
// that the policy's /validate denies when /mutate has not run, named name
// as admittedRequest's, and a part of the denial's message when it is sent
// in namespace ns (for a namespaced kind). The rollout tests
// (rollout_test.go) send it under each -validation-action; a policy that
// denies nothing returns request{}, and they skip, saying so.
//
// The demonstration's is admittedRequest before /mutate has annotated it.
func deniedRequest(ns, name string) (request, string) {
	return admittedRequest(validateRoute, name, 0), fmt.Sprintf("Deployment %s/%s must have the annotation %s=%s", ns, name, allowKey, allowValue)
}

// TestDemonstration is the demonstration this project started from, with
// AdmissionReview v1 and v1beta1: /validate alone denies a Deployment
// without the annotation, naming it; with /mutate as well, the Deployment
// is stored annotated.
func TestDemonstration(t *testing.T) {
	for _, version := range []string{"v1", "v1beta1"} {
		t.Run(version, func(t *testing.T) {
			ctx := context.Background()
			scope := newScope(t, "demo-"+version)
			ns := scope.namespace
			w := startWebhook(t, "")
			mark := apiserver.logMark()
			deployments := apiserver.client.AppsV1().Deployments(ns)

			// Only the validating webhook: the Deployment is denied, and the
			// user is told which webhook and which annotation.
			validateName := "validate-" + ns + ".webhook.example.com"
			registerValidating(t, hookOptions{name: validateName, url: w.url("/validate"), caBundle: w.caPEM, scope: scope, versions: []string{version}, seen: w.saw})
			_, err := deployments.Create(ctx, nginxDeployment("nginx-deployment", nil), metav1.CreateOptions{})
			if err == nil {
				t.Fatal("the Deployment was created without the required annotation")
			}
			for _, want := range []string{
				fmt.Sprintf("admission webhook %q denied the request:", validateName),
				fmt.Sprintf("Deployment %s/nginx-deployment", ns),
				allowKey + "=" + allowValue,
			} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("denial %q does not contain %q", err, want)
				}
			}
			if !apierrors.IsForbidden(err) {
				t.Errorf("got %v, want a Forbidden error", err)
			}

			// With the mutating webhook too, it is stored annotated.
			registerMutating(t, hookOptions{name: "mutate-" + ns + ".webhook.example.com", url: w.url("/mutate"), caBundle: w.caPEM, scope: scope, versions: []string{version}, seen: w.saw})
			if _, err := deployments.Create(ctx, nginxDeployment("nginx-deployment", nil), metav1.CreateOptions{}); err != nil {
				t.Fatalf("with both webhooks: %v", err)
			}
			stored, err := deployments.Get(ctx, "nginx-deployment", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := stored.Annotations[allowKey]; got != allowValue {
				t.Errorf("stored Deployment has %s=%q, want %q", allowKey, got, allowValue)
			}
			noFailedCalls(t, mark)
		})
	}
}

// TestDemonstrationOperations covers what the policy does with updates,
// deletes, subresources, custom resources and dry-run.
func TestDemonstrationOperations(t *testing.T) {
	ctx := context.Background()
	scope := newScope(t, "operations")
	ns := scope.namespace
	w := startWebhook(t, "")
	mark := apiserver.logMark()
	// Every operation is sent, so the webhook's own scoping is what's tested.
	all := []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
	createWidgetCRD(t)
	registerDeployed(t, w, scope, hookOptions{rules: []admissionregistrationv1.RuleWithOperations{
		{Operations: all, Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments", "deployments/scale"}}},
		{Operations: all, Rule: admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}}},
	}})
	deployments := apiserver.client.AppsV1().Deployments(ns)

	t.Run("update keeps other annotations", func(t *testing.T) {
		d, err := deployments.Create(ctx, nginxDeployment("web", map[string]string{"team.example.com/owner": "payments"}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The user drops the webhook's annotation and adds another.
		delete(d.Annotations, allowKey)
		d.Annotations["note"] = "resized"
		replicas := int32(3)
		d.Spec.Replicas = &replicas
		if _, err := deployments.Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		stored, err := deployments.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"team.example.com/owner": "payments", "note": "resized", allowKey: allowValue}
		for k, v := range want {
			if stored.Annotations[k] != v {
				t.Errorf("stored annotations %v: %s=%q, want %q", stored.Annotations, k, stored.Annotations[k], v)
			}
		}
	})
	t.Run("scale subresource passes", func(t *testing.T) {
		if _, err := deployments.UpdateScale(ctx, "web", &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 5},
		}, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if !w.loggedLine(func(line string) bool { return strings.Contains(line, "subresource=scale") }) {
			t.Error("the webhook was not sent the scale request")
		}
	})
	t.Run("delete passes", func(t *testing.T) {
		if err := deployments.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if !w.loggedLine(func(line string) bool { return strings.Contains(line, "operation=DELETE") }) {
			t.Error("the webhook was not sent the DELETE")
		}
	})
	t.Run("custom resource with / in annotation keys", func(t *testing.T) {
		widgets := dynamic.NewForConfigOrDie(apiserver.config).Resource(widgetGVR).Namespace(ns)
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": "gizmo", "annotations": map[string]any{"widgets.example.com/size": "large", "a/b": "c"}},
			"spec":     map[string]any{"size": "large"},
		}}
		if _, err := widgets.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		stored, err := widgets.Get(ctx, "gizmo", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := stored.GetAnnotations()
		for k, v := range map[string]string{"widgets.example.com/size": "large", "a/b": "c", allowKey: allowValue} {
			if got[k] != v {
				t.Errorf("stored Widget annotations %v: %s=%q, want %q", got, k, got[k], v)
			}
		}
	})
	t.Run("server-side dry-run stores nothing", func(t *testing.T) {
		d, err := deployments.Create(ctx, nginxDeployment("dry", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatal(err)
		}
		if d.Annotations[allowKey] != allowValue {
			t.Errorf("dry-run answer has annotations %v, want the webhook's", d.Annotations)
		}
		if _, err := deployments.Get(ctx, "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("after a dry-run create, Get gave %v, want NotFound", err)
		}
		if !w.loggedLine(func(line string) bool { return strings.Contains(line, "dry_run=true") }) {
			t.Error("the webhook log does not mark the dry-run review")
		}
	})
	noFailedCalls(t, mark)
}

// demonstrateEnforced checks the demonstration's verdicts through api,
// whose own webhook configurations are the deployed ones (the static
// manifests of deploy/render.sh static), in a new namespace named name:
// the first Deployment created there is stored annotated by /mutate, and
// one whose annotation a later mutating webhook, registered through the
// API, takes away is denied by /validate. Mutating webhooks run in order
// and ours is not called again (reinvocationPolicy: Never), so this is
// validation holding on its own when mutation is undone. When your
// /mutate and /validate act on different kinds, the undoing webhook must
// use /validate's rules and probe object: register it with
// hookOptions{route: validateRoute} (webhook_test.go).
func demonstrateEnforced(t *testing.T, api *apiServer, name string) {
	t.Helper()
	ctx := context.Background()
	scope := newScopeIn(t, api, name)
	ns := scope.namespace
	deployments := api.client.AppsV1().Deployments(ns)
	if _, err := deployments.Create(ctx, nginxDeployment("first", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the first Deployment in %s: %v", ns, err)
	}
	stored, err := deployments.Get(ctx, "first", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := stored.Annotations[allowKey]; got != allowValue {
		t.Errorf("the first Deployment in %s is stored with %s=%q, want %q", ns, allowKey, got, allowValue)
	}

	// A mutating webhook of the test's own that sets the annotation to
	// "false", as a user's other webhook might.
	undo := startPatcher(t, api, fmt.Sprintf(`[{"op":"replace","path":"/metadata/annotations/%s","value":"false"}]`, strings.ReplaceAll(allowKey, "/", "~1")))
	// The apiserver calls mutating webhooks in the order of their
	// configurations' names: "zz-" comes after the policy's.
	registerMutating(t, hookOptions{name: "zz-undo-" + ns + ".example.com", url: undo.url, caBundle: undo.caPEM, scope: scope, seen: undo.saw})
	_, err = deployments.Create(ctx, nginxDeployment("undone", nil), metav1.CreateOptions{})
	want := `admission webhook "validate.webhook.example.com" denied the request:`
	if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("creating a Deployment whose annotation was taken away in %s: got %v, want a Forbidden error containing %q", ns, err, want)
	}
}
