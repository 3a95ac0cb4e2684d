package review

// What the apiserver serves each kind as: its resource, its scope, its
// subresources, and which resources are one under matchPolicy Equivalent.
// For the built-in kinds this is apiresources.json, written by e2e
// TestReviewAPIResources from a real kube-apiserver's discovery and held
// to it there (make capture writes it anew), so that it cannot rot as
// Kubernetes changes: a RESTMapper built from k8s.io/api's scheme would
// know the kinds, but not their scope, nor which versions an apiserver
// serves, nor which resources share their storage. For a custom resource
// it is its CustomResourceDefinition, when the input holds it; else
// -api-resources (`kubectl api-resources -o wide`); else -resource; else
// review says the scope is unknown, never guesses it.
//
// Equivalence is the apiserver's: k8s.io/apiserver pkg/server/config.go
// makes its EquivalentResourceRegistry (k8s.io/apimachinery
// pkg/runtime/mapper.go) key each resource by its storage prefix, so that
// resources stored together, across versions and across groups
// (events and events.k8s.io/events), are equivalent; discovery's
// storageVersionHash is the same for them, and is what the table keeps.
// The registry lists them in the order they were installed, the order of
// discovery; a CustomResourceDefinition's, in the order of its served
// versions (apiextensions-apiserver customresource_handler.go).

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

//go:embed apiresources.json
var builtinResourcesJSON []byte

// apiResource is one line of apiresources.json.
type apiResource struct {
	Group          string   `json:"group"`
	Version        string   `json:"version"`
	Resource       string   `json:"resource"` // "pods", or "pods/exec"
	Kind           string   `json:"kind"`
	KindAPIVersion string   `json:"kindAPIVersion"` // a subresource's kind's, when not the resource's
	Namespaced     bool     `json:"namespaced"`
	Storage        string   `json:"storage"` // storageVersionHash: equal for equivalent resources
	Verbs          []string `json:"verbs"`
}

// kindInfo is what the apiserver serves one kind of one version as.
type kindInfo struct {
	kind     schema.GroupVersionKind
	resource schema.GroupVersionResource
	// scope is "Namespaced", "Cluster", or "" when review does not know.
	scope string
	// class names the resources stored together: equivalent ones share it.
	class        string
	subresources map[string]schema.GroupVersionKind
	// subresourceVerbs are the verbs each subresource serves, when known.
	subresourceVerbs map[string][]string
	verbs            []string // nil when not known
	// source says where review learned it, for a note.
	source string
	// conversion is how the apiserver converts an object of this kind to
	// another version: "" for a built-in kind (its own conversion
	// functions), None or Webhook for a custom resource.
	conversion string
	// pluralGuessed: resource's name is a guess, which no source gave.
	pluralGuessed bool
}

// namespaced reports whether objects of the kind live in a namespace; it
// is only meaningful when the scope is known.
func (k *kindInfo) namespaced() bool { return k.scope == "Namespaced" }

// catalog is every kind review knows how the apiserver serves.
type catalog struct {
	kubeVersion string
	byKind      map[schema.GroupVersionKind]*kindInfo
	byResource  map[schema.GroupVersionResource]*kindInfo
	// classes lists, for each class, its resources in the order the
	// apiserver registers them.
	classes map[string][]schema.GroupVersionResource
	// builtinGroups are the groups of k8s.io/api, served or not: a kind of
	// one that the table lacks is not served, not a custom resource.
	builtinGroups map[string]bool
	// servedVersions are the versions served of each built-in group, for
	// a message.
	servedVersions map[string][]string
	// plurals are -resource's Kind=plural, for a kind no other source
	// names.
	plurals map[string]resourceFlag
	// subresourceKinds are the kinds a subresource is sent as that are
	// no kind of a resource of their own (autoscaling/v1 Scale,
	// policy/v1 Eviction, …), and whose subresources they are.
	subresourceKinds map[schema.GroupVersionKind][]subresourceOf
}

// subresourceOf names one subresource: the resource, and the
// subresource's name.
type subresourceOf struct {
	resource schema.GroupVersionResource
	sub      string
}

func (s subresourceOf) String() string { return s.resource.Resource + "/" + s.sub }

// resourceFlag is one -resource: a kind's plural, and its scope when
// given.
type resourceFlag struct {
	plural, scope string
}

// builtinCatalog is the built-in table, read once: newCatalog copies it.
var builtinCatalog = sync.OnceValues(readBuiltinCatalog)

// newCatalog is a catalog of the built-in kinds, to which a review adds
// its own: a copy of the table's, which is read once.
func newCatalog() (*catalog, error) {
	base, err := builtinCatalog()
	if err != nil {
		return nil, err
	}
	c := *base
	c.byKind, c.byResource, c.classes = maps.Clone(base.byKind), maps.Clone(base.byResource), maps.Clone(base.classes)
	c.builtinGroups, c.servedVersions, c.plurals = maps.Clone(base.builtinGroups), maps.Clone(base.servedVersions), map[string]resourceFlag{}
	c.subresourceKinds = maps.Clone(base.subresourceKinds)
	return &c, nil
}

