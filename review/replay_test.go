package review

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// auditEventLine is one line of an audit log as the apiserver's log
// backend writes it: by default a create, as user alice of devs
// impersonated by the admin, answered with code, at level
// RequestResponse; more replaces or adds fields.
func auditEventLine(verb, uri string, code int, ref map[string]any, more map[string]any) string {
	e := map[string]any{
		"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "RequestResponse", "auditID": newUID(),
		"stage": "ResponseComplete", "requestURI": uri, "verb": verb,
		"user":             map[string]any{"username": "admin", "uid": "admin", "groups": []any{"system:masters", "system:authenticated"}},
		"impersonatedUser": map[string]any{"username": "alice", "groups": []any{"devs", "system:authenticated"}},
		"responseStatus":   map[string]any{"metadata": map[string]any{}, "code": code},
		"annotations":      map[string]any{"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""},
	}
	if ref != nil {
		e["objectRef"] = ref
	}
	maps.Copy(e, more)
	for k, v := range e {
		if v == nil {
			delete(e, k)
		}
	}
	b, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// ref is an objectRef.
func ref(group, version, resource, namespace, name, subresource string) map[string]any {
	r := map[string]any{"resource": resource, "apiVersion": version}
	for k, v := range map[string]string{"apiGroup": group, "namespace": namespace, "name": name, "subresource": subresource} {
		if v != "" {
			r[k] = v
		}
	}
	return r
}

// configMap is a ConfigMap's JSON, as an event holds it.
func configMap(namespace, name, resourceVersion string, annotations map[string]string) map[string]any {
	meta := map[string]any{"name": name, "namespace": namespace}
	if resourceVersion != "" {
		meta["resourceVersion"] = resourceVersion
	}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	return map[string]any{"kind": "ConfigMap", "apiVersion": "v1", "metadata": meta, "data": map[string]any{"k": "v"}}
}

// replayRun replays log (lines) with `webhook review -audit-log` against
// f, with -o json and args, and returns its results, the summary (stderr)
// and the exit status.
func replayRun(t *testing.T, f *fakeWebhook, log []string, args ...string) ([]replayResult, string, int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(strings.Join(log, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runReplayArgs(t, f, "", append([]string{"-audit-log", path, "-o", "json"}, args...)...)
	var results []replayResult
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatalf("-o json printed %s: %v\n%s", out, err, errOut)
	}
	return results, errOut, code
}

// runReplayArgs runs `webhook review args` against f, with stdin.
func runReplayArgs(t *testing.T, f *fakeWebhook, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := Run(context.Background(), flag.NewFlagSet("webhook review", flag.ContinueOnError), args, strings.NewReader(stdin), &out, &errOut, func() http.Handler { return f })
	var exit *ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.Code
		if exit.Err != nil {
			errOut.WriteString(exit.Err.Error())
		}
	default:
		t.Fatalf("review %q: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// TestReplayOperations turns each kind of write of the log into the
// admission request the apiserver sends: the operation each verb and
// subresource makes, the object and where it comes from, the old object,
// the user (impersonatedUser when the request impersonated), dryRun and
// the options, from the URI; and says why a write it cannot review is not
// reviewed.
func TestReplayOperations(t *testing.T) {
	stored := auditEventLine("create", "/api/v1/namespaces/ns/configmaps", 201, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
		"requestObject": configMap("", "cm", "", nil), "responseObject": configMap("ns", "cm", "10", map[string]string{"seen": "yes"})})
	deployment := map[string]any{"kind": "Deployment", "apiVersion": "apps/v1", "metadata": map[string]any{"name": "web", "namespace": "ns", "resourceVersion": "20"},
		"spec": map[string]any{"replicas": 1}}
	storedDeployment := auditEventLine("create", "/apis/apps/v1/namespaces/ns/deployments", 201, ref("apps", "v1", "deployments", "ns", "web", ""), map[string]any{
		"requestObject": deployment, "responseObject": deployment})
	// Pod p as stored at resourceVersion 3, and an update of it from there.
	storedPod := auditEventLine("create", "/api/v1/namespaces/ns/pods", 201, ref("", "v1", "pods", "ns", "p", ""), map[string]any{
		"requestObject":  map[string]any{"kind": "Pod", "apiVersion": "v1", "metadata": map[string]any{"name": "p", "namespace": "ns"}},
		"responseObject": map[string]any{"kind": "Pod", "apiVersion": "v1", "metadata": map[string]any{"name": "p", "namespace": "ns", "resourceVersion": "3"}}})
	podUpdate := auditEventLine("update", "/api/v1/namespaces/ns/pods/p", 200, ref("", "v1", "pods", "ns", "p", ""), map[string]any{
		"requestObject": map[string]any{"kind": "Pod", "apiVersion": "v1", "metadata": map[string]any{"name": "p", "namespace": "ns", "resourceVersion": "3", "labels": map[string]any{"a": "b"}}}})
	// A webhook of Deployments' updates alone, not of their scale.
	deploymentsOnly := filepath.Join(t.TempDir(), "deployments.yaml")
	if err := os.WriteFile(deploymentsOnly, []byte(validateConfig(`{apiGroups: [apps], apiVersions: [v1], operations: [UPDATE], resources: [deployments]}`, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		log     []string
		args    []string
		want    admissionv1.Operation // "" when not reviewed
		check   func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult)
		without string // what NotReviewed says, when not reviewed
	}{
		{
			name: "create: the object sent, by the impersonated user",
			log:  []string{stored},
			want: admissionv1.Create,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if req.UserInfo.Username != "alice" || !slices.Equal(req.UserInfo.Groups, []string{"devs", "system:authenticated"}) || res.ImpersonatedBy != "admin" {
					t.Errorf("got userInfo %+v, impersonated by %q; want alice of devs, impersonated by admin", req.UserInfo, res.ImpersonatedBy)
				}
				if req.Name != "cm" || req.Namespace != "ns" || req.Resource.Resource != "configmaps" || req.Kind.Kind != "ConfigMap" || bytes.Contains(req.Object.Raw, []byte(`"seen"`)) {
					t.Errorf("got %s %s/%s of %s, object %s; want ConfigMap ns/cm of configmaps, as sent", req.Kind.Kind, req.Namespace, req.Name, req.Resource.Resource, req.Object.Raw)
				}
				if !bytes.Contains(req.Object.Raw, []byte(`"namespace":"ns"`)) {
					t.Errorf("got object %s, want it in namespace ns, as the apiserver sets it before admission", req.Object.Raw)
				}
				if string(req.Options.Raw) != `{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1"}` || *req.DryRun {
					t.Errorf("got options %s, dryRun %v; want CreateOptions, no dry run", req.Options.Raw, *req.DryRun)
				}
			},
		},
		{
			name: "create, dry run: dryRun and the options from the URI",
			log: []string{auditEventLine("create", "/api/v1/namespaces/ns/configmaps?dryRun=All&fieldManager=kubectl", 201, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
				"requestObject": configMap("", "cm", "", nil)})},
			want: admissionv1.Create,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if !*req.DryRun || !res.DryRun || string(req.Options.Raw) != `{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1","dryRun":["All"],"fieldManager":"kubectl"}` {
					t.Errorf("got dryRun %v, options %s; want a dry run and its options", *req.DryRun, req.Options.Raw)
				}
			},
		},
		{
			// As a Helm chart's ClusterRole with namespace: {{ .Release.Namespace }}:
			// audit filled objectRef.namespace from the object, and the
			// apiserver cleared the object's.
			name: "create of a cluster-scoped object that names a namespace: none",
			log: []string{auditEventLine("create", "/apis/rbac.authorization.k8s.io/v1/clusterroles", 201, ref("rbac.authorization.k8s.io", "v1", "clusterroles", "monitoring", "reader", ""), map[string]any{
				"requestObject": map[string]any{"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1", "metadata": map[string]any{"name": "reader", "namespace": "monitoring"}}})},
			want: admissionv1.Create,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if req.Namespace != "" || res.Namespace != "" || bytes.Contains(req.Object.Raw, []byte(`"namespace"`)) {
					t.Errorf("got namespace %q (result %q), object %s; want none: a ClusterRole's request has none, and the apiserver clears its object's", req.Namespace, res.Namespace, req.Object.Raw)
				}
			},
		},
		{
			// kubectl delete --dry-run=server logs the same line: client-go
			// sends dryRun in the body, which level Metadata leaves out.
			name: "delete at level Metadata: not reviewed, whether a dry run unknown",
			log: []string{stored, auditEventLine("delete", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
				"level": "Metadata"})},
			without: "whether it was a dry run is unknown",
		},
		{
			name: "create with generateName: no name yet",
			log: []string{auditEventLine("create", "/api/v1/namespaces/ns/configmaps", 201, ref("", "v1", "configmaps", "ns", "", ""), map[string]any{
				"requestObject": map[string]any{"kind": "ConfigMap", "apiVersion": "v1", "metadata": map[string]any{"generateName": "cm-"}}})},
			want: admissionv1.Create,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if req.Name != "" {
					t.Errorf("got name %q, want none: the apiserver names the object after mutating admission", req.Name)
				}
			},
		},
		{
			name: "update whose earlier version is in the log",
			log: []string{stored, auditEventLine("update", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
				"requestObject": configMap("ns", "cm", "10", map[string]string{"seen": "yes", "new": "yes"})})},
			want: admissionv1.Update,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if !bytes.Contains(req.OldObject.Raw, []byte(`"resourceVersion":"10"`)) || !bytes.Contains(req.Object.Raw, []byte(`"new"`)) || !strings.HasSuffix(res.OldObject, ":1") {
					t.Errorf("got object %s, oldObject %s from %q; want the update's object and the version stored at line 1", req.Object.Raw, req.OldObject.Raw, res.OldObject)
				}
				if string(req.Options.Raw) != `{"kind":"UpdateOptions","apiVersion":"meta.k8s.io/v1"}` {
					t.Errorf("got options %s, want UpdateOptions", req.Options.Raw)
				}
			},
		},
		{
			// The garbage collector reads through the metadata client
			// (Accept: as=PartialObjectMetadata), and the log holds what
			// was sent: metadata, no data.
			name: "update after a get answered as PartialObjectMetadata: the version before it",
			log: []string{stored, auditEventLine("get", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
				"responseObject": map[string]any{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": map[string]any{"name": "cm", "namespace": "ns", "resourceVersion": "10"}}}),
				auditEventLine("update", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
					"requestObject": configMap("ns", "cm", "10", nil)})},
			want: admissionv1.Update,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if !bytes.Contains(req.OldObject.Raw, []byte(`"kind":"ConfigMap"`)) || !strings.HasSuffix(res.OldObject, ":1") {
					t.Errorf("got oldObject %s from %q; want the ConfigMap stored at line 1", req.OldObject.Raw, res.OldObject)
				}
			},
		},
		{
			// Two updates overlap, and the first to be stored is logged
			// last: the apiserver's current version is the newer.
			name: "update after an older version was logged after a newer one: the newer",
			log: []string{stored,
				auditEventLine("update", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
					"requestObject": configMap("ns", "cm", "11", nil), "responseObject": configMap("ns", "cm", "12", map[string]string{"owner": "set"})}),
				auditEventLine("update", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
					"requestObject": configMap("ns", "cm", "10", nil), "responseObject": configMap("ns", "cm", "11", nil)}),
				auditEventLine("update", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
					"requestObject": configMap("ns", "cm", "12", nil)})},
			want: admissionv1.Update,
			check: func(t *testing.T, _ *admissionv1.AdmissionRequest, res replayResult) {
				if !strings.HasSuffix(res.OldObject, ":2") {
					t.Errorf("the last update's oldObject: got %q, want the version 12 stored at line 2", res.OldObject)
				}
			},
		},
		{
			name: "update whose earlier version is not in the log",
			log: []string{auditEventLine("update", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
				"requestObject": configMap("ns", "cm", "10", nil)})},
			want: admissionv1.Update,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if len(req.OldObject.Raw) != 0 || !strings.HasPrefix(res.OldObject, "unknown: no earlier version") {
					t.Errorf("got oldObject %s, %q; want none, said to be unknown", req.OldObject.Raw, res.OldObject)
				}
			},
		},
		{
			name: "update of another version than the log's last: the old object is unknown",
			log: []string{stored, auditEventLine("update", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
				"requestObject": configMap("ns", "cm", "11", nil)})},
			want: admissionv1.Update,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if len(req.OldObject.Raw) != 0 || !strings.Contains(res.OldObject, "replaces resourceVersion 11, the log's last stored version is 10") {
					t.Errorf("got oldObject %s, %q; want none, and why", req.OldObject.Raw, res.OldObject)
				}
			},
		},
		{
			name: "update that creates the object (201): a CREATE",
			log: []string{auditEventLine("update", "/api/v1/namespaces/ns/configmaps/cm", 201, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
				"requestObject": configMap("ns", "cm", "", nil)})},
			want: admissionv1.Create,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if res.CreateAuthorization == nil || res.CreateAuthorization.Request.ResourceAttributes.Verb != "create" || res.CreateAuthorization.Request.ResourceAttributes.Name != "cm" {
					t.Errorf("got %+v, want the create it made authorized too (handlers/update.go, withAuthorization)", res.CreateAuthorization)
				}
			},
		},
		{
			name: "JSON Patch: applied to the version before it",
			log: []string{stored, auditEventLine("patch", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
				"requestObject":  []any{map[string]any{"op": "add", "path": "/data/patched", "value": "yes"}},
				"responseObject": configMap("ns", "cm", "11", map[string]string{"seen": "yes", "mutated": "after"})})},
			want: admissionv1.Update,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if !bytes.Contains(req.Object.Raw, []byte(`"patched":"yes"`)) || bytes.Contains(req.Object.Raw, []byte(`"mutated"`)) || !strings.Contains(res.Object, "a JSON Patch") {
					t.Errorf("got object %s (%s); want the patch applied to the version stored before it", req.Object.Raw, res.Object)
				}
				if !bytes.Contains(req.OldObject.Raw, []byte(`"resourceVersion":"10"`)) || string(req.Options.Raw) != `{"kind":"UpdateOptions","apiVersion":"meta.k8s.io/v1"}` {
					t.Errorf("got oldObject %s, options %s; want the version before, UpdateOptions", req.OldObject.Raw, req.Options.Raw)
				}
			},
		},
		{
			name: "merge patch: applied to the version before it",
			log: []string{stored, auditEventLine("patch", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
				"requestObject": map[string]any{"data": map[string]any{"k": nil, "patched": "yes"}}})},
			want: admissionv1.Update,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if !bytes.Contains(req.Object.Raw, []byte(`"data":{"patched":"yes"}`)) || !strings.Contains(res.Object, "a merge patch") {
					t.Errorf("got object %s (%s); want k removed and patched added", req.Object.Raw, res.Object)
				}
			},
		},
		{
			// A list a merge patch replaces and strategic merge merges: the
			// log does not say which the patch was.
			name: "a patch whose list a merge patch and a strategic merge patch apply otherwise: the object as stored, said so",
			log: []string{auditEventLine("create", "/api/v1/namespaces/ns/configmaps", 201, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
				"requestObject": configMap("", "cm", "", nil), "responseObject": map[string]any{"kind": "ConfigMap", "apiVersion": "v1",
					"metadata": map[string]any{"name": "cm", "namespace": "ns", "resourceVersion": "10", "finalizers": []any{"a"}}}}),
				auditEventLine("patch", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
					"requestObject":  map[string]any{"metadata": map[string]any{"finalizers": []any{"x"}}},
					"responseObject": configMap("ns", "cm", "11", map[string]string{"seen": "yes", "mutated": "after"})})},
			want: admissionv1.Update,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if !bytes.Contains(req.Object.Raw, []byte(`"mutated":"after"`)) || !strings.HasPrefix(res.Object, "the object as stored") {
					t.Errorf("got object %s (%s); want the responseObject, said to be the stored one", req.Object.Raw, res.Object)
				}
			},
		},
		{
			// kubectl debug's: the Pod's ephemeral containers merged by
			// name, in the order $setElementOrder gives.
			name: "a strategic merge patch: applied to the version stored, as strategic merge applies it",
			log: []string{auditEventLine("create", "/api/v1/namespaces/ns/pods", 201, ref("", "v1", "pods", "ns", "p", ""), map[string]any{
				"requestObject": map[string]any{"kind": "Pod", "apiVersion": "v1", "metadata": map[string]any{"name": "p", "namespace": "ns"}},
				"responseObject": map[string]any{"kind": "Pod", "apiVersion": "v1", "metadata": map[string]any{"name": "p", "namespace": "ns", "resourceVersion": "3"},
					"spec": map[string]any{"containers": []any{map[string]any{"name": "app", "image": "nginx"}}, "ephemeralContainers": []any{map[string]any{"name": "one", "image": "a"}}}}}),
				auditEventLine("patch", "/api/v1/namespaces/ns/pods/p/ephemeralcontainers", 403, ref("", "v1", "pods", "ns", "p", "ephemeralcontainers"), map[string]any{
					"requestObject": map[string]any{"spec": map[string]any{"$setElementOrder/ephemeralContainers": []any{map[string]any{"name": "one"}, map[string]any{"name": "two"}},
						"ephemeralContainers": []any{map[string]any{"name": "two", "image": "b"}}}}})},
			want: admissionv1.Update,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if !bytes.Contains(req.Object.Raw, []byte(`"ephemeralContainers":[{"image":"a","name":"one"},{"image":"b","name":"two"}]`)) || !bytes.Contains(req.Object.Raw, []byte(`"containers":[{"image":"nginx","name":"app"}]`)) ||
					!strings.Contains(res.Object, "a strategic merge patch") {
					t.Errorf("got object %s (%s); want both ephemeral containers, in order, the container kept", req.Object.Raw, res.Object)
				}
			},
		},
		{
			name: "patch refused then, its pre-image not in the log: not reviewed",
			log: []string{auditEventLine("patch", "/api/v1/namespaces/ns/configmaps/cm", 403, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
				"requestObject":  map[string]any{"data": map[string]any{"k": "x"}},
				"responseObject": map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403}})},
			without: "the patch's pre-image, the version stored before it, is not in the log",
		},
		{
			name: "apply that creates the object (201): a CREATE of the stored object",
			log: []string{auditEventLine("patch", "/api/v1/namespaces/ns/configmaps/cm?fieldManager=kubectl", 201, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
				"requestObject":  configMap("ns", "cm", "", nil),
				"responseObject": configMap("ns", "cm", "5", map[string]string{"seen": "yes"})})},
			want: admissionv1.Create,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if string(req.Options.Raw) != `{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1","fieldManager":"kubectl"}` || !strings.HasPrefix(res.Object, "the object as stored") {
					t.Errorf("got options %s, object from %q; want CreateOptions with the field manager, the stored object", req.Options.Raw, res.Object)
				}
			},
		},
		{
			name: "delete: oldObject from the log, the DeleteOptions sent",
			log: []string{stored, auditEventLine("delete", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
				"requestObject": map[string]any{"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", "propagationPolicy": "Foreground"}})},
			want: admissionv1.Delete,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if len(req.Object.Raw) != 0 || !bytes.Contains(req.OldObject.Raw, []byte(`"resourceVersion":"10"`)) || !bytes.Contains(req.Options.Raw, []byte("Foreground")) {
					t.Errorf("got object %s, oldObject %s, options %s; want the stored version as oldObject alone, and the options sent", req.Object.Raw, req.OldObject.Raw, req.Options.Raw)
				}
			},
		},
		{
			// client-go, and so kubectl delete --dry-run=server, sends dryRun
			// in the body; the event holds the body as the apiserver decoded
			// it, in meta.k8s.io/__internal.
			name: "delete, dry run: dryRun from the DeleteOptions sent, as meta.k8s.io/v1",
			log: []string{stored, auditEventLine("delete", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
				"requestObject": map[string]any{"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/__internal", "dryRun": []any{"All"}}})},
			want: admissionv1.Delete,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if !*req.DryRun || !res.DryRun || string(req.Options.Raw) != `{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/v1","dryRun":["All"]}` {
					t.Errorf("got dryRun %v (%v), options %s; want a dry run, DeleteOptions of meta.k8s.io/v1 with dryRun", *req.DryRun, res.DryRun, req.Options.Raw)
				}
			},
		},
		{
			name: "update after a dry-run delete: the version stored before it is still the oldObject",
			log: []string{stored, auditEventLine("delete", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
				"requestObject": map[string]any{"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/__internal", "dryRun": []any{"All"}}}),
				auditEventLine("update", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
					"requestObject": configMap("ns", "cm", "10", map[string]string{"updated": "yes"})})},
			want: admissionv1.Update,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if !bytes.Contains(req.OldObject.Raw, []byte(`"resourceVersion":"10"`)) {
					t.Errorf("got oldObject %s (%s), want the version stored before the dry run", req.OldObject.Raw, res.OldObject)
				}
			},
		},
		{
			// The binding sets spec.nodeName and a new resourceVersion
			// (pod/storage/storage.go, assignPod); the log holds neither.
			name: "patch after a binding at level Metadata: the version stored before the binding is not its pre-image",
			log: []string{storedPod,
				auditEventLine("create", "/api/v1/namespaces/ns/pods/p/binding", 201, ref("", "v1", "pods", "ns", "p", "binding"), map[string]any{"level": "Metadata"}),
				auditEventLine("patch", "/api/v1/namespaces/ns/pods/p", 200, ref("", "v1", "pods", "ns", "p", ""), map[string]any{
					"requestObject": map[string]any{"metadata": map[string]any{"labels": map[string]any{"a": "b"}}}})},
			without: "the patch's pre-image",
		},
		{
			// kubectl drain --dry-run=server: the eviction's deleteOptions.
			name: "update after a dry-run eviction: the version stored before it is still the oldObject",
			log: []string{storedPod,
				auditEventLine("create", "/api/v1/namespaces/ns/pods/p/eviction", 201, ref("", "v1", "pods", "ns", "p", "eviction"), map[string]any{
					"requestObject": map[string]any{"kind": "Eviction", "apiVersion": "policy/v1", "metadata": map[string]any{"name": "p", "namespace": "ns"}, "deleteOptions": map[string]any{"dryRun": []any{"All"}}}}),
				podUpdate},
			want: admissionv1.Update,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if !bytes.Contains(req.OldObject.Raw, []byte(`"resourceVersion":"3"`)) {
					t.Errorf("got oldObject %s (%s), want the version stored before the dry-run eviction", req.OldObject.Raw, res.OldObject)
				}
			},
		},
		{
			// kubectl exec writes nothing of the Pod.
			name: "update after an exec: the version stored before it is still the oldObject",
			log: []string{storedPod,
				auditEventLine("create", "/api/v1/namespaces/ns/pods/p/exec?command=sh", 101, ref("", "v1", "pods", "ns", "p", "exec"), map[string]any{"level": "Metadata"}),
				podUpdate},
			want: admissionv1.Update,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if !bytes.Contains(req.OldObject.Raw, []byte(`"resourceVersion":"3"`)) {
					t.Errorf("got oldObject %s (%s), want the version stored before the exec", req.OldObject.Raw, res.OldObject)
				}
			},
		},
		{
			name:    "delete of an object the log never stored: not reviewed",
			log:     []string{auditEventLine("delete", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), nil)},
			without: "the object as stored before the delete is unknown",
		},
		{
			name:    "deletecollection: not reviewed",
			log:     []string{auditEventLine("deletecollection", "/api/v1/namespaces/ns/configmaps", 200, ref("", "v1", "configmaps", "ns", "", ""), nil)},
			without: "a deletecollection is admitted object by object",
		},
		{
			name: "status: the whole object, its old version from the log",
			log: []string{storedDeployment, auditEventLine("update", "/apis/apps/v1/namespaces/ns/deployments/web/status", 200, ref("apps", "v1", "deployments", "ns", "web", "status"), map[string]any{
				"requestObject": deployment})},
			want: admissionv1.Update,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if req.SubResource != "status" || req.Kind.Kind != "Deployment" || len(req.OldObject.Raw) == 0 {
					t.Errorf("got %s/%s of kind %s, oldObject %s; want status of a Deployment with its old version", req.Resource.Resource, req.SubResource, req.Kind.Kind, req.OldObject.Raw)
				}
			},
		},
		{
			name: "scale: an update of the Scale, its old one made of the Deployment stored",
			log: []string{storedDeployment, auditEventLine("update", "/apis/apps/v1/namespaces/ns/deployments/web/scale", 200, ref("apps", "v1", "deployments", "ns", "web", "scale"), map[string]any{
				"requestObject": map[string]any{"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": map[string]any{"name": "web", "namespace": "ns"}, "spec": map[string]any{"replicas": 3}}})},
			want: admissionv1.Update,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if req.SubResource != "scale" || req.Kind != (metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}) || req.Resource.Group != "apps" ||
					!strings.HasSuffix(res.OldObject, "audit.log:1") || !bytes.Contains(req.OldObject.Raw, []byte(`"kind":"Scale"`)) || !bytes.Contains(req.OldObject.Raw, []byte(`"spec":{"replicas":1}`)) ||
					!bytes.Contains(req.OldObject.Raw, []byte(`"resourceVersion":"20"`)) {
					t.Errorf("got %+v %s/%s, oldObject %q %s; want an autoscaling/v1 Scale of apps deployments, scale, the old one made of line 1's", req.Kind, req.Resource.Resource, req.SubResource, res.OldObject, req.OldObject.Raw)
				}
			},
		},
		{
			name: "kubectl scale: a merge patch of the Scale, applied to the one made of the Deployment stored",
			log: []string{storedDeployment, auditEventLine("patch", "/apis/apps/v1/namespaces/ns/deployments/web/scale", 403, ref("apps", "v1", "deployments", "ns", "web", "scale"), map[string]any{
				"requestObject": map[string]any{"spec": map[string]any{"replicas": 7}}})},
			want: admissionv1.Update,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if req.Kind.Kind != "Scale" || !bytes.Contains(req.Object.Raw, []byte(`"spec":{"replicas":7}`)) || !bytes.Contains(req.OldObject.Raw, []byte(`"spec":{"replicas":1}`)) ||
					!strings.Contains(res.Object, "a merge patch") {
					t.Errorf("got %s of %s, oldObject %s (%s); want the Scale patched to 7 replicas, the old one of 1", req.Kind.Kind, req.Object.Raw, req.OldObject.Raw, res.Object)
				}
			},
		},
		{
			name: "a later update's oldObject has the replicas a scale stored",
			log: []string{storedDeployment, auditEventLine("patch", "/apis/apps/v1/namespaces/ns/deployments/web/scale", 200, ref("apps", "v1", "deployments", "ns", "web", "scale"), map[string]any{
				"requestObject":  map[string]any{"spec": map[string]any{"replicas": 7}},
				"responseObject": map[string]any{"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": map[string]any{"name": "web", "namespace": "ns", "resourceVersion": "21"}, "spec": map[string]any{"replicas": 7}}}),
				auditEventLine("update", "/apis/apps/v1/namespaces/ns/deployments/web", 200, ref("apps", "v1", "deployments", "ns", "web", ""), map[string]any{
					"requestObject": map[string]any{"kind": "Deployment", "apiVersion": "apps/v1", "metadata": map[string]any{"name": "web", "namespace": "ns", "resourceVersion": "21"}, "spec": map[string]any{"replicas": 7}}})},
			args: []string{"-config", deploymentsOnly},
			want: admissionv1.Update,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if req.Kind.Kind != "Deployment" || !bytes.Contains(req.OldObject.Raw, []byte(`"replicas":7`)) || !bytes.Contains(req.OldObject.Raw, []byte(`"resourceVersion":"21"`)) || !strings.HasSuffix(res.OldObject, "audit.log:2") {
					t.Errorf("got oldObject %s (%s); want the Deployment with the scale's replicas and resourceVersion, as stored at line 2", req.OldObject.Raw, res.OldObject)
				}
			},
		},
		{
			name: "ephemeral containers: the Pod, its old version from the log",
			log: []string{storedPod,
				auditEventLine("update", "/api/v1/namespaces/ns/pods/p/ephemeralcontainers", 200, ref("", "v1", "pods", "ns", "p", "ephemeralcontainers"), map[string]any{
					"requestObject": map[string]any{"kind": "Pod", "apiVersion": "v1", "metadata": map[string]any{"name": "p", "namespace": "ns", "resourceVersion": "3"},
						"spec": map[string]any{"ephemeralContainers": []any{map[string]any{"name": "debug", "image": "busybox"}}}}})},
			want: admissionv1.Update,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if req.SubResource != "ephemeralcontainers" || req.Kind.Kind != "Pod" || !strings.HasSuffix(res.OldObject, "audit.log:1") || !bytes.Contains(req.Object.Raw, []byte("busybox")) || bytes.Contains(req.OldObject.Raw, []byte("busybox")) {
					t.Errorf("got %s/%s of %s, oldObject %q %s; want the Pod with its debug container, the old one as stored at line 1", req.Resource.Resource, req.SubResource, req.Kind.Kind, res.OldObject, req.OldObject.Raw)
				}
			},
		},
		{
			name: "exec: a CONNECT of the options in the URI",
			log:  []string{auditEventLine("create", "/api/v1/namespaces/ns/pods/p/exec?command=ls&command=-l&container=c&stdout=true&tty=false", 101, ref("", "v1", "pods", "ns", "p", "exec"), nil)},
			want: admissionv1.Connect,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if req.Kind.Kind != "PodExecOptions" || string(req.Object.Raw) != `{"apiVersion":"v1","command":["ls","-l"],"container":"c","kind":"PodExecOptions","stdout":true}` || req.Options.Raw != nil || req.SubResource != "exec" {
					t.Errorf("got %s %s, options %s; want PodExecOptions from the query, no options", req.Kind.Kind, req.Object.Raw, req.Options.Raw)
				}
			},
		},
		{
			name: "eviction: a create of a subresource, named in the URL",
			log: []string{auditEventLine("create", "/api/v1/namespaces/ns/pods/p/eviction", 201, ref("", "v1", "pods", "ns", "p", "eviction"), map[string]any{
				"requestObject": map[string]any{"kind": "Eviction", "apiVersion": "policy/v1", "metadata": map[string]any{"name": "p", "namespace": "ns"}}})},
			want: admissionv1.Create,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if req.Name != "p" || req.SubResource != "eviction" || req.Kind.Kind != "Eviction" {
					t.Errorf("got %s %s/%s; want an Eviction of pods/eviction named p", req.Kind.Kind, req.Resource.Resource, req.Name)
				}
			},
		},
		{
			name: "a Namespace: sent in its own namespace",
			log: []string{auditEventLine("create", "/api/v1/namespaces", 201, ref("", "v1", "namespaces", "", "team", ""), map[string]any{
				"requestObject": map[string]any{"kind": "Namespace", "apiVersion": "v1", "metadata": map[string]any{"name": "team"}}})},
			want: admissionv1.Create,
			check: func(t *testing.T, req *admissionv1.AdmissionRequest, res replayResult) {
				if req.Namespace != "team" {
					t.Errorf("got namespace %q, want the Namespace's own name", req.Namespace)
				}
			},
		},
		{
			name: "level Metadata: not reviewed, and why",
			log: []string{auditEventLine("create", "/api/v1/namespaces/ns/configmaps", 201, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
				"level": "Metadata"})},
			without: "the audit policy records this request at level Metadata, without its object",
		},
		{
			name: "truncated by the backend: not reviewed, and why",
			log: []string{auditEventLine("create", "/api/v1/namespaces/ns/configmaps", 201, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
				"annotations": map[string]any{"audit.k8s.io/truncated": "true"}})},
			without: "the log backend dropped the event's objects as too large",
		},
		{
			name:    "a webhook configuration: never sent",
			log:     []string{auditEventLine("create", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", 201, ref("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", "", "v", ""), nil)},
			without: "never sent to webhooks",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeWebhook{}
			results, summary, _ := replayRun(t, f, tc.log, tc.args...)
			res := results[len(results)-1]
			if tc.want == "" {
				if res.Admission != nil || !strings.Contains(res.NotReviewed, tc.without) {
					t.Fatalf("got %+v, not reviewed %q; want it not reviewed, saying %q\n%s", res.Admission, res.NotReviewed, tc.without, summary)
				}
				return
			}
			if res.Admission == nil {
				t.Fatalf("not reviewed: %s\n%s", res.NotReviewed, summary)
			}
			// The first sent, to /mutate: the object as replayed.
			var req *admissionv1.AdmissionRequest
			for _, r := range slices.Backward(f.requests) {
				if r.Operation == tc.want {
					req = r
				}
			}
			if req == nil {
				t.Fatalf("no %s request was sent; got %d requests", tc.want, len(f.requests))
			}
			tc.check(t, req, res)
		})
	}
}

