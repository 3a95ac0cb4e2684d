package e2e

// `webhook review -audit-log` against a real kube-apiserver's audit log:
// the requests a test makes through the webhook, as several users and
// groups, replayed with the same flags, agree with what the apiserver did,
// and replayed with stricter flags name exactly the requests the change
// would refuse. The webhook is built with a policy.go of the test's own
// (testdata/replay-policy.go), as TestPolicyWarning builds one, so that
// this is plumbing: no policy a copier writes changes it.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

const (
	// replayPolicy is the test's policy.go: it decides by the operation,
	// the object, the object before an UPDATE or DELETE, and the groups.
	replayPolicy = "testdata/replay-policy.go"

	// The annotations and labels replayPolicy reads and writes.
	replayTeam      = "replay.example.com/team=shop"    // -require'd from the start
	replayReviewed  = "replay.example.com/reviewed=yes" // -require'd by the stricter replay
	replayMutated   = "replay.example.com/mutated"
	replayOwner     = "replay.example.com/owner"
	replayProtected = "replay.example.com/protected"

	// The groups of the test's users.
	replayWriters = "replay:writers"
	replayAdmins  = "replay:admins" // replayPolicy's default -admin-group
	replayReaders = "replay:readers"
	replayBlocked = "replay:blocked" // denied by /authorize from the start

	// The names of the test's webhooks.
	replayMutating   = "mutate.replay.example.com"
	replayValidating = "validate.replay.example.com"

	// replayEnforced labels the namespaces the test's webhooks are
	// registered for: a namespaceSelector that reads a label of the
	// namespace beside its name, of namespaces made before the log the
	// replay reads begins.
	replayEnforced = "replay.example.com/enforced"
)

// replayAuditPolicy is the audit policy docs/review.md gives for a replay:
// the writes of what the webhooks are sent at RequestResponse (the object
// sent, and as stored for the next one's oldObject), everything else at
// Metadata (who did what, for /authorize, and the admission annotations).
// Pods and PersistentVolumeClaims too: the test reads what the built-in
// admission plugins changed in them.
const replayAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: RequestResponse
  verbs: ["create", "update", "patch", "delete"]
  resources:
  - group: ""
    resources: ["configmaps", "pods", "persistentvolumeclaims"]
