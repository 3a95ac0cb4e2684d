package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/example/webhook/kubeclient"
)

// testPod is what the view tests keep of a Pod: its name, and the
// ServiceAccount and images it names.
type testPod struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		ServiceAccountName string `json:"serviceAccountName"`
		Containers         []struct {
			Image string `json:"image"`
		} `json:"containers"`
	} `json:"spec"`
}

var podKind = clusterKind{APIVersion: "v1", Kind: "Pod"}

// byImage indexes a Pod by its containers' images.
var byImage = indexBy("image", func(p testPod) []string {
	var images []string
	for _, c := range p.Spec.Containers {
		images = append(images, c.Image)
	}
	return images
})

func pod(namespace, name, serviceAccount string, images ...string) string {
	var containers []string
	for _, i := range images {
		containers = append(containers, `{"name":"c","image":"`+i+`"}`)
	}
	return `{"apiVersion":"v1","kind":"Pod","metadata":{"namespace":"` + namespace + `","name":"` + name + `","resourceVersion":"1"},"spec":{"serviceAccountName":"` + serviceAccount + `","containers":[` + strings.Join(containers, ",") + `]}}`
}

// filledView is a view of Pods made through fillViews, the door tests
// use, from the Pods given as JSON.
func filledView(t *testing.T, kind clusterKind, pods ...string) *view[testPod] {
	t.Helper()
	var v *view[testPod]
	var objects []clusterObject
	for i, p := range pods {
		got, err := readClusterObjects(fmt.Sprint("pod ", i), strings.NewReader(p))
		if err != nil {
			t.Fatal(err)
		}
		objects = append(objects, got...)
	}
	if err := fillViews([]read{readInto(&v, kind, byImage)}, objects); err != nil {
		t.Fatal(err)
	}
	return v
}

func names(pods []testPod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Metadata.Name)
	}
	return out
}

// TestViewLookups: a view answers by namespace and name, by namespace, and
// by the policy's index, in order; watch events add, change and remove
// objects and their index entries; a list whose object does not decode
// into what the policy keeps leaves the view as it was.
func TestViewLookups(t *testing.T) {
	ctx := context.Background()
	v := filledView(t, podKind, pod("a", "web", "builder", "nginx"), pod("a", "api", "default", "go", "nginx"), pod("b", "db", "default", "postgres"))
	if p, ok, err := v.get(ctx, "a", "web"); err != nil || !ok || p.Spec.ServiceAccountName != "builder" {
		t.Errorf("get a/web: got %+v, %v, %v", p, ok, err)
	}
	if _, ok, err := v.get(ctx, "b", "web"); err != nil || ok {
		t.Errorf("get b/web: got %v, %v, want not found", ok, err)
	}
	for _, tc := range []struct {
		namespace string
		want      []string
	}{{"a", []string{"api", "web"}}, {"", []string{"api", "web", "db"}}, {"c", nil}} {
		if got, err := v.list(tc.namespace); err != nil || !slices.Equal(names(got), tc.want) {
			t.Errorf("list(%q): got %v, %v, want %v", tc.namespace, names(got), err, tc.want)
		}
	}
	if got, err := v.indexed("image", "nginx"); err != nil || !slices.Equal(names(got), []string{"api", "web"}) {
		t.Errorf("indexed nginx: got %v, %v", names(got), err)
	}
	if _, err := v.indexed("color", "red"); err == nil || !strings.Contains(err.Error(), `has no index "color"`) {
		t.Errorf("an index the view lacks: got %v, want an error", err)
	}

	// web changes its image, api goes, a new one comes.
	for _, e := range []struct{ eventType, object string }{
		{"MODIFIED", pod("a", "web", "builder", "caddy")},
		{"DELETED", pod("a", "api", "default")},
		{"ADDED", pod("c", "cache", "default", "nginx")},
	} {
		if err := v.Apply(e.eventType, []byte(e.object)); err != nil {
			t.Fatal(err)
		}
	}
	for image, want := range map[string][]string{"nginx": {"cache"}, "caddy": {"web"}, "go": nil} {
		if got, _ := v.indexed("image", image); !slices.Equal(names(got), want) {
			t.Errorf("after the events, indexed %s: got %v, want %v", image, names(got), want)
		}
	}
	if v.size() != 3 {
		t.Errorf("got %d objects, want 3", v.size())
	}

	bad := `{"apiVersion":"v1","kind":"Pod","metadata":{"namespace":"a","name":"odd"},"spec":{"serviceAccountName":5}}`
	err := v.Replace(func(add func([]byte) error) error {
		if err := add([]byte(pod("z", "new", "default"))); err != nil {
			return err
		}
		return add([]byte(bad))
	})
	if err == nil || !strings.Contains(err.Error(), "Pod a/odd does not decode into the policy's main.testPod") {
		t.Errorf("a list with an object that does not decode: got %v, want an error naming it", err)
	}
	if got, _ := v.list(""); !slices.Equal(names(got), []string{"web", "db", "cache"}) {
		t.Errorf("after a failed list: got %v, want the view as it was", names(got))
	}
}

