package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
)

// apiResource is one resource, or subresource, in webhook review's table
// of what the apiserver serves (review/apiresources.json), as discovery
// lists it.
type apiResource struct {
	Group    string `json:"group,omitempty"`
	Version  string `json:"version"`
	Resource string `json:"resource"` // "pods", or "pods/exec" for a subresource
	Kind     string `json:"kind"`
	// KindAPIVersion is a subresource's kind's group and version, when not
	// the resource's: autoscaling/v1 for deployments/scale's Scale.
	KindAPIVersion string `json:"kindAPIVersion,omitempty"`
	Namespaced     bool   `json:"namespaced,omitempty"`
	// Storage is the resource's storageVersionHash: resources that share
	// one are stored as one, and are equivalent under matchPolicy
	// Equivalent. Subresources have none; they follow their resource.
	Storage string   `json:"storage,omitempty"`
	Verbs   []string `json:"verbs,omitempty"`
}

// apiResources is review/apiresources.json.
type apiResources struct {
	Comment     string        `json:"comment"`
	KubeVersion string        `json:"kubeVersion"`
	Resources   []apiResource `json:"resources"`
	// Unserved are the group versions of k8s.io/api, as client-go's scheme
	// registers them, that the apiserver does not serve, such as
	// apps/v1beta1 and extensions/v1beta1: an object of one is refused.
	Unserved []string `json:"unserved"`
}

// TestReviewAPIResources holds review/apiresources.json, the table of
// kinds, resources, scopes, subresources and equivalences `webhook review`
// reads, to the suite's kube-apiserver's discovery, served with its
// default feature gates: -capture (make capture) writes it anew, and
// without -capture a difference fails, so the table cannot rot as
// Kubernetes changes. Only on the newest minor: the table is that one's.
func TestReviewAPIResources(t *testing.T) {
	skipWithoutPart(t, "review", "webhook review, whose resources these are")
	if *kubeVersionFlag != "" {
		t.Skipf("review/apiresources.json is the newest minor's in e2e/kube; -kube-version chose %s", kubernetesVersion)
	}
	version := kubernetesVersion
	// Each group version's own document (/api/v1, /apis/GROUP/VERSION),
	// not the aggregated discovery at /apis, which has no
	// storageVersionHash.
	groups, err := apiserver.client.Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	// The apiserver's own groups, not those of the CustomResourceDefinitions
	// other tests of the suite made (webhook review reads those from its
	// input), nor of aggregated APIs (an APIService with a service).
	notOwn := map[string]bool{}
	crds, err := apiserver.dynamic.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, crd := range crds.Items {
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		notOwn[group] = true
	}
	services, err := apiserver.dynamic.Resource(schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range services.Items {
		if _, aggregated, _ := unstructured.NestedMap(svc.Object, "spec", "service"); aggregated {
			group, _, _ := unstructured.NestedString(svc.Object, "spec", "group")
			notOwn[group] = true
		}
	}
	var lists []*metav1.APIResourceList
	for _, g := range groups.Groups {
		if notOwn[g.Name] {
			continue
		}
		for _, v := range g.Versions {
			path := "/apis/" + v.GroupVersion
			if g.Name == "" {
				path = "/api/" + v.Version
			}
			raw, err := apiserver.client.Discovery().RESTClient().Get().AbsPath(path).DoRaw(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var list metav1.APIResourceList
			if err := json.Unmarshal(raw, &list); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			lists = append(lists, &list)
		}
	}
	table := apiResources{
		Comment:     "What kube-apiserver serves with its default feature gates, from its discovery: written by e2e TestReviewAPIResources -capture (make capture); do not edit.",
		KubeVersion: version,
	}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.APIResources {
			entry := apiResource{Group: gv.Group, Version: gv.Version, Resource: r.Name, Kind: r.Kind, Namespaced: r.Namespaced, Verbs: r.Verbs}
			if strings.Contains(r.Name, "/") {
				if kindGV := (schema.GroupVersion{Group: r.Group, Version: r.Version}); r.Version != "" && kindGV != gv {
					entry.KindAPIVersion = kindGV.String()
				}
			} else {
				entry.Storage = r.StorageVersionHash
			}
			table.Resources = append(table.Resources, entry)
		}
	}
	served := map[schema.GroupVersion]bool{}
	for _, list := range lists {
		gv, _ := schema.ParseGroupVersion(list.GroupVersion)
		served[gv] = true
	}
	unserved := map[string]bool{}
	for gvk := range scheme.Scheme.AllKnownTypes() {
		if gv := gvk.GroupVersion(); !served[gv] && gv.Version != runtime.APIVersionInternal && !strings.HasSuffix(gvk.Kind, "Options") && gvk.Kind != "WatchEvent" {
			unserved[gv.String()] = true
		}
	}
	table.Unserved = slices.Sorted(maps.Keys(unserved))
	got, err := encodeAPIResources(table)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(repoRoot, "review", "apiresources.json")
	if *capture {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s: %d resources", path, len(table.Resources))
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not what kube-apiserver %s serves: run make capture, and read the diff", path, version)
	}
}

// encodeAPIResources writes the table as JSON, a resource to a line, so
// that a new Kubernetes' diff is a line per resource it changed.
func encodeAPIResources(table apiResources) ([]byte, error) {
	var b bytes.Buffer
	head, err := json.Marshal(struct {
		Comment     string `json:"comment"`
		KubeVersion string `json:"kubeVersion"`
	}{table.Comment, table.KubeVersion})
	if err != nil {
		return nil, err
	}
	b.Write(head[:len(head)-1])
	b.WriteString(`,"resources":[` + "\n")
	for i, r := range table.Resources {
		line, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		b.Write(line)
		if i < len(table.Resources)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("],\n")
	unserved, err := json.Marshal(table.Unserved)
	if err != nil {
		return nil, err
	}
	b.WriteString(`"unserved":`)
	b.Write(unserved)
	b.WriteString("}\n")
	return b.Bytes(), nil
}
