package review

// What review does not know, and the verdict all the same. A verdict may
// depend on the scope of a kind no source names, on the labels of a
// namespace the input does not hold, or on matchConditions, CEL review
// does not evaluate. Review then reviews the object each way it could be;
// when every way gives one verdict, that is the apiserver's, and a note
// says what was not known; otherwise the verdict is unknown, and says what
// it is each way and how to tell review. It never guesses, such as a
// namespace `default` for a kind whose scope it does not know.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// maxUnknowns bounds what review tries each way: 2^4, 16 reviews of one
// object (twice that when its scope is not known either).
const maxUnknowns = 4

// assumption is one way what review does not know could be: each unknown
// true or false, by what it says.
type assumption map[string]bool

// holds reports whether a webhook that depends on unsure is sent the
// request under a.
func (a assumption) holds(unsure []unknown) bool {
	for _, u := range unsure {
		if !a[u.what] {
			return false
		}
	}
	return true
}

// assumptions are every way unsure could be; nil when they are too many
// to try.
func assumptions(unsure []unknown) []assumption {
	if len(unsure) > maxUnknowns {
		return nil
	}
	// Every unknown true first, so that a verdict that needs them all is
	// said with its conditions, and the others' as "otherwise".
	n := 1 << len(unsure)
	out := make([]assumption, n)
	for i := range out {
		a := assumption{}
		for j, u := range unsure {
			a[u.what] = (n-1-i)&(1<<j) != 0
		}
		out[i] = a
	}
	return out
}

// variantRun is a review of an object under one assumption: the scope (one
// of two when the kind's is not known) and the unknowns.
type variantRun struct {
	res     result
	scope   string
	assumed assumption
	unsure  []unknown
}

// outcome is what must agree across runs for the verdict to be known:
// what review says of the object, and its patch.
func (v variantRun) outcome() string {
	_, label := describe(v.res)
	if label == "error" {
		return label + " " + v.res.Error // whatever the mutating webhooks patched before it
	}
	patch := "[]"
	if v.res.Mutate != nil {
		patch = string(v.res.Mutate.Patch)
	}
	return label + " " + patch
}

// condition says what run assumed, for a verdict that depends on it.
func (v variantRun) condition(scopeKnown bool) string {
	var parts []string
	if !scopeKnown {
		if v.scope == "Namespaced" {
			parts = append(parts, fmt.Sprintf("as namespaced (in %s)", v.res.Namespace))
		} else {
			parts = append(parts, "as cluster-scoped")
		}
	}
	for _, u := range v.unsure {
		if v.assumed[u.what] {
			parts = append(parts, "if "+u.what)
		} else {
			parts = append(parts, "unless "+u.what)
		}
	}
	return strings.Join(parts, " and ")
}

