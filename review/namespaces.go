package review

// The labels of the namespaces a namespaceSelector reads, where the input
// does not hold them: from the cluster's own list (-namespaces), and, in
// a replay, from what the log shows the apiserver did.

import (
	"fmt"
	"strings"
)

// readNamespaces reads -namespaces: the Namespaces of the cluster, as
// `kubectl get namespaces -o json` (or -o yaml) writes them. Reviewing
// manifests, their labels are those of every namespace the input does not
// hold; replaying, those of a namespace the log has not shown.
func (r *reviewer) readNamespaces() error {
	if len(r.o.namespaceFiles) == 0 {
		return nil
	}
	in, err := expandInputs(r.o.namespaceFiles, nil, expansion{})
	if err != nil {
		return usageError("-namespaces: %v", err)
	}
	defer in.close()
	if err := in.scan(func(unit) {}); err != nil {
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