// TestViewFreshness: a view answers only once synced, and until it has
// heard nothing from the apiserver for longer than its kind's MaxStale;
// its errors say which, and errors.Is tells them apart. A nil view is an
// error, not a panic.
func TestViewFreshness(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		health  kubeclient.Health
		wantErr error
		want    string
	}{
		{"listing", kubeclient.Health{Since: time.Now()}, errNotSynced, "its first list is under way"},
		{"refused", kubeclient.Health{Since: time.Now(), Err: errors.New("pods is forbidden")}, errNotSynced, "pods is forbidden"},
		{"watching", kubeclient.Health{Synced: true}, nil, ""},
		{"reconnecting", kubeclient.Health{Synced: true, Since: time.Now().Add(-time.Second)}, nil, ""},
		{"cut off", kubeclient.Health{Synced: true, Since: time.Now().Add(-time.Minute), Err: errors.New("connection refused")}, errStale, "heard nothing from the apiserver for 1m0s (connection refused)"},
	} {
		v := newView[testPod](podKind, nil, func() kubeclient.Health { return tc.health }, nil)
		_, _, err := v.get(ctx, "a", "b")
		if !errors.Is(err, tc.wantErr) || (tc.want != "" && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: got %v, want %v saying %q", tc.name, err, tc.wantErr, tc.want)
		}
		if _, listErr := v.list(""); !errors.Is(listErr, tc.wantErr) {
			t.Errorf("%s: list: got %v, want %v", tc.name, listErr, tc.wantErr)
		}
	}
	var missing *view[testPod]
	if _, _, err := missing.get(ctx, "a", "b"); !errors.Is(err, errNotSynced) {
		t.Errorf("a nil view: got %v, want errNotSynced", err)
	}
}

// TestViewAsksTheAPIServerOnAMiss: an object the view lacks is asked of
// the apiserver before get says it does not exist; a failure to ask is an
// error, never "not found". A view filled once asks nothing.
func TestViewAsksTheAPIServerOnAMiss(t *testing.T) {
	ctx := context.Background()
	var asked []string
	fetch := func(_ context.Context, namespace, name string) ([]byte, error) {
		asked = append(asked, namespace+"/"+name)
		switch name {
		case "late":
			return []byte(pod(namespace, name, "builder")), nil
		case "gone":
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
		}
		return nil, errors.New("connection reset")
	}
	v := newView[testPod](podKind, nil, func() kubeclient.Health { return kubeclient.Health{Synced: true} }, fetch)
	if p, ok, err := v.get(ctx, "a", "late"); !ok || err != nil || p.Spec.ServiceAccountName != "builder" {
		t.Errorf("late: got %+v, %v, %v, want the apiserver's", p, ok, err)
	}
	if _, ok, err := v.get(ctx, "a", "gone"); ok || err != nil {
		t.Errorf("gone: got %v, %v, want not found", ok, err)
	}
	if _, ok, err := v.get(ctx, "a", "broken"); ok || err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Errorf("broken: got %v, %v, want the error", ok, err)
	}
	if want := []string{"a/late", "a/gone", "a/broken"}; !slices.Equal(asked, want) {
		t.Errorf("asked %v, want %v", asked, want)
	}
}

// TestViewOfOneNamespace: a view of one namespace holds only its objects,
// and a lookup elsewhere is an error saying so, not a miss.
func TestViewOfOneNamespace(t *testing.T) {
	kind := podKind
	kind.Namespace = "a"
	v := filledView(t, kind, pod("a", "web", "x"), pod("b", "db", "x"))
	if got, err := v.list(""); err != nil || !slices.Equal(names(got), []string{"web"}) {
		t.Errorf("got %v, %v, want namespace a's alone", names(got), err)
	}
	if _, _, err := v.get(context.Background(), "b", "db"); err == nil || !strings.Contains(err.Error(), "holds only namespace a") {
		t.Errorf("get in b: got %v, want an error", err)
	}
}