// TestReplaySubjectAccessReviews turns each request, reads included, into
// the SubjectAccessReview the apiserver's webhook authorizer sends, as
// testdata/authorization/ holds those a real apiserver sent (make capture
// writes them here and in authorize/testdata/), and sends
// none for system:masters or a request never authenticated.
func TestReplaySubjectAccessReviews(t *testing.T) {
	fixture := func(name string) authorizationv1.SubjectAccessReviewSpec {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("testdata", "authorization", name))
		if err != nil {
			t.Fatal(err)
		}
		var sar authorizationv1.SubjectAccessReview
		if err := json.Unmarshal(b, &sar); err != nil {
			t.Fatal(err)
		}
		return sar.Spec
	}
	alice := map[string]any{"username": "alice", "groups": []any{"developers", "route:capture-v1", "system:authenticated"}}
	for _, tc := range []struct {
		name, line string
		want       *authorizationv1.SubjectAccessReviewSpec // nil: none sent
		notSent    string
	}{
		{"a get", auditEventLine("get", "/api/v1/namespaces/authz/configmaps/settings", 403, ref("", "v1", "configmaps", "authz", "settings", ""), map[string]any{"impersonatedUser": alice}),
			ptr(fixture("v1-get-configmap.json")), ""},
		{"a list with selectors", auditEventLine("list", "/api/v1/namespaces/authz/pods?fieldSelector=spec.nodeName%3Dnode-1&labelSelector=app%3Dweb", 403, ref("", "v1", "pods", "authz", "", ""), map[string]any{"impersonatedUser": alice}),
			ptr(fixture("v1-list-pods-selectors.json")), ""},
		{"a subresource", auditEventLine("get", "/apis/apps/v1/namespaces/authz/deployments/web/scale", 403, ref("apps", "v1", "deployments", "authz", "web", "scale"), map[string]any{"impersonatedUser": alice}),
			ptr(fixture("v1-get-deployment-scale.json")), ""},
		{"a delete of a Namespace", auditEventLine("delete", "/api/v1/namespaces/authz-x", 403, ref("", "v1", "namespaces", "authz-x", "authz-x", ""), map[string]any{"impersonatedUser": alice}),
			ptr(fixture("v1-delete-namespace.json")), ""},
		{"another path", auditEventLine("get", "/version", 200, nil, map[string]any{"impersonatedUser": alice}),
			ptr(fixture("v1-get-version.json")), ""},
		{"a create: no name", auditEventLine("create", "/api/v1/namespaces/ns/configmaps", 201, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{"impersonatedUser": alice, "level": "Metadata"}),
			&authorizationv1.SubjectAccessReviewSpec{User: "alice", Groups: []string{"developers", "route:capture-v1", "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "ns", Verb: "create", Version: "v1", Resource: "configmaps"}}, ""},
		{"system:masters", auditEventLine("get", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{"impersonatedUser": nil}),
			nil, "system:masters is allowed before any authorizer"},
		{"not authenticated", auditEventLine("get", "/api/v1/namespaces/ns/configmaps/cm", 401, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{"impersonatedUser": nil, "user": map[string]any{}, "stage": "ResponseStarted"}),
			nil, "not authenticated"},
		// Refused before authorization, which records no decision.
		{"impersonation refused", auditEventLine("create", "/api/v1/namespaces/ns/configmaps", 403, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{"impersonatedUser": nil, "user": map[string]any{"username": "bob"}, "annotations": map[string]any{}}),
			nil, "refused (403) by impersonation, before authorization"},
		{"throttled", auditEventLine("get", "/api/v1/namespaces/ns/configmaps/cm", 429, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{"annotations": map[string]any{}}),
			nil, "refused (429) by API priority and fairness, before authorization"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeWebhook{}
			results, _, _ := replayRun(t, f, []string{tc.line})
			az := results[0].Authorization
			if tc.want == nil {
				if len(f.sars) != 0 || az == nil || !strings.Contains(az.NotSent, tc.notSent) {
					t.Errorf("got %d sent, %+v; want none sent, saying %q", len(f.sars), az, tc.notSent)
				}
				return
			}
			if len(f.sars) != 1 {
				t.Fatalf("got %d SubjectAccessReviews, want 1", len(f.sars))
			}
			got, _ := json.Marshal(f.sars[0])
			want, _ := json.Marshal(tc.want)
			if !bytes.Equal(got, want) {
				t.Errorf("got %s\nwant %s", got, want)
			}
			if az == nil || az.Verdict != "no-opinion" || az.Request == nil {
				t.Errorf("got %+v, want the answer no-opinion and the request", az)
			}
		})
	}
}

// TestReplayCapturedLog replays the log e2e TestAuditReplay captured from
// a real kube-apiserver (make capture): every ConfigMap write but the one
// authorization refused is reviewed; each update's and delete's oldObject
// is the version the apiserver stored just before; each patch's object is
// the patch applied, or the stored result of the apply that created one.
func TestReplayCapturedLog(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "audit", "e2e.log"))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeWebhook{}
	results, summary, _ := replayRun(t, f, strings.Split(strings.TrimSpace(string(b)), "\n"))
	for _, r := range results {
		if r.Resource != "configmaps" || r.Verb == "get" || r.Verb == "list" {
			continue
		}
		if r.Then.Authorization == "forbid" {
			if r.Admission != nil || !strings.Contains(r.NotReviewed, "refused by authorization") {
				t.Errorf("%s: refused by authorization: got %+v, %q; want not reviewed, and why", r.Source, r.Admission, r.NotReviewed)
			}
			continue
		}
		if r.Admission == nil {
			t.Errorf("%s %s %s: not reviewed: %s", r.Source, r.Verb, r.Name, r.NotReviewed)
			continue
		}
		if r.Verb == "update" || r.Verb == "delete" || (r.Verb == "patch" && r.Then.Code != 201) {
			if r.OldObject == "" || strings.HasPrefix(r.OldObject, "unknown") {
				t.Errorf("%s %s %s: oldObject %q, want the version stored before", r.Source, r.Verb, r.Name, r.OldObject)
			}
		}
		if r.Verb == "patch" && r.Object == "" {
			t.Errorf("%s: a patch whose object's source is not said", r.Source)
		}
	}
	// Each update's oldObject is the version stored by the write before.
	for _, req := range f.requests {
		var old, obj struct {
			Metadata struct{ Name, ResourceVersion string }
		}
		_ = json.Unmarshal(req.OldObject.Raw, &old)
		_ = json.Unmarshal(req.Object.Raw, &obj)
		if req.Operation == admissionv1.Update && obj.Metadata.ResourceVersion != "" && old.Metadata.ResourceVersion != obj.Metadata.ResourceVersion {
			t.Errorf("update of %s: oldObject at resourceVersion %s, the update names %s", obj.Metadata.Name, old.Metadata.ResourceVersion, obj.Metadata.ResourceVersion)
		}
	}
	if !strings.Contains(summary, "oldObject: 9 found in the log, 0 not in it") {
		t.Errorf("the summary:\n%s\nwant 9 oldObjects found, none unknown", summary)
	}
}