- level: Metadata
`

// replayed is what `webhook review -audit-log -o json` says of a request.
type replayed struct {
	Source, Verb, User, Resource, Namespace, Name string
	Object, OldObject, NotReviewed, Error         string
	NamespaceLabels                               string
	DryRun                                        bool
	Then                                          struct {
		Code                               int
		Admission, DeniedBy, Message       string
		PatchedBy                          []string
		Authorization, AuthorizationReason string
	}
	Admission *struct {
		Verdict, Error string
		Webhooks       []string
		Notes          []string
		Mutate         *struct{ PatchedBy []string }
		Validate       *struct{ Message string }
	}
	Authorization       *replayedAuthorization
	CreateAuthorization *replayedAuthorization
	Changes             []string
}

// replayedAuthorization is a SubjectAccessReview the replay sent, and
// the answer.
type replayedAuthorization struct {
	Verdict, Reason, NotSent string
	Request                  json.RawMessage
}

func (r replayed) String() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// replayAction is one request the test makes, and what it expects of it.
type replayAction struct {
	user   string
	groups []string
	verb   string
	name   string // the ConfigMap's; "" for a list, or a generateName
	do     func(ctx context.Context, c kubernetes.Interface) error
	// admitted is whether the apiserver admits it; reads are authorized.
	admitted bool
	// refusedNow is whether the stricter flags would refuse it.
	refusedNow bool
}

// TestAuditReplay runs the webhook, built with replayPolicy, as the
// admission webhooks and the authorizer of a kube-apiserver of the test's
// own that writes an audit log with replayAuditPolicy. A recorder,
// consulted first and without an opinion, keeps every SubjectAccessReview
// the apiserver sends. The test creates, updates, patches (JSON, merge,
// strategic merge and apply) and deletes ConfigMaps and reads them, as
// users of several groups impersonated from the admin token, some of it
// denied by admission and some by authorization. Then it replays the
// log's part that holds those requests:
//   - with the flags the webhook runs with, every verdict, admission and
//     authorization, is the apiserver's; every patched object is patched;
//     every SubjectAccessReview is the one the apiserver sent;
//   - with another -require and a new -deny rule, exactly the requests the
//     change would refuse are reported as would now be refused, reads of
//     a group among them.
func TestAuditReplay(t *testing.T) {
	skipWithoutPart(t, "review", "webhook review -audit-log to replay with")
	skipWithoutPart(t, "authorize", "/authorize, whose verdicts the replay is held to beside admission's")
	ctx := context.Background()
	bin := buildWithPolicy(t, replayPolicy)
	baseFlags := []string{"-require", replayTeam, "-deny", "group=" + replayBlocked}
	w := startWebhookBinary(t, bin, "", "127.0.0.1:0", nil, baseFlags...)

	// The recorder serves with the webhook's development certificate.
	pair, err := tls.LoadX509KeyPair(filepath.Join(w.dir, "tls", "tls.crt"), filepath.Join(w.dir, "tls", "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{answer: noOpinionOnAnything}
	recSrv := httptest.NewUnstartedServer(rec)
	recSrv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	recSrv.StartTLS()
	t.Cleanup(recSrv.Close)

	dir := t.TempDir()
	// /authorize is served with -authorization, which answers only a
	// client the CA of -client-ca-file signed: a second webhook of the
	// same policy and flags, for the apiserver's authorizer, which presents
	// that certificate; the admission webhooks are called without one.
	clientCA := newTestCA(t, "webhook client CA")
	caFile := filepath.Join(dir, "client-ca.crt")
	writeText(t, caFile, string(clientCA.certPEM))
	clientCert, clientKey := writePair(t, dir, "apiserver", newTestClientCert(t, clientCA, "kube-apiserver"))
	authorizer := startWebhookBinary(t, bin, "", "127.0.0.1:0", nil, append(slices.Clone(baseFlags), "-authorization", "-client-ca-file", caFile)...)
	api, auditLog := startReplayAPIServer(t, dir,
		replayAuthorizer("recorder", writeKubeconfig(t, dir, "recorder", recSrv.URL+"/authorize", w.caPEM, "", "")),
		replayAuthorizer("policy", writeKubeconfig(t, dir, "policy", authorizer.url("/authorize"), authorizer.caPEM, clientCert, clientKey)))

	// Both namespaces are made before the part of the log replayed
	// begins: the log holds neither's labels.
	ns := createLabelledNamespaceIn(t, api, "replay", map[string]string{replayEnforced: "true"})
	free := createLabelledNamespaceIn(t, api, "replay-free", nil)
	// RBAC lets every authenticated user do anything in ns (cluster-admin,
	// bound there: "edit" is aggregated by the controller-manager, which
	// does not run), so that what is refused is the webhook's doing.
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "everyone-administers"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:authenticated"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
	}
	if _, err := api.client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "RBAC lets an authenticated user list ConfigMaps", func() bool {
		_, err := as(api, "rbac-probe").CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		return err == nil
	})
	configFile := registerReplayWebhooks(t, api, w, ns, dir)
	// RBAC in free too, for the one write there.
	rbFree := rb.DeepCopy()
	rbFree.ResourceVersion = ""
	if _, err := api.client.RbacV1().RoleBindings(free).Create(ctx, rbFree, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "RBAC lets an authenticated user list ConfigMaps of "+free, func() bool {
		_, err := as(api, "rbac-probe").CoreV1().ConfigMaps(free).List(ctx, metav1.ListOptions{})
		return err == nil
	})

	// The part of the log to replay begins after the webhooks are in use.
	start := auditMarker(t, api, auditLog, ns, "replay-start")
	rec.take()
	actions := replayActions(ns, free)
	for i, a := range actions {
		err := a.do(ctx, as(api, a.user, a.groups...))
		if (err == nil) != a.admitted {
			t.Fatalf("action %d, %s %s %s: got %v, want admitted %v", i, a.user, a.verb, a.name, err, a.admitted)
		}
	}
	builtins := createBuiltinsAdmitted(t, api, ns)
	end := auditMarker(t, api, auditLog, ns, "replay-end")
	sent := rec.take()
	replayLog := filepath.Join(dir, "replayed.log")
	lines := sliceLog(t, auditLog, start, end, replayLog)
	t.Logf("replaying %d events of %s", lines, auditLog)
	if *capture {
		captureAuditLog(t, replayLog)
	}

	t.Run("same flags: every verdict is the apiserver's, the namespaces' labels from the log's evidence of the calls", func(t *testing.T) {
		results, code, text := runReplay(t, bin, append([]string{"-audit-log", replayLog, "-config", configFile}, baseFlags...)...)
		if code != 0 {
			t.Errorf("got exit %d, want 0:\n%s", code, text)
		}
		for _, r := range results {
			if r.Admission != nil && r.NamespaceLabels != "" && !strings.Contains(r.NamespaceLabels, "by the log's evidence") {
				t.Errorf("%s: the namespace's labels decided by %q, want the log's evidence of the call", r.Source, r.NamespaceLabels)
			}
		}
		t.Logf("webhook review -audit-log, same flags:\n%s", text)
		for _, a := range actions {
			r := findReplayed(t, results, a)
			if a.verb == "get" || a.verb == "list" {
				continue
			}
			checkAgrees(t, a, r)
		}
		for _, r := range results {
			for _, c := range r.Changes {
				t.Errorf("%s: change %s with the flags the apiserver ran with: %s", r.Source, c, r)
			}
			if r.Error != "" {
				t.Errorf("%s: %s", r.Source, r.Error)
			}
			if az := r.Authorization; az != nil && az.NotSent == "" {
				ours := r.Then.Authorization == "forbid" && strings.HasPrefix(r.Then.AuthorizationReason, "denied by rule ")
				if (az.Verdict == "denied") != ours || (ours && az.Reason != r.Then.AuthorizationReason) {
					t.Errorf("%s: /authorize now %s %q, then %s %q", r.Source, az.Verdict, az.Reason, r.Then.Authorization, r.Then.AuthorizationReason)
				}
			}
		}
		checkSubjectAccessReviews(t, sent, results)
	})

	// The cluster's namespaces, as kubectl get namespaces -o json lists
	// them.
	namespaces, err := api.dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	namespacesJSON, err := namespaces.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	namespacesFile := filepath.Join(dir, "namespaces.json")
	writeText(t, namespacesFile, string(namespacesJSON))

	t.Run("the validating webhook alone, the namespaces listed: every verdict is the apiserver's", func(t *testing.T) {
		// Without the mutating webhook in -config, an admitted write
		// shows no call of the validating one: -namespaces decides.
		raw, err := os.ReadFile(configFile)
		if err != nil {
			t.Fatal(err)
		}
		docs := strings.Split(string(raw), "---\n")
		validatingOnly := filepath.Join(dir, "validating.yaml")
		writeText(t, validatingOnly, docs[len(docs)-1])
		results, code, text := runReplay(t, bin, append([]string{"-audit-log", replayLog, "-config", validatingOnly, "-namespaces", namespacesFile}, baseFlags...)...)
		if code != 0 {
			t.Errorf("got exit %d, want 0:\n%s", code, text)
		}
		listed := 0
		for _, a := range actions {
			if a.verb == "get" || a.verb == "list" {
				continue
			}
			r := findReplayed(t, results, a)
			if r.Then.Authorization == "forbid" {
				continue
			}
			if r.Admission == nil || (r.Admission.Verdict == "denied") != (r.Then.Admission == "denied") || len(r.Changes) > 0 {
				t.Errorf("%s: %s %s %s: then %s, now %+v, changes %v; want the apiserver's verdict", r.Source, a.user, a.verb, a.name, r.Then.Admission, r.Admission, r.Changes)
			}
			if strings.Contains(r.NamespaceLabels, "by -namespaces") {
				listed++
			}
		}
		if listed == 0 || !strings.Contains(text, "by -namespaces") {
			t.Errorf("no verdict was decided by -namespaces:\n%s", text)
		}
	})

	t.Run("stricter flags: exactly the requests the change refuses", func(t *testing.T) {
		stricter := append([]string{"-audit-log", replayLog, "-config", configFile, "-require", replayReviewed,
			"-deny", "group=" + replayReaders + ",resource=configmaps"}, baseFlags...)
		results, code, text := runReplay(t, bin, stricter...)
		t.Logf("webhook review -audit-log, stricter flags:\n%s", text)
		if code != 1 {
			t.Errorf("got exit %d, want 1: requests would now be refused", code)
		}
		want := map[string]bool{}
		for _, a := range actions {
			if a.refusedNow {
				want[actionKey(a.verb, a.user, a.name)] = true
			}
		}
		got := map[string]bool{}
		for _, r := range results {
			if slices.Contains(r.Changes, "would-now-be-refused") || slices.Contains(r.Changes, "authorization-would-now-be-refused") {
				got[actionKey(r.Verb, r.User, r.Name)] = true
			}
		}
		if !equalSets(got, want) {
			t.Errorf("would now be refused: got %v, want %v", sortedKeys(got), sortedKeys(want))
		}
		for _, r := range results {
			if r.User == "erin" && !slices.Contains(r.Changes, "authorization-would-now-be-refused") {
				t.Errorf("%s: a read by %s: got changes %v, want authorization-would-now-be-refused", r.Source, replayReaders, r.Changes)
			}
		}
		if !strings.Contains(text, "would now be refused, admitted then: "+fmt.Sprint(len(want))) {
			t.Errorf("the summary does not count %d requests that would now be refused:\n%s", len(want), text)
		}
	})

	t.Run("built-in admission plugins: each note names what the apiserver changed", func(t *testing.T) {
		checkBuiltinNotes(t, bin, ns, auditLog, builtins)
	})
}

// actionKey names a request in the replay's output by what the test did.
func actionKey(verb, user, name string) string { return verb + " " + user + " " + name }

// replayActions are the requests the test makes in ns, and one in free,
// whose namespace the webhooks' namespaceSelector does not select, and
// what it expects of each: see TestAuditReplay.
func replayActions(ns, free string) []replayAction {
	cms := func(c kubernetes.Interface) interface {
		Create(context.Context, *corev1.ConfigMap, metav1.CreateOptions) (*corev1.ConfigMap, error)
		Get(context.Context, string, metav1.GetOptions) (*corev1.ConfigMap, error)
		Update(context.Context, *corev1.ConfigMap, metav1.UpdateOptions) (*corev1.ConfigMap, error)
		Delete(context.Context, string, metav1.DeleteOptions) error
		List(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error)
		Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*corev1.ConfigMap, error)
	} {
		return c.CoreV1().ConfigMaps(ns)
	}
	annotations := func(kvs ...string) map[string]string {
		m := map[string]string{}
		for _, kv := range kvs {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		return m
	}
	create := func(name string, labels, ann map[string]string, opts metav1.CreateOptions) func(context.Context, kubernetes.Interface) error {
		return func(ctx context.Context, c kubernetes.Interface) error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: ann}, Data: map[string]string{"k": "v"}}
			if name == "" {
				cm.GenerateName = "generated-"
			}
			_, err := cms(c).Create(ctx, cm, opts)
			return err
		}
	}
	update := func(name string, change func(*corev1.ConfigMap)) func(context.Context, kubernetes.Interface) error {
		return func(ctx context.Context, c kubernetes.Interface) error {
			cm, err := cms(c).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(cm)
			_, err = cms(c).Update(ctx, cm, metav1.UpdateOptions{})
			return err
		}
	}
	patch := func(name string, pt types.PatchType, body string, opts metav1.PatchOptions) func(context.Context, kubernetes.Interface) error {
		return func(ctx context.Context, c kubernetes.Interface) error {
			_, err := cms(c).Patch(ctx, name, pt, []byte(body), opts)
			return err
		}
	}
	remove := func(name string) func(context.Context, kubernetes.Interface) error {
		return func(ctx context.Context, c kubernetes.Interface) error {
			return cms(c).Delete(ctx, name, metav1.DeleteOptions{})
		}
	}
	get := func(name string) func(context.Context, kubernetes.Interface) error {
		return func(ctx context.Context, c kubernetes.Interface) error {
			_, err := cms(c).Get(ctx, name, metav1.GetOptions{})
			return err
		}
	}
	list := func(ctx context.Context, c kubernetes.Interface) error {
		_, err := cms(c).List(ctx, metav1.ListOptions{})
		return err
	}
	writer, admin, reader, blocked := []string{replayWriters}, []string{replayAdmins}, []string{replayReaders}, []string{replayBlocked}
	team := annotations(replayTeam)
	both := annotations(replayTeam, replayReviewed)
	return []replayAction{
		{user: "alice", groups: writer, verb: "create", name: "alpha", do: create("alpha", map[string]string{replayOwner: "alice"}, team, metav1.CreateOptions{}), admitted: true, refusedNow: true},
		{user: "bob", groups: writer, verb: "create", name: "bravo", do: create("bravo", nil, nil, metav1.CreateOptions{})},
		{user: "alice", groups: writer, verb: "create", name: "charlie", do: create("charlie", map[string]string{replayProtected: "true"}, both, metav1.CreateOptions{}), admitted: true},
		{user: "alice", groups: writer, verb: "create", name: "", do: create("", nil, team, metav1.CreateOptions{}), admitted: true, refusedNow: true},
		{user: "alice", groups: writer, verb: "create", name: "dry", do: create("dry", nil, team, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}), admitted: true, refusedNow: true},
		{user: "alice", groups: writer, verb: "update", name: "alpha", do: update("alpha", func(cm *corev1.ConfigMap) { cm.Data["k"] = "v2" }), admitted: true, refusedNow: true},
		{user: "carol", groups: writer, verb: "update", name: "alpha", do: update("alpha", func(cm *corev1.ConfigMap) { cm.Labels[replayOwner] = "carol" })},
		{user: "dave", groups: admin, verb: "update", name: "alpha", do: update("alpha", func(cm *corev1.ConfigMap) { cm.Labels[replayOwner] = "dave" }), admitted: true, refusedNow: true},
		{user: "alice", groups: writer, verb: "patch", name: "alpha", do: patch("alpha", types.MergePatchType, `{"data":{"k":"v3"}}`, metav1.PatchOptions{}), admitted: true, refusedNow: true},
		{user: "bob", groups: writer, verb: "patch", name: "alpha", do: patch("alpha", types.JSONPatchType, `[{"op":"remove","path":"/metadata/annotations/replay.example.com~1team"}]`, metav1.PatchOptions{})},
		{user: "alice", groups: writer, verb: "patch", name: "charlie", do: patch("charlie", types.StrategicMergePatchType, `{"data":{"k":"v2"}}`, metav1.PatchOptions{}), admitted: true},
		{user: "alice", groups: writer, verb: "patch", name: "applied", do: patch("applied", types.ApplyPatchType,
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"applied","annotations":{"replay.example.com/team":"shop"}},"data":{"k":"v"}}`,
			metav1.PatchOptions{FieldManager: "replay-test"}), admitted: true, refusedNow: true},
		{user: "erin", groups: reader, verb: "get", name: "alpha", do: get("alpha"), admitted: true, refusedNow: true},
		{user: "erin", groups: reader, verb: "list", name: "", do: list, admitted: true, refusedNow: true},
		{user: "frank", groups: blocked, verb: "get", name: "alpha", do: get("alpha")},
		// Refused by authorization before the object is read: the log
		// names none.
		{user: "frank", groups: blocked, verb: "create", name: "", do: create("foxtrot", nil, team, metav1.CreateOptions{})},
		{user: "bob", groups: writer, verb: "delete", name: "charlie", do: remove("charlie")},
		{user: "dave", groups: admin, verb: "delete", name: "charlie", do: remove("charlie"), admitted: true},
		{user: "alice", groups: writer, verb: "delete", name: "alpha", do: remove("alpha"), admitted: true},
		// Not sent to the webhooks, which would deny it: its namespace is
		// not selected.
		{user: "bob", groups: writer, verb: "create", name: "unselected", do: func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().ConfigMaps(free).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unselected"}}, metav1.CreateOptions{})
			return err
		}, admitted: true},
	}
}

