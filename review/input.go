package review

// Reading the manifests: files, directories and stdin, YAML or JSON,
// several documents each, Lists as kubectl prints them.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// document is one object to review, or what kept it from being read.
type document struct {
	source string // file#n, and [i] for an item of a List
	obj    *unstructured.Unstructured
	err    error
}

// readInputs reads every -f: a file, a directory (its *.yaml, *.yml and
// *.json, not below it), or "-" for stdin.
func readInputs(paths []string, stdin io.Reader) []document {
	var docs []document
	for _, path := range paths {
		if path == "-" {
			docs = append(docs, readStream("stdin", stdin)...)
			continue
		}
		info, err := os.Stat(path)
		if err != nil {
			docs = append(docs, document{source: path, err: err})
			continue
		}
		files := []string{path}
		if info.IsDir() {
			entries, err := os.ReadDir(path)
			if err != nil {
				docs = append(docs, document{source: path, err: err})
				continue
			}
			files = nil
			for _, e := range entries {
				if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
					files = append(files, filepath.Join(path, e.Name()))
				}
			}
			if len(files) == 0 {
				docs = append(docs, document{source: path, err: errors.New("the directory holds no *.yaml, *.yml or *.json file")})
			}
		}
		for _, f := range files {
			fh, err := os.Open(f)
			if err != nil {
				docs = append(docs, document{source: f, err: err})
				continue
			}
			docs = append(docs, readStream(f, fh)...)
			fh.Close()
		}
	}
	return docs
}

// readStream reads the documents of one file, YAML or JSON. A document that
// is not YAML ends the file: what follows it cannot be told apart.
func readStream(name string, r io.Reader) []document {
	var docs []document
	dec := yaml.NewYAMLOrJSONDecoder(r, 4096)
	for n := 1; ; n++ {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return docs
		}
		source := fmt.Sprintf("%s#%d", name, n)
		if err != nil {
			return append(docs, document{source: source, err: fmt.Errorf("not YAML or JSON: %w", err)})
		}
		if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			n-- // an empty document, between two "---"
			continue
		}
		docs = append(docs, objectsOf(source, raw)...)
	}
}

// objectsOf is the object of one document, or the items of a List: a
// `kind: List`, or any *List such as a DeploymentList, as `kubectl get -o
// yaml|json` prints them. An item without kind or apiVersion takes them
// from its List's.
func objectsOf(source string, raw json.RawMessage) []document {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return []document{{source: source, err: fmt.Errorf("not an object: %w", err)}}
	}
	obj := &unstructured.Unstructured{Object: m}
	if err := checkKind(obj); err != nil {
		return []document{{source: source, err: err}}
	}
	items, isList := m["items"].([]any)
	if !strings.HasSuffix(obj.GetKind(), "List") || (!isList && m["items"] != nil) {
		return []document{{source: source, obj: obj}}
	}
	if len(items) == 0 {
		return []document{{source: source, err: fmt.Errorf("the %s holds no items: nothing to review", obj.GetKind())}}
	}
	itemKind := strings.TrimSuffix(obj.GetKind(), "List")
	var docs []document
	for i, it := range items {
		itemSource := fmt.Sprintf("%s[%d]", source, i)
		im, ok := it.(map[string]any)
		if !ok {
			docs = append(docs, document{source: itemSource, err: errors.New("the item is not an object")})
			continue
		}
		item := &unstructured.Unstructured{Object: im}
		if item.GetKind() == "" && itemKind != "" {
			item.SetKind(itemKind)
		}
		if item.GetAPIVersion() == "" && itemKind != "" {
			item.SetAPIVersion(obj.GetAPIVersion())
		}
		if err := checkKind(item); err != nil {
			docs = append(docs, document{source: itemSource, err: err})
			continue
		}
		docs = append(docs, document{source: itemSource, obj: item})
	}
	return docs
}

// checkKind refuses an object the apiserver could not take: one without
// kind or apiVersion.
func checkKind(obj *unstructured.Unstructured) error {
	var missing []string
	if obj.GetAPIVersion() == "" {
		missing = append(missing, "apiVersion")
	}
	if obj.GetKind() == "" {
		missing = append(missing, "kind")
	}
	if len(missing) > 0 {
		return fmt.Errorf("the document has no %s", strings.Join(missing, " or "))
	}
	return nil
}

// objectKey pairs an object with its old version (-old): kind, namespace
// and name.
func objectKey(obj *unstructured.Unstructured, namespace string) string {
	return strings.Join([]string{obj.GetAPIVersion(), obj.GetKind(), namespace, obj.GetName()}, "/")
}

// clusterScoped are the built-in kinds that live outside any namespace: an
// object of another kind without a namespace is reviewed in -namespace, as
// kubectl creates it in its context's.
var clusterScoped = []string{
	"Namespace", "Node", "PersistentVolume", "ClusterRole", "ClusterRoleBinding", "StorageClass", "PriorityClass",
	"CustomResourceDefinition", "APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
	"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
	"CSIDriver", "CSINode", "VolumeAttachment", "RuntimeClass", "IngressClass", "CertificateSigningRequest",
	"FlowSchema", "PriorityLevelConfiguration", "ComponentStatus", "ClusterTrustBundle", "DeviceClass", "ResourceSlice",
	"IPAddress", "ServiceCIDR", "StorageVersionMigration", "VolumeAttributesClass",
}

func isClusterScoped(kind string) bool { return slices.Contains(clusterScoped, kind) }