// TestReplayMalformedLines: a line that is no event is an error naming
// its file and line, and why; the other lines are still replayed; the exit
// status is 2.
func TestReplayMalformedLines(t *testing.T) {
	good := func(name string) string {
		return auditEventLine("create", "/api/v1/namespaces/ns/configmaps", 201, ref("", "v1", "configmaps", "ns", name, ""), map[string]any{"requestObject": configMap("", name, "", nil)})
	}
	for _, tc := range []struct{ name, line, want string }{
		{"not JSON", `{"kind": "Event", "apiVersion":`, "not JSON at byte"},
		{"legacy format", `2026-11-26T00:00:00Z AUDIT: id="x" stage="ResponseComplete"`, "not a JSON object: replay reads the log as --audit-log-format=json"},
		{"another kind", `{"kind": "Pod", "apiVersion": "v1"}`, `not an audit event: kind "Pod"`},
		{"no stage", `{"kind": "Event", "apiVersion": "audit.k8s.io/v1", "verb": "get"}`, `stage ""`},
		{"a field of the wrong type", `{"kind": "Event", "apiVersion": "audit.k8s.io/v1", "stage": "ResponseComplete", "verb": "get", "objectRef": "x"}`, "objectRef is a JSON string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeWebhook{}
			results, summary, code := replayRun(t, f, []string{good("one"), tc.line, "", good("two")})
			if code != 2 {
				t.Errorf("got exit %d, want 2", code)
			}
			if len(results) != 3 || !strings.HasSuffix(results[1].Source, "audit.log:2") || !strings.Contains(results[1].Error, tc.want) {
				t.Fatalf("got %+v; want line 2 an error containing %q", results, tc.want)
			}
			if results[2].Name != "two" || results[2].Admission == nil || !strings.HasSuffix(results[2].Source, "audit.log:4") {
				t.Errorf("got %+v, want line 4 replayed", results[2])
			}
			if !strings.Contains(summary, "1 line could not be read") || !strings.Contains(summary, "audit.log:2: not") || !strings.Contains(summary, tc.want) {
				t.Errorf("the summary does not name the line:\n%s", summary)
			}
		})
	}
	t.Run("a line longer than any event", func(t *testing.T) {
		huge := `{"kind": "Event", "x": "` + strings.Repeat("a", maxEventBytes) + `"}`
		results, _, code := replayRun(t, &fakeWebhook{}, []string{huge, good("after")})
		if code != 2 || len(results) != 2 || !strings.Contains(results[0].Error, "longer than 16 MiB") || results[1].Name != "after" {
			t.Errorf("got exit %d, %d results; want 2, the long line an error and the next replayed", code, len(results))
		}
	})
	t.Run("a file that does not exist", func(t *testing.T) {
		out, errOut, code := runReplayArgs(t, &fakeWebhook{}, "", "-audit-log", filepath.Join(t.TempDir(), "missing.log"))
		if code != 2 || !strings.Contains(out+errOut, "no such file") {
			t.Errorf("got exit %d, %s%s; want 2 and the error", code, out, errOut)
		}
	})
}