// readBuiltinCatalog reads apiresources.json.
func readBuiltinCatalog() (*catalog, error) {
	var table struct {
		KubeVersion string        `json:"kubeVersion"`
		Resources   []apiResource `json:"resources"`
		Unserved    []string      `json:"unserved"`
	}
	if err := json.Unmarshal(builtinResourcesJSON, &table); err != nil {
		return nil, fmt.Errorf("review/apiresources.json: %w", err)
	}
	c := &catalog{kubeVersion: table.KubeVersion, byKind: map[schema.GroupVersionKind]*kindInfo{},
		byResource: map[schema.GroupVersionResource]*kindInfo{}, classes: map[string][]schema.GroupVersionResource{},
		builtinGroups: map[string]bool{}, servedVersions: map[string][]string{}, plurals: map[string]resourceFlag{},
		subresourceKinds: map[schema.GroupVersionKind][]subresourceOf{}}
	source := "kube-apiserver " + table.KubeVersion
	for _, r := range table.Resources {
		c.builtinGroups[r.Group] = true
		resource, sub, isSub := strings.Cut(r.Resource, "/")
		gvr := schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: resource}
		if isSub {
			parent := c.byResource[gvr]
			if parent == nil {
				return nil, fmt.Errorf("review/apiresources.json: %s before its resource", r.Resource)
			}
			kindGV := gvr.GroupVersion()
			if r.KindAPIVersion != "" {
				kindGV, _ = schema.ParseGroupVersion(r.KindAPIVersion)
			}
			parent.subresources[sub] = kindGV.WithKind(r.Kind)
			parent.subresourceVerbs[sub] = r.Verbs
			continue
		}
		scope := "Cluster"
		if r.Namespaced {
			scope = "Namespaced"
		}
		k := &kindInfo{kind: gvr.GroupVersion().WithKind(r.Kind), resource: gvr, scope: scope, class: r.Storage,
			subresources: map[string]schema.GroupVersionKind{}, subresourceVerbs: map[string][]string{}, verbs: r.Verbs, source: source}
		if k.class == "" {
			// Not stored (a TokenReview): equivalent to itself alone, as
			// the registry keys it by its group and resource.
			k.class = gvr.GroupResource().String()
		}
		c.add(k)
		if !slices.Contains(c.servedVersions[r.Group], r.Version) {
			c.servedVersions[r.Group] = append(c.servedVersions[r.Group], r.Version)
		}
	}
	for _, k := range c.byResource {
		for sub, kind := range k.subresources {
			if _, own := c.byKind[kind]; !own {
				c.subresourceKinds[kind] = append(c.subresourceKinds[kind], subresourceOf{k.resource, sub})
			}
		}
	}
	for _, list := range c.subresourceKinds {
		slices.SortFunc(list, func(a, b subresourceOf) int {
			return strings.Compare(a.String()+a.resource.Group, b.String()+b.resource.Group)
		})
	}
	for _, gv := range table.Unserved {
		parsed, err := schema.ParseGroupVersion(gv)
		if err != nil {
			return nil, fmt.Errorf("review/apiresources.json: unserved %q: %w", gv, err)
		}
		c.builtinGroups[parsed.Group] = true
	}
	return c, nil
}

// add registers k, after those registered before it.
func (c *catalog) add(k *kindInfo) {
	if _, ok := c.byKind[k.kind]; !ok {
		c.byKind[k.kind] = k
	}
	if _, ok := c.byResource[k.resource]; !ok {
		c.byResource[k.resource] = k
		// Clipped: a copy of a catalog shares its slices with the table.
		c.classes[k.class] = append(slices.Clip(c.classes[k.class]), k.resource)
	}
}

