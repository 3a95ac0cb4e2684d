package review

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

// validateRequests are the requests of op sent to /validate.
func validateRequests(f *fakeWebhook, op admissionv1.Operation) []*admissionv1.AdmissionRequest {
	var out []*admissionv1.AdmissionRequest
	for i, r := range f.requests {
		if f.routes[i] == "/validate" && r.Operation == op {
			out = append(out, r)
		}
	}
	return out
}

// The patches and deletes below are of the ConfigMap stored at line 1,
// resourceVersion 429.
var storedAlpha = auditEventLine("create", "/api/v1/namespaces/replay/configmaps", 201, ref("", "v1", "configmaps", "replay", "alpha", ""), map[string]any{
	"requestObject": configMap("", "alpha", "", nil), "responseObject": withLabels(configMap("replay", "alpha", "429", nil), map[string]any{"owner": "alice"})})

func withLabels(obj map[string]any, labels map[string]any) map[string]any {
	obj["metadata"].(map[string]any)["labels"] = labels
	return obj
}

func withMeta(obj map[string]any, k string, v any) map[string]any {
	obj["metadata"].(map[string]any)[k] = v
	return obj
}

// TestReplayPreImageContradictedByTheLog: each write below proves that the
// version the apiserver had before it is not the one the log last showed;
// replay must not send line 1's as its oldObject, nor apply a patch to it
// (helper-33). Before, each was sent, or patched, as stored at line 1.
func TestReplayPreImageContradictedByTheLog(t *testing.T) {
	cmRef := ref("", "v1", "configmaps", "replay", "alpha", "")
	timeout := map[string]any{"metadata": map[string]any{}, "status": "Failure", "message": "Timeout: request did not complete within requested timeout - context deadline exceeded", "reason": "Timeout", "details": map[string]any{}, "code": 504}
	for _, tc := range []struct {
		name string
		log  []string
		op   admissionv1.Operation
	}{
		{
			// kubectl label --resource-version=440 sends the version in the
			// patch; the registry refuses a patched object whose
			// resourceVersion is not the stored one (store.go:807, 409).
			// Admitted (200): the version stored before it was 440.
			name: "a patch that names resourceVersion 440",
			log: []string{storedAlpha, auditEventLine("patch", "/api/v1/namespaces/replay/configmaps/alpha", 200, cmRef, map[string]any{
				"requestObject":  map[string]any{"metadata": map[string]any{"labels": map[string]any{"tier": "gold"}, "resourceVersion": "440"}},
				"responseObject": withLabels(configMap("replay", "alpha", "441", nil), map[string]any{"owner": "bob", "tier": "gold"})})},
			op: admissionv1.Update,
		},
		{
			// A JSON Patch whose test of the resourceVersion held in the
			// apiserver (200) and fails on the version replay kept.
			name: "a JSON Patch that tests resourceVersion 440",
			log: []string{storedAlpha, auditEventLine("patch", "/api/v1/namespaces/replay/configmaps/alpha", 200, cmRef, map[string]any{
				"requestObject": []any{map[string]any{"op": "test", "path": "/metadata/resourceVersion", "value": "440"},
					map[string]any{"op": "add", "path": "/metadata/labels/tier", "value": "gold"}},
				"responseObject": withLabels(configMap("replay", "alpha", "441", nil), map[string]any{"owner": "bob", "tier": "gold"})})},
			op: admissionv1.Update,
		},
		{
			// Preconditions are checked against the stored object
			// (store.go:1221, storage.Preconditions.Check): 200 means the
			// version deleted was 440.
			name: "a delete whose preconditions name resourceVersion 440",
			log: []string{storedAlpha, auditEventLine("delete", "/api/v1/namespaces/replay/configmaps/alpha", 200, cmRef, map[string]any{
				"requestObject":  map[string]any{"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/__internal", "preconditions": map[string]any{"resourceVersion": "440"}},
				"responseObject": map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{}, "status": "Success"}})},
			op: admissionv1.Delete,
		},
		{
			// DeleteCollection deletes object by object (store.go:1353):
			// one with a finalizer is kept, with a deletionTimestamp; the
			// patch that removes the finalizer is of that version.
			name: "a patch after a deletecollection of its namespace's configmaps",
			log: []string{storedAlpha,
				auditEventLine("deletecollection", "/api/v1/namespaces/replay/configmaps", 200, ref("", "v1", "configmaps", "replay", "", ""), map[string]any{"level": "Metadata"}),
				auditEventLine("patch", "/api/v1/namespaces/replay/configmaps/alpha", 200, cmRef, map[string]any{
					"requestObject":  map[string]any{"metadata": map[string]any{"finalizers": nil}},
					"responseObject": withMeta(configMap("replay", "alpha", "431", nil), "deletionTimestamp", "2026-11-26T00:38:00Z")})},
			op: admissionv1.Update,
		},
		{
			// A write that times out is answered 504 while its handler
			// goes on and may store it (handlers/finisher/finisher.go:
			// 127-146, FinishRequest): what is stored after it is unknown.
			name: "a patch after a patch answered 504 Timeout",
			log: []string{storedAlpha,
				auditEventLine("patch", "/api/v1/namespaces/replay/configmaps/alpha", 504, cmRef, map[string]any{
					"responseStatus": timeout, "requestObject": map[string]any{"metadata": map[string]any{"labels": map[string]any{"owner": "bob"}}}}),
				auditEventLine("patch", "/api/v1/namespaces/replay/configmaps/alpha", 200, cmRef, map[string]any{
					"requestObject":  map[string]any{"data": map[string]any{"k": "v3"}},
					"responseObject": withLabels(configMap("replay", "alpha", "431", nil), map[string]any{"owner": "bob"})})},
			op: admissionv1.Update,
		},
		{
			// Two patches overlap, and the one stored first (429 -> 430) is
			// logged last: its result, 430, is older than the version 431
			// replay would apply it to.
			name: "a patch whose result is older than the version kept",
			log: []string{storedAlpha,
				auditEventLine("patch", "/api/v1/namespaces/replay/configmaps/alpha", 200, cmRef, map[string]any{
					"requestObject":  map[string]any{"metadata": map[string]any{"labels": map[string]any{"tier": "gold"}}},
					"responseObject": withLabels(configMap("replay", "alpha", "431", nil), map[string]any{"owner": "bob", "tier": "gold"})}),
				auditEventLine("patch", "/api/v1/namespaces/replay/configmaps/alpha", 200, cmRef, map[string]any{
					"requestObject":  map[string]any{"metadata": map[string]any{"labels": map[string]any{"owner": "bob"}}},
					"responseObject": withLabels(configMap("replay", "alpha", "430", nil), map[string]any{"owner": "bob"})})},
			op: admissionv1.Update,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeWebhook{}
			results, _, _ := replayRun(t, f, tc.log)
			res := results[len(results)-1]
			last := len(tc.log)
			var sent []*admissionv1.AdmissionRequest
			for _, r := range slices.Backward(validateRequests(f, tc.op)) {
				sent = append(sent, r)
				break
			}
			if res.Admission == nil {
				return // not reviewed: fine, if it says why
			}
			if !strings.HasPrefix(res.OldObject, "unknown") && len(sent) > 0 && len(sent[0].OldObject.Raw) > 0 {
				t.Errorf("line %d: oldObject %q, sent %s; want it unknown (or the write not reviewed): the log proves the version before it is not that one", last, res.OldObject, sent[0].OldObject.Raw)
			}
			if strings.HasPrefix(res.Object, "the patch") {
				t.Errorf("line %d: object %q; want the patch not applied to a version the log proves was not its pre-image", last, res.Object)
			}
		})
	}
}