// checkAgrees checks what the same-flags replay says of a write a.
func checkAgrees(t *testing.T, a replayAction, r replayed) {
	t.Helper()
	what := fmt.Sprintf("%s: %s %s %s", r.Source, a.user, a.verb, a.name)
	if r.Then.Authorization == "forbid" {
		if r.Then.Admission != "refused" || a.admitted {
			t.Errorf("%s: refused by authorization, then reads %q", what, r.Then.Admission)
		}
		return
	}
	if r.Admission == nil {
		t.Errorf("%s: not reviewed (%s), want it reviewed", what, r.NotReviewed)
		return
	}
	now := r.Admission.Verdict
	switch {
	case a.admitted && (r.Then.Admission != "admitted" || now == "denied" || now == "error"):
		t.Errorf("%s: then %s, now %s; want both admitted", what, r.Then.Admission, now)
	case !a.admitted && (r.Then.Admission != "denied" || r.Then.DeniedBy != replayValidating || now != "denied"):
		t.Errorf("%s: then %s by %s, now %s; want both denied by %s", what, r.Then.Admission, r.Then.DeniedBy, now, replayValidating)
	case !a.admitted && (r.Admission.Validate == nil || r.Admission.Validate.Message != r.Then.Message || r.Then.Message == ""):
		t.Errorf("%s: denied then with %q, now with %+v; want the same message", what, r.Then.Message, r.Admission.Validate)
	}
	// What the mutating webhook did then, it does now.
	if a.admitted && a.verb != "delete" && !strings.HasPrefix(r.Object, "the object as stored") {
		var now []string
		if r.Admission.Mutate != nil {
			now = r.Admission.Mutate.PatchedBy
		}
		if !slices.Equal(now, r.Then.PatchedBy) {
			t.Errorf("%s: patched then by %v, now by %v", what, r.Then.PatchedBy, now)
		}
	}
	switch a.verb {
	case "update", "delete":
		if r.OldObject == "" || strings.HasPrefix(r.OldObject, "unknown") {
			t.Errorf("%s: oldObject %q, want the line that stored it", what, r.OldObject)
		}
	case "patch":
		if r.Object == "" {
			t.Errorf("%s: the patched object's source is not said", what)
		}
	}
}

