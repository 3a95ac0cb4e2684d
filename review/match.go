package review

// Which webhooks the apiserver sends a request to, read from webhook
// configurations (-config) and matched as k8s.io/apiserver v0.37's
// pkg/admission/plugin/webhook matches them (generic/webhook.go,
// ShouldCallHook): the namespaceSelector (predicates/namespace/matcher.go),
// the objectSelector (predicates/object/matcher.go), then the rules
// (predicates/rules/rules.go, Matcher.Matches), and under matchPolicy
// Equivalent, the default, each rule again against the resources the
// apiserver holds equivalent to the request's, the webhook then being sent
// the request as that resource, its kind and its version. matchConditions
// are CEL the apiserver evaluates: they are reported, not evaluated.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// equivalent is matchPolicy Equivalent: the default of
	// admissionregistration.k8s.io/v1 (k8s.io/kubernetes
	// pkg/apis/admissionregistration/v1/defaults.go); v1beta1's was Exact.
	equivalent      bool
	matchConditions int
}

// readConfigs reads the webhooks of the MutatingWebhookConfigurations and
// ValidatingWebhookConfigurations in paths, documents or Lists of them, in
// the apiserver's order: configurations sorted by name, each one's
// webhooks in order (configuration/mutating_webhook_manager.go and
// validating_webhook_manager.go sort them so). Mutating webhooks run in
// that order.
func readConfigs(paths []string) ([]webhook, error) {
	type configuration struct {
		name  string
		hooks []webhook
	}
	var configs []configuration
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("-config: %w", err)
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
				return nil, fmt.Errorf("-config %s#%d: %w", path, n, err)
			}
			docs := []json.RawMessage{raw}
			var list struct {
				Kind       string            `json:"kind"`
				APIVersion string            `json:"apiVersion"`
				Items      []json.RawMessage `json:"items"`
			}
			inherited := configHead{}
			if json.Unmarshal(raw, &list) == nil && strings.HasSuffix(list.Kind, "List") {
				// An item that names neither takes the List's apiVersion,
				// and its kind less "List" (apimachinery's unstructured
				// decodeToList).
				docs, inherited = list.Items, configHead{Kind: strings.TrimSuffix(list.Kind, "List"), APIVersion: list.APIVersion}
			}
			for i, doc := range docs {
				name, hooks, err := configWebhooks(doc, inherited)
				if err != nil {
					f.Close()
					return nil, fmt.Errorf("-config %s#%d: %w", path, n+i, err)
				}
				if hooks != nil {
					configs = append(configs, configuration{name, hooks})
				}
			}
		}
		f.Close()
	}
	slices.SortStableFunc(configs, func(a, b configuration) int { return strings.Compare(a.name, b.name) })
	var hooks []webhook
	for _, c := range configs {
		hooks = append(hooks, c.hooks...)
	}
	if len(hooks) == 0 {
		return nil, fmt.Errorf("-config %s: no MutatingWebhookConfiguration or ValidatingWebhookConfiguration with webhooks", strings.Join(paths, ", "))
	}
	return hooks, nil
}

// configHead is what a List's items that name neither inherit from it.
type configHead struct{ Kind, APIVersion string }