// The apiserver converts object and oldObject to one version, the one the
// webhook is called with (k8s.io/apiserver v0.37.2 pkg/admission/
// conversion.go:83-104, NewVersionedAttributes; request/admissionreview.go
// :206-211). The log stores each version in the version of the request
// that wrote it: an HPA created through autoscaling/v2 and then written
// through autoscaling/v1 must not be sent with a v1 object and a v2
// oldObject, nor have a v1 patch applied to its v2 fields.
func TestReplayOldObjectOfAnotherVersion(t *testing.T) {
	hpa := func(version, rv string) map[string]any {
		spec := map[string]any{"scaleTargetRef": map[string]any{"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"}, "minReplicas": 1, "maxReplicas": 5}
		if version == "v2" {
			spec["metrics"] = []any{map[string]any{"type": "Resource", "resource": map[string]any{"name": "cpu", "target": map[string]any{"type": "Utilization", "averageUtilization": 80}}}}
		} else {
			spec["targetCPUUtilizationPercentage"] = 80
		}
		meta := map[string]any{"name": "web", "namespace": "replay"}
		if rv != "" {
			meta["resourceVersion"] = rv
		}
		return map[string]any{"kind": "HorizontalPodAutoscaler", "apiVersion": "autoscaling/" + version, "metadata": meta, "spec": spec}
	}
	created := auditEventLine("create", "/apis/autoscaling/v2/namespaces/replay/horizontalpodautoscalers", 201, ref("autoscaling", "v2", "horizontalpodautoscalers", "replay", "web", ""), map[string]any{
		"requestObject": hpa("v2", ""), "responseObject": hpa("v2", "500")})
	for _, tc := range []struct {
		name  string
		write string
	}{
		{"an update through v1", auditEventLine("update", "/apis/autoscaling/v1/namespaces/replay/horizontalpodautoscalers/web", 200, ref("autoscaling", "v1", "horizontalpodautoscalers", "replay", "web", ""), map[string]any{
			"requestObject": hpa("v1", "500"), "responseObject": hpa("v1", "501")})},
		{"a merge patch through v1", auditEventLine("patch", "/apis/autoscaling/v1/namespaces/replay/horizontalpodautoscalers/web", 200, ref("autoscaling", "v1", "horizontalpodautoscalers", "replay", "web", ""), map[string]any{
			"requestObject": map[string]any{"spec": map[string]any{"targetCPUUtilizationPercentage": 50}}, "responseObject": hpa("v1", "501")})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeWebhook{}
			results, _, _ := replayRun(t, f, []string{created, tc.write})
			res := results[1]
			if res.Admission == nil {
				return
			}
			v := validateRequests(f, admissionv1.Update)
			if len(v) == 0 {
				t.Fatal("nothing sent to /validate")
			}
			r := v[len(v)-1]
			var obj, old struct{ APIVersion string }
			_ = json.Unmarshal(r.Object.Raw, &obj)
			_ = json.Unmarshal(r.OldObject.Raw, &old)
			if r.Kind.Version != r.Resource.Version || obj.APIVersion != "autoscaling/"+r.Resource.Version || (old.APIVersion != "" && old.APIVersion != obj.APIVersion) {
				t.Errorf("sent kind %v, resource %v, object of %s, oldObject of %s (%s; object %s); want one version throughout, as the apiserver converts both", r.Kind, r.Resource, obj.APIVersion, old.APIVersion, res.OldObject, res.Object)
			}
		})
	}
}