// TestReplayInputs reads several files in order, a gzip-compressed one
// (as --audit-log-compress writes rotated logs) and stdin: the stored
// version of a file read before is the next one's oldObject.
func TestReplayInputs(t *testing.T) {
	dir := t.TempDir()
	created := auditEventLine("create", "/api/v1/namespaces/ns/configmaps", 201, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
		"requestObject": configMap("", "cm", "", nil), "responseObject": configMap("ns", "cm", "10", nil)})
	updated := auditEventLine("update", "/api/v1/namespaces/ns/configmaps/cm", 200, ref("", "v1", "configmaps", "ns", "cm", ""), map[string]any{
		"requestObject": configMap("ns", "cm", "10", nil), "responseObject": configMap("ns", "cm", "11", nil)})
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	fmt.Fprintln(w, created)
	w.Close()
	old := filepath.Join(dir, "audit-2026-11-25T00-00-00.000.log.gz")
	if err := os.WriteFile(old, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &fakeWebhook{}
	out, errOut, code := runReplayArgs(t, f, updated+"\n", "-audit-log", old, "-audit-log", "-", "-o", "json")
	var results []replayResult
	if err := json.Unmarshal([]byte(out), &results); err != nil || code != 0 {
		t.Fatalf("got exit %d, %s%s: %v", code, out, errOut, err)
	}
	if len(results) != 2 || results[1].Source != "stdin:1" || results[1].OldObject != old+":1" {
		t.Errorf("got %+v; want the update of stdin:1 with its oldObject from %s:1", results, old)
	}
}