// findReplayed finds the request a made among the results.
func findReplayed(t *testing.T, results []replayed, a replayAction) replayed {
	t.Helper()
	for _, r := range results {
		if r.Verb == a.verb && r.User == a.user && r.Name == a.name && r.Resource == "configmaps" {
			return r
		}
	}
	t.Fatalf("the replay has no %s by %s of %q", a.verb, a.user, a.name)
	return replayed{}
}

// checkSubjectAccessReviews checks that the SubjectAccessReviews the
// replay sent are those the apiserver sent the recorder, for the users
// the recorder is asked about (not system: ones), one for one.
func checkSubjectAccessReviews(t *testing.T, sent [][]byte, results []replayed) {
	t.Helper()
	canonical := func(spec json.RawMessage) string {
		var v any
		if err := json.Unmarshal(spec, &v); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(v)
		return string(b)
	}
	var apiserver, replay []string
	for _, body := range sent {
		var sar struct{ Spec json.RawMessage }
		if err := json.Unmarshal(body, &sar); err != nil {
			t.Fatal(err)
		}
		apiserver = append(apiserver, canonical(sar.Spec))
	}
	for _, r := range results {
		for _, az := range []*replayedAuthorization{r.Authorization, r.CreateAuthorization} {
			if az != nil && az.Request != nil && !strings.HasPrefix(r.User, "system:") {
				replay = append(replay, canonical(az.Request))
			}
		}
	}
	sort.Strings(apiserver)
	sort.Strings(replay)
	if !slices.Equal(apiserver, replay) {
		t.Errorf("the SubjectAccessReviews differ:\napiserver (%d):\n  %s\nreplay (%d):\n  %s", len(apiserver), strings.Join(apiserver, "\n  "), len(replay), strings.Join(replay, "\n  "))
	}
	if len(apiserver) == 0 {
		t.Error("the apiserver sent the recorder no SubjectAccessReview")
	}
}

