package review

// Replaying the apiserver's audit log (-audit-log): each request the log
// recorded becomes the AdmissionReview the apiserver would have sent the
// webhook for it, and the SubjectAccessReview it would have sent
// /authorize, both through the webhook's routes in process; what the policy
// decides now is set beside what the log says happened then.
//
// Where the log's event comes from, in k8s.io/apiserver v0.37:
//   - pkg/audit/request.go: LogRequestMetadata (verb, user, objectRef from
//     the RequestInfo), LogImpersonatedUser (impersonatedUser: who the
//     request was authorized and admitted as), LogRequestObject
//     (requestObject, at level Request and above), LogRequestPatch (a
//     PATCH's requestObject is the patch), LogResponseObject
//     (responseObject, at RequestResponse).
//   - pkg/endpoints/handlers/create.go and update.go: requestObject is
//     encoded from the object as decoded, so with the scheme's defaults,
//     before any admission; patch.go: the patch, transcoded to JSON.
//   - pkg/endpoints/filters/authorization.go (WithAuthorization): the
//     annotations authorization.k8s.io/decision and /reason.
//   - pkg/admission/plugin/webhook/mutating/dispatcher.go: the annotation
//     mutation.webhook.admission.k8s.io/round_<r>_index_<i>, whose value
//     says which webhook was called and whether its patch changed the
//     object; a webhook's auditAnnotations, as "<webhook-name>/<key>".
//   - pkg/admission/plugin/webhook/errors/statuserror.go (ToStatusErr): a
//     denial's message, `admission webhook "<name>" denied the request: …`.
//   - plugin/pkg/audit/truncate: an event too large for the backend loses
//     its objects and gains audit.k8s.io/truncated.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/example/webhook/jsonpatch"
)

const (
	// maxNamespaceLabels bounds the Namespaces whose labels replay keeps
	// for namespaceSelectors; past it, a namespaceSelector of a namespace
	// not kept is reported as not evaluated.
	maxNamespaceLabels = 100000

	// systemMasters is the group the apiserver allows before any
	// authorizer runs (k8s.io/kubernetes pkg/kubeapiserver/authorizer/
	// reload.go, newForConfig: the privileged-group authorizer comes
	// first): /authorize is never asked about its members.
	systemMasters = "system:masters"

	// truncatedAnnotation marks an event whose objects the log backend
	// dropped as too large (k8s.io/apiserver plugin/pkg/audit/truncate).
	truncatedAnnotation = "audit.k8s.io/truncated"

	// mutationAnnotationPrefix begins the annotation the mutating webhook
	// dispatcher adds for each webhook it calls.
	mutationAnnotationPrefix = "mutation.webhook.admission.k8s.io/"

	// The authorization annotations of WithAuthorization.
	decisionAnnotation = "authorization.k8s.io/decision"
	reasonAnnotation   = "authorization.k8s.io/reason"
)

// The changes replay reports, in -o json's "changes" and on a result's
// line. Those marked refused make the exit status 1.
const (
	changeRefused          = "would-now-be-refused"               // admission: admitted then, denied now (refused)
	changeErrors           = "webhook-errors-now"                 // admission: admitted then, the webhook errors now (refused under failurePolicy Fail)
	changeAdmitted         = "would-now-be-admitted"              // admission: denied by a webhook of -config then, admitted now
	changeMessage          = "denied-with-another-message"        // admission: denied then and now, in other words
	changePatched          = "now-patched"                        // admission: a webhook of -config patches what it did not then
	changeUnpatched        = "no-longer-patched"                  // admission: … or no longer patches
	changeAuthzRefused     = "authorization-would-now-be-refused" // authorization: allowed then, denied now (refused)
	changeAuthzAllowed     = "authorization-would-now-be-allowed" // authorization: refused then, allowed now
	changeNotIdempotentNow = "not-idempotent"                     // /mutate patches its own result again (refused)
	changeNotKnown         = "verdict-not-known"                  // admission: the verdict now depends on what the log does not hold
)

// refusing reports whether a change is one that makes the exit status 1.
func refusing(change string) bool {
	return change == changeRefused || change == changeErrors || change == changeAuthzRefused || change == changeNotIdempotentNow
}

// replayResult is what replay says of one request of the log.
type replayResult struct {
	Source         string   `json:"source"`            // file:line of the event replayed
	AuditID        string   `json:"auditID,omitempty"` // the request's, as the log names it
	Stage          string   `json:"stage,omitempty"`   // the stage replayed, when not ResponseComplete: the last the log has
	Time           string   `json:"time,omitempty"`    // requestReceivedTimestamp
	Verb           string   `json:"verb,omitempty"`
	User           string   `json:"user,omitempty"` // whom the apiserver authorized and admitted
	Groups         []string `json:"groups,omitempty"`
	ImpersonatedBy string   `json:"impersonatedBy,omitempty"` // the authenticated user, when the request impersonated User
	APIGroup       string   `json:"apiGroup,omitempty"`
	APIVersion     string   `json:"apiVersion,omitempty"`
	Resource       string   `json:"resource,omitempty"`
	Subresource    string   `json:"subresource,omitempty"`
	Namespace      string   `json:"namespace,omitempty"`
	Name           string   `json:"name,omitempty"`
	Path           string   `json:"path,omitempty"` // a request for another path than a resource's, such as /version
	DryRun         bool     `json:"dryRun,omitempty"`

	Then      *thenResult `json:"then,omitempty"`
	Admission *result     `json:"admission,omitempty"` // the review, as of a manifest, the patch's values left out
	Object    string      `json:"object,omitempty"`    // where the object reviewed comes from, when not requestObject
	OldObject string      `json:"oldObject,omitempty"` // where oldObject comes from: the line that stored it, or why it is unknown
	// NamespaceLabels says what decided whether a namespaceSelector that
	// reads the namespace's labels matches: the log's evidence of the
	// call, -namespaces, or the labels as the log stored them.
	NamespaceLabels string               `json:"namespaceLabels,omitempty"`
	NotReviewed     string               `json:"notReviewed,omitempty"` // why a write was not reviewed
	Authorization   *authorizationResult `json:"authorization,omitempty"`
	// CreateAuthorization is the second SubjectAccessReview of an update
	// or a patch that created the object: a create of it.
	CreateAuthorization *authorizationResult `json:"createAuthorization,omitempty"`
	Changes             []string             `json:"changes,omitempty"`
	Error               string               `json:"error,omitempty"` // a line that holds no event
}

// thenResult is what the log says happened.
type thenResult struct {
	Code int32 `json:"code,omitempty"` // responseStatus.code
	// Admission is admitted (a 2xx), denied (by a webhook, named in
	// DeniedBy), failed (the call to the webhook DeniedBy failed), refused
	// (otherwise, Reason naming how, before or beside the webhooks:
	// authorization, validation, a conflict) or unknown (no response in
	// the log).
	Admission string `json:"admission,omitempty"`
	DeniedBy  string `json:"deniedBy,omitempty"`
	Reason    string `json:"reason,omitempty"`  // responseStatus.reason of a refusal, never its message
	Message   string `json:"message,omitempty"` // a denial's by a webhook of -config: the policy's own words
	// PatchedBy are the mutating webhooks whose patch changed the object
	// (mutation.webhook.admission.k8s.io annotations).
	PatchedBy []string `json:"patchedBy,omitempty"`
	// AuditAnnotations are those the webhooks of -config added
	// ("<webhook-name>/<key>"), such as a denial -validation-action audit
	// let through.
	AuditAnnotations    map[string]string `json:"auditAnnotations,omitempty"`
	Authorization       string            `json:"authorization,omitempty"` // allow or forbid
	AuthorizationReason string            `json:"authorizationReason,omitempty"`
}