// TestCompleter replays a request once, from its ResponseComplete event;
// from the last stage read when the log has no ResponseComplete (a watch
// still open, a log cut short); a failed authentication at once; and, with
// more than maxPendingRequests waiting, the oldest first.
func TestCompleter(t *testing.T) {
	var replayed []string
	c := newCompleter(func(at logLine, e *auditEvent) { replayed = append(replayed, e.AuditID+"/"+e.Stage) })
	ev := func(id, stage string, code int32) *auditEvent {
		e := &auditEvent{AuditID: id, Stage: stage}
		if code != 0 {
			e.ResponseStatus = &metav1.Status{Code: code}
		}
		return e
	}
	c.add(logLine{}, ev("a", stageRequestReceived, 0))
	c.add(logLine{}, ev("w", stageResponseStarted, 200))
	c.add(logLine{}, ev("u", stageResponseStarted, 401))
	c.add(logLine{}, ev("a", stageResponseComplete, 201))
	// At once, before the requests after it: their oldObject may be its.
	if !slices.Equal(replayed, []string{"u/ResponseStarted", "a/ResponseComplete"}) {
		t.Errorf("before the log ends: got %v replayed, want the failed authentication and the complete request", replayed)
	}
	c.add(logLine{}, ev("r", stageRequestReceived, 0))
	c.flush()
	want := []string{"u/ResponseStarted", "a/ResponseComplete", "w/ResponseStarted", "r/RequestReceived"}
	if !slices.Equal(replayed, want) {
		t.Errorf("got %v, want %v", replayed, want)
	}

	replayed = nil
	for i := range maxPendingRequests + 2 {
		c.add(logLine{}, ev(fmt.Sprint(i), stageRequestReceived, 0))
	}
	if !slices.Equal(replayed, []string{"0/RequestReceived", "1/RequestReceived"}) || len(c.pending) != maxPendingRequests {
		t.Errorf("with %d waiting: got %v replayed and %d pending, want the 2 oldest replayed", maxPendingRequests+2, replayed, len(c.pending))
	}
	// A request replayed early is not replayed again when its later stages
	// come; one still waiting is, from its last.
	c.add(logLine{}, ev("0", stageResponseStarted, 200))
	c.add(logLine{}, ev("0", stageResponseComplete, 200))
	c.add(logLine{}, ev("2", stageResponseComplete, 200))
	if want := []string{"0/RequestReceived", "1/RequestReceived", "2/ResponseComplete"}; !slices.Equal(replayed, want) {
		t.Errorf("the later stages of a request replayed early: got %v replayed, want %v", replayed, want)
	}
}

