package review

// Which webhooks the apiserver sends an object to, read from webhook
// configurations (-config) and matched as k8s.io/apiserver's
// pkg/admission/plugin/webhook/predicates match them: rules (rules.go,
// Matcher.Matches), objectSelector (object/matcher.go), namespaceSelector
// (namespace/matcher.go). matchConditions are CEL the apiserver evaluates;
// they are reported, not evaluated.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// webhook is one webhook of a configuration, and the route of this webhook
// that serves it.
type webhook struct {
	name                              string
	mutating                          bool
	route                             string // /mutate or /validate
	rules                             []admissionregistrationv1.RuleWithOperations
	namespaceSelector, objectSelector *metav1.LabelSelector
	matchConditions                   int
}

// readConfigs reads the webhooks of the MutatingWebhookConfigurations and
// ValidatingWebhookConfigurations in paths, in order (mutating webhooks run
// in the order of their configurations, as the apiserver sorts them by
// name, and in order within one).
func readConfigs(paths []string) ([]webhook, error) {
	var hooks []webhook
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
		for n := 1; ; n++ {
			var raw json.RawMessage
			err := dec.Decode(&raw)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s#%d: %w", path, n, err)
			}
			// What decides where an object goes, and no more: caBundle may
			// still be a placeholder, as in deploy/webhooks.yaml.
			var cfg struct {
				Kind     string `json:"kind"`
				Webhooks []struct {
					Name         string `json:"name"`
					ClientConfig struct {
						URL     *string `json:"url"`
						Service *struct {
							Path *string `json:"path"`
						} `json:"service"`
					} `json:"clientConfig"`
					Rules             []admissionregistrationv1.RuleWithOperations `json:"rules"`
					NamespaceSelector *metav1.LabelSelector                        `json:"namespaceSelector"`
					ObjectSelector    *metav1.LabelSelector                        `json:"objectSelector"`
					MatchConditions   []json.RawMessage                            `json:"matchConditions"`
				} `json:"webhooks"`
			}
			if err := json.Unmarshal(raw, &cfg); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s#%d: %w", path, n, err)
			}
			mutating := cfg.Kind == "MutatingWebhookConfiguration"
			if !mutating && cfg.Kind != "ValidatingWebhookConfiguration" {
				continue
			}
			for _, w := range cfg.Webhooks {
				route := map[bool]string{true: "/mutate", false: "/validate"}[mutating]
				switch {
				case w.ClientConfig.Service != nil && w.ClientConfig.Service.Path != nil:
					route = *w.ClientConfig.Service.Path
				case w.ClientConfig.URL != nil:
					if u, err := url.Parse(*w.ClientConfig.URL); err == nil && u.Path != "" {
						route = u.Path
					}
				}
				hooks = append(hooks, webhook{w.Name, mutating, route, w.Rules, w.NamespaceSelector, w.ObjectSelector, len(w.MatchConditions)})
			}
		}
		f.Close()
	}
	if len(hooks) == 0 {
		return nil, fmt.Errorf("-config %s: no MutatingWebhookConfiguration or ValidatingWebhookConfiguration with webhooks", strings.Join(paths, ", "))
	}
	return hooks, nil
}

// request is one admission request as the apiserver would send it: what
// the matchers read, and what the review carries.
type request struct {
	operation              admissionregistrationv1.OperationType
	kind                   schema.GroupVersionKind // the object's
	group, version         string                  // the resource's
	resource, subresource  string
	name                   string
	namespace              string // "" for a cluster-scoped object
	object, oldObject      *unstructured.Unstructured
	userInfo               authenticationv1.UserInfo
	dryRun                 bool
	options                []byte            // the operation's options, JSON; nil for CONNECT
	admitted               bool              // object has been through admission already: a PATCH's stored result
	namespaceLabels        map[string]string // the object's namespace's, when the input holds it
	namespaceLabelsUnknown bool
}