// lookup says what the apiserver serves gvk as, or why it serves it not:
// a version of a built-in group it does not serve (apps/v1beta1), or one a
// CustomResourceDefinition of the input does not serve. A kind no source
// names gets its resource guessed as the apiserver's RESTMapper guesses a
// plural (meta.UnsafeGuessKindToResource) and an unknown scope.
func (c *catalog) lookup(gvk schema.GroupVersionKind) (*kindInfo, error) {
	if k, ok := c.byKind[gvk]; ok {
		return k, nil
	}
	if c.builtinGroups[gvk.Group] {
		served := c.servedVersions[gvk.Group]
		if len(served) == 0 {
			return nil, fmt.Errorf("kube-apiserver %s serves no version of the group %s: it refuses %s %s (no matches for kind)", c.kubeVersion, groupName(gvk.Group), gvk.GroupVersion(), gvk.Kind)
		}
		if subs := c.subresourceKinds[gvk]; len(subs) > 0 {
			var names []string
			for _, s := range subs {
				names = append(names, s.String())
			}
			return nil, fmt.Errorf("%s %s is the object of a subresource (%s), not a kind the apiserver stores: review it with -subresource %s (-operation UPDATE for a Scale, its object in -old; CREATE for an Eviction)",
				gvk.GroupVersion(), gvk.Kind, strings.Join(names, ", "), subs[0].sub)
		}
		if slices.Contains(served, gvk.Version) {
			return nil, fmt.Errorf("kube-apiserver %s serves %s, but no kind %s in it: it refuses the object (no matches for kind %q in version %q); a component's configuration file (an audit Policy, a kubeconfig) is not a manifest (-skip-kind %s leaves it out)",
				c.kubeVersion, gvk.GroupVersion(), gvk.Kind, gvk.Kind, gvk.GroupVersion(), gvk.Kind)
		}
		return nil, fmt.Errorf("kube-apiserver %s does not serve %s (of %s it serves %s): it refuses %s (no matches for kind %q in version %q)",
			c.kubeVersion, gvk.GroupVersion(), groupName(gvk.Group), strings.Join(served, ", "), gvk.Kind, gvk.Kind, gvk.GroupVersion())
	}
	for _, k := range c.byKind {
		if k.kind.Group == gvk.Group && k.kind.Kind == gvk.Kind && k.conversion != "" && strings.HasPrefix(k.source, "the CustomResourceDefinition") {
			var served []string
			for _, r := range c.classes[k.class] {
				served = append(served, r.Version)
			}
			return nil, fmt.Errorf("%s does not serve version %s (it serves %s): the apiserver refuses %s", k.source, gvk.Version, strings.Join(served, ", "), gvk.GroupVersion())
		}
	}
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	k := &kindInfo{kind: gvk, resource: plural, class: plural.GroupResource().String(), subresources: map[string]schema.GroupVersionKind{},
		source: "no CustomResourceDefinition of it in -f, nor -api-resources, nor -resource", pluralGuessed: true}
	if f, ok := c.plurals[gvk.Kind]; ok {
		k.resource.Resource, k.scope, k.source, k.pluralGuessed = f.plural, f.scope, "-resource", false
		k.class = k.resource.GroupResource().String()
	}
	return k, nil
}

func groupName(group string) string {
	if group == "" {
		return "the core group"
	}
	return group
}

// equivalents are the resources the apiserver holds equivalent to
// resource, with sub, in its order, resource itself among them
// (EquivalentResourcesFor).
func (c *catalog) equivalents(resource schema.GroupVersionResource, sub string) []schema.GroupVersionResource {
	k := c.byResource[resource]
	if k == nil {
		return []schema.GroupVersionResource{resource}
	}
	var out []schema.GroupVersionResource
	for _, r := range c.classes[k.class] {
		if other := c.byResource[r]; sub == "" || other.subresources[sub] != (schema.GroupVersionKind{}) {
			out = append(out, r)
		}
	}
	return out
}

// kindFor is the kind of resource's sub, or of resource when sub is ""
// (KindFor).
func (c *catalog) kindFor(resource schema.GroupVersionResource, sub string) schema.GroupVersionKind {
	k := c.byResource[resource]
	switch {
	case k == nil:
		return schema.GroupVersionKind{}
	case sub != "":
		return k.subresources[sub]
	}
	return k.kind
}

// crdDocument is what review reads of a CustomResourceDefinition
// (apiextensions.k8s.io/v1).
type crdDocument struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Plural string `json:"plural"`
			Kind   string `json:"kind"`
		} `json:"names"`
		Scope    string `json:"scope"`
		Versions []struct {
			Name         string `json:"name"`
			Served       bool   `json:"served"`
			Subresources *struct {
				Status *struct{} `json:"status"`
				Scale  *struct{} `json:"scale"`
			} `json:"subresources"`
		} `json:"versions"`
		Conversion *struct {
			Strategy string `json:"strategy"`
		} `json:"conversion"`
	} `json:"spec"`
}

