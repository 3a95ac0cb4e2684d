package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var capture = flag.Bool("capture", false, "rewrite ../testdata/*.json with the AdmissionReview bodies a real kube-apiserver sends")

// recorder is a webhook that keeps each review it is sent, exactly as it
// arrived, and answers it with answer: admitEverything or
// noOpinionOnAnything.
type recorder struct {
	answer func(body []byte) (string, error)
	mu     sync.Mutex
	bodies [][]byte
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rec.mu.Lock()
	rec.bodies = append(rec.bodies, body)
	rec.mu.Unlock()
	answer, err := rec.answer(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, answer)
}

// admitEverything answers an AdmissionReview by admitting it unchanged.
func admitEverything(body []byte) (string, error) {
	var in struct {
		APIVersion string `json:"apiVersion"`
		Request    struct {
			UID string `json:"uid"`
		} `json:"request"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return "", err
	}
	return fmt.Sprintf(`{"apiVersion":%q,"kind":"AdmissionReview","response":{"uid":%q,"allowed":true}}`, in.APIVersion, in.Request.UID), nil
}

// noOpinionOnAnything answers a SubjectAccessReview with no opinion.
func noOpinionOnAnything(body []byte) (string, error) {
	var in struct {
		APIVersion string `json:"apiVersion"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return "", err
	}
	return fmt.Sprintf(`{"apiVersion":%q,"kind":"SubjectAccessReview","status":{"allowed":false}}`, in.APIVersion), nil
}

// take returns and forgets what was recorded so far.
func (rec *recorder) take() [][]byte {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	b := rec.bodies
	rec.bodies = nil
	return b
}