// buildWithPolicy builds the webhook with policyFile (in e2e/) in place of
// policy.go, as a copier's policy replaces it (go build -overlay).
func buildWithPolicy(t *testing.T, policyFile string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "webhook-"+strings.TrimSuffix(filepath.Base(policyFile), ".go"))
	if err := buildWithPolicyTo(policyFile, bin); err != nil {
		t.Fatalf("building the webhook with %s as its policy.go: %v", policyFile, err)
	}
	return bin
}

// buildWithPolicyTo is buildWithPolicy into bin.
func buildWithPolicyTo(policyFile, bin string) error {
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {
		filepath.Join(repoRoot, "policy.go"): filepath.Join(repoRoot, "e2e", policyFile),
	}})
	if err != nil {
		return err
	}
	overlayFile := bin + ".overlay.json"
	if err := os.WriteFile(overlayFile, overlay, 0o600); err != nil {
		return err
	}
	return goBuild(repoRoot, bin, ".", "-overlay", overlayFile)
}

// replayAuthorizer is a Webhook authorizer asked about every user but the
// system: ones, that never caches, so that each request is sent.
func replayAuthorizer(name, kubeconfig string) map[string]any {
	return map[string]any{
		"type": "Webhook",
		"name": name,
		"webhook": map[string]any{
			"timeout":                    "3s",
			"subjectAccessReviewVersion": "v1",
			"matchConditionSubjectAccessReviewVersion": "v1",
			"failurePolicy":             "Deny",
			"authorizedTTL":             "1s",
			"unauthorizedTTL":           "1s",
			"cacheAuthorizedRequests":   false,
			"cacheUnauthorizedRequests": false,
			"connectionInfo":            map[string]any{"type": "KubeConfigFile", "kubeConfigFile": kubeconfig},
			"matchConditions":           []any{map[string]any{"expression": "!request.user.startsWith('system:')"}},
		},
	}
}

