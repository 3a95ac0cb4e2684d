package review

// Reviewing what is not a whole object's CREATE, UPDATE or DELETE: a
// subresource's write (-subresource: a Deployment's scale, a Pod's
// ephemeral containers or status, an Eviction), with the kinds and
// resources the apiserver sends; and an AdmissionReview a user captured,
// sent as it is. Documents -skip-kind leaves out are said here too.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// skippedKind says why -skip-kind leaves out a document of this head, or
// "": its kind, or its apiVersion and kind, is one given.
func (r *reviewer) skippedKind(head objectHead) string {
	for _, list := range r.o.skipKinds {
		for _, k := range strings.Split(list, ",") {
			k = strings.TrimSpace(k)
			if k == head.Kind || k == head.APIVersion+"/"+head.Kind {
				return "-skip-kind " + k
			}
		}
	}
	return ""
}

// scaleResources are the built-in resources whose Scale review derives
// from the object, as their ScaleREST does (k8s.io/kubernetes
// pkg/registry/apps/{deployment,replicaset,statefulset}/storage and
// core/replicationcontroller/storage: scaleFrom…).
var scaleResources = map[schema.GroupResource]bool{
	{Group: "apps", Resource: "deployments"}: true, {Group: "apps", Resource: "replicasets"}: true,
	{Group: "apps", Resource: "statefulsets"}: true, {Resource: "replicationcontrollers"}: true,
}

// scaleOf is the object a Scale is the scale of, as the apiserver holds
// it before the write.
type scaleOf struct {
	resource schema.GroupVersionResource
	object   []byte // JSON
}

// derive is the Scale of the object, as the apiserver makes it
// (scaleFromDeployment and its kin): the object's name, namespace, uid,
// resourceVersion and creationTimestamp; spec.replicas (1 when it names
// none, the default), or replicas when not nil; status.replicas; and the
// selector, as a string. It is canonical JSON, in autoscaling/v1.
func (s *scaleOf) derive(replicas *int32) ([]byte, error) {
	var parent struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     struct {
			Replicas *int32          `json:"replicas"`
			Selector json.RawMessage `json:"selector"`
		} `json:"spec"`
		Status struct {
			Replicas int32 `json:"replicas"`
		} `json:"status"`
	}
	if err := json.Unmarshal(s.object, &parent); err != nil {
		return nil, fmt.Errorf("its %s does not decode: %w", s.resource.Resource, err)
	}
	selector := ""
	if len(parent.Spec.Selector) > 0 && string(parent.Spec.Selector) != "null" {
		if s.resource.Resource == "replicationcontrollers" {
			var set map[string]string
			if err := json.Unmarshal(parent.Spec.Selector, &set); err != nil {
				return nil, fmt.Errorf("spec.selector: %w", err)
			}
			selector = labels.SelectorFromSet(set).String()
		} else {
			var ls metav1.LabelSelector
			if err := json.Unmarshal(parent.Spec.Selector, &ls); err != nil {
				return nil, fmt.Errorf("spec.selector: %w", err)
			}
			sel, err := metav1.LabelSelectorAsSelector(&ls)
			if err != nil {
				return nil, fmt.Errorf("spec.selector: %w", err)
			}
			selector = sel.String()
		}
	}
	scale := scaleObject{
		TypeMeta: metav1.TypeMeta{APIVersion: "autoscaling/v1", Kind: "Scale"},
		ObjectMeta: metav1.ObjectMeta{Name: parent.Metadata.Name, Namespace: parent.Metadata.Namespace, UID: parent.Metadata.UID,
			ResourceVersion: parent.Metadata.ResourceVersion, CreationTimestamp: parent.Metadata.CreationTimestamp},
	}
	scale.Spec.Replicas = 1
	scale.Status.Replicas, scale.Status.Selector = parent.Status.Replicas, selector
	switch {
	case replicas != nil:
		scale.Spec.Replicas = *replicas
	case parent.Spec.Replicas != nil:
		scale.Spec.Replicas = *parent.Spec.Replicas
	}
	out, err := json.Marshal(&scale)
	if err != nil {
		return nil, err
	}
	return canonicalJSON(out)
}