// TestVersionCache keeps the last stored version of each object within
// its bytes, lets the least recently stored go first, and remembers which
// it let go.
func TestVersionCache(t *testing.T) {
	version := func(n int) []byte { return bytes.Repeat([]byte("x"), n) }
	c := newVersionCache(3 * (100 + versionOverheadBytes + 6))
	for _, k := range []string{"k/a", "k/b", "k/c"} {
		c.put(k, version(100), "1", logLine{"f", 1})
	}
	c.put("k/a", version(100), "2", logLine{"f", 2}) // stored again: now the most recent
	c.put("k/d", version(100), "3", logLine{"f", 3})
	if v, dropped, _ := c.get("k/b"); v != nil || !dropped {
		t.Errorf("k/b: got %v, dropped %v; want it dropped, the least recently stored", v, dropped)
	}
	if v, _, _ := c.get("k/a"); v == nil || v.at.line != 2 {
		t.Errorf("k/a: got %+v, want the version of line 2", v)
	}
	if v, dropped, _ := c.get("k/never"); v != nil || dropped {
		t.Errorf("k/never: got %v, dropped %v; want neither", v, dropped)
	}
	if c.bytes > c.maxBytes || c.len() != 3 || c.droppedCount != 1 {
		t.Errorf("got %d bytes of %d, %d versions, %d dropped; want at most the limit, 3, 1", c.bytes, c.maxBytes, c.len(), c.droppedCount)
	}
	c.put("k/huge", version(int(c.maxBytes)), "4", logLine{"f", 4})
	if v, dropped, _ := c.get("k/huge"); v != nil || !dropped || c.len() != 3 {
		t.Errorf("a version larger than the cache: got %v, dropped %v, %d kept; want it not kept, the others kept", v, dropped, c.len())
	}
	c.remove("k/a")
	if v, dropped, _ := c.get("k/a"); v != nil || dropped {
		t.Errorf("a deleted object: got %v, dropped %v; want it forgotten", v, dropped)
	}
	// Of two versions the apiserver's rules cannot order, neither is kept.
	c.put("k/e", version(10), "5", logLine{"f", 5})
	c.put("k/e", version(10), "5a", logLine{"f", 6})
	if v, _, writtenAt := c.get("k/e"); v != nil || writtenAt == nil || writtenAt.line != 6 {
		t.Errorf("k/e: got %+v, written at %v; want neither version, written at line 6", v, writtenAt)
	}

	// Through replay: an update whose earlier version the cache dropped
	// says so, and the summary counts it.
	var log []string
	for _, name := range []string{"first", "second"} {
		log = append(log, auditEventLine("create", "/api/v1/namespaces/ns/configmaps", 201, ref("", "v1", "configmaps", "ns", name, ""), map[string]any{
			"requestObject": configMap("", name, "", nil), "responseObject": configMap("ns", name, "1", nil)}))
	}
	log = append(log, auditEventLine("update", "/api/v1/namespaces/ns/configmaps/first", 200, ref("", "v1", "configmaps", "ns", "first", ""), map[string]any{
		"requestObject": configMap("ns", "first", "1", nil)}))
	results, summary, _ := replayRun(t, &fakeWebhook{}, log, "-audit-cache-bytes", "400")
	if got := results[2].OldObject; !strings.Contains(got, "dropped from the cache (raise -audit-cache-bytes)") {
		t.Errorf("got oldObject %q, want it said to be dropped", got)
	}
	if !strings.Contains(summary, "1 dropped from the cache") || !strings.Contains(summary, "1 dropped\n") {
		t.Errorf("the summary does not count what was dropped:\n%s", summary)
	}
}

// TestReplayChanges: what the policy decides now beside what happened
// then, each change on its line and the refusals in the summary; the exit
// status is 1 when something would now be refused, 0 otherwise.
func TestReplayChanges(t *testing.T) {
	config := `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: m}
webhooks:
- name: m.example.com
  clientConfig: {url: "https://w/mutate"}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: v}
webhooks:
- name: v.example.com
  clientConfig: {url: "https://w/validate"}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}]
`
	configFile := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	create := func(name string, code int, annotations map[string]string, message string) string {
		more := map[string]any{"requestObject": configMap("", name, "", nil)}
		if len(annotations) > 0 {
			a := map[string]any{"authorization.k8s.io/decision": "allow"}
			for k, v := range annotations {
				a[k] = v
			}
			more["annotations"] = a
		}
		line := auditEventLine("create", "/api/v1/namespaces/ns/configmaps", code, ref("", "v1", "configmaps", "ns", name, ""), more)
		if message != "" {
			var e map[string]any
			_ = json.Unmarshal([]byte(line), &e)
			e["responseStatus"] = map[string]any{"code": code, "status": "Failure", "reason": "Forbidden", "message": message}
			b, _ := json.Marshal(e)
			line = string(b)
		}
		return line
	}
	mutated := map[string]string{"mutation.webhook.admission.k8s.io/round_0_index_0": `{"configuration":"m","webhook":"m.example.com","mutated":true}`}
	notMutated := map[string]string{"mutation.webhook.admission.k8s.io/round_0_index_0": `{"configuration":"m","webhook":"m.example.com","mutated":false}`}
	for _, tc := range []struct {
		name, line string
		want       []string
		code       int
	}{
		{"admitted and patched then, now too", create("same", 201, mutated, ""), nil, 0},
		{"admitted then, denied now", create("bad-new", 201, mutated, ""), []string{changeRefused}, 1},
		{"denied then, admitted now", create("fine", 403, nil, `admission webhook "v.example.com" denied the request: fine is not fine`), []string{changeAdmitted}, 0},
		{"denied then and now, in other words", create("bad-words", 403, nil, `admission webhook "v.example.com" denied the request: old words`), []string{changeMessage}, 0},
		{"denied then and now, the same words", create("bad-same", 403, nil, `admission webhook "v.example.com" denied the request: bad-same is bad`), nil, 0},
		{"denied then by another webhook: not compared", create("fine-other", 403, nil, `admission webhook "other.example.com" denied the request: no`), nil, 0},
		{"not patched then, patched now", create("unpatched", 201, notMutated, ""), []string{changePatched}, 0},
		{"authorized then, denied now", auditEventLine("get", "/api/v1/namespaces/ns/configmaps/x", 200, ref("", "v1", "configmaps", "ns", "x", ""), map[string]any{
			"impersonatedUser": map[string]any{"username": "jane", "groups": []any{"system:authenticated"}}}), []string{changeAuthzRefused}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			results, summary, code := replayRun(t, &fakeWebhook{}, []string{tc.line}, "-config", configFile)
			if got := results[0].Changes; !slices.Equal(got, tc.want) {
				t.Errorf("got changes %v, want %v: %+v", got, tc.want, results[0])
			}
			if code != tc.code {
				t.Errorf("got exit %d, want %d", code, tc.code)
			}
			if tc.code == 1 && !strings.Contains(summary, "would now be refused, admitted then: 1\n  "+results[0].Source) {
				t.Errorf("the summary does not name the request:\n%s", summary)
			}
		})
	}
}

// TestReplayWithoutOldObject: an update whose oldObject the log does not
// hold is reviewed without it, its refusal still reported, but its
// verdict is no proof of agreement or not: it cannot be compared.
func TestReplayWithoutOldObject(t *testing.T) {
	line := auditEventLine("update", "/api/v1/namespaces/ns/configmaps/bad-cm", 200, ref("", "v1", "configmaps", "ns", "bad-cm", ""), map[string]any{
		"requestObject": configMap("ns", "bad-cm", "7", nil)})
	results, summary, code := replayRun(t, &fakeWebhook{}, []string{line})
	if !slices.Equal(results[0].Changes, []string{changeRefused}) || code != 1 {
		t.Errorf("got changes %v, exit %d; want would-now-be-refused, 1", results[0].Changes, code)
	}
	if !strings.Contains(summary, "agrees with the log on 0, differs on 0; 1 cannot be compared (0 whose verdict now depends on what the log does not hold, 1 whose oldObject it does not hold)") {
		t.Errorf("the summary:\n%s\nwant the update counted as one that cannot be compared", summary)
	}
}