// startReplayAPIServer starts a kube-apiserver of the test's own, with
// replayAuditPolicy and the authorizers given before RBAC, and returns it
// and its audit log's path.
func startReplayAPIServer(t *testing.T, dir string, authorizers ...map[string]any) (*apiServer, string) {
	t.Helper()
	return startAuthorizedAuditedAPIServer(t, dir, "apiserver-replay", replayAuditPolicy, authorizers...)
}

// startAuthorizedAuditedAPIServer starts a kube-apiserver of the test's own, named
// name, that writes an audit log with auditPolicy, its authorizers those
// given then RBAC, and returns it and its audit log's path.
func startAuthorizedAuditedAPIServer(t *testing.T, dir, name, auditPolicy string, authorizers ...map[string]any) (*apiServer, string) {
	t.Helper()
	fitAuthorizers(t, authorizers...)
	all := []any{}
	for _, a := range authorizers {
		all = append(all, a)
	}
	all = append(all, map[string]any{"type": "RBAC", "name": "rbac"})
	authz, err := yaml.Marshal(map[string]any{"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AuthorizationConfiguration", "authorizers": all})
	if err != nil {
		t.Fatal(err)
	}
	authzFile, policyFile, logFile := filepath.Join(dir, "authorization-config.yaml"), filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	writeText(t, authzFile, string(authz))
	writeText(t, policyFile, auditPolicy)
	a, err := startOwnAPIServer(t, name, []string{"--audit-policy-file", policyFile, "--audit-log-path", logFile, "--authorization-config", authzFile})
	if err != nil {
		t.Fatal(err)
	}
	return a, logFile
}

