package e2e

// What the policy reads of the cluster (its policy.reads, as `webhook
// reads` prints it), and the credentials the suite gives a webhook that
// reads something: on each apiserver, a ServiceAccount of its own bound by
// exactly the RBAC `webhook reads -o rbac` renders, as deploy/render.sh
// renders it for a deployment, and a kubeconfig with that account's
// token. A webhook whose policy reads nothing is given none, as it is
// deployed with none.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// readKind is one kind a webhook's policy reads, as `webhook reads -o
// json` prints it.
type readKind struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Resource   string `json:"resource"`
	Namespace  string `json:"namespace"`
}

func (k readKind) resource() schema.GroupVersionResource {
	gv, _ := schema.ParseGroupVersion(k.APIVersion)
	return gv.WithResource(k.Resource)
}

// readsOf returns what the policy of the webhook binary bin reads, asking
// it once per binary.
func readsOf(t *testing.T, bin string) []readKind {
	t.Helper()
	binaryReads.Lock()
	defer binaryReads.Unlock()
	if r, ok := binaryReads.of[bin]; ok {
		return r
	}
	if exec.Command(bin, "help", "reads").Run() != nil {
		binaryReads.of[bin] = nil // no cluster part: the webhook reads nothing
		return nil
	}
	out, err := exec.Command(bin, "reads", "-o", "json").Output()
	if err != nil {
		t.Fatalf("%s reads -o json: %v", bin, err)
	}
	var r []readKind
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s reads -o json printed %s: %v", bin, out, err)
	}
	binaryReads.of[bin] = r
	return r
}

var binaryReads = struct {
	sync.Mutex
	of map[string][]readKind
}{of: map[string][]readKind{}}

// readerNamespace holds the ServiceAccounts the suite's webhooks read the
// cluster as: not webhook-system, which TestDeployManifests applies and
// then deletes.
const readerNamespace = "e2e-webhook-reader"

// webhookCredentials returns the flags that let the webhook binary bin
// read, on a, what its policy reads: -kubeconfig of a ServiceAccount of
// its own, which only the RBAC its policy renders binds; none when it
// reads nothing.
func (a *apiServer) webhookCredentials(t *testing.T, bin string) []string {
	t.Helper()
	r := a.reader(t, bin)
	if r == nil {
		return nil
	}
	return []string{"-kubeconfig", r.kubeconfig}
}

// reader is how a webhook binary reads a: the kubeconfig of its
// ServiceAccount, and the account's token.
type reader struct{ kubeconfig, token string }

// reader returns bin's reader of a, making it the first time; nil when
// its policy reads nothing.
func (a *apiServer) reader(t *testing.T, bin string) *reader {
	t.Helper()
	reads := readsOf(t, bin)
	if len(reads) == 0 {
		return nil
	}
	a.readersMu.Lock()
	defer a.readersMu.Unlock()
	if r, ok := a.readers[bin]; ok {
		return r
	}
	if a.readers == nil {
		a.readers = map[string]*reader{}
	}
	account := fmt.Sprintf("webhook-%d", len(a.readers)+1)
	r, err := a.makeReader(bin, account, reads)
	if err != nil {
		t.Fatalf("giving %s a ServiceAccount to read the cluster with: %v", bin, err)
	}
	a.readers[bin] = r
	return r
}

// makeReader makes the ServiceAccount readerNamespace/account, applies the
// RBAC that bin's policy renders for it (`webhook reads -o rbac`, its
// objects' names made the account's), waits until RBAC lets it read each
// kind, and writes a kubeconfig with a token of it, for a day.
func (a *apiServer) makeReader(bin, account string, reads []readKind) (*reader, error) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: readerNamespace}}
	if _, err := a.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		return nil, err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account}}
	if _, err := a.client.CoreV1().ServiceAccounts(readerNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		return nil, err
	}
	rbac, err := exec.Command(bin, "reads", "-o", "rbac", "-service-account", readerNamespace+"/"+account).Output()
	if err != nil {
		return nil, fmt.Errorf("%s reads -o rbac: %w", bin, err)
	}
	for _, obj := range decodeObjects(rbac) {
		for _, ns := range namespacesOf(obj) {
			_, _ = a.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		}
		obj.SetName(obj.GetName() + "-" + account)
		if ref, ok, _ := unstructured.NestedString(obj.Object, "roleRef", "name"); ok {
			_ = unstructured.SetNestedField(obj.Object, ref+"-"+account, "roleRef", "name")
		}
		gvk := obj.GroupVersionKind()
		res := schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: strings.ToLower(gvk.Kind) + "s"}
		client := a.dynamic.Resource(res).Namespace(obj.GetNamespace())
		if _, err := client.Create(ctx, obj, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
			return nil, fmt.Errorf("creating %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
	}
	// RBAC sees new bindings through an informer, a moment later.
	user := "system:serviceaccount:" + readerNamespace + ":" + account
	for _, k := range reads {
		r := k.resource()
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "watch", Group: r.Group, Resource: r.Resource, Namespace: k.Namespace}}}
		for deadline := time.Now().Add(startTimeout); ; time.Sleep(100 * time.Millisecond) {
			got, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			if err == nil && got.Status.Allowed {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("RBAC did not let %s watch %s within %s of binding it: %v", user, r, startTimeout, err)
			}
		}
	}
	day := int64(24 * 60 * 60)
	token, err := a.client.CoreV1().ServiceAccounts(readerNamespace).CreateToken(ctx, account,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &day}}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	path := filepath.Join(workDir, fmt.Sprintf("kubeconfig-%s-%s", filepath.Base(a.dir), account))
	return &reader{kubeconfig: path, token: token.Status.Token}, writeReaderKubeconfig(path, a, token.Status.Token)
}

// writeReaderKubeconfig writes a kubeconfig of a, checked against its serving
// certificate (self-signed, the apiserver's own), with token.
func writeReaderKubeconfig(path string, a *apiServer, token string) error {
	return os.WriteFile(path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: e2e
contexts: [{name: e2e, context: {cluster: e2e, user: reader}}]
clusters: [{name: e2e, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: reader, user: {token: %q}}]
`, a.config.Host, filepath.Join(a.dir, "certs", "apiserver.crt"), token)), 0o600)
}

// decodeObjects decodes the YAML documents of text.
func decodeObjects(text []byte) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(text), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			return out
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
}

// namespacesOf returns the namespace an object of RBAC is in, if any.
func namespacesOf(obj *unstructured.Unstructured) []string {
	if ns := obj.GetNamespace(); ns != "" {
		return []string{ns}
	}
	return nil
}

// clusterDump writes, for `webhook review -cluster`, what a stores of each
// kind the webhook binary bin reads, as `kubectl get KIND -A -o json`
// lists it, and returns the file's path; "" when it reads nothing.
func clusterDump(t *testing.T, a *apiServer, bin, dir string) string {
	t.Helper()
	reads := readsOf(t, bin)
	if len(reads) == 0 {
		return ""
	}
	list := map[string]any{"apiVersion": "v1", "kind": "List", "items": []any{}}
	for _, k := range reads {
		got, err := a.dynamic.Resource(k.resource()).Namespace(k.Namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing %s for webhook review -cluster: %v", k.Resource, err)
		}
		for _, item := range got.Items {
			item.SetAPIVersion(k.APIVersion)
			item.SetKind(k.Kind)
			list["items"] = append(list["items"].([]any), item.Object)
		}
	}
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "cluster.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