// A namespace write answered 504 may have been stored (handlers/finisher/
// finisher.go:127-146): the labels the log showed before it are no longer
// known to be the namespace's.
func TestReplayNamespaceLabelsAfterATimedOutWrite(t *testing.T) {
	config := validateConfig(`{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}`,
		"  namespaceSelector: {matchLabels: {enforced: \"true\"}}\n")
	configFile := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	ns := map[string]any{"kind": "Namespace", "apiVersion": "v1", "metadata": map[string]any{"name": "team", "resourceVersion": "1", "labels": map[string]any{"enforced": "true", "kubernetes.io/metadata.name": "team"}}}
	timeout := map[string]any{"metadata": map[string]any{}, "status": "Failure", "message": "Timeout: request did not complete within requested timeout - context deadline exceeded", "reason": "Timeout", "details": map[string]any{}, "code": 504}
	log := []string{
		auditEventLine("create", "/api/v1/namespaces", 201, ref("", "v1", "namespaces", "", "team", ""), map[string]any{"requestObject": ns, "responseObject": ns}),
		// kubectl label namespace team enforced-
		auditEventLine("patch", "/api/v1/namespaces/team", 504, ref("", "v1", "namespaces", "", "team", ""), map[string]any{
			"responseStatus": timeout, "requestObject": map[string]any{"metadata": map[string]any{"labels": map[string]any{"enforced": nil}}}}),
		auditEventLine("create", "/api/v1/namespaces/team/configmaps", 201, ref("", "v1", "configmaps", "team", "cm", ""), map[string]any{
			"requestObject": configMap("", "cm", "", nil), "responseObject": configMap("team", "cm", "5", nil)}),
	}
	results, _, _ := replayRun(t, &fakeWebhook{}, log, "-config", configFile)
	if got := results[2]; strings.Contains(got.NamespaceLabels, "as the log showed them") {
		t.Errorf("namespace labels %q; want them not known: the 504 patch of line 2 may have removed enforced=true", got.NamespaceLabels)
	}
}

// TestReplayGenerateNameSentToValidatingWebhooksWithItsName: a create
// with generateName, as e2e.log records one, objectRef without a name and
// the stored result with the generated one: the apiserver generates the
// name before the validating webhooks, and sends it them
// (rest.AdmissionToValidateObjectFunc), not to the mutating ones. Before,
// /validate got no name (helper-33).
func TestReplayGenerateNameSentToValidatingWebhooksWithItsName(t *testing.T) {
	log := []string{auditEventLine("create", "/api/v1/namespaces/replay/configmaps", 201, ref("", "v1", "configmaps", "replay", "", ""), map[string]any{
		"requestObject":  map[string]any{"kind": "ConfigMap", "apiVersion": "v1", "metadata": map[string]any{"generateName": "generated-"}, "data": map[string]any{"k": "v"}},
		"responseObject": map[string]any{"kind": "ConfigMap", "apiVersion": "v1", "metadata": map[string]any{"generateName": "generated-", "name": "generated-m6bt5", "namespace": "replay", "resourceVersion": "431", "uid": "3b3d1d7e-0000-4000-8000-000000000001"}, "data": map[string]any{"k": "v"}}})}
	f := &fakeWebhook{}
	results, summary, _ := replayRun(t, f, log)
	if results[0].Admission == nil {
		t.Fatalf("not reviewed: %s\n%s", results[0].NotReviewed, summary)
	}
	v := validateRequests(f, admissionv1.Create)
	if len(v) == 0 {
		t.Fatalf("nothing sent to /validate")
	}
	if v[0].Name != "generated-m6bt5" || !bytes.Contains(v[0].Object.Raw, []byte(`"name":"generated-m6bt5"`)) {
		t.Errorf("/validate got name %q, object %s; want the name the apiserver generated, generated-m6bt5 (the log's responseObject), in both", v[0].Name, v[0].Object.Raw)
	}
}