// authorizationResult is the SubjectAccessReview of a request and what
// /authorize answered, or why it was not sent.
type authorizationResult struct {
	Verdict string                                   `json:"verdict,omitempty"` // allowed, denied, no-opinion or error
	Reason  string                                   `json:"reason,omitempty"`
	Error   string                                   `json:"error,omitempty"`
	NotSent string                                   `json:"notSent,omitempty"`
	Request *authorizationv1.SubjectAccessReviewSpec `json:"request,omitempty"`
}

// replayer replays the events of a log, one at a time, remembering what
// the next ones need: the stored versions, the Namespaces' labels.
type replayer struct {
	*reviewer
	versions *versionCache
	names    map[string]bool // the webhooks of -config, by name
	sum      replaySummary
	// fileLabelUses counts, by namespace, the requests whose verdict a
	// namespace's labels from -namespaces decided since the log last
	// showed a write of it: a write after them may have changed them.
	fileLabelUses map[string]int
	// namespaceStoredAt is where the log showed each namespace's labels
	// kept in namespaces.
	namespaceStoredAt map[string]string
}

func newReplayer(r *reviewer, cacheBytes int64) *replayer {
	r.replaying, r.unknownNamespaces = true, map[string]string{}
	p := &replayer{reviewer: r, versions: newVersionCache(cacheBytes), names: map[string]bool{}, fileLabelUses: map[string]int{}, namespaceStoredAt: map[string]string{}}
	for _, h := range r.hooks {
		p.names[h.name] = true
	}
	return p
}

// replay replays one event.
func (p *replayer) replay(ctx context.Context, at logLine, e *auditEvent) replayResult {
	res := replayResult{Source: at.String(), AuditID: e.AuditID, Time: e.RequestReceivedTimestamp, Verb: e.Verb}
	if e.Stage != stageResponseComplete {
		res.Stage = e.Stage
	}
	user := e.User
	if e.ImpersonatedUser != nil {
		user, res.ImpersonatedBy = *e.ImpersonatedUser, e.User.Username
	}
	res.User, res.Groups = user.Username, user.Groups
	uri, err := url.ParseRequestURI(e.RequestURI)
	if err != nil {
		uri = &url.URL{}
	}
	query := uri.Query()
	if _, ok := query["dryRun"]; ok {
		res.DryRun = true
	}
	if e.Verb == "delete" && len(e.RequestObject) > 0 {
		// With a body, as client-go sends one, the options are the body's
		// alone, the URI's not read (delete.go).
		options := deleteOptionsSent(e.RequestObject)
		res.DryRun = options != nil && len(options.DryRun) > 0
	}
	if ref := e.ObjectRef; ref != nil {
		res.APIGroup, res.APIVersion, res.Resource, res.Subresource, res.Namespace, res.Name = ref.APIGroup, ref.APIVersion, ref.Resource, ref.Subresource, ref.Namespace, ref.Name
	} else {
		res.Path = uri.Path
	}
	res.Then = p.then(e)
	res.Authorization, res.CreateAuthorization = p.authorizeEvent(ctx, e, user, uri)
	p.admitEvent(ctx, &res, e, user, uri)
	res.Changes = p.changes(&res)
	p.remember(at, e, res.DryRun)
	return res
}

// then reads what happened to the request from its event.
func (p *replayer) then(e *auditEvent) *thenResult {
	t := &thenResult{Authorization: e.Annotations[decisionAnnotation], AuthorizationReason: e.Annotations[reasonAnnotation]}
	for key, value := range e.Annotations {
		if strings.HasPrefix(key, mutationAnnotationPrefix) {
			var m struct {
				Webhook string `json:"webhook"`
				Mutated bool   `json:"mutated"`
			}
			if json.Unmarshal([]byte(value), &m) == nil && m.Mutated && !slices.Contains(t.PatchedBy, m.Webhook) {
				t.PatchedBy = append(t.PatchedBy, m.Webhook)
			}
		}
		if name, _, ok := strings.Cut(key, "/"); ok && p.names[name] {
			if t.AuditAnnotations == nil {
				t.AuditAnnotations = map[string]string{}
			}
			t.AuditAnnotations[key] = value
		}
	}
	slices.Sort(t.PatchedBy)
	s := e.ResponseStatus
	if s == nil {
		t.Admission = "unknown"
		return t
	}
	t.Code = s.Code
	switch {
	case s.Code >= 200 && s.Code < 300:
		t.Admission = "admitted"
	case t.Authorization == "forbid":
		t.Admission, t.Reason = "refused", "by authorization, before admission"
	default:
		if name, message, ok := webhookDenial(s.Message); ok {
			t.Admission, t.DeniedBy = "denied", name
			if p.names[name] {
				t.Message = message
			}
		} else if name, ok := failedCall(s.Message); ok {
			t.Admission, t.DeniedBy = "failed", name
		} else {
			t.Admission, t.Reason = "refused", cmpOr(string(s.Reason), "code "+strconv.Itoa(int(s.Code)))
		}
	}
	return t
}

var (
	// deniedRequest is a webhook's denial as ToStatusErr words it: the
	// name Go-quoted (%q), then the policy's message.
	deniedRequest = regexp.MustCompile(`(?s)^admission webhook ("(?:[^"\\]|\\.)*") denied the request(?:: (.*)| without explanation)$`)
	// failedCalling is a call that failed, as the dispatchers word it.
	failedCalling = regexp.MustCompile(`failed calling webhook ("(?:[^"\\]|\\.)*")`)
)

// webhookDenial reads a denial's message: the webhook's name and its own
// words.
func webhookDenial(message string) (name, policyMessage string, ok bool) {
	m := deniedRequest.FindStringSubmatch(message)
	if m == nil {
		return "", "", false
	}
	name, err := strconv.Unquote(m[1])
	return name, m[2], err == nil
}

func failedCall(message string) (name string, ok bool) {
	m := failedCalling.FindStringSubmatch(message)
	if m == nil {
		return "", false
	}
	name, err := strconv.Unquote(m[1])
	return name, err == nil
}