// scaleObject is an autoscaling/v1 Scale, written as k8s.io/api's
// autoscalingv1.Scale writes one; that package, linked, would bring core/v1
// and its many types into the webhook.
type scaleObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Replicas int32 `json:"replicas,omitempty"`
	} `json:"spec,omitempty"`
	Status struct {
		Replicas int32  `json:"replicas"`
		Selector string `json:"selector,omitempty"`
	} `json:"status,omitempty"`
}

// forValidation is the Scale the validating webhooks are sent once the
// mutating webhooks made mutated of the Scale: the apiserver sets the
// object's spec.replicas (and resourceVersion) from it, stores the
// object, and sends the Scale made of that (scaleUpdatedObjectInfo, then
// toScaleUpdateValidation), so that of the mutating webhooks' changes only
// spec.replicas reaches them.
func (s *scaleOf) forValidation(mutated []byte) []byte {
	var m struct {
		Spec struct {
			Replicas int32 `json:"replicas"`
		} `json:"spec"`
	}
	if json.Unmarshal(mutated, &m) != nil {
		return mutated
	}
	out, err := s.derive(&m.Spec.Replicas)
	if err != nil {
		return mutated
	}
	return out
}

// replicasOf is an object's spec.replicas, when it names one.
func replicasOf(object []byte) *int32 {
	var o struct {
		Spec struct {
			Replicas *int32 `json:"replicas"`
		} `json:"spec"`
	}
	_ = json.Unmarshal(object, &o)
	return o.Spec.Replicas
}