// widgetGVR is the custom resource the fixtures and the scenarios use.
var widgetGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// startRecorder starts a recorder that admits everything, serving over TLS
// with the development certificate the webhook binary makes for 127.0.0.1,
// and returns it, its server (closed when the test ends) and the CA's PEM.
func startRecorder(t *testing.T) (*recorder, *httptest.Server, []byte) {
	t.Helper()
	certDir := startWebhook(t, "").dir
	cert, err := tls.LoadX509KeyPair(filepath.Join(certDir, "tls", "tls.crt"), filepath.Join(certDir, "tls", "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(certDir, "tls", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{answer: admitEverything}
	srv := httptest.NewUnstartedServer(rec)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return rec, srv, caPEM
}

// TestCapture records what the apiserver sends for each fixture of the root
// module's testdata/ and, with -capture, writes it there. Without -capture it
// still runs every action and checks each produced exactly one review, so
// the tool that makes the fixtures cannot rot.
func TestCapture(t *testing.T) {
	ctx := context.Background()
	rec, srv, caPEM := startRecorder(t)

	createWidgetCRD(t)
	apps := apiserver.client.AppsV1()
	core := apiserver.client.CoreV1()
	all := []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
	rules := []admissionregistrationv1.RuleWithOperations{
		{Operations: all, Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments", "deployments/scale"}}},
		{Operations: all, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps", "secrets", "pods", "pods/exec"}}},
		{Operations: all, Rule: admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}}},
	}
	scope, betaScope := newScope(t, "fixtures"), newScope(t, "fixtures-v1beta1")
	ns, nsBeta := scope.namespace, betaScope.namespace
	// Namespaces themselves, which the scope's namespaceSelector selects by
	// their own labels, and a kind of cluster scope that no
	// namespaceSelector leaves out, which a webhook of its own selects by
	// the object's labels.
	namespaces := admissionregistrationv1.RuleWithOperations{Operations: all, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"namespaces"}}}
	clusterRoles := admissionregistrationv1.RuleWithOperations{Operations: all, Rule: admissionregistrationv1.Rule{APIGroups: []string{"rbac.authorization.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"clusterroles"}}}
	registerMutating(t, hookOptions{name: "capture.example.com", url: srv.URL + "/capture", caBundle: caPEM, scope: scope, rules: append(slices.Clone(rules), namespaces)})
	registerMutating(t, hookOptions{name: "capture-v1beta1.example.com", url: srv.URL + "/capture", caBundle: caPEM, scope: betaScope, rules: rules, versions: []string{"v1beta1"}})
	registerMutating(t, hookOptions{name: "capture-cluster.example.com", url: srv.URL + "/capture", caBundle: caPEM, scope: scope, rules: []admissionregistrationv1.RuleWithOperations{clusterRoles}, selectObjects: true})
	scoped := map[string]string{scopeLabel: scope.id}
	t.Cleanup(func() {
		_ = apiserver.client.RbacV1().ClusterRoles().Delete(context.Background(), "pod-reader", metav1.DeleteOptions{})
		_ = core.Namespaces().Delete(context.Background(), "team-a", metav1.DeleteOptions{})
	})

	dyn := dynamic.NewForConfigOrDie(apiserver.config)
	fixtures := []struct {
		name   string
		setup  func() error // its reviews are not kept
		action func() error // must produce exactly one review
	}{
		{name: "v1-deployment-create", action: func() error {
			_, err := apps.Deployments(ns).Create(ctx, nginxDeployment("nginx-deployment", nil), metav1.CreateOptions{})
			return err
		}},
		{name: "v1beta1-deployment-create", action: func() error {
			_, err := apps.Deployments(nsBeta).Create(ctx, nginxDeployment("nginx-deployment", nil), metav1.CreateOptions{})
			return err
		}},
		{name: "v1-deployment-create-dryrun", action: func() error {
			_, err := apps.Deployments(ns).Create(ctx, nginxDeployment("dry-run", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{name: "v1-deployment-update-mutated", setup: func() error {
			_, err := apps.Deployments(ns).Create(ctx, nginxDeployment("mutated", map[string]string{"webhook.example.com/allow": "true", "team.example.com/owner": "payments"}), metav1.CreateOptions{})
			return err
		}, action: func() error {
			return updateReplicas(ctx, apps.Deployments(ns), "mutated", 2)
		}},
		{name: "v1-deployment-update-other-annotations", setup: func() error {
			_, err := apps.Deployments(ns).Create(ctx, nginxDeployment("annotated", map[string]string{"team.example.com/owner": "payments"}), metav1.CreateOptions{})
			return err
		}, action: func() error {
			return updateReplicas(ctx, apps.Deployments(ns), "annotated", 2)
		}},
		{name: "v1-deployment-scale", action: func() error {
			_, err := apps.Deployments(ns).UpdateScale(ctx, "nginx-deployment", &autoscalingv1.Scale{
				ObjectMeta: metav1.ObjectMeta{Name: "nginx-deployment", Namespace: ns},
				Spec:       autoscalingv1.ScaleSpec{Replicas: 5},
			}, metav1.UpdateOptions{})
			return err
		}},
		{name: "v1-deployment-delete", action: func() error {
			return apps.Deployments(ns).Delete(ctx, "nginx-deployment", metav1.DeleteOptions{})
		}},
		{name: "v1-configmap-create-escaped-keys", action: func() error {
			// "~" is not valid in an annotation key, but mutating admission
			// runs before validation, so a webhook is sent it anyway; the
			// create then fails validation, which is expected here.
			_, _ = core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "escaped-keys", Annotations: map[string]string{
					"example.com/with-slash": "kept",
					"example.com/tilde~key":  "kept",
				}},
				Data: map[string]string{"color": "blue"},
			}, metav1.CreateOptions{})
			return nil
		}},
		{name: "v1-widget-create", action: func() error {
			w := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "example.com/v1", "kind": "Widget",
				"metadata": map[string]any{"name": "gizmo", "annotations": map[string]any{"widgets.example.com/size": "large"}},
				"spec":     map[string]any{"size": "large"},
			}}
			_, err := dyn.Resource(widgetGVR).Namespace(ns).Create(ctx, w, metav1.CreateOptions{})
			return err
		}},
		{name: "v1-pod-create", action: func() error {
			_, err := core.Pods(ns).Create(ctx, webPod("web"), metav1.CreateOptions{})
			return err
		}},
		{name: "v1-pod-update", action: func() error {
			pod, err := core.Pods(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			pod.Labels["version"] = "2"
			_, err = core.Pods(ns).Update(ctx, pod, metav1.UpdateOptions{})
			return err
		}},
		// A CONNECT is reviewed before the apiserver looks for the Pod's
		// node, which it has none of here: what follows the review fails.
		{name: "v1-pod-exec-connect", setup: func() error {
			_, err := core.Pods(ns).Create(ctx, webPod("exec-target"), metav1.CreateOptions{})
			return err
		}, action: func() error {
			err := core.RESTClient().Post().Namespace(ns).Resource("pods").Name("exec-target").SubResource("exec").
				Param("container", "web").Param("command", "ls").Param("stdout", "true").Do(ctx).Error()
			if err != nil && strings.Contains(err.Error(), "does not have a host assigned") {
				return nil
			}
			return err
		}},
		// A Namespace is named in request.namespace as well as request.name
		// on UPDATE and DELETE, not on CREATE: the apiserver takes it from
		// the URL (/api/v1/namespaces/team-a), which a create has not.
		{name: "v1-namespace-create", action: func() error {
			_, err := core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{scopeLabel: scope.id, "example.com/protected": "true"}}}, metav1.CreateOptions{})
			return err
		}},
		{name: "v1-namespace-update", action: func() error {
			n, err := core.Namespaces().Get(ctx, "team-a", metav1.GetOptions{})
			if err != nil {
				return err
			}
			delete(n.Labels, "example.com/protected")
			_, err = core.Namespaces().Update(ctx, n, metav1.UpdateOptions{})
			return err
		}},
		{name: "v1-namespace-delete", action: func() error {
			return core.Namespaces().Delete(ctx, "team-a", metav1.DeleteOptions{})
		}},
		{name: "v1-clusterrole-create", action: func() error {
			_, err := apiserver.client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
				ObjectMeta: metav1.ObjectMeta{Name: "pod-reader", Labels: scoped},
				Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
			}, metav1.CreateOptions{})
			return err
		}},
		{name: "v1-secret-create", action: func() error {
			_, err := core.Secrets(ns).Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "db-credentials"},
				StringData: map[string]string{"password": "s3cr3t-value-that-must-never-be-logged"},
			}, metav1.CreateOptions{})
			return err
		}},
	}
	inPlay := []schema.GroupVersionResource{appsv1.SchemeGroupVersion.WithResource("deployments"), widgetGVR,
		corev1.SchemeGroupVersion.WithResource("configmaps"), corev1.SchemeGroupVersion.WithResource("secrets"),
		corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithResource("namespaces"),
		rbacv1.SchemeGroupVersion.WithResource("clusterroles")}
	for _, f := range fixtures {
		if f.setup != nil {
			if err := f.setup(); err != nil {
				t.Fatalf("%s: setup: %v", f.name, err)
			}
		}
		waitForWatchCaches(t, dyn, inPlay)
		rec.take()
		if err := f.action(); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		bodies := rec.take()
		if len(bodies) != 1 {
			t.Fatalf("%s: got %d reviews, want 1", f.name, len(bodies))
		}
		if !*capture {
			continue
		}
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, bodies[0], "", "  "); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		pretty.WriteByte('\n')
		path := filepath.Join(repoRoot, "testdata", f.name+".json")
		if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}
}