// addCRD registers the kinds a CustomResourceDefinition serves, one per
// served version, all equivalent, ahead of -api-resources. source names
// where it was read.
func (c *catalog) addCRD(crd crdDocument, source string) error {
	s := crd.Spec
	if s.Group == "" || s.Names.Plural == "" || s.Names.Kind == "" || (s.Scope != "Namespaced" && s.Scope != "Cluster") {
		return fmt.Errorf("the CustomResourceDefinition %s has no spec.group, spec.names.plural, spec.names.kind or spec.scope Namespaced or Cluster", crd.Metadata.Name)
	}
	if c.builtinGroups[s.Group] {
		return fmt.Errorf("the CustomResourceDefinition %s defines a kind in %s, a group of the apiserver's own", crd.Metadata.Name, s.Group)
	}
	conversion := "None"
	if s.Conversion != nil && s.Conversion.Strategy != "" {
		conversion = s.Conversion.Strategy
	}
	class := "crd:" + s.Names.Plural + "." + s.Group
	delete(c.classes, class) // a second definition of it replaces the first
	for _, v := range s.Versions {
		if !v.Served {
			continue
		}
		gvr := schema.GroupVersionResource{Group: s.Group, Version: v.Name, Resource: s.Names.Plural}
		k := &kindInfo{kind: gvr.GroupVersion().WithKind(s.Names.Kind), resource: gvr, scope: s.Scope, class: class,
			subresources: map[string]schema.GroupVersionKind{}, subresourceVerbs: map[string][]string{}, source: fmt.Sprintf("the CustomResourceDefinition %s (%s)", crd.Metadata.Name, source), conversion: conversion}
		if v.Subresources != nil && v.Subresources.Status != nil {
			k.subresources["status"] = k.kind
		}
		if v.Subresources != nil && v.Subresources.Scale != nil {
			scale := schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}
			k.subresources["scale"] = scale
			c.subresourceKinds[scale] = append(slices.Clip(c.subresourceKinds[scale]), subresourceOf{gvr, "scale"})
		}
		c.byKind[k.kind] = k
		c.byResource[gvr] = k
		c.classes[class] = append(slices.Clip(c.classes[class]), gvr)
	}
	return nil
}

// readAPIResources reads `kubectl api-resources` output (-o wide or not):
// a table whose header names NAME, APIVERSION, NAMESPACED and KIND, its
// columns aligned under the header's words. Each kind of a group the
// built-in table does not know is registered; a built-in group's are
// already known, with their equivalences.
func (c *catalog) readAPIResources(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("-api-resources: %w", err)
	}
	defer f.Close()
	return c.parseAPIResources(path, f)
}

func (c *catalog) parseAPIResources(path string, r io.Reader) error {
	lines := bufio.NewScanner(r)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	var columns map[string][2]int // name → start, end (-1: to the end)
	for n := 1; lines.Scan(); n++ {
		line := lines.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		if columns == nil {
			columns = headerColumns(line)
			for _, want := range []string{"NAME", "APIVERSION", "NAMESPACED", "KIND"} {
				if _, ok := columns[want]; !ok {
					return fmt.Errorf("-api-resources %s:%d: the header has no %s column: want the output of kubectl api-resources -o wide", path, n, want)
				}
			}
			continue
		}
		field := func(name string) string {
			col := columns[name]
			if col[0] >= len(line) {
				return ""
			}
			end := col[1]
			if end < 0 || end > len(line) {
				end = len(line)
			}
			return strings.TrimSpace(line[col[0]:end])
		}
		name, apiVersion, namespaced, kind := field("NAME"), field("APIVERSION"), field("NAMESPACED"), field("KIND")
		gv, err := schema.ParseGroupVersion(apiVersion)
		if name == "" || kind == "" || err != nil || apiVersion == "" || (namespaced != "true" && namespaced != "false") {
			return fmt.Errorf("-api-resources %s:%d: want NAME, APIVERSION, NAMESPACED (true or false) and KIND under their headers", path, n)
		}
		gvk := gv.WithKind(kind)
		if _, known := c.byKind[gvk]; known || (c.builtinGroups[gv.Group] && gv.Group != "") {
			continue
		}
		scope := "Cluster"
		if namespaced == "true" {
			scope = "Namespaced"
		}
		gvr := gv.WithResource(name)
		c.add(&kindInfo{kind: gvk, resource: gvr, scope: scope, class: gvr.GroupResource().String(),
			subresources: map[string]schema.GroupVersionKind{}, source: "-api-resources " + path})
	}
	if err := lines.Err(); err != nil {
		return fmt.Errorf("-api-resources %s: %w", path, err)
	}
	if columns == nil {
		return fmt.Errorf("-api-resources %s: empty: want the output of kubectl api-resources -o wide", path)
	}
	return nil
}

// headerColumns finds each word of a table's header and the span of its
// column: from the word to the next word.
func headerColumns(header string) map[string][2]int {
	columns := map[string][2]int{}
	var last string
	for i := 0; i < len(header); {
		if header[i] == ' ' || header[i] == '\t' {
			i++
			continue
		}
		start := i
		for i < len(header) && header[i] != ' ' && header[i] != '\t' {
			i++
		}
		if last != "" {
			col := columns[last]
			columns[last] = [2]int{col[0], start}
		}
		last = header[start:i]
		columns[last] = [2]int{start, -1}
	}
	return columns
}