// reviewSubresource reviews obj as the object of a write of -subresource
// (an UPDATE or a CREATE): either obj is the object whose subresource it
// is (info), reviewed as the subresource's kind (the object itself for
// status or ephemeralcontainers, its Scale for scale), or it is of the
// subresource's kind (a Scale, an Eviction; lookupErr from the catalog),
// whose object is the one of -old of its namespace and name (UPDATE), or
// the one resource that has such a subresource (CREATE).
func (r *reviewer) reviewSubresource(ctx context.Context, obj *parsedObject, res result, info *kindInfo, lookupErr error) result {
	sub := r.o.subresource
	fail := func(format string, a ...any) result {
		res.Verdict, res.Error = "error", fmt.Sprintf(format, a...)
		return res
	}
	gvk := obj.gvk()
	var parent *kindInfo // whose subresource it is
	var object, oldObject []byte
	var scale *scaleOf
	namespace := func(k *kindInfo) string {
		if k.namespaced() {
			return cmpOr(obj.head.Metadata.Namespace, r.o.namespace)
		}
		return ""
	}
	switch {
	case info != nil:
		parent = info
		subKind, ok := info.subresources[sub]
		if !ok {
			var served []string
			for s := range info.subresources {
				served = append(served, s)
			}
			slices.Sort(served)
			return fail("the apiserver serves no %s of %s (it serves %s)", sub, info.resource.Resource, cmpOr(strings.Join(served, ", "), "none"))
		}
		if info.scope == "" {
			return fail("the scope of %s is not known (%s): give its CustomResourceDefinition in -f", info.kind.Kind, info.source)
		}
		if verbs := info.subresourceVerbs[sub]; verbs != nil && !slices.Contains(verbs, verbOf(r.op)) {
			return fail("the apiserver does not %s %s/%s (it serves the verbs %s)", verbOf(r.op), info.resource.Resource, sub, strings.Join(verbs, ", "))
		}
		var err error
		if object, err = withNamespace(obj.json, obj.head.Metadata.Namespace, namespace(info)); err != nil {
			return fail("%v", err)
		}
		var old *parsedObject
		if r.op == admissionv1.Update {
			if old = r.olds[r.objectKey(obj)]; old == nil {
				return fail("no old object for %s %s in -old: an UPDATE of %s carries the object as it was", obj.head.Kind, qualified(namespace(info), obj.head.Metadata.Name), sub)
			}
			if oldObject, err = withNamespace(old.json, old.head.Metadata.Namespace, namespace(info)); err != nil {
				return fail("-old: %v", err)
			}
		}
		switch {
		case subKind == info.kind:
		case subKind.Kind == "Scale" && scaleResources[info.resource.GroupResource()] && oldObject != nil:
			// kubectl scale patches the Scale made of the object as
			// stored: spec.replicas of -f's object, the rest of -old's.
			scale = &scaleOf{resource: info.resource, object: oldObject}
			if object, err = scale.derive(ptrOr(replicasOf(object), 1)); err != nil {
				return fail("%v", err)
			}
			if oldObject, err = scale.derive(nil); err != nil {
				return fail("-old: %v", err)
			}
		case subKind.Kind == "Scale":
			return fail("review makes the Scale of deployments, replicasets, statefulsets and replicationcontrollers, as the apiserver does, in an UPDATE: give the Scale of %s in -f and %s itself in -old", info.resource.Resource, obj.head.Kind)
		default:
			return fail("%s/%s is sent a %s %s, not the %s: give that in -f", info.resource.Resource, sub, subKind.GroupVersion(), subKind.Kind, obj.head.Kind)
		}
		res.Namespace = namespace(info)
	default:
		var candidates []subresourceOf
		for _, s := range r.catalog.subresourceKinds[gvk] {
			if s.sub == sub {
				candidates = append(candidates, s)
			}
		}
		if len(candidates) == 0 {
			return fail("%v", lookupErr)
		}
		var err error
		switch {
		case r.op == admissionv1.Update:
			// The object it is of: the one of -old of its namespace and
			// name whose resource has this subresource.
			var found []*parsedObject
			for _, o := range r.olds {
				if o.head.Metadata.Name != obj.head.Metadata.Name {
					continue
				}
				k, err := r.catalog.lookup(o.gvk())
				if err != nil || !slices.ContainsFunc(candidates, func(c subresourceOf) bool { return c.resource == k.resource }) || namespace(k) != cmpOr(o.head.Metadata.Namespace, namespace(k)) {
					continue
				}
				found, parent = append(found, o), k
			}
			if len(found) != 1 {
				var names []string
				for _, c := range candidates {
					names = append(names, c.String())
				}
				return fail("a %s is the object of %s: give the one object it is of, of its namespace and name, in -old (found %d)", gvk.Kind, strings.Join(names, ", "), len(found))
			}
			if oldObject, err = withNamespace(found[0].json, found[0].head.Metadata.Namespace, namespace(parent)); err != nil {
				return fail("-old: %v", err)
			}
			if gvk.Kind == "Scale" && scaleResources[parent.resource.GroupResource()] {
				scale = &scaleOf{resource: parent.resource, object: oldObject}
				if oldObject, err = scale.derive(nil); err != nil {
					return fail("-old: %v", err)
				}
			} else {
				oldObject = nil // not of the subresource's kind: review does not know it
				res.Notes = append(res.Notes, fmt.Sprintf("oldObject: not sent; review makes the old %s of deployments, replicasets, statefulsets and replicationcontrollers only", gvk.Kind))
			}
		case len(candidates) == 1:
			if parent = r.catalog.byResource[candidates[0].resource]; parent == nil {
				return fail("%v", lookupErr)
			}
		default:
			return fail("a %s is the object of several subresources (%v): -operation UPDATE, with the object it is of in -old, says which", gvk.Kind, candidates)
		}
		if object, err = withNamespace(obj.json, obj.head.Metadata.Namespace, namespace(parent)); err != nil {
			return fail("%v", err)
		}
		res.Namespace = namespace(parent)
	}
	if verbs := parent.subresourceVerbs[sub]; verbs != nil && !slices.Contains(verbs, verbOf(r.op)) {
		return fail("the apiserver does not %s %s/%s (it serves the verbs %s)", verbOf(r.op), parent.resource.Resource, sub, strings.Join(verbs, ", "))
	}
	if r.op == admissionv1.Create && !keepsSystemFields(parent.resource, sub) {
		object = withoutSystemFields(object)
	}
	req := request{
		operation: admissionregistrationv1.OperationType(r.op), kind: parent.subresources[sub], resource: parent.resource, subresource: sub,
		name: obj.head.Metadata.Name, namespace: res.Namespace, hasMeta: true, object: object, oldObject: oldObject,
		userInfo: authenticationUser(r.o), options: operationOptions(r.op, nil), conversion: parent.conversion, scale: scale,
	}
	if req.kind.Empty() {
		req.kind = gvk
	}
	req.labels, req.oldLabels = labelsOf2(object), labelsOf2(oldObject)
	r.setNamespaceLabels(&req)
	res.Subresource = sub
	runs, unknownRes := r.variants(ctx, res, req, parent.scope)
	if unknownRes != nil {
		return *unknownRes
	}
	return combine(runs, nil, res.Namespace)
}