// matches says whether the apiserver sends req to h, and notes what it
// could not evaluate.
func (h webhook) matches(req request) (bool, []string) {
	if !h.rulesMatch(req) || !h.objectMatches(req) {
		return false, nil
	}
	var notes []string
	if h.namespaceSelector != nil && !emptySelector(h.namespaceSelector) && (req.namespace != "" || req.resource == "namespaces") {
		// Every namespace has its name as a label: a selector of names
		// alone needs no more.
		set := map[string]string{}
		for k, v := range req.namespaceLabels {
			set[k] = v
		}
		set[namespaceNameLabel] = req.namespaceName()
		if req.namespaceLabelsUnknown && !onlyNames(h.namespaceSelector) {
			notes = append(notes, fmt.Sprintf("%s: namespaceSelector not evaluated (give the Namespace %s in -f)", h.name, req.namespaceName()))
		} else if sel, err := metav1.LabelSelectorAsSelector(h.namespaceSelector); err != nil || !sel.Matches(labels.Set(set)) {
			return false, nil
		}
	}
	if h.matchConditions > 0 {
		notes = append(notes, fmt.Sprintf("%s: %d matchConditions not evaluated", h.name, h.matchConditions))
	}
	return true, notes
}

// rulesMatch is rules.Matcher.Matches: scope, operation, group, version
// and resource, each "*" or the request's.
func (h webhook) rulesMatch(req request) bool {
	for _, r := range h.rules {
		if exactOrWildcard(operations(r.Operations), string(req.operation)) &&
			exactOrWildcard(r.APIGroups, req.group) && exactOrWildcard(r.APIVersions, req.version) &&
			resourceMatches(r.Resources, req.resource, req.subresource) && scopeMatches(r.Scope, req) {
			return true
		}
	}
	return false
}

func operations(ops []admissionregistrationv1.OperationType) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = string(op)
	}
	return out
}

func exactOrWildcard(items []string, requested string) bool {
	for _, item := range items {
		if item == "*" || item == requested {
			return true
		}
	}
	return false
}

func resourceMatches(resources []string, resource, subresource string) bool {
	for _, r := range resources {
		res, sub, _ := strings.Cut(r, "/")
		if (res == "*" || res == resource) && (sub == "*" || sub == subresource) {
			return true
		}
	}
	return false
}

// scopeMatches: a Namespace object is cluster-scoped.
func scopeMatches(scope *admissionregistrationv1.ScopeType, req request) bool {
	if scope == nil || *scope == admissionregistrationv1.AllScopes {
		return true
	}
	switch *scope {
	case admissionregistrationv1.NamespacedScope:
		return req.resource != "namespaces" && req.namespace != ""
	case admissionregistrationv1.ClusterScope:
		return req.resource == "namespaces" || req.namespace == ""
	}
	return false
}

// objectMatches is object.Matcher: the object's labels or the old
// object's.
func (h webhook) objectMatches(req request) bool {
	if h.objectSelector == nil || emptySelector(h.objectSelector) {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(h.objectSelector)
	if err != nil {
		return false
	}
	for _, o := range []*unstructured.Unstructured{req.object, req.oldObject} {
		if o != nil && sel.Matches(labels.Set(o.GetLabels())) {
			return true
		}
	}
	return false
}

// namespaceNameLabel is the label the apiserver gives every namespace, its
// name.
const namespaceNameLabel = "kubernetes.io/metadata.name"

// namespaceName is the namespace whose labels the namespaceSelector reads:
// a Namespace's own, or the object's.
func (req request) namespaceName() string {
	if req.resource == "namespaces" {
		for _, o := range []*unstructured.Unstructured{req.object, req.oldObject} {
			if o != nil {
				return o.GetName()
			}
		}
	}
	return req.namespace
}

// onlyNames reports whether s reads no label but a namespace's name.
func onlyNames(s *metav1.LabelSelector) bool {
	for k := range s.MatchLabels {
		if k != namespaceNameLabel {
			return false
		}
	}
	for _, r := range s.MatchExpressions {
		if r.Key != namespaceNameLabel {
			return false
		}
	}
	return true
}

func emptySelector(s *metav1.LabelSelector) bool {
	return len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0
}