// TestReplayNeverPrintsValues: an audit log holds Secrets. Neither the
// text, with -v, nor -o json prints an object's values: not the data of
// a Secret, not a patch's values; only names and the policy's messages.
func TestReplayNeverPrintsValues(t *testing.T) {
	secret := map[string]any{"kind": "Secret", "apiVersion": "v1", "metadata": map[string]any{"name": "bad-token", "namespace": "ns", "labels": map[string]any{"l": "LABELVALUE"}},
		"data": map[string]any{"token": "U0VDUkVUVkFMVUU="}, "stringData": map[string]any{"password": "SECRETVALUE"}}
	log := []string{
		auditEventLine("create", "/api/v1/namespaces/ns/secrets", 201, ref("", "v1", "secrets", "ns", "bad-token", ""), map[string]any{"requestObject": secret, "responseObject": secret}),
		auditEventLine("update", "/api/v1/namespaces/ns/secrets/bad-token", 200, ref("", "v1", "secrets", "ns", "bad-token", ""), map[string]any{"requestObject": secret}),
		auditEventLine("patch", "/api/v1/namespaces/ns/secrets/bad-token", 200, ref("", "v1", "secrets", "ns", "bad-token", ""), map[string]any{
			"requestObject": []any{map[string]any{"op": "replace", "path": "/stringData/password", "value": "SECRETVALUE"}}}),
		// A subresource's object, sent whole: a Pod whose environment
		// holds a value.
		auditEventLine("update", "/api/v1/namespaces/ns/pods/bad-pod/ephemeralcontainers", 200, ref("", "v1", "pods", "ns", "bad-pod", "ephemeralcontainers"), map[string]any{
			"requestObject": map[string]any{"kind": "Pod", "apiVersion": "v1", "metadata": map[string]any{"name": "bad-pod", "namespace": "ns"},
				"spec": map[string]any{"ephemeralContainers": []any{map[string]any{"name": "d", "image": "busybox", "env": []any{map[string]any{"name": "TOKEN", "value": "SECRETVALUE"}}}}}}}),
	}
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(strings.Join(log, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-v"}, {"-o", "json"}, {"-o", "yaml"}, {"-o", "junit"}} {
		out, errOut, _ := runReplayArgs(t, &fakeWebhook{}, "", append([]string{"-audit-log", path}, args...)...)
		for _, value := range []string{"SECRETVALUE", "U0VDUkVUVkFMVUU=", "LABELVALUE", `"yes"`} {
			if strings.Contains(out+errOut, value) {
				t.Errorf("review -audit-log %v printed the value %s:\n%s%s", args, value, out, errOut)
			}
		}
		if !strings.Contains(out, "bad-token is bad") {
			t.Errorf("review -audit-log %v does not print the policy's message:\n%s", args, out)
		}
	}
}

// TestReplayUsage: the flags of a manifest's request do not apply to a
// replay.
func TestReplayUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-audit-log", "x", "-user", "jane"},
		{"-audit-log", "x", "-f", "y"},
		{"-audit-log", "x", "-operation", "DELETE"},
		{"-audit-log", "x", "-audit-cache-bytes", "-1"},
	} {
		_, errOut, code := runReplayArgs(t, &fakeWebhook{}, "", args...)
		if code != 2 || errOut == "" {
			t.Errorf("review %q: got exit %d, %q; want 2 and why", args, code, errOut)
		}
	}
}

// TestProgressOnlyOnATerminal: progress goes to stderr when it is a
// terminal (a character device), never into a file or a pipe that a
// script reads.
func TestProgressOnlyOnATerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for name, stderr := range map[string]any{"a pipe": w, "a file": file, "a buffer": &bytes.Buffer{}} {
		var p *progress
		switch s := stderr.(type) {
		case *os.File:
			p = newProgress(s)
		case *bytes.Buffer:
			p = newProgress(s)
		}
		if p.w != nil {
			t.Errorf("%s: got progress written, want none", name)
		}
	}
	// A terminal is a character device, as /dev/null is: the one test
	// machines always have.
	dev, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if newProgress(dev).w == nil {
		t.Errorf("%s, a character device: got no progress, want it written", os.DevNull)
	}
}

// TestReplayTextSaysNotSentOnlyByConfig: without -config every write goes
// to /mutate and /validate, as for manifests, so no line of the text
// output says "not sent to the webhook"; with a -config that matches no
// ConfigMap, the summary counts the writes as not sent.
func TestReplayTextSaysNotSentOnlyByConfig(t *testing.T) {
	log := filepath.Join("testdata", "audit", "e2e.log")
	out, _, _ := runReplayArgs(t, &fakeWebhook{}, "", "-audit-log", log, "-v")
	if strings.Contains(out, ": not sent to the webhook") {
		t.Errorf("without -config, a line says a write was not sent to the webhook:\n%s", grepLines(out, ": not sent to the webhook"))
	}
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: pods-only}
webhooks:
- name: pods.example.com
  clientConfig: {url: "https://127.0.0.1/validate"}
  rules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["*"], resources: ["pods"]}]
  sideEffects: None
  admissionReviewVersions: ["v1"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, summary, _ := runReplayArgs(t, &fakeWebhook{}, "", "-audit-log", log, "-config", config)
	if m := regexp.MustCompile(`admission: \d+ reviewed[^;]*; \d+ not reviewed; (\d+) not sent to the webhook`).FindStringSubmatch(summary); m == nil || m[1] == "0" {
		t.Errorf("with a -config of Pods only, the summary does not count the ConfigMaps' writes as not sent to the webhook:\n%s", summary)
	}
}