// registerReplayWebhooks registers w's /mutate and /validate for the
// ConfigMaps of ns, waits until the apiserver calls both, and writes the
// configurations for webhook review's -config.
func registerReplayWebhooks(t *testing.T, a *apiServer, w *webhookServer, ns, dir string) string {
	t.Helper()
	ctx := context.Background()
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{replayEnforced: "true"}}
	none, fail, timeout := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Fail, int32(5)
	client := func(path string) admissionregistrationv1.WebhookClientConfig {
		url := w.url(path)
		return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: w.caPEM}
	}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: replayMutating},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: replayMutating, ClientConfig: client("/mutate"), Rules: rules, NamespaceSelector: selector,
			SideEffects: &none, FailurePolicy: &fail, TimeoutSeconds: &timeout, AdmissionReviewVersions: []string{"v1"}}},
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: replayValidating},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: replayValidating, ClientConfig: client("/validate"), Rules: rules, NamespaceSelector: selector,
			SideEffects: &none, FailurePolicy: &fail, TimeoutSeconds: &timeout, AdmissionReviewVersions: []string{"v1"}}},
	}
	if _, err := a.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, o := range []any{m, v} {
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	path := filepath.Join(dir, "webhooks.yaml")
	writeText(t, path, strings.Join(docs, "---\n"))

	// In use once a dry-run create without the required annotation is
	// denied by the validating webhook, and one with it comes back
	// patched by the mutating webhook.
	team, value, _ := strings.Cut(replayTeam, "=")
	deadline := time.Now().Add(startTimeout)
	for i := 0; ; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("the apiserver did not call the webhooks %s and %s within %s", replayMutating, replayValidating, startTimeout)
		}
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		_, err := a.client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("probe-%d", i)}}, dry)
		denied := err != nil && strings.Contains(err.Error(), fmt.Sprintf("admission webhook %q denied", replayValidating))
		cm, err := a.client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("probe-%d", i), Annotations: map[string]string{team: value}}}, dry)
		if denied && err == nil && cm.Annotations[replayMutated] == "true" {
			return path
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// auditMarker gets the ConfigMap name in ns (which does not exist) as the
// admin, and returns the line of the audit log that records it, once it
// is written: a request's event is written after its answer, but each of
// the test's requests is answered before the next is sent, so every
// request before the marker is recorded by then, at an earlier line.
func auditMarker(t *testing.T, a *apiServer, path, ns, name string) int {
	t.Helper()
	if _, err := a.client.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("getting the marker %s: got %v, want NotFound", name, err)
	}
	_, line := waitForAuditEvent(t, path, "marker "+name, func(e auditEvent) bool {
		return e.Stage == "ResponseComplete" && e.Verb == "get" && e.ObjectRef != nil &&
			e.ObjectRef.Resource == "configmaps" && e.ObjectRef.Namespace == ns && e.ObjectRef.Name == name
	})
	return line
}

// sliceLog writes the lines of the log at path after line from and before
// line to into out, and returns how many.
func sliceLog(t *testing.T, path string, from, to int, out string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	if to-1 > len(lines) || from >= to {
		t.Fatalf("the log %s has %d lines, want lines %d to %d", path, len(lines), from, to)
	}
	part := lines[from : to-1]
	writeText(t, out, strings.Join(part, ""))
	return len(part)
}

// runReplay runs `webhook review -o json` with args, and returns its
// results, its exit status, and the text the same replay prints without
// -o json: its lines, then its summary (stderr's).
func runReplay(t *testing.T, bin string, args ...string) ([]replayed, int, string) {
	t.Helper()
	var stderr bytes.Buffer
	run := func(args ...string) ([]byte, int) {
		stderr.Reset()
		cmd := exec.Command(bin, append([]string{"review"}, args...)...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		code := 0
		if exit, ok := err.(*exec.ExitError); ok {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code == 2 {
			t.Fatalf("webhook review %q: exit 2:\n%s%s", args, out, &stderr)
		}
		return out, code
	}
	out, code := run(append([]string{"-o", "json"}, args...)...)
	var results []replayed
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("webhook review -audit-log -o json printed %s: %v", out, err)
	}
	text, textCode := run(args...)
	if textCode != code {
		t.Errorf("exit %d with -o json, %d without", code, textCode)
	}
	return results, code, string(text) + stderr.String()
}

// builtinObjects are the objects createBuiltinsAdmitted creates, by
// resource.
type builtinObjects map[string][]byte

// createBuiltinsAdmitted creates, as the admin, a Pod and a
// PersistentVolumeClaim in ns, objects the built-in admission plugins
// change before any webhook (no webhook of the test is sent them), and
// returns them as sent.
func createBuiltinsAdmitted(t *testing.T, a *apiServer, ns string) builtinObjects {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
	}
	pvc := &corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := a.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	objs := builtinObjects{}
	for resource, o := range map[string]any{"pods": pod, "persistentvolumeclaims": pvc} {
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		objs[resource] = b
	}
	return objs
}

