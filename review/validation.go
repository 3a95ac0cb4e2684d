package review

// What the apiserver refuses of an object's metadata before its
// validating webhooks: the name, generateName, namespace, labels,
// annotations, finalizers and owner references, checked as its object
// validation checks them (k8s.io/apimachinery pkg/api/validation,
// ValidateObjectMetaAccessor, with each kind's name rule). It runs after
// the mutating webhooks and before the validating ones: the create
// handler (k8s.io/apiserver pkg/endpoints/handlers/create.go) decodes the
// object, runs mutating admission, then hands it to the registry, whose
// rest.BeforeCreate generates a generateName's name and validates the
// object before createValidation calls the validating webhooks
// (pkg/registry/generic/registry/store.go, Create).

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/example/webhook/jsonfield"
)

// nameRules are the kinds whose names the apiserver checks otherwise than
// as DNS subdomains, the rule of every other kind, custom resources
// included (k8s.io/kubernetes v1.37 pkg/apis/*/validation; customresource
// validator.go). A nil rule checks nothing of the name.
var nameRules = map[schema.GroupKind]apivalidation.ValidateNameFunc{
	{Kind: "Namespace"}: apivalidation.ValidateNamespaceName, // a DNS label
	// A DNS label in 1.37 (RelaxedServiceNameValidation, GA, locked on;
	// a DNS-1035 label before 1.36).
	{Kind: "Service"}:                                                apivalidation.NameIsDNSLabel,
	{Group: "apps", Kind: "StatefulSet"}:                             apivalidation.NameIsDNSLabel, // ValidateStatefulSetName
	{Group: "rbac.authorization.k8s.io", Kind: "Role"}:               pathSegmentName,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:        pathSegmentName,
	{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"}:        pathSegmentName,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}: pathSegmentName,
	{Group: "coordination.k8s.io", Kind: "LeaseCandidate"}: func(name string, _ bool) []string {
		return validation.IsConfigMapKey(name)
	},
	// Rules of their own review does not repeat: any name is taken here.
	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}: nil,
	{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle"}:        nil,
	{Group: "networking.k8s.io", Kind: "IPAddress"}:                   nil,
	{Group: "internal.apiserver.k8s.io", Kind: "StorageVersion"}:      nil,
}

// pathSegmentName is RBAC's rule: any name that can be a path segment.
func pathSegmentName(name string, _ bool) []string { return content.IsPathSegmentName(name) }

// maxGeneratedNameLength is the longest a generateName prefix is kept
// before the apiserver appends its 5 random characters
// (k8s.io/apiserver pkg/storage/names, SimpleNameGenerator).
const maxGeneratedNameLength = 63 - 5

// metaCheck is what a request's metadata is checked as, and the last
// check, so that the runs of one object (its dry run, the ways review
// does not know) decode a patched object's metadata once.
type metaCheck struct {
	kind       schema.GroupKind
	namespaced bool
	operation  string
	original   []byte             // the object as sent before any patch
	meta       *metav1.ObjectMeta // its metadata, as read already
	last       []byte
	lastWhy    string
}

// problem says what the apiserver's validation refuses of object's
// metadata, or "". object is the request's, as the mutating webhooks
// left it.
func (c *metaCheck) problem(object []byte) string {
	if c == nil || object == nil {
		return ""
	}
	if c.last != nil && sameSlice(c.last, object) {
		return c.lastWhy
	}
	var why string
	if sameSlice(object, c.original) && c.meta != nil {
		why = c.metadataProblem(*c.meta)
	} else {
		why = c.decoded(object)
	}
	c.last, c.lastWhy = object, why
	return why
}

// sameSlice reports whether a and b are the very same bytes.
func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func (c *metaCheck) decoded(object []byte) string {
	raw, found, err := jsonfield.Top(object, "metadata")
	if err != nil {
		return ""
	}
	var meta metav1.ObjectMeta
	if found && string(raw) != "null" {
		if err := json.Unmarshal(raw, &meta); err != nil {
			return headError(fmt.Errorf("metadata: %w", err)).Error()
		}
	}
	return c.metadataProblem(meta)
}

// metadataProblem validates meta as the apiserver validates an object's
// of the kind. A CREATE's generateName is first turned into a name, as
// the apiserver does before validating. Its managedFields are not
// validated: the field manager replaces those it cannot read by the
// stored object's before validation, and after the mutating webhooks
// (k8s.io/apimachinery pkg/util/managedfields/internal/fieldmanager.go,
// decodeLiveOrNew; k8s.io/apiserver pkg/endpoints/handlers/create.go,
// NewManagedFieldsValidatingAdmissionController).
func (c *metaCheck) metadataProblem(meta metav1.ObjectMeta) string {
	meta.ManagedFields = nil
	if c.operation == "CREATE" && meta.Name == "" && meta.GenerateName != "" {
		meta.Name = meta.GenerateName[:min(len(meta.GenerateName), maxGeneratedNameLength)] + "xxxxx"
	}
	nameFn, special := nameRules[c.kind]
	switch {
	case !special:
		nameFn = apivalidation.NameIsDNSSubdomain
	case nameFn == nil:
		nameFn = func(string, bool) []string { return nil }
	}
	errs := apivalidation.ValidateObjectMetaAccessor(&meta, c.namespaced, nameFn, field.NewPath("metadata"))
	if len(errs) == 0 {
		return ""
	}
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	// In one order, run after run: the validation of labels and
	// annotations walks a map.
	slices.Sort(msgs)
	msg := strings.Join(msgs, "; ")
	if strings.Contains(msg, "{{") {
		msg += " (a template's {{ … }} expression: render it first, with helm template or the tool it is written for)"
	}
	return "the apiserver refuses it (422 Invalid) before any validating webhook: " + msg
}
