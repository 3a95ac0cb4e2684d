package review

// The labels of the namespaces a namespaceSelector reads, where the input
// does not hold them: from the cluster's own list (-namespaces), and, in
// a replay, from what the log shows the apiserver did.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// readNamespaces reads -namespaces: the Namespaces of the cluster, as
// `kubectl get namespaces -o json` (or -o yaml) writes them. Reviewing
// manifests, their labels are those of every namespace the input does not
// hold; replaying, those of a namespace the log has not shown.
func (r *reviewer) readNamespaces(ctx context.Context) error {
	if len(r.o.namespaceFiles) == 0 {
		return nil
	}
	in, err := expandInputs(ctx, r.o.namespaceFiles, nil, expansion{})
	if err != nil {
		return inputError(ctx, "-namespaces: ", err)
	}
	defer in.close()
	if _, err := in.scan(func(unit) []parsedObject { return nil }); err != nil {
		return usageError("-namespaces: %v", err)
	}
	r.clusterNamespaces = map[string]map[string]string{}
	var problems []string
	err = in.each(func(u unit) {
		objs, bad := parseUnit(u)
		for _, b := range bad {
			problems = append(problems, fmt.Sprintf("%s: %v", b.source, b.err))
		}
		for _, obj := range objs {
			if obj.head.Kind != "Namespace" || obj.head.APIVersion != "v1" {
				problems = append(problems, fmt.Sprintf("%s: a %s %s, not a Namespace: give what kubectl get namespaces -o json writes", obj.source, obj.head.APIVersion, obj.head.Kind))
				continue
			}
			r.clusterNamespaces[obj.head.Metadata.Name] = obj.head.Metadata.Labels
		}
	}, func() bool { return false })
	if err == nil && len(problems) > 0 {
		err = fmt.Errorf("%s", strings.Join(problems, "\n"))
	}
	if err != nil {
		return usageError("-namespaces: %v", err)
	}
	if !r.replaying {
		for name, labels := range r.clusterNamespaces {
			r.namespaces[name] = labels
		}
	}
	return nil
}

// The annotations by which the apiserver's audit log shows that it called
// a webhook (k8s.io/apiserver v0.37 pkg/admission/plugin/webhook):
// mutating/dispatcher.go adds mutation.webhook.admission.k8s.io/
// round_<r>_index_<i> for every mutating webhook it calls, whether its patch
// changed the object or not ({"configuration":…,"webhook":…,"mutated":…});
// both dispatchers add failed-open.…/round_0_index_<i> (the webhook's
// name) for a call that failed under failurePolicy Ignore; a webhook's own
// auditAnnotations are <webhook name>/<key>.
const (
	failedOpenMutatingPrefix   = "failed-open." + mutationAnnotationPrefix
	failedOpenValidatingPrefix = "failed-open.validating.webhook.admission.k8s.io/"
)

// callEvidence is what an event shows of the webhooks the apiserver
// called for its request: those it called, and how the log shows it; and
// whether every mutating webhook that matched was called, so that one of
// -config's whose call is not shown was not called.
type callEvidence struct {
	called      map[string]string // webhook name → how the log shows the call
	mutatingRan bool
}

// evidenceOf reads an event's evidence of the calls, given what it says
// happened then. Every mutating webhook that matched ran when the request
// was admitted (2xx), or denied by a validating webhook of -config, which
// the apiserver calls after the mutating ones.
func (p *replayer) evidenceOf(e *auditEvent, t *thenResult) callEvidence {
	ev := callEvidence{called: map[string]string{}}
	for key, value := range e.Annotations {
		switch {
		case strings.HasPrefix(key, mutationAnnotationPrefix):
			var m struct {
				Webhook string `json:"webhook"`
			}
			if json.Unmarshal([]byte(value), &m) == nil && m.Webhook != "" {
				ev.called[m.Webhook] = "its mutation annotation " + key
			}
		case strings.HasPrefix(key, failedOpenMutatingPrefix), strings.HasPrefix(key, failedOpenValidatingPrefix):
			ev.called[value] = "the annotation " + key + " of its call that failed open"
		default:
			if name, _, ok := strings.Cut(key, "/"); ok && p.names[name] {
				ev.called[name] = "its audit annotation " + key
			}
		}
	}
	switch t.Admission {
	case "denied":
		ev.called[t.DeniedBy] = "its denial, in the response"
	case "failed":
		ev.called[t.DeniedBy] = "the failed call, in the response"
	}
	ev.mutatingRan = t.Admission == "admitted" ||
		(t.Admission == "denied" || t.Admission == "failed") && slices.ContainsFunc(p.hooks, func(h webhook) bool { return h.name == t.DeniedBy && !h.mutating })
	return ev
}

// decided is what replay knows of a request's unknowns, and what told it.
type decided struct {
	known map[string]bool   // by unknown.what
	by    map[string]string // by unknown.what: what decided it
}

// decide settles what it can of unsure, the unknowns of a request sent
// calls: first by the log's evidence of the calls (a webhook called holds
// every unknown it depends on; a mutating webhook not called, when every
// one that matched ran, holds not all, so the one left unknown is false),
// then a namespace's labels by -namespaces.
func (p *replayer) decide(unsure []unknown, calls []invocation, ev callEvidence) decided {
	d := decided{known: map[string]bool{}, by: map[string]string{}}
	for _, c := range calls {
		if how, ok := ev.called[c.hook.name]; ok {
			for _, u := range c.unsure {
				d.known[u.what], d.by[u.what] = true, fmt.Sprintf("the log's evidence: the apiserver called %s (%s)", c.hook.name, how)
			}
		}
	}
	for changed := ev.mutatingRan; changed; {
		changed = false
		for _, c := range calls {
			if _, ok := ev.called[c.hook.name]; ok || !c.hook.mutating || len(c.unsure) == 0 {
				continue
			}
			var open []unknown
			holds := true
			for _, u := range c.unsure {
				v, ok := d.known[u.what]
				switch {
				case !ok:
					open = append(open, u)
				case !v:
					holds = false
				}
			}
			if holds && len(open) == 1 {
				d.known[open[0].what] = false
				d.by[open[0].what] = fmt.Sprintf("the log's evidence: the apiserver did not call %s, whose rules match (no mutation annotation)", c.hook.name)
				changed = true
			}
		}
	}
	for _, u := range unsure {
		if _, ok := d.known[u.what]; ok || u.selector == nil {
			continue
		}
		if listed, ok := p.clusterNamespaces[u.namespace]; ok {
			set := map[string]string{}
			for k, v := range listed {
				set[k] = v
			}
			set[namespaceNameLabel] = u.namespace
			d.known[u.what] = u.selector.Matches(labels.Set(set))
			d.by[u.what] = "-namespaces: the Namespace " + u.namespace + "'s labels as listed"
			p.fileLabelUses[u.namespace]++
		}
	}
	return d
}

// consistent are the ways of combos that agree with what d knows; all of
// them when none does, the evidence contradicting itself.
func (d decided) consistent(combos []assumption) []assumption {
	var out []assumption
	for _, c := range combos {
		ok := true
		for what, v := range d.known {
			if held, in := c[what]; in && held != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return combos
	}
	return out
}

// source says what decided the unknowns of a request, for its line.
func (d decided) source(unsure []unknown) string {
	var says []string
	for _, u := range unsure {
		if by, ok := d.by[u.what]; ok {
			s := fmt.Sprintf("whether %s: %v, by %s", u.what, d.known[u.what], by)
			if !slices.Contains(says, s) {
				says = append(says, s)
			}
		}
	}
	return strings.Join(says, "; ")
}