// configWebhooks reads one configuration: its name and its webhooks, or
// none for a document of another kind.
func configWebhooks(raw json.RawMessage, inherited configHead) (string, []webhook, error) {
	// What decides where an object goes, and no more: caBundle may still
	// be a placeholder, as in deploy/webhooks.yaml.
	var cfg struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
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
			MatchPolicy       *admissionregistrationv1.MatchPolicyType     `json:"matchPolicy"`
			MatchConditions   []json.RawMessage                            `json:"matchConditions"`
		} `json:"webhooks"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return "", nil, err
	}
	if cfg.Kind == "" && cfg.APIVersion == "" {
		cfg.Kind, cfg.APIVersion = inherited.Kind, inherited.APIVersion
	}
	mutating := cfg.Kind == "MutatingWebhookConfiguration"
	if !mutating && cfg.Kind != "ValidatingWebhookConfiguration" {
		return "", nil, nil
	}
	if cfg.APIVersion != "admissionregistration.k8s.io/v1" && cfg.APIVersion != "" { // "": as e2e's writeRegistered writes one
		// v1beta1 was last served by Kubernetes 1.21: no apiserver
		// review stands for would call its webhooks.
		return "", nil, fmt.Errorf("%s %s: apiVersion %q, want admissionregistration.k8s.io/v1, the one the apiserver serves", cfg.Kind, cfg.Metadata.Name, cfg.APIVersion)
	}
	var hooks []webhook
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
		for _, s := range []*metav1.LabelSelector{w.NamespaceSelector, w.ObjectSelector} {
			if s == nil {
				continue
			}
			if _, err := metav1.LabelSelectorAsSelector(s); err != nil {
				return "", nil, fmt.Errorf("webhook %s: a selector the apiserver refuses: %w", w.Name, err)
			}
		}
		equivalent := w.MatchPolicy == nil || *w.MatchPolicy == admissionregistrationv1.Equivalent // v1's default
		hooks = append(hooks, webhook{name: w.Name, mutating: mutating, route: route, rules: w.Rules,
			namespaceSelector: w.NamespaceSelector, objectSelector: w.ObjectSelector, equivalent: equivalent, matchConditions: len(w.MatchConditions)})
	}
	return cfg.Metadata.Name, hooks, nil
}

// request is one admission request as the apiserver would send it: what
// the matchers read, and what the review carries.
type request struct {
	operation         admissionregistrationv1.OperationType
	kind              schema.GroupVersionKind     // the object's, as requested
	resource          schema.GroupVersionResource // as requested
	subresource       string
	name              string
	namespace         string // "" for a cluster-scoped object
	object, oldObject []byte // JSON; object is a CONNECT's options
	// labels and oldLabels are object's and oldObject's, for
	// objectSelectors; hasMeta is false for a CONNECT's options, which no
	// objectSelector matches.
	labels, oldLabels map[string]string
	hasMeta           bool
	userInfo          authenticationv1.UserInfo
	dryRun            bool
	options           []byte // the operation's options, JSON; nil for CONNECT
	admitted          bool   // object has been through admission already: a PATCH's stored result
	// namespaceLabels are those of the namespace a namespaceSelector
	// reads, when known.
	namespaceLabels        map[string]string
	namespaceLabelsUnknown bool
	labelsHint             string // how to make them known
	// conversion is how the apiserver converts the object to another
	// version of its kind, for a webhook of another: see kindInfo.
	conversion string
	// meta checks the object's metadata as the apiserver validates it
	// after the mutating webhooks; nil checks nothing (a replay's, whose
	// objects the apiserver took, and a subresource's).
	meta *metaCheck
	// scale, for a Scale of a built-in kind, re-derives the Scale the
	// validating webhooks are sent from the object it scales.
	scale *scaleOf
	// sentAs, for a captured AdmissionReview reviewed without -config,
	// is the kind and resource it was sent as.
	sentAs *invocation
	// pluralGuessed: resource's name is a guess (kindInfo.pluralGuessed).
	pluralGuessed bool
	// generatedName is a create's name as the apiserver generated it from
	// generateName (replay: the stored result's; a manifest's: the prefix
	// and "xxxxx" for the five random characters), which it sends the
	// validating webhooks, and not the mutating ones
	// (rest.AdmissionToValidateObjectFunc, k8s.io/apiserver v0.37.2,
	// registry/rest/create.go).
	generatedName string
}

// namespacesResource is the resource of Namespaces, which the rules and
// the namespaceSelector treat apart (rules.go, namespaceResource).
var namespacesResource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// invocation is one webhook a request is sent to, and as what: under
// matchPolicy Equivalent another resource and kind than requested
// (WebhookInvocation).
type invocation struct {
	hook        webhook
	resource    schema.GroupVersionResource
	kind        schema.GroupVersionKind
	subresource string
	// unsure are what review does not know that decides whether the
	// webhook is sent the request: a namespaceSelector of a namespace
	// whose labels are unknown, matchConditions, which review does not
	// evaluate. Webhooks with the same selector are sent it alike.
	unsure []unknown
}

// unknown is something a verdict may depend on that review does not know:
// what, said as a condition, and how to tell review. For a
// namespaceSelector, namespace and selector say which, so that a replay
// can decide it from the cluster's list of namespaces (-namespaces).
type unknown struct {
	what, hint string
	namespace  string
	selector   labels.Selector
}

// equivalence is what matchPolicy Equivalent needs of the apiserver's
// resources: catalog's.
type equivalence interface {
	equivalents(resource schema.GroupVersionResource, sub string) []schema.GroupVersionResource
	kindFor(resource schema.GroupVersionResource, sub string) schema.GroupVersionKind
}

// invocation says whether the apiserver sends req to h, and as what
// (ShouldCallHook), or nil; with what it depends on that review does not
// know.
func (h webhook) invocation(req request, eq equivalence) *invocation {
	var unsure []unknown
	if !h.namespaceSelected(req) {
		return nil
	}
	if req.namespaceLabelsUnknown && h.readsNamespaceLabels(req) {
		sel, _ := metav1.LabelSelectorAsSelector(h.namespaceSelector)
		unsure = append(unsure, unknown{what: fmt.Sprintf("the labels of the namespace %s match %s", req.namespaceName(), sel), hint: req.labelsHint,
			namespace: req.namespaceName(), selector: sel})
	}
	if h.matchConditions > 0 {
		unsure = append(unsure, unknown{what: fmt.Sprintf("the matchConditions of %s hold", h.name), hint: "matchConditions are CEL, which review does not evaluate"})
	}
	if !h.objectSelected(req) {
		return nil
	}
	inv := &invocation{hook: h, resource: req.resource, kind: req.kind, subresource: req.subresource, unsure: unsure}
	if req.pluralGuessed {
		// Rules of "*" decide alone; one that names resources matches
		// if the kind's is among them, which review does not know.
		anyName := req.resource
		anyName.Resource = "\x00"
		switch {
		case slices.ContainsFunc(h.rules, func(r admissionregistrationv1.RuleWithOperations) bool { return ruleMatches(r, req, anyName) }):
		case slices.ContainsFunc(h.rules, func(r admissionregistrationv1.RuleWithOperations) bool {
			var named []string // each entry that names a resource, as any resource
			for _, e := range r.Resources {
				if res, sub, _ := strings.Cut(e, "/"); res != "*" {
					named = append(named, strings.TrimSuffix("*/"+sub, "/"))
				}
			}
			r.Resources = named
			return ruleMatches(r, req, req.resource)
		}):
			inv.unsure = append(inv.unsure, unknown{what: fmt.Sprintf("the resource of %s is one that %s's rules name", req.kind.Kind, h.name),
				hint: fmt.Sprintf("its resource is not known (review guessed %s): give its CustomResourceDefinition in -f, or -api-resources, or -resource %s=PLURAL", req.resource.Resource, req.kind.Kind)})
		default:
			return nil
		}
		return inv
	}
	found := slices.ContainsFunc(h.rules, func(r admissionregistrationv1.RuleWithOperations) bool { return ruleMatches(r, req, req.resource) })
	if !found && h.equivalent && eq != nil {
		// Honour earlier rules first; the request's own resource was
		// tried already.
	outer:
		for _, r := range h.rules {
			for _, other := range eq.equivalents(req.resource, req.subresource) {
				if other == req.resource || !ruleMatches(r, req, other) {
					continue
				}
				kind := eq.kindFor(other, req.subresource)
				if kind.Empty() {
					continue
				}
				inv.resource, inv.kind, found = other, kind, true
				break outer
			}
		}
	}
	if !found {
		return nil
	}
	return inv
}

// rulesMayMatch reports whether h's rules may match req, directly or, under
// matchPolicy Equivalent, as an equivalent resource, whatever its
// selectors say.
func (h webhook) rulesMayMatch(req request, eq equivalence) bool {
	for _, r := range h.rules {
		if ruleMatches(r, req, req.resource) {
			return true
		}
		if !h.equivalent || eq == nil {
			continue
		}
		for _, other := range eq.equivalents(req.resource, req.subresource) {
			if ruleMatches(r, req, other) {
				return true
			}
		}
	}
	return false
}

// ruleMatches is rules.Matcher.Matches of req, its resource taken as
// resource: scope, operation, group, version and resource, each "*" or
// the request's.
func ruleMatches(r admissionregistrationv1.RuleWithOperations, req request, resource schema.GroupVersionResource) bool {
	return exactOrWildcard(operations(r.Operations), string(req.operation)) &&
		exactOrWildcard(r.APIGroups, resource.Group) && exactOrWildcard(r.APIVersions, resource.Version) &&
		resourceMatches(r.Resources, resource.Resource, req.subresource) && scopeMatches(r.Scope, req.namespace, resource)
}

func operations(ops []admissionregistrationv1.OperationType) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = string(op)
	}
	return out
}

func exactOrWildcard(items []string, requested string) bool {
	return slices.Contains(items, "*") || slices.Contains(items, requested)
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

// scopeMatches is Matcher.scope: a Namespace is cluster-scoped, though the
// apiserver gives its requests its own name as namespace.
func scopeMatches(scope *admissionregistrationv1.ScopeType, namespace string, resource schema.GroupVersionResource) bool {
	if scope == nil || *scope == admissionregistrationv1.AllScopes {
		return true
	}
	switch *scope {
	case admissionregistrationv1.NamespacedScope:
		return resource != namespacesResource && namespace != ""
	case admissionregistrationv1.ClusterScope:
		return resource == namespacesResource || namespace == ""
	}
	return false
}

// namespaceSelected is MatchNamespaceSelector: a cluster-scoped request
// other than a Namespace's is never exempted; otherwise the labels of the
// namespace must match, or be unknown (then req.namespaceLabelsUnknown).
func (h webhook) namespaceSelected(req request) bool {
	if req.namespace == "" && req.resource.Resource != "namespaces" {
		return true
	}
	if h.namespaceSelector == nil || emptySelector(h.namespaceSelector) {
		return true
	}
	if req.namespaceLabelsUnknown && h.readsNamespaceLabels(req) {
		return true // decided by whoever knows the labels: see invocation.unsure
	}
	set := map[string]string{}
	for k, v := range req.namespaceLabels {
		set[k] = v
	}
	// Every namespace has its name as a label (k8s.io/kubernetes
	// pkg/apis/core/v1/defaults.go, SetDefaults_Namespace).
	if name := req.namespaceName(); name != "" {
		set[namespaceNameLabel] = name // a generateName Namespace has none yet
	}
	sel, err := metav1.LabelSelectorAsSelector(h.namespaceSelector)
	return err == nil && sel.Matches(labels.Set(set))
}

// readsNamespaceLabels reports whether h's namespaceSelector reads a label
// of the request's namespace beside its name.
func (h webhook) readsNamespaceLabels(req request) bool {
	return h.namespaceSelector != nil && !emptySelector(h.namespaceSelector) && !onlyNames(h.namespaceSelector) &&
		(req.namespace != "" || req.resource.Resource == "namespaces")
}

// objectSelected is object.Matcher: the object's labels or the old
// object's. A CONNECT's object is its options, which have no labels to
// match (meta.Accessor fails on them), and a DELETE has no object.
func (h webhook) objectSelected(req request) bool {
	if h.objectSelector == nil || emptySelector(h.objectSelector) {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(h.objectSelector)
	if err != nil || !req.hasMeta {
		return false
	}
	return (req.object != nil && sel.Matches(labels.Set(req.labels))) || (req.oldObject != nil && sel.Matches(labels.Set(req.oldLabels)))
}

// namespaceNameLabel is the label the apiserver gives every namespace, its
// name.
const namespaceNameLabel = "kubernetes.io/metadata.name"

// namespaceName is the namespace whose labels the namespaceSelector reads:
// a Namespace's own, or the object's.
func (req request) namespaceName() string {
	if req.resource.Resource == "namespaces" {
		return req.name
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

// exempt says why the apiserver sends no webhook a request for resource,
// or "": webhook and admission policy configurations
// (rules.IsExemptAdmissionConfigurationResource), and the reviews of
// authentication and authorization, which are not stored
// (ExcludeAdmissionWebhookVirtualResources, on by default from 1.37;
// k8s.io/kubernetes pkg/kubeapiserver/admission/exclusion).
func exempt(kind schema.GroupVersionKind, resource schema.GroupVersionResource) string {
	if kind.Group == "admissionregistration.k8s.io" && slices.Contains([]string{"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}, kind.Kind) {
		return "the apiserver sends no webhook a " + kind.Kind + " (rules.IsExemptAdmissionConfigurationResource)"
	}
	switch resource.GroupResource().String() {
	case "selfsubjectreviews.authentication.k8s.io", "tokenreviews.authentication.k8s.io",
		"localsubjectaccessreviews.authorization.k8s.io", "selfsubjectaccessreviews.authorization.k8s.io",
		"selfsubjectrulesreviews.authorization.k8s.io", "subjectaccessreviews.authorization.k8s.io":
		return "the apiserver sends no webhook a " + kind.Kind + ", which is not stored (ExcludeAdmissionWebhookVirtualResources)"
	}
	return ""
}