// combine is the verdict of the runs of one object: theirs when they
// agree, else unknown. unscoped is the kind when its scope is not known,
// else nil; namespace the one the object names.
func combine(runs []variantRun, unscoped *kindInfo, namespace string) result {
	scopeKnown := unscoped == nil
	first := runs[0].res
	if !scopeKnown && namespace == "" {
		// Not default: it may be cluster-scoped. When the scopes agree,
		// the run that says so is the one whose messages name no
		// namespace the object does not name.
		if i := slices.IndexFunc(runs, func(v variantRun) bool { return v.scope == "Cluster" }); i >= 0 {
			first = runs[i].res
		}
		first.Namespace = ""
	}
	var hints []string
	addHint := func(h string) {
		if h != "" && !slices.Contains(hints, h) {
			hints = append(hints, h)
		}
	}
	if !scopeKnown {
		plural := unscoped.resource.Resource
		if unscoped.pluralGuessed {
			plural = "PLURAL"
		}
		addHint(fmt.Sprintf("its scope is not known (%s): give its CustomResourceDefinition in -f, or -api-resources, or -resource %s=%s,Cluster (or ,Namespaced)", unscoped.source, unscoped.kind.Kind, plural))
	}
	for _, run := range runs {
		for _, u := range run.unsure {
			addHint(u.hint)
		}
	}
	agree := !slices.ContainsFunc(runs, func(v variantRun) bool { return v.outcome() != runs[0].outcome() })
	if agree {
		if len(runs) > 1 {
			var whats []string
			if !scopeKnown {
				whats = append(whats, "whether it is namespaced")
			}
			for _, u := range runs[0].unsure {
				whats = append(whats, "whether "+u.what)
			}
			first.Notes = append(first.Notes, fmt.Sprintf("not known: %s; the verdict is the same either way (%s)", strings.Join(whats, ", "), strings.Join(hints, "; ")))
		}
		return first
	}
	// Each verdict with the ways it comes, the one most ways give last,
	// as "otherwise".
	type verdict struct {
		outcome, line string
		patch         *mutateResult
		conditions    []string
	}
	var verdicts []*verdict
	for _, run := range runs {
		i := slices.IndexFunc(verdicts, func(v *verdict) bool { return v.outcome == run.outcome() })
		if i < 0 {
			line, _ := describe(result{Verdict: run.res.Verdict, Mutate: run.res.Mutate, Validate: run.res.Validate, DryRunSame: run.res.DryRunSame, Error: run.res.Error})
			verdicts = append(verdicts, &verdict{outcome: run.outcome(), line: line, patch: run.res.Mutate})
			i = len(verdicts) - 1
		}
		verdicts[i].conditions = append(verdicts[i].conditions, run.condition(scopeKnown))
	}
	// Two verdicts that read alike differ by their patches: say each
	// one's operations and paths, and where those are alike too, the
	// operations whole (a Secret's values not: -o json has them).
	alike := func(v *verdict) bool {
		return slices.ContainsFunc(verdicts, func(o *verdict) bool { return o != v && o.line == v.line })
	}
	var sayPaths, sayValues []*verdict
	for _, v := range verdicts {
		if alike(v) {
			sayPaths = append(sayPaths, v)
		}
	}
	for _, v := range sayPaths {
		v.line += " [" + strings.Join(patchPaths(patchOf(v.patch)), ", ") + "]"
	}
	for _, v := range sayPaths {
		if alike(v) {
			sayValues = append(sayValues, v)
		}
	}
	for _, v := range sayValues {
		if first.Kind == "Secret" {
			v.line += " (the values differ: -o json has them)"
		} else {
			v.line += " " + truncate(string(patchOf(v.patch)), 300)
		}
	}
	most := 0
	for i, v := range verdicts {
		if len(v.conditions) >= len(verdicts[most].conditions) {
			most = i
		}
	}
	var ways []string
	for i, v := range verdicts {
		if i != most {
			ways = append(ways, v.line+" "+strings.Join(v.conditions, ", or "))
		}
	}
	ways = append(ways, verdicts[most].line+" otherwise")
	out := result{Source: first.Source, APIVersion: first.APIVersion, Kind: first.Kind, Namespace: first.Namespace, Name: first.Name, Verdict: "unknown"}
	out.Unknown = fmt.Sprintf("%s (%s)", strings.Join(ways, "; "), strings.Join(hints, "; "))
	for _, run := range runs {
		for _, n := range run.res.Notes {
			if !slices.Contains(out.Notes, n) && !strings.HasPrefix(n, "no webhook of -config matches it") {
				out.Notes = append(out.Notes, n)
			}
		}
		for _, w := range run.res.Webhooks {
			if !slices.Contains(out.Webhooks, w) {
				out.Webhooks = append(out.Webhooks, w)
			}
		}
	}
	return out
}

// patchOf is a mutate result's patch, [] for none.
func patchOf(m *mutateResult) []byte {
	if m == nil {
		return []byte("[]")
	}
	return m.Patch
}

// patchPaths are a JSON Patch's operations and paths, without values.
func patchPaths(patch []byte) []string {
	var ops []struct{ Op, Path string }
	_ = json.Unmarshal(patch, &ops)
	var out []string
	for _, op := range ops {
		out = append(out, op.Op+" "+op.Path)
	}
	return out
}
