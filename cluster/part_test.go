package cluster

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
)

// TestReadsCommand: `webhook reads`, the part's command, prints what a
// policy reads, says so on stderr when it reads nothing, prints its usage
// for -h, and exits 2 (an ExitCode of 2) for a command line it cannot run.
func TestReadsCommand(t *testing.T) {
	run := func(policy any, args ...string) (stdout, stderr string, err error) {
		var out, errOut bytes.Buffer
		err = Part(policy).Command(context.Background(), args, nil, &out, &errOut)
		return out.String(), errOut.String(), err
	}
	if out, _, err := run(&podPolicy{}); err != nil || !strings.Contains(out, "v1  Pod  pods  every namespace") {
		t.Errorf("a policy that reads Pods: got %q, %v, want the kind", out, err)
	}
	if out, errOut, err := run(struct{}{}); err != nil || out != "" || !strings.Contains(errOut, "the policy reads nothing of the cluster") {
		t.Errorf("a policy without Reads: got %q, %q, %v, want nothing on stdout and stderr saying it reads nothing", out, errOut, err)
	}
	if _, help, err := run(&podPolicy{}, "-h"); !errors.Is(err, flag.ErrHelp) || !strings.Contains(help, "-service-account") {
		t.Errorf("reads -h: got %q, %v, want the usage naming -service-account", help, err)
	}
	for _, args := range [][]string{{"-no-such-flag"}, {"stray"}, {"-o", "yaml"}} {
		_, _, err := run(&podPolicy{}, args...)
		var exit interface{ ExitCode() int }
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("reads %q: got %v, want exit status 2", args, err)
		}
	}
}