// grepLines returns the lines of s that contain substr.
func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestReplayNamespaceLabelledLater: a Namespace labelled after its
// creation, by a patch the log records at level Request (the patch, not
// the result), as `kubectl label` sends one. Replay applies the patch to
// the labels it knew, so that a namespaceSelector on the new label is
// judged on it, not on the labels of the create; once a write of the
// Namespace leaves its labels unknown (at level Metadata, a patch replay
// cannot apply), a write its namespaceSelector decides is not judged from
// stale labels: its verdict is not known, it is counted as one that
// cannot be compared, and the exit status is 3.
func TestReplayNamespaceLabelledLater(t *testing.T) {
	config := validateConfig(`{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}`,
		"  namespaceSelector: {matchLabels: {enforced: \"true\"}}\n")
	configFile := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	namespace := func(labels map[string]any) map[string]any {
		meta := map[string]any{"name": "team", "resourceVersion": "1"}
		if labels != nil {
			meta["labels"] = labels
		}
		return map[string]any{"kind": "Namespace", "apiVersion": "v1", "metadata": meta}
	}
	nsRef := ref("", "v1", "namespaces", "", "team", "")
	patchNamespace := func(level string, patch any) string {
		more := map[string]any{"level": level, "requestObject": patch}
		if level == "Metadata" {
			more["requestObject"] = nil
		}
		return auditEventLine("patch", "/api/v1/namespaces/team", 200, nsRef, more)
	}
	deniedCreate := func(name string) string {
		line := auditEventLine("create", "/api/v1/namespaces/team/configmaps", 403, ref("", "v1", "configmaps", "team", name, ""), map[string]any{
			"requestObject": configMap("", name, "", nil)})
		var e map[string]any
		_ = json.Unmarshal([]byte(line), &e)
		e["responseStatus"] = map[string]any{"code": 403, "status": "Failure", "reason": "Forbidden",
			"message": fmt.Sprintf(`admission webhook "valid.example.com" denied the request: %s is bad`, name)}
		b, _ := json.Marshal(e)
		return string(b)
	}
	created := auditEventLine("create", "/api/v1/namespaces", 201, ref("", "v1", "namespaces", "", "team", ""), map[string]any{
		"requestObject": namespace(nil), "responseObject": namespace(nil)})
	// Admitted then, and no annotation says whether the webhook was
	// called: the log holds no evidence of the call.
	admittedCreate := func(name string) string {
		return auditEventLine("create", "/api/v1/namespaces/team/configmaps", 201, ref("", "v1", "configmaps", "team", name, ""), map[string]any{
			"requestObject": configMap("", name, "", nil), "responseObject": configMap("team", name, "5", nil)})
	}

	for _, tc := range []struct {
		name  string
		label string // the line that labels the namespace
		// known: the write after it is judged, and agrees with the log.
		known bool
	}{
		{"a merge patch at Request", patchNamespace("Request", map[string]any{"metadata": map[string]any{"labels": map[string]any{"enforced": "true"}}}), true},
		{"a JSON Patch at Request", patchNamespace("Request", []any{map[string]any{"op": "add", "path": "/metadata/labels", "value": map[string]any{"enforced": "true"}}}), true},
		{"an update at Request", auditEventLine("update", "/api/v1/namespaces/team", 200, nsRef, map[string]any{"level": "Request", "requestObject": namespace(map[string]any{"enforced": "true"})}), true},
		{"a get answered as PartialObjectMetadata", auditEventLine("get", "/api/v1/namespaces/team", 200, nsRef, map[string]any{
			"responseObject": map[string]any{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": map[string]any{"name": "team", "resourceVersion": "2", "labels": map[string]any{"enforced": "true"}}}}), true},
		{"a patch at Metadata", patchNamespace("Metadata", nil), false},
		{"a strategic merge patch with a directive", patchNamespace("Request", map[string]any{"metadata": map[string]any{"labels": map[string]any{"$patch": "replace", "enforced": "true"}}}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			last := deniedCreate("bad-cm")
			if !tc.known {
				last = admittedCreate("bad-cm")
			}
			results, summary, code := replayRun(t, &fakeWebhook{}, []string{created, tc.label, last}, "-config", configFile)
			got := results[len(results)-1]
			if tc.known {
				if got.Admission == nil || got.Admission.Verdict != "denied" || len(got.Changes) != 0 || code != 0 || !strings.HasPrefix(got.NamespaceLabels, "as the log showed them at ") ||
					!strings.Contains(summary, "agrees with the log on 1, differs on 0; 0 cannot be compared") {
					t.Errorf("got %+v, changes %v, exit %d:\n%s\nwant it denied now as then, the labels patched", got.Admission, got.Changes, code, summary)
				}
				return
			}
			if got.Admission == nil || got.Admission.Verdict != "unknown" || !slices.Contains(got.Changes, changeNotKnown) || code != exitUnknown ||
				!strings.Contains(got.Admission.Unknown, "the labels of the namespace team match enforced=true") || !strings.Contains(got.Admission.Unknown, "labels since are not known") ||
				!strings.Contains(summary, "1 cannot be compared (1 whose verdict now depends on what the log does not hold") {
				t.Errorf("got %+v, changes %v, exit %d:\n%s\nwant its verdict not known, said, counted, exit 3", got.Admission, got.Changes, code, summary)
			}
		})
	}

	// A namespace the log never stored: its labels are not known either,
	// and the line says how to tell replay.
	results, _, code := replayRun(t, &fakeWebhook{}, []string{admittedCreate("bad-cm")}, "-config", configFile)
	if a := results[0].Admission; a == nil || a.Verdict != "unknown" || !strings.Contains(a.Unknown, "the log holds no version of the Namespace team") ||
		!strings.Contains(a.Unknown, "-namespaces FILE (kubectl get namespaces -o json > FILE)") || code != exitUnknown {
		t.Errorf("a namespace the log never stored: got %+v, exit %d", a, code)
	}
}

// TestReplayNamespaceEvidence: for a namespace the log did not store (one
// created before it began), whether a namespaceSelector that reads a
// label matched is taken from the log's evidence of the call, then from
// the cluster's namespaces (-namespaces), and the line says which decided:
// a webhook's denial in the response, a mutating webhook's annotation
// (which decides for a validating webhook of the same selector), a
// mutating webhook whose rules match but that the apiserver did not call
// (no annotation on an admitted write). What nothing shows stays unknown.
func TestReplayNamespaceEvidence(t *testing.T) {
	dir := t.TempDir()
	selector := "  namespaceSelector: {matchLabels: {enforced: \"true\"}}\n"
	rule := `{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}`
	mutating := strings.Replace(strings.Replace(validateConfig(rule, selector), "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", 1), "valid.example.com", "mutate.example.com", 1)
	mutating = strings.Replace(strings.Replace(mutating, "path: /validate", "path: /mutate", 1), "metadata: {name: v}", "metadata: {name: m}", 1)
	configFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(configFile, []byte(validateConfig(rule, selector)+"---\n"+mutating), 0o644); err != nil {
		t.Fatal(err)
	}
	namespaces := filepath.Join(dir, "namespaces.json")
	if err := os.WriteFile(namespaces, []byte(`{"apiVersion":"v1","kind":"List","items":[
		{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team","labels":{"enforced":"true"}}},
		{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"free","labels":{}}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	event := func(ns, name string, code int, annotations map[string]string, message string) string {
		line := auditEventLine("create", "/api/v1/namespaces/"+ns+"/configmaps", code, ref("", "v1", "configmaps", ns, name, ""), map[string]any{
			"requestObject": configMap("", name, "", nil), "annotations": annotations})
		var e map[string]any
		_ = json.Unmarshal([]byte(line), &e)
		if message != "" {
			e["responseStatus"] = map[string]any{"code": code, "status": "Failure", "reason": "Forbidden", "message": message}
		}
		b, _ := json.Marshal(e)
		return string(b)
	}
	called := map[string]string{"mutation.webhook.admission.k8s.io/round_0_index_0": `{"configuration":"m","webhook":"mutate.example.com","mutated":true}`}
	for _, tc := range []struct {
		name, event string
		args        []string
		// verdict now, the source said, whether sent
		verdict, by string
		sent        bool
	}{
		{"denied then by the webhook", event("team", "bad-a", 403, nil, `admission webhook "valid.example.com" denied the request: bad-a is bad`), nil,
			"denied", "the log's evidence: the apiserver called valid.example.com (its denial, in the response)", true},
		{"the mutating webhook's annotation", event("team", "bad-b", 201, called, ""), nil,
			"denied", "the log's evidence: the apiserver called mutate.example.com (its mutation annotation mutation.webhook.admission.k8s.io/round_0_index_0)", true},
		{"admitted, the mutating webhook not called", event("free", "bad-c", 201, nil, ""), nil,
			"admitted", "the log's evidence: the apiserver did not call mutate.example.com, whose rules match (no mutation annotation)", false},
		// Refused before the webhooks: no evidence; the cluster's list
		// decides.
		{"-namespaces", event("team", "bad-d", 409, nil, "conflict"), []string{"-namespaces", namespaces},
			"denied", "-namespaces: the Namespace team's labels as listed", true},
		{"-namespaces, not selected", event("free", "bad-e", 409, nil, "conflict"), []string{"-namespaces", namespaces},
			"admitted", "-namespaces: the Namespace free's labels as listed", false},
		{"nothing shows it", event("team", "bad-f", 409, nil, "conflict"), nil, "unknown", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			results, summary, code := replayRun(t, &fakeWebhook{}, []string{tc.event}, append([]string{"-config", configFile}, tc.args...)...)
			got := results[0]
			if got.Admission == nil || got.Admission.Verdict != tc.verdict || !strings.Contains(got.NamespaceLabels, tc.by) || (len(got.Admission.Webhooks) > 0) != tc.sent {
				t.Errorf("got %+v, namespace labels %q, exit %d:\n%s\nwant %s, sent %v, decided by %q", got.Admission, got.NamespaceLabels, code, summary, tc.verdict, tc.sent, tc.by)
			}
			if tc.by != "" && !strings.Contains(summary, "namespaceSelectors that read labels the log did not store: ") {
				t.Errorf("the summary does not count what decided the labels:\n%s", summary)
			}
		})
	}

	// A write of a namespace after requests whose verdicts its labels from
	// -namespaces decided is said: it may have changed them.
	nsRef := ref("", "v1", "namespaces", "", "team", "")
	relabel := auditEventLine("patch", "/api/v1/namespaces/team", 200, nsRef, map[string]any{"level": "Metadata"})
	_, summary, _ := replayRun(t, &fakeWebhook{}, []string{event("team", "bad-g", 409, nil, "conflict"), relabel}, "-config", configFile, "-namespaces", namespaces)
	if !strings.Contains(summary, "a patch of the Namespace team, after 1 request whose verdict its labels from -namespaces decided") {
		t.Errorf("the summary does not say the namespace was written after its listed labels were used:\n%s", summary)
	}
}

// TestRequestNamespace reads a request's namespace from its path, as the
// apiserver's RequestInfo does, whatever the objectRef says.
func TestRequestNamespace(t *testing.T) {
	for _, tc := range []struct{ uri, logged, want string }{
		{"/api/v1/namespaces/ns/configmaps/cm?dryRun=All", "ns", "ns"},
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles", "monitoring", ""},
		{"/apis/apps/v1/namespaces/ns/deployments/web/scale", "ns", "ns"},
		{"/api/v1/namespaces/ns", "ns", "ns"},
		{"/api/v1/watch/namespaces/ns/pods", "ns", "ns"},
		{"/api/v1/watch", "", ""},
		{"/api/v1/proxy/namespaces/ns/pods/p", "ns", "ns"},
		{"/api/v1/nodes/n1", "x", ""},
		{"/healthz", "x", "x"},
		{"", "x", "x"},
	} {
		if got := requestNamespace(tc.uri, tc.logged); got != tc.want {
			t.Errorf("requestNamespace(%q, %q) = %q, want %q", tc.uri, tc.logged, got, tc.want)
		}
	}
}

// TestReplayCreateWithoutSystemFields: a create's requestObject is logged
// as sent, before the apiserver wipes the metadata it sets (uid,
// creationTimestamp, …; handlers/create.go), so replay wipes them before
// sending it. Before, the webhooks were sent them.
func TestReplayCreateWithoutSystemFields(t *testing.T) {
	f := &fakeWebhook{}
	sent := configMap("ns", "cm", "", nil)
	meta := sent["metadata"].(map[string]any)
	meta["uid"], meta["creationTimestamp"], meta["selfLink"] = "0b1c2d3e-0000-4000-8000-000000000001", "2024-01-01T00:00:00Z", "/api/v1/namespaces/ns/configmaps/cm"
	line := auditEventLine("create", "/api/v1/namespaces/ns/configmaps", 201, ref("", "v1", "configmaps", "ns", "cm", ""),
		map[string]any{"requestObject": sent, "responseObject": configMap("ns", "cm", "5", nil)})
	replayRun(t, f, []string{line})
	if len(f.requests) == 0 {
		t.Fatal("nothing sent")
	}
	for _, r := range f.requests {
		for _, field := range []string{"uid", "creationTimestamp\":\"", "selfLink"} {
			if strings.Contains(string(r.Object.Raw), field) {
				t.Errorf("%s was sent: %s", field, r.Object.Raw)
			}
		}
	}
}
