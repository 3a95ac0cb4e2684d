package cluster

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/example/webhook/part"
)

// Part is the policy's view of the cluster, as main.go's table of parts
// lists it. policy is the policy main.go configures; when it has a method
// Reads() []Read, each kind it returns gets a view, made once the flags are
// parsed: in the server kept in step with the apiserver (-kubeconfig,
// -apiserver-lookups-per-second), with /ping not ready until each has
// synced and its series in the metrics; in `webhook review`, and in the
// server given -cluster (tests, trials), filled from -cluster's files. `webhook reads` prints what it reads and the RBAC that
// needs. A policy without Reads reads nothing, and needs no credentials.
func Part(policy any) part.Part {
	var (
		flags   clusterFlags
		files   clusterFiles
		running atomic.Pointer[clusterViews]
	)
	reads := func() []Read {
		if r, ok := policy.(interface{ Reads() []Read }); ok {
			return r.Reads()
		}
		return nil
	}
	return part.Part{
		Name:  "reads",
		Usage: "reads              what the policy reads of the cluster, and the RBAC that needs (webhook reads -h)",
		Command: func(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
			all := reads()
			if len(all) == 0 && !isHelp(args) {
				fmt.Fprintln(stderr, "webhook reads: the policy reads nothing of the cluster: the webhook needs no RBAC and no -kubeconfig")
			}
			return runReads(args, all, stdout, stderr)
		},
		Flags: func(fs *flag.FlagSet, offline bool) {
			fs.Var(&files, "cluster", "the objects the policy reads of the cluster (webhook reads), from a `file` as kubectl get KIND -A -o json writes them, in place of the apiserver's; a kind none holds is empty (repeatable)")
			if !offline {
				flags.register(fs)
			}
		},
		Start: func(env part.Env) (stop func(), err error) {
			if env.Offline || files.given {
				if files.given && flags.kubeconfig != "" {
					return nil, errors.New("-cluster and -kubeconfig: give one, the files or the apiserver")
				}
				if err := offlineViews(reads(), files); err != nil {
					return nil, fmt.Errorf("-cluster: %w", err)
				}
				return func() {}, nil
			}
			c, err := watchCluster(reads(), flags, env.Getenv, env.Logger)
			if err != nil {
				return nil, err
			}
			running.Store(c)
			return c.stop, nil
		},
		NotReady: func() error { return running.Load().notSynced() },
		Metrics:  func(w io.Writer) { running.Load().writeMetrics(w) },
	}
}

// isHelp reports whether args ask for the usage.
func isHelp(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" || a == "--h" {
			return true
		}
	}
	return false
}