// authorizeEvent sends the request's SubjectAccessReview to /authorize, as
// the apiserver's webhook authorizer builds it
// (k8s.io/apiserver/plugin/pkg/authorizer/webhook/webhook.go, Authorize
// and resourceAttributesFrom) from the request's attributes
// (pkg/endpoints/filters/authorization.go, GetAuthorizerAttributes). An
// update or a patch that created the object (201) was also authorized as
// a create of it, before validating admission (handlers/update.go and
// patch.go, withAuthorization): that review is the second it returns.
func (p *replayer) authorizeEvent(ctx context.Context, e *auditEvent, user authenticationv1.UserInfo, uri *url.URL) (*authorizationResult, *authorizationResult) {
	switch {
	case e.ResponseStatus != nil && e.ResponseStatus.Code == 401:
		return &authorizationResult{NotSent: "not authenticated (401): no authorizer was asked"}, nil
	case user.Username == "" && len(user.Groups) == 0:
		return &authorizationResult{NotSent: "the event names no user"}, nil
	case slices.Contains(user.Groups, systemMasters):
		return &authorizationResult{NotSent: "system:masters is allowed before any authorizer"}, nil
	case refusedBeforeAuthorization(e) != "":
		return &authorizationResult{NotSent: refusedBeforeAuthorization(e) + ": no authorizer was asked of the request"}, nil
	}
	spec := authorizationv1.SubjectAccessReviewSpec{User: user.Username, UID: user.UID, Groups: user.Groups}
	if len(user.Extra) > 0 {
		spec.Extra = map[string]authorizationv1.ExtraValue{}
		for k, v := range user.Extra {
			spec.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	ref := e.ObjectRef
	if ref == nil {
		spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: uri.Path, Verb: e.Verb}
		return p.sendSubjectAccessReview(ctx, spec), nil
	}
	ra := authorizationv1.ResourceAttributes{
		Namespace: ref.Namespace, Verb: e.Verb, Group: ref.APIGroup, Version: ref.APIVersion,
		Resource: ref.Resource, Subresource: ref.Subresource, Name: ref.Name,
	}
	// A create's URL names no object (POST to the collection), and the
	// RequestInfo none: objectRef's name is the object's (LogRequestObject).
	if e.Verb == "create" && ref.Subresource == "" {
		ra.Name = ""
	}
	if e.Verb == "list" || e.Verb == "watch" || e.Verb == "deletecollection" {
		ra.FieldSelector, ra.LabelSelector = selectorAttributes(uri.Query())
	}
	spec.ResourceAttributes = &ra
	first := p.sendSubjectAccessReview(ctx, spec)
	if (e.Verb == "update" || e.Verb == "patch") && e.ResponseStatus != nil && e.ResponseStatus.Code == 201 {
		create := ra
		create.Verb = "create"
		spec.ResourceAttributes = &create
		return first, p.sendSubjectAccessReview(ctx, spec)
	}
	return first, nil
}

// sendSubjectAccessReview sends spec to /authorize and says what it
// answered.
func (p *replayer) sendSubjectAccessReview(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) *authorizationResult {
	out := &authorizationResult{Request: &spec}
	body, _ := json.Marshal(&authorizationv1.SubjectAccessReview{TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"}, Spec: spec})
	out.Verdict, out.Reason, out.Error = p.askAuthorize(ctx, body)
	return out
}

// selectorAttributes are a list's selectors as the webhook authorizer
// sends them (fieldSelectorToAuthorizationAPI,
// labelSelectorToAuthorizationAPI): =, == and in become In, != and notin
// NotIn, exists and !; others are left out, which only widens the check.
// A selector that does not parse is left out, as its requirements are.
func selectorAttributes(query url.Values) (*authorizationv1.FieldSelectorAttributes, *authorizationv1.LabelSelectorAttributes) {
	var fs *authorizationv1.FieldSelectorAttributes
	var ls *authorizationv1.LabelSelectorAttributes
	if raw := query.Get("fieldSelector"); raw != "" {
		if sel, err := fields.ParseSelector(raw); err == nil {
			var reqs []metav1.FieldSelectorRequirement
			for _, r := range sel.Requirements() {
				switch r.Operator {
				case selection.Equals, selection.DoubleEquals, selection.In:
					reqs = append(reqs, metav1.FieldSelectorRequirement{Key: r.Field, Operator: metav1.FieldSelectorOpIn, Values: []string{r.Value}})
				case selection.NotEquals, selection.NotIn:
					reqs = append(reqs, metav1.FieldSelectorRequirement{Key: r.Field, Operator: metav1.FieldSelectorOpNotIn, Values: []string{r.Value}})
				}
			}
			if len(reqs) > 0 {
				fs = &authorizationv1.FieldSelectorAttributes{Requirements: reqs}
			}
		}
	}
	if raw := query.Get("labelSelector"); raw != "" {
		if sel, err := labels.Parse(raw); err == nil {
			requirements, _ := sel.Requirements()
			var reqs []metav1.LabelSelectorRequirement
			for _, r := range requirements {
				req := metav1.LabelSelectorRequirement{Key: r.Key()}
				if values := r.ValuesUnsorted(); len(values) > 0 {
					req.Values = values
				}
				switch r.Operator() {
				case selection.Equals, selection.DoubleEquals, selection.In:
					req.Operator = metav1.LabelSelectorOpIn
				case selection.NotEquals, selection.NotIn:
					req.Operator = metav1.LabelSelectorOpNotIn
				case selection.Exists:
					req.Operator = metav1.LabelSelectorOpExists
				case selection.DoesNotExist:
					req.Operator = metav1.LabelSelectorOpDoesNotExist
				default:
					continue
				}
				reqs = append(reqs, req)
			}
			if len(reqs) > 0 {
				ls = &authorizationv1.LabelSelectorAttributes{Requirements: reqs}
			}
		}
	}
	return fs, ls
}

// admitEvent reviews a request that admission would have seen: a write, or
// a CONNECT. It fills res.Admission, or res.NotReviewed with why.
func (p *replayer) admitEvent(ctx context.Context, res *replayResult, e *auditEvent, user authenticationv1.UserInfo, uri *url.URL) {
	ref := e.ObjectRef
	if ref == nil {
		return
	}
	code := int32(0)
	if e.ResponseStatus != nil {
		code = e.ResponseStatus.Code
	}
	req := request{
		resource:    schema.GroupVersionResource{Group: ref.APIGroup, Version: ref.APIVersion, Resource: ref.Resource},
		subresource: ref.Subresource, name: ref.Name, namespace: ref.Namespace, userInfo: user, dryRun: res.DryRun, hasMeta: true,
	}
	if req.resource == namespacesResource {
		req.namespace = "" // a Namespace is cluster-scoped; call sends its own name
	}
	var op admissionv1.Operation
	connect, isConnect := connectSubresources[ref.Resource+"/"+ref.Subresource]
	switch {
	case isConnect && ref.APIGroup == "":
		op = admissionv1.Connect
	case e.Verb == "create":
		op = admissionv1.Create
	case e.Verb == "update" || e.Verb == "patch":
		// An update or an apply that creates the object answers 201
		// (update.go, patch.go: admission sees a CREATE).
		op = admissionv1.Update
		if code == 201 {
			op = admissionv1.Create
		}
	case e.Verb == "delete":
		op = admissionv1.Delete
	case e.Verb == "deletecollection":
		res.NotReviewed = "a deletecollection is admitted object by object, and the log does not say which objects it deleted"
		p.sum.notReviewed++
		return
	default:
		return // a read: admission never sees it
	}
	if ref.APIGroup == "admissionregistration.k8s.io" && exemptResources[ref.Resource] {
		res.NotReviewed = "webhook and admission policy configurations are never sent to webhooks (rules.IsExemptAdmissionConfigurationResource)"
		p.sum.notSent++
		return
	}
	req.operation = admissionregistrationv1.OperationType(op)
	if p.hooks != nil && !slices.ContainsFunc(p.hooks, func(h webhook) bool { return h.rulesMayMatch(req, p.catalog) }) {
		p.sum.notSent++ // no webhook of -config is sent such requests, whatever the object
		return
	}
	req.options = operationOptions(op, uri.Query())
	if op == admissionv1.Delete && len(e.RequestObject) > 0 {
		if options := deleteOptionsSent(e.RequestObject); options != nil {
			req.options, _ = json.Marshal(options)
		}
	}

	var object, oldObject *unstructured.Unstructured
	why := ""
	switch op {
	case admissionv1.Connect:
		object, req.hasMeta, req.options = connectObject(connect.kind, connect.subpath, uri, ref), false, nil
	case admissionv1.Create, admissionv1.Update:
		object, oldObject, why = p.objectOf(res, &req, e, op, code)
	case admissionv1.Delete:
		if deleteOptionsUnlogged(e) {
			why = "the audit policy records this request at level " + e.Level + ", without the DeleteOptions a client sends in its body: whether it was a dry run is unknown"
			break
		}
		oldObject, why = p.oldObjectOf(res, req)
		if why == "" {
			why = contradicted(oldObject, e, code)
		}
		if why != "" {
			why = "the object as stored before the delete is unknown: " + why
		}
	}
	if why != "" {
		res.NotReviewed = why
		p.sum.notReviewed++
		return
	}
	source := object
	if source == nil {
		source = oldObject
	}
	req.kind = source.GroupVersionKind()
	if req.kind.Kind == "" || req.kind.Version == "" {
		res.NotReviewed = "the object in the log has no kind or apiVersion"
		p.sum.notReviewed++
		return
	}
	if op == admissionv1.Create && ref.Subresource == "" {
		req.name = source.GetName() // "" for generateName: named after mutating admission (rest.BeforeCreate)
		if stored, _ := objectFrom(e.ResponseObject); req.name == "" && code >= 200 && code < 300 && stored != nil && stored.GetKind() != "Status" {
			req.generatedName = stored.GetName()
		}
	}
	if object != nil {
		req.object, _ = json.Marshal(object.Object)
		req.labels = object.GetLabels()
	}
	if oldObject != nil {
		req.oldObject, _ = json.Marshal(oldObject.Object)
		req.oldLabels = oldObject.GetLabels()
	}
	p.setNamespaceLabels(&req)
	if !req.namespaceLabelsUnknown && p.hooks != nil && slices.ContainsFunc(p.hooks, func(h webhook) bool { return h.readsNamespaceLabels(req) }) {
		if at, ok := p.namespaceStoredAt[req.namespaceName()]; ok {
			res.NamespaceLabels = "as the log showed them at " + at
		}
	}
	calls, unsure := p.match(req)
	// What the log shows of the calls, and -namespaces, decide what they
	// can of what replay does not know.
	var d decided
	if len(unsure) > 0 {
		d = p.decide(unsure, calls, p.evidenceOf(e, res.Then))
	}
	if said := d.source(unsure); said != "" {
		res.NamespaceLabels = said
		for _, u := range unsure {
			if _, ok := d.known[u.what]; ok && u.selector != nil {
				p.sum.labelsBy[strings.SplitN(d.by[u.what], ":", 2)[0]]++
				break
			}
		}
	}
	combos := assumptions(unsure)
	if combos == nil {
		res.NotReviewed = fmt.Sprintf("it depends on %d things replay does not know", len(unsure))
		p.sum.notReviewed++
		return
	}
	combos = d.consistent(combos)
	var runs []variantRun
	for _, combo := range combos {
		run := variantRun{assumed: combo, unsure: unsure}
		var chosen []invocation
		for _, c := range calls {
			if combo.holds(c.unsure) {
				chosen = append(chosen, c)
			}
		}
		p.admit(ctx, &run.res, req, chosen, nil) // one run: nothing to reuse
		runs = append(runs, run)
	}
	out := combine(runs, nil, req.namespace)
	out.Source, out.APIVersion, out.Kind, out.Namespace, out.Name = "", source.GetAPIVersion(), source.GetKind(), req.namespace, req.name
	if out.Mutate != nil {
		out.Mutate.Patch = withoutValues(out.Mutate.Patch)
	}
	for i := range out.Requests {
		if out.Requests[i].Operation != string(admissionv1.Connect) {
			out.Requests[i].Object = nil // a subresource's object, which may hold a Secret's values
		}
	}
	res.Admission = &out
}

// exemptResources are the admissionregistration.k8s.io resources no
// webhook is sent (rules.IsExemptAdmissionConfigurationResource).
var exemptResources = map[string]bool{
	"validatingwebhookconfigurations": true, "mutatingwebhookconfigurations": true,
	"validatingadmissionpolicies": true, "validatingadmissionpolicybindings": true,
	"mutatingadmissionpolicies": true, "mutatingadmissionpolicybindings": true,
}

// objectOf is the object of a CREATE or an UPDATE, and an UPDATE's
// oldObject, or why it cannot be had. The object is requestObject; for a
// PATCH, whose requestObject is the patch, it is the patch applied to the
// earlier stored version when the patch's type can be told (a JSON Patch,
// or a merge patch that no strategic merge reads otherwise), else the
// object as stored (responseObject), which every mutation has already
// changed.
func (p *replayer) objectOf(res *replayResult, req *request, e *auditEvent, op admissionv1.Operation, code int32) (object, oldObject *unstructured.Unstructured, why string) {
	if len(e.RequestObject) == 0 && len(e.ResponseObject) == 0 {
		return nil, nil, cmpOr(objectsLeftOut(e), "the event holds no object")
	}
	if op == admissionv1.Update {
		var why string
		if oldObject, why = p.oldObjectOf(res, *req); why != "" {
			res.OldObject = "unknown: " + why
		} else if why = contradicted(oldObject, e, code); why != "" {
			res.OldObject, oldObject = "unknown: "+why, nil
		}
	}
	if e.Verb != "patch" {
		if len(e.RequestObject) == 0 {
			return nil, nil, cmpOr(objectsLeftOut(e), "the event holds no requestObject")
		}
		obj, err := objectFrom(e.RequestObject)
		if err != nil {
			return nil, nil, "requestObject " + err.Error()
		}
		// Logged as sent; then, before admission, given the request's
		// namespace, or none when cluster-scoped (handlers/create.go and
		// update.go, EnsureObjectNamespaceMatchesRequestNamespace).
		obj.SetNamespace(req.namespace)
		if op == admissionv1.Create && !keepsSystemFields(req.resource, req.subresource) {
			wipeSystemFields(obj) // after logging it, as handlers/create.go does
		}
		if op == admissionv1.Update && oldObject != nil && obj.GetResourceVersion() != "" && obj.GetResourceVersion() != oldObject.GetResourceVersion() {
			// An update names the version it replaces: another is not it.
			res.OldObject = fmt.Sprintf("unknown: the update replaces resourceVersion %s, the log's last stored version is %s", obj.GetResourceVersion(), oldObject.GetResourceVersion())
			oldObject = nil
		}
		return obj, oldObject, ""
	}
	if len(e.RequestObject) > 0 && oldObject != nil {
		patched, how := applyPatch(oldObject, e.RequestObject)
		switch {
		case patched != nil:
			res.Object = "the patch (" + how + ") applied to the version stored at " + res.OldObject
			return patched, oldObject, ""
		case how == "a JSON Patch" && code >= 200 && code < 300:
			res.OldObject = fmt.Sprintf("unknown: the JSON Patch, which the apiserver applied, does not apply to the log's last stored version (%s)", oldObject.GetResourceVersion())
			oldObject = nil
		}
	}
	if len(e.ResponseObject) > 0 && code >= 200 && code < 300 {
		obj, err := objectFrom(e.ResponseObject)
		if err != nil {
			return nil, nil, "responseObject " + err.Error()
		}
		req.admitted = true
		res.Object = "the object as stored (responseObject): after the patch and every mutation, which /mutate then sees already made"
		return obj, oldObject, ""
	}
	switch {
	case len(e.RequestObject) == 0:
		return nil, nil, cmpOr(objectsLeftOut(e), "the event has no requestObject")
	case oldObject == nil:
		return nil, nil, "the patch's pre-image, the version stored before it, is not in the log" + strings.TrimPrefix(res.OldObject, "unknown")
	}
	return nil, nil, "the patch is a strategic merge or apply patch, which replay does not apply, and the log has no stored result (responseObject)"
}

// contradicted says why a write that succeeded shows old, the version of
// its object the log last showed stored, not to be the one it was made
// to, if it does: a resourceVersion or uid it names, which the apiserver
// checks against the stored object (k8s.io/apiserver v0.37.2,
// registry/generic/registry/store.go: a patched object's resourceVersion
// must be the stored one's, else 409; a delete's Preconditions); a JSON
// Patch that was applied and does not apply to it (objectOf says so, as
// it applies the patch); or a result no newer
// than it, as when requests overlap and the log has them out of order.
func contradicted(old *unstructured.Unstructured, e *auditEvent, code int32) string {
	if code < 200 || code >= 300 {
		return ""
	}
	rv, uid := old.GetResourceVersion(), string(old.GetUID())
	var named struct {
		Metadata      struct{ ResourceVersion, UID string }
		Preconditions struct{ ResourceVersion, UID *string }
	}
	patch := bytes.TrimSpace(e.RequestObject)
	switch {
	case e.Verb == "patch" && len(patch) > 0 && patch[0] == '[':
		// A JSON Patch that does not apply to old: objectOf, which applies it.
	case (e.Verb == "patch" || e.Verb == "delete") && json.Unmarshal(patch, &named) == nil:
		for _, n := range []struct {
			what, named, kept string
		}{
			{"resourceVersion", named.Metadata.ResourceVersion, rv}, {"uid", named.Metadata.UID, uid},
			{"resourceVersion", valueOr(named.Preconditions.ResourceVersion), rv}, {"uid", valueOr(named.Preconditions.UID), uid},
		} {
			if n.named != "" && n.kept != "" && n.named != n.kept {
				return fmt.Sprintf("the %s names %s %s, and the log's last stored version has %s", e.Verb, n.what, n.named, n.kept)
			}
		}
	}
	if stored, _ := objectFrom(e.ResponseObject); stored != nil && stored.GetKind() != "Status" && stored.GetResourceVersion() != "" && rv != "" && e.Verb != "delete" {
		if order, err := resourceversion.CompareResourceVersion(stored.GetResourceVersion(), rv); err == nil && order <= 0 {
			return fmt.Sprintf("its result, resourceVersion %s, is no newer than the log's last stored version, %s: requests overlapped", stored.GetResourceVersion(), rv)
		}
	}
	return ""
}

// valueOr is *s, or "" for nil.
func valueOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// deleteOptionsUnlogged reports whether the log left out a delete's
// DeleteOptions, dryRun among them: client-go sends them in the body,
// which the apiserver then reads alone (delete.go), and which level
// Metadata does not record.
func deleteOptionsUnlogged(e *auditEvent) bool {
	return len(e.RequestObject) == 0 && (e.Level == "Metadata" || e.Level == "None")
}

// refusedBeforeAuthorization says why e was refused before authorization
// decided it, if it was: a 403 or 429 without the decision that
// authorization records. Impersonation (403) and API priority and fairness
// (429) are the filters before it (k8s.io/apiserver v0.37.2,
// pkg/server/config.go, DefaultBuildHandlerChain).
func refusedBeforeAuthorization(e *auditEvent) string {
	if e.ResponseStatus == nil || e.Annotations[decisionAnnotation] != "" {
		return ""
	}
	switch e.ResponseStatus.Code {
	case 403:
		return "refused (403) by impersonation, before authorization"
	case 429:
		return "refused (429) by API priority and fairness, before authorization"
	}
	return ""
}

// objectsLeftOut says why an event holds no objects, if it can.
func objectsLeftOut(e *auditEvent) string {
	switch {
	case refusedBeforeAuthorization(e) != "":
		return refusedBeforeAuthorization(e) + " and admission"
	case e.Annotations[decisionAnnotation] == "forbid":
		return "refused by authorization before its object was read: the log holds none"
	case e.Annotations[truncatedAnnotation] == "true":
		return "the log backend dropped the event's objects as too large (" + truncatedAnnotation + ")"
	case e.Level == "Metadata" || e.Level == "None":
		return "the audit policy records this request at level " + e.Level + ", without its object"
	case e.Stage == stageRequestReceived:
		return "the log has only the RequestReceived stage, written before the object is read"
	}
	return ""
}

// oldObjectOf is the version of req's object the log last showed stored,
// and res.OldObject says where; or why it is unknown.
func (p *replayer) oldObjectOf(res *replayResult, req request) (*unstructured.Unstructured, string) {
	key := versionKey(req.resource.Group, req.resource.Resource, req.namespace, req.name)
	scale := false
	switch p.subresourceIs(req.resource, req.subresource) {
	case subresourceOther:
		return nil, fmt.Sprintf("the log stores %s, not their %s", req.resource.Resource, req.subresource)
	case subresourceScale:
		scale = true
	}
	v, dropped, writtenAt := p.versions.get(key)
	switch {
	case writtenAt != nil:
		p.sum.oldUnknown++
		return nil, fmt.Sprintf("%s wrote it, and the log does not hold what it stored (a write at level Request or Metadata)", writtenAt)
	case v != nil && scale:
		// The Scale the apiserver makes of the object stored
		// (scaleUpdatedObjectInfo).
		derived, err := (&scaleOf{resource: req.resource, object: v.raw}).derive(nil)
		if err != nil {
			return nil, fmt.Sprintf("its Scale cannot be made of the version stored at %s: %v", v.at, err)
		}
		obj, err := objectFrom(derived)
		if err != nil {
			return nil, err.Error()
		}
		res.OldObject = v.at.String()
		p.sum.oldFound++
		return obj, ""
	case v != nil:
		obj, err := objectFrom(v.raw)
		if err != nil {
			return nil, err.Error()
		}
		if gv := req.resource.GroupVersion().String(); obj.GetAPIVersion() != gv {
			// The apiserver converts the stored object to the request's
			// version (admission/conversion.go, NewVersionedAttributes);
			// replay cannot.
			p.sum.oldUnknown++
			return nil, fmt.Sprintf("the log's last stored version, at %s, is of %s, and the request of %s, to which the apiserver converts it", v.at, obj.GetAPIVersion(), gv)
		}
		res.OldObject = v.at.String()
		p.sum.oldFound++
		return obj, ""
	case dropped:
		p.sum.oldDropped++
		return nil, "its earlier version was dropped from the cache (raise -audit-cache-bytes)"
	}
	p.sum.oldUnknown++
	return nil, "no earlier version of it is stored in the log before this line (a write or get at level RequestResponse)"
}

// The subresources replay knows the object of, as subresourceIs says.
const (
	subresourceNone  = iota // the object itself
	subresourceSame         // of the object's own kind: status, ephemeralcontainers, resize, …
	subresourceScale        // a Scale the apiserver makes of a built-in object
	subresourceOther        // another kind, whose old version the log does not store
)

// subresourceIs says what a write of resource's sub writes: the object
// itself (no subresource), the object whole (a subresource of its own
// kind, as discovery says; status for any resource), a Scale replay can
// make of the object (scaleResources), or something else.
func (p *replayer) subresourceIs(resource schema.GroupVersionResource, sub string) int {
	switch {
	case sub == "":
		return subresourceNone
	case sub == "status":
		return subresourceSame
	}
	k := p.catalog.byResource[resource]
	switch {
	case k == nil:
		return subresourceOther
	case k.subresources[sub] == k.kind:
		return subresourceSame
	case sub == "scale" && scaleResources[resource.GroupResource()]:
		return subresourceScale
	}
	return subresourceOther
}

// versionKey names an object in the cache. A Namespace's objectRef has its
// own name as namespace once it exists, and none when it is created.
func versionKey(group, resource, namespace, name string) string {
	if resource == "namespaces" && group == "" {
		namespace = ""
	}
	return group + "/" + resource + "/" + namespace + "/" + name
}

// objectFrom reads an object of the log, its numbers as written.
func objectFrom(raw json.RawMessage) (*unstructured.Unstructured, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, fmt.Errorf("is not a JSON object")
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// applyPatch applies a PATCH's requestObject to the version before it, when
// what the apiserver did can be told from the patch alone: a JSON Patch (an
// array; applied with jsonpatch, as the apiserver applies one), or an
// object that is a merge patch whichever of merge and strategic merge it
// was sent as, with no list and no $ directive, and not an apply
// configuration (which has apiVersion and kind, and field ownership).
// Of a JSON Patch that does not apply, it returns nil and "a JSON Patch".
func applyPatch(old *unstructured.Unstructured, patch json.RawMessage) (*unstructured.Unstructured, string) {
	before, err := json.Marshal(old.Object)
	if err != nil {
		return nil, ""
	}
	trimmed := bytes.TrimSpace(patch)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		after, err := jsonpatch.Apply(before, trimmed)
		if err != nil {
			return nil, "a JSON Patch" // that does not apply
		}
		obj, err := objectFrom(after)
		if err != nil {
			return nil, ""
		}
		return obj, "a JSON Patch"
	}
	var m map[string]any
	if json.Unmarshal(trimmed, &m) != nil || m == nil {
		return nil, ""
	}
	if _, ok := m["kind"]; ok {
		if _, ok := m["apiVersion"]; ok {
			return nil, ""
		}
	}
	fresh := func() map[string]any {
		var doc map[string]any
		_ = json.Unmarshal(before, &doc)
		return doc
	}
	if plainMergePatch(m) {
		doc := fresh()
		if doc == nil {
			return nil, ""
		}
		return &unstructured.Unstructured{Object: mergePatch(doc, m)}, "a merge patch"
	}
	// Lists, or directives: a strategic merge patch, where replay knows
	// the kind's fields. The log does not say a patch's type: one without
	// directives might be a merge patch, which replaces what strategic
	// merge merges, and is applied only when the two agree.
	merged, err := strategicMerge(fresh(), m, old.GroupVersionKind())
	if err != nil {
		return nil, ""
	}
	if hasStrategicDirective(m) {
		return &unstructured.Unstructured{Object: merged}, "a strategic merge patch"
	}
	if !reflect.DeepEqual(merged, mergePatch(fresh(), m)) {
		return nil, ""
	}
	return &unstructured.Unstructured{Object: merged}, "a patch that a merge patch and a strategic merge patch apply alike"
}

// plainMergePatch reports whether a patch holds no list and no key
// beginning with $ (a strategic merge directive), at any depth.
func plainMergePatch(v any) bool {
	switch v := v.(type) {
	case []any:
		return false
	case map[string]any:
		for k, e := range v {
			if strings.HasPrefix(k, "$") || !plainMergePatch(e) {
				return false
			}
		}
	}
	return true
}

// mergePatch applies patch to doc as RFC 7386 says: null removes, an
// object merges, anything else replaces. It writes into doc, which is the
// caller's own copy.
func mergePatch(doc, patch map[string]any) map[string]any {
	for k, v := range patch {
		switch v := v.(type) {
		case nil:
			delete(doc, k)
		case map[string]any:
			sub, _ := doc[k].(map[string]any)
			if sub == nil {
				sub = map[string]any{}
			}
			doc[k] = mergePatch(sub, v)
		default:
			doc[k] = v
		}
	}
	return doc
}

// evictionDryRun reports whether e is an eviction whose deleteOptions ask
// for a dry run, as kubectl drain --dry-run=server sends it: the Pod is
// not written. (The eviction's own admission is no dry run: its URI has no
// dryRun.)
func evictionDryRun(e *auditEvent) bool {
	var eviction struct {
		DeleteOptions *metav1.DeleteOptions `json:"deleteOptions"`
	}
	return e.ObjectRef.Subresource == "eviction" && json.Unmarshal(e.RequestObject, &eviction) == nil &&
		eviction.DeleteOptions != nil && len(eviction.DeleteOptions.DryRun) > 0
}

// deleteOptionsSent is what the apiserver sends a webhook as a delete's
// options, from the DeleteOptions its body held, as the event holds them:
// in the version the client sent, or meta.k8s.io/__internal, whose fields
// are v1's. The apiserver sends them as meta.k8s.io/v1 (k8s.io/apiserver
// v0.37.2, pkg/endpoints/handlers/delete.go). Nil if they do not decode,
// as the apiserver then refused the request with 400.
func deleteOptionsSent(requestObject []byte) *metav1.DeleteOptions {
	var options metav1.DeleteOptions
	if json.Unmarshal(requestObject, &options) != nil {
		return nil
	}
	options.TypeMeta = metav1.TypeMeta{Kind: "DeleteOptions", APIVersion: "meta.k8s.io/v1"}
	return &options
}

// connectObject is a CONNECT's object: the options the apiserver decodes
// from the request's query and, for a proxy, the rest of its path
// (handlers/get.go, getRequestOptions).
func connectObject(kind string, subpath bool, uri *url.URL, ref *objectReference) *unstructured.Unstructured {
	q := uri.Query()
	obj := map[string]any{"kind": kind, "apiVersion": "v1"}
	flag := func(name string) {
		if v := q[name]; len(v) > 0 && v[0] != "0" && !strings.EqualFold(v[0], "false") {
			obj[name] = true
		}
	}
	switch kind {
	case "PodExecOptions", "PodAttachOptions":
		for _, name := range []string{"stdin", "stdout", "stderr", "tty"} {
			flag(name)
		}
		if c := q.Get("container"); c != "" {
			obj["container"] = c
		}
		if kind == "PodExecOptions" {
			command := []any{}
			for _, c := range q["command"] {
				command = append(command, c)
			}
			obj["command"] = command
		}
	case "PodPortForwardOptions":
		var ports []any
		for _, p := range q["ports"] {
			if n, err := strconv.ParseInt(p, 10, 32); err == nil {
				ports = append(ports, n)
			}
		}
		if len(ports) > 0 {
			obj["ports"] = ports
		}
	}
	if p := q.Get("path"); p != "" && strings.HasSuffix(kind, "ProxyOptions") {
		obj["path"] = p
	}
	if subpath {
		marker := "/" + ref.Name + "/" + ref.Subresource
		if i := strings.Index(uri.Path, marker); i >= 0 {
			path := uri.Path[i+len(marker):]
			if path != "" {
				obj["path"] = path
			}
		}
	}
	return &unstructured.Unstructured{Object: obj}
}

// withoutValues is a JSON Patch with each operation's value left out: an
// audit log holds Secrets, and a patch may copy from them.
func withoutValues(patch json.RawMessage) json.RawMessage {
	var ops []map[string]json.RawMessage
	if json.Unmarshal(patch, &ops) != nil {
		return json.RawMessage("[]")
	}
	for _, op := range ops {
		delete(op, "value")
	}
	out, _ := json.Marshal(ops)
	if len(ops) == 0 {
		out = []byte("[]")
	}
	return out
}

// changes compares what the policy decides now with what the log says
// happened then, and counts the result.
func (p *replayer) changes(res *replayResult) []string {
	var changes []string
	t := res.Then
	if a := res.Admission; a != nil {
		now := a.Verdict
		// Without -config replay knows no webhook's name, and cannot tell
		// this webhook's denial from another's.
		ours := p.names[t.DeniedBy]
		switch {
		case t.Admission == "admitted" && now == "denied":
			changes = append(changes, changeRefused)
		case t.Admission == "admitted" && now == "error":
			changes = append(changes, changeErrors)
		case t.Admission == "denied" && ours && now != "denied" && now != "error":
			changes = append(changes, changeAdmitted)
		case t.Admission == "denied" && ours && now == "denied" && t.Message != "" && a.Validate != nil && a.Validate.Message != t.Message:
			changes = append(changes, changeMessage)
		}
		if a.Mutate != nil && !a.Mutate.Idempotent {
			changes = append(changes, changeNotIdempotentNow)
		}
		// The object of a PATCH taken as stored has every mutation in it
		// already: what /mutate does to it now says nothing of then.
		if t.Admission == "admitted" && a.Mutate != nil && !strings.HasPrefix(res.Object, "the object as stored") {
			for name := range p.names {
				then, now := slices.Contains(t.PatchedBy, name), slices.Contains(a.Mutate.PatchedBy, name)
				switch {
				case now && !then:
					changes = append(changes, changePatched)
				case then && !now && slices.Contains(a.Webhooks, name):
					changes = append(changes, changeUnpatched)
				}
			}
		}
		switch {
		case now == "unknown":
			// Its verdict depends on what the log does not hold: a
			// namespace's labels, or matchConditions.
			p.sum.cannotCompare++
			p.sum.verdictUnknown++
			changes = append(changes, changeNotKnown)
		case len(a.Webhooks) == 0 && p.hooks != nil:
			// Not sent to the webhook: nothing to compare.
		case strings.HasPrefix(res.OldObject, "unknown"):
			// Reviewed without the oldObject the apiserver sent: its
			// changes are said, but it is no proof of agreement or not.
			p.sum.cannotCompare++
		case t.Admission == "admitted" || (t.Admission == "denied" && ours):
			if slices.ContainsFunc(changes, func(c string) bool {
				return c == changeRefused || c == changeErrors || c == changeAdmitted || c == changeMessage
			}) {
				p.sum.disagree++
			} else {
				p.sum.agree++
			}
		default:
			p.sum.notCompared++
		}
	}
	if az := res.Authorization; az != nil && az.NotSent == "" {
		switch {
		case az.Verdict == "denied" && t.Authorization == "allow":
			changes = append(changes, changeAuthzRefused)
		case az.Verdict == "allowed" && t.Authorization == "forbid":
			changes = append(changes, changeAuthzAllowed)
		}
	}
	if az := res.CreateAuthorization; az != nil && az.Verdict == "denied" {
		changes = append(changes, changeAuthzRefused) // it created the object then
	}
	slices.Sort(changes)
	return slices.Compact(changes)
}

// remember keeps what later events need from this one: the version stored
// (responseObject of a write or a get that succeeded, not in a dry run),
// and the labels of a Namespace. A deleted object is forgotten, unless the
// response is the object still stored, terminating.
func (p *replayer) remember(at logLine, e *auditEvent, dryRun bool) {
	ref := e.ObjectRef
	if ref == nil || dryRun {
		return
	}
	if e.Stage == "Panic" || e.ResponseStatus != nil && e.ResponseStatus.Code >= 500 {
		p.rememberFailedWrite(at, e, ref)
		return
	}
	if e.ResponseStatus == nil || e.ResponseStatus.Code < 200 || e.ResponseStatus.Code >= 300 {
		return
	}
	resource := schema.GroupVersionResource{Group: ref.APIGroup, Version: ref.APIVersion, Resource: ref.Resource}
	switch p.subresourceIs(resource, ref.Subresource) {
	case subresourceOther:
		// A binding or an eviction writes the object too (its nodeName,
		// its deletion), and the log holds no version of it after; an
		// exec or a token does not.
		_, isConnect := connectSubresources[ref.Resource+"/"+ref.Subresource]
		if e.Verb != "get" && !isConnect && !(ref.APIGroup == "" && ref.Resource+"/"+ref.Subresource == "serviceaccounts/token") && !evictionDryRun(e) {
			p.versions.writtenBlind(versionKey(ref.APIGroup, ref.Resource, ref.Namespace, ref.Name), at)
		}
		return
	case subresourceScale:
		if e.Verb == "update" || e.Verb == "patch" {
			p.rememberScale(at, e, ref)
		}
		return
	}
	switch e.Verb {
	case "create", "update", "patch", "get", "delete":
	case "deletecollection":
		p.deletedCollection(at, ref)
		return
	default:
		return
	}
	stored, _ := objectFrom(e.ResponseObject)
	if stored != nil && (stored.GetKind() == "Status" || stored.GetName() == "") {
		stored = nil
	}
	metadata := stored // what the response says of the object's metadata
	if stored != nil && stored.GroupVersionKind().Group == metav1.GroupName {
		// Not the object: what its client asked for in its place
		// (Accept's as=PartialObjectMetadata, as the garbage collector's
		// metadata client asks), whose metadata is the object's.
		stored = nil
	}
	namespace := ref.Namespace
	name := ref.Name
	if stored != nil {
		namespace, name = stored.GetNamespace(), stored.GetName()
	}
	key := versionKey(ref.APIGroup, ref.Resource, namespace, name)
	switch {
	case stored != nil:
		p.versions.put(key, e.ResponseObject, stored.GetResourceVersion(), at)
	case e.Verb == "delete" && deleteOptionsUnlogged(e):
		p.versions.writtenBlind(key, at) // deleted, or a dry run: the log does not say
	case e.Verb == "delete":
		p.versions.remove(key)
	case e.Verb != "get":
		// A write the log holds no result of: the version kept is no
		// longer the one stored, and a later write must not take it as
		// its oldObject, nor apply its patch to it.
		p.versions.writtenBlind(key, at)
	}
	if ref.Resource == "namespaces" && ref.APIGroup == "" && ref.Subresource == "" {
		p.rememberNamespace(at, e, metadata)
	}
}

// rememberFailedWrite forgets what the log showed stored of the object a
// write answered with a 5xx (or that panicked) was made to: it may have
// been stored all the same, as a request that times out (504) has its
// handler carry on (k8s.io/apiserver v0.37.2,
// endpoints/handlers/finisher/finisher.go, FinishRequest), and the log
// holds no result of it. A Namespace's labels are no longer known.
func (p *replayer) rememberFailedWrite(at logLine, e *auditEvent, ref *objectReference) {
	switch e.Verb {
	case "get", "list", "watch":
		return
	}
	if _, isConnect := connectSubresources[ref.Resource+"/"+ref.Subresource]; isConnect || (ref.APIGroup == "" && ref.Resource+"/"+ref.Subresource == "serviceaccounts/token") {
		return
	}
	if e.Verb == "deletecollection" {
		p.deletedCollection(at, ref)
		return
	}
	p.versions.writtenBlind(versionKey(ref.APIGroup, ref.Resource, ref.Namespace, ref.Name), at)
	if ref.Resource == "namespaces" && ref.APIGroup == "" && ref.Subresource == "" && ref.Name != "" {
		p.namespaceUnknown(at, ref.Name, fmt.Sprintf("a %s of it answered %s, which may have been stored all the same", e.Verb, failedWith(e)))
	}
}

// deletedCollection forgets the versions kept of the objects a
// deletecollection of ref's resource, in its namespace or in all, may
// have deleted: the apiserver deletes them one by one, and one a finalizer
// holds stays, with a deletionTimestamp (k8s.io/apiserver v0.37.2,
// registry/generic/registry/store.go, DeleteCollection). The log holds
// none of them; the namespace controller deletes a namespace's objects so.
func (p *replayer) deletedCollection(at logLine, ref *objectReference) {
	prefix := ref.APIGroup + "/" + ref.Resource + "/"
	if ref.Namespace != "" {
		prefix = versionKey(ref.APIGroup, ref.Resource, ref.Namespace, "")
	}
	p.versions.writtenBlindUnder(prefix, at)
}

// failedWith names how a failed write ended: its code, or a panic.
func failedWith(e *auditEvent) string {
	if e.ResponseStatus == nil {
		return "with a panic"
	}
	return strconv.Itoa(int(e.ResponseStatus.Code))
}

// rememberScale keeps what a write of a scale subresource stored: the
// object's spec.replicas and resourceVersion, as the Scale in the response
// says (scaleUpdatedObjectInfo sets both from it); the rest of the object
// is unchanged but for its generation, which the log does not say.
func (p *replayer) rememberScale(at logLine, e *auditEvent, ref *objectReference) {
	key := versionKey(ref.APIGroup, ref.Resource, ref.Namespace, ref.Name)
	v, _, _ := p.versions.get(key)
	scale, _ := objectFrom(e.ResponseObject)
	if scale == nil || scale.GetKind() != "Scale" {
		if v != nil {
			p.versions.writtenBlind(key, at)
		}
		return
	}
	if v == nil {
		return
	}
	obj, err := objectFrom(v.raw)
	if err != nil {
		return
	}
	replicas, found, _ := unstructured.NestedFieldNoCopy(scale.Object, "spec", "replicas")
	if !found {
		replicas = int64(0) // autoscaling/v1 omits a replicas of 0
	}
	if unstructured.SetNestedField(obj.Object, replicas, "spec", "replicas") != nil {
		return
	}
	obj.SetResourceVersion(scale.GetResourceVersion())
	raw, err := json.Marshal(obj.Object)
	if err != nil {
		return
	}
	p.versions.put(key, raw, obj.GetResourceVersion(), at)
}

// rememberNamespace keeps the labels of a Namespace a write or a get of it
// shows, which a later request's namespaceSelector reads; or, when the log
// does not hold what the write made of them, that they are not known from
// then on: a stale label set would judge a namespaceSelector wrong, in
// either direction.
func (p *replayer) rememberNamespace(at logLine, e *auditEvent, stored *unstructured.Unstructured) {
	name := e.ObjectRef.Name
	if stored != nil {
		name = stored.GetName()
	}
	sent, _ := objectFrom(e.RequestObject)
	if name == "" && sent != nil {
		name = sent.GetName() // a create's, whose URL names none
	}
	if name == "" {
		return
	}
	if n := p.fileLabelUses[name]; n > 0 && e.Verb != "get" {
		delete(p.fileLabelUses, name)
		if len(p.sum.labelsBeforeWrite) < maxListedRefusals {
			p.sum.labelsBeforeWrite = append(p.sum.labelsBeforeWrite, fmt.Sprintf("%s: a %s of the Namespace %s, after %s whose verdict its labels from -namespaces decided: if it changed them, those verdicts may not be the apiserver's", at, e.Verb, name, count(n, "request")))
		}
	}
	known := func(labels map[string]string) {
		delete(p.unknownNamespaces, name)
		if _, ok := p.namespaces[name]; ok || len(p.namespaces) < maxNamespaceLabels {
			p.namespaces[name] = labels
			p.namespaceStoredAt[name] = at.String()
		}
	}
	unknown := func(why string) { p.namespaceUnknown(at, name, why) }
	mutated := len(p.then(e).PatchedBy) > 0
	switch {
	case stored != nil:
		known(stored.GetLabels())
	case e.Verb == "get":
	case e.Verb == "delete":
		delete(p.namespaces, name)
		delete(p.namespaceStoredAt, name)
		delete(p.unknownNamespaces, name)
	case len(e.RequestObject) == 0:
		unknown(fmt.Sprintf("a %s of it at level %s, without its objects", e.Verb, e.Level))
	case mutated:
		unknown(fmt.Sprintf("a %s of it that a mutating webhook patched, without the object as stored", e.Verb))
	case e.Verb != "patch":
		if sent == nil {
			unknown(fmt.Sprintf("a %s of it whose requestObject is not an object", e.Verb))
		} else {
			known(sent.GetLabels())
		}
	default:
		labels, ok := p.namespaces[name]
		if !ok {
			if _, isUnknown := p.unknownNamespaces[name]; !isUnknown {
				return // not known before either; said when a request needs them
			}
			unknown("a patch of it, its labels not known before")
			return
		}
		after, ok := patchedLabels(labels, e.RequestObject)
		if !ok {
			unknown("a patch of it that replay cannot apply to its labels (a strategic merge with directives, an apply, or a JSON Patch of other paths)")
			return
		}
		known(after)
	}
}

// namespaceUnknown records that the labels of the Namespace name are not
// known from at on, and why.
func (p *replayer) namespaceUnknown(at logLine, name, why string) {
	delete(p.namespaces, name)
	delete(p.namespaceStoredAt, name)
	if len(p.unknownNamespaces) < maxNamespaceLabels {
		p.unknownNamespaces[name] = fmt.Sprintf("%s: %s, so the Namespace %s's labels since are not known, nor shown by evidence of the call: give the cluster's namespaces with -namespaces, or audit the writes of namespaces at RequestResponse", at, why, name)
	}
}

// patchedLabels applies a PATCH's requestObject to a Namespace's labels,
// when what it does to them can be told from the patch alone: a JSON
// Patch whose operations are all below /metadata/labels, or none is; a
// merge patch (or a strategic merge one without directives, the same on a
// map) that names metadata.labels or does not. An apply configuration
// (apiVersion and kind) is not applied: field ownership decides what it
// removes.
func patchedLabels(labels map[string]string, patch json.RawMessage) (map[string]string, bool) {
	trimmed := bytes.TrimSpace(patch)
	doc, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var ops []struct {
			Path, From string
		}
		if json.Unmarshal(trimmed, &ops) != nil {
			return nil, false
		}
		touches, all := false, true
		for _, op := range ops {
			for _, path := range []string{op.Path, op.From} {
				switch {
				case path == "":
				case strings.HasPrefix(path, "/metadata/labels/") || path == "/metadata/labels":
					touches = true
				case path == "/metadata" || path == "":
					return nil, false
				default:
					all = false
				}
			}
		}
		if !touches {
			return labels, true
		}
		if !all {
			return nil, false
		}
		after, err := jsonpatch.Apply(doc, trimmed)
		if err != nil {
			return nil, false
		}
		return labelsOf(after)
	}
	var m map[string]any
	if json.Unmarshal(trimmed, &m) != nil || m == nil {
		return nil, false
	}
	if _, ok := m["kind"]; ok {
		if _, ok := m["apiVersion"]; ok {
			return nil, false
		}
	}
	meta, hasMeta := m["metadata"]
	if !hasMeta {
		return labels, true
	}
	metaMap, _ := meta.(map[string]any)
	if _, ok := metaMap["labels"]; !ok && meta != nil {
		return labels, true
	}
	if !plainMergePatch(m) {
		return nil, false
	}
	var d map[string]any
	_ = json.Unmarshal(doc, &d)
	after, _ := json.Marshal(mergePatch(d, map[string]any{"metadata": meta}))
	return labelsOf(after)
}

func labelsOf(doc []byte) (map[string]string, bool) {
	var o struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if json.Unmarshal(doc, &o) != nil {
		return nil, false
	}
	return o.Metadata.Labels, true
}