// ptrOr is p, or a pointer to or when p is nil.
func ptrOr[T any](p *T, or T) *T {
	if p == nil {
		return &or
	}
	return p
}

// labelsOf2 are the labels of a JSON object, or nil.
func labelsOf2(object []byte) map[string]string {
	if object == nil {
		return nil
	}
	l, _ := labelsOf(object)
	return l
}

// reviewCaptured reviews an AdmissionReview a user captured (as
// testdata/ holds them, or as a webhook logs one) as it was sent: its
// operation, kind, resource, subresource, names, user, dryRun, options,
// object and oldObject, with a uid of its own, to /mutate and /validate or,
// with -config, to the webhooks that match its request (its requestKind
// and requestResource, as the apiserver matched it).
func (r *reviewer) reviewCaptured(ctx context.Context, obj *parsedObject, res result) result {
	var review struct {
		Request *admissionv1.AdmissionRequest `json:"request"`
	}
	if err := json.Unmarshal(obj.json, &review); err != nil || review.Request == nil {
		res.Verdict, res.Error = "error", "an AdmissionReview without a request: review sends what a captured request holds, and an answer alone holds none"
		if err != nil {
			res.Error = fmt.Sprintf("an AdmissionReview whose request does not decode: %v", err)
		}
		return res
	}
	areq := review.Request
	kind, resource := schema.GroupVersionKind(areq.Kind), schema.GroupVersionResource(areq.Resource)
	reqKind, reqResource, sub := kind, resource, areq.SubResource
	if areq.RequestKind != nil {
		reqKind = schema.GroupVersionKind(*areq.RequestKind)
	}
	if areq.RequestResource != nil {
		reqResource = schema.GroupVersionResource(*areq.RequestResource)
	}
	if areq.RequestSubResource != "" {
		sub = areq.RequestSubResource
	}
	op := admissionregistrationv1.OperationType(areq.Operation)
	if !slices.Contains([]admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete, admissionregistrationv1.Connect}, op) {
		res.Verdict, res.Error = "error", fmt.Sprintf("an AdmissionReview of operation %q: the apiserver sends CREATE, UPDATE, DELETE or CONNECT", areq.Operation)
		return res
	}
	canonical := func(raw []byte) []byte {
		if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
			return nil
		}
		if c, err := canonicalJSON(raw); err == nil {
			return asVersion(c, reqKind, kind) // as requested, as review holds every object
		}
		return raw
	}
	req := request{
		operation: op, kind: reqKind, resource: reqResource, subresource: sub, name: areq.Name, namespace: areq.Namespace,
		object: canonical(areq.Object.Raw), oldObject: canonical(areq.OldObject.Raw), hasMeta: op != admissionregistrationv1.Connect,
		userInfo: areq.UserInfo, dryRun: areq.DryRun != nil && *areq.DryRun, options: areq.Options.Raw,
	}
	if reqResource == namespacesResource {
		req.namespace = "" // call sends a Namespace in its own
	}
	if k, err := r.catalog.lookup(reqKind); err == nil {
		req.conversion = k.conversion
	}
	if kind != reqKind || resource != reqResource || areq.SubResource != sub {
		req.sentAs = &invocation{kind: kind, resource: resource, subresource: areq.SubResource}
	}
	req.labels, req.oldLabels = labelsOf2(req.object), labelsOf2(req.oldObject)
	r.setNamespaceLabels(&req)
	res.APIVersion, res.Kind, res.Namespace, res.Name = reqKind.GroupVersion().String(), reqKind.Kind, areq.Namespace, areq.Name
	runs, unknownRes := r.variants(ctx, res, req, "")
	if unknownRes != nil {
		return *unknownRes
	}
	out := combine(runs, nil, areq.Namespace)
	what := string(op)
	if sub != "" {
		what += " of " + reqResource.Resource + "/" + sub
	}
	out.Notes = append([]string{fmt.Sprintf("a captured %s: sent as it was, a %s by %s, with a uid of its own", obj.head.APIVersion+" AdmissionReview", what, cmpOr(areq.UserInfo.Username, "no user"))}, out.Notes...)
	return out
}