// waitForWatchCaches waits until the apiserver's watch cache of each of
// gvrs has seen every write made so far. A write to an object starts from
// the cache's copy of it (CacheDelegator.GuaranteedUpdate in
// k8s.io/apiserver/pkg/storage/cacher/delegator.go): when that copy is
// stale, as under load, admission runs on it, the write conflicts, and
// etcd3's GuaranteedUpdate runs admission again on the stored object, so
// a webhook is sent two reviews for one request (TestCapture once got
// two for v1-namespace-delete, right after v1-namespace-update). A
// consistent list reads etcd's current revision; a list not older than
// it, from each cache, waits until that cache has seen it.
func waitForWatchCaches(t *testing.T, dyn dynamic.Interface, gvrs []schema.GroupVersionResource) {
	t.Helper()
	ctx := context.Background()
	now, err := dyn.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, gvr := range gvrs {
		opts := metav1.ListOptions{ResourceVersion: now.GetResourceVersion(), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Limit: 1}
		if _, err := dyn.Resource(gvr).List(ctx, opts); err != nil {
			t.Fatalf("waiting for the apiserver's cache of %s to see revision %s: %v", gvr.Resource, now.GetResourceVersion(), err)
		}
	}
}

// nginxDeployment is the Deployment of the original demonstration
// (nginx.yaml), with the given annotations, labelled with its team as
// teams label theirs.
func nginxDeployment(name string, annotations map[string]string) *appsv1.Deployment {
	replicas := int32(1)
	labels := map[string]string{"app": "nginx"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "nginx", "team": "web"}, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "nginx", Image: "nginx:1.14.2",
					Ports: []corev1.ContainerPort{{ContainerPort: 80}},
				}}},
			},
		},
	}
}

// webPod is a Pod with an init container and two containers, for policies
// that read containers.
func webPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web", "team": "web"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{
				Name: "migrate", Image: "registry.example.com/web/migrate:1.4.0", Command: []string{"/migrate", "--up"},
			}},
			Containers: []corev1.Container{
				{Name: "web", Image: "nginx:1.14.2", Ports: []corev1.ContainerPort{{ContainerPort: 80}}},
				{Name: "log-shipper", Image: "registry.example.com/logging/shipper:3.0.2"},
			},
		},
	}
}

type deploymentClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*appsv1.Deployment, error)
	Update(ctx context.Context, d *appsv1.Deployment, opts metav1.UpdateOptions) (*appsv1.Deployment, error)
}

func updateReplicas(ctx context.Context, c deploymentClient, name string, replicas int32) error {
	d, err := c.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	d.Spec.Replicas = &replicas
	_, err = c.Update(ctx, d, metav1.UpdateOptions{})
	return err
}

// createWidgetCRD defines example.com/v1 Widget, a namespaced custom
// resource, and waits until it is served. It is made once per run.
func createWidgetCRD(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(apiserver.config)
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets.example.com"},
		"spec": map[string]any{
			"group": "example.com", "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
		},
	}}
	if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		t.Fatalf("creating the Widget CRD: %v", err)
	}
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		_, err := dyn.Resource(widgetGVR).Namespace("default").List(ctx, metav1.ListOptions{})
		if err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("the Widget CRD was not served in time")
}