// checkBuiltinNotes reviews the objects createBuiltinsAdmitted created, as
// manifests, and checks each note of the built-in admission plugins
// against what the apiserver changed between the object as decoded (the
// create's requestObject in the audit log) and as stored (its
// responseObject), in spec and metadata.finalizers: every field the
// apiserver changed is named by a note, and every field a note names
// without a condition ("if" or "unless" what the cluster holds) changed.
func checkBuiltinNotes(t *testing.T, bin, ns, auditLog string, objs builtinObjects) {
	t.Helper()
	created := map[string][2]json.RawMessage{} // by resource: requestObject, responseObject
	f, err := os.Open(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var e struct {
			auditEvent
			RequestObject, ResponseObject json.RawMessage
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Verb == "create" && e.Stage == "ResponseComplete" && e.ObjectRef != nil && e.ObjectRef.Namespace == ns {
			if _, ok := objs[e.ObjectRef.Resource]; ok {
				created[e.ObjectRef.Resource] = [2]json.RawMessage{e.RequestObject, e.ResponseObject}
			}
		}
	}
	for resource, obj := range objs {
		raw, ok := created[resource]
		if !ok || len(raw[0]) == 0 || len(raw[1]) == 0 {
			t.Errorf("the audit log has no create of %s in %s with both its objects", resource, ns)
			continue
		}
		changed := changedFields(t, raw[0], raw[1])
		file := filepath.Join(t.TempDir(), resource+".json")
		writeText(t, file, string(obj))
		cmd := exec.Command(bin, "review", "-o", "json", "-f", file, "-namespace", ns)
		out, _ := cmd.Output()
		var results []struct{ Notes []string }
		if err := json.Unmarshal(out, &results); err != nil || len(results) != 1 {
			t.Fatalf("webhook review -f %s printed %s: %v", file, out, err)
		}
		named, certain := notedFields(results[0].Notes)
		for field := range changed {
			if !named[field] {
				t.Errorf("%s: the apiserver changed %s before any webhook, and no note names it; notes:\n  %s", resource, field, strings.Join(results[0].Notes, "\n  "))
			}
		}
		for field := range certain {
			if !changed[field] {
				t.Errorf("%s: a note says %s is changed, and the apiserver left it as it was; changed: %v", resource, field, sortedKeys(changed))
			}
		}
		t.Logf("%s: the apiserver changed %v; the notes:\n  %s", resource, sortedKeys(changed), strings.Join(results[0].Notes, "\n  "))
	}
}

// changedFields are the fields of spec, and metadata.finalizers, whose
// values differ between sent and stored, as "spec.<field>".
func changedFields(t *testing.T, sent, stored json.RawMessage) map[string]bool {
	t.Helper()
	var a, b struct {
		Metadata struct{ Finalizers []string }
		Spec     map[string]any
	}
	if err := json.Unmarshal(sent, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(stored, &b); err != nil {
		t.Fatal(err)
	}
	changed := map[string]bool{}
	for k := range b.Spec {
		x, _ := json.Marshal(a.Spec[k])
		y, _ := json.Marshal(b.Spec[k])
		if !bytes.Equal(x, y) {
			changed["spec."+k] = true
		}
	}
	for k := range a.Spec {
		if _, ok := b.Spec[k]; !ok {
			changed["spec."+k] = true
		}
	}
	if !slices.Equal(a.Metadata.Finalizers, b.Metadata.Finalizers) {
		changed["metadata.finalizers"] = true
	}
	return changed
}

// notedFields are the fields the built-in notes name (spec.x, and
// spec.x[*].y as spec.x; metadata.finalizers), and those named by a note
// that holds whatever the cluster holds.
func notedFields(notes []string) (named, certain map[string]bool) {
	named, certain = map[string]bool{}, map[string]bool{}
	for _, n := range notes {
		if !strings.HasPrefix(n, "built-in admission") {
			continue
		}
		conditional := strings.Contains(n, ", if ") || strings.Contains(n, ", unless ")
		for _, word := range strings.FieldsFunc(n, func(r rune) bool { return r == ' ' || r == '(' || r == ')' || r == ',' || r == ';' }) {
			for _, prefix := range []string{"spec.", "metadata.finalizers"} {
				if strings.HasPrefix(word, prefix) {
					field := word
					if i := strings.IndexAny(field[len("spec."):], ".["); i >= 0 && prefix == "spec." {
						field = field[:len("spec.")+i]
					}
					named[field] = true
					if !conditional {
						certain[field] = true
					}
				}
			}
		}
	}
	return named, certain
}

// captureAuditLog writes the replayed part of the log into the root
// module's review/testdata, for review's unit tests (make capture).
func captureAuditLog(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(repoRoot, "review", "testdata", "audit", "e2e.log")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", out)
}

func equalSets(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]bool) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
