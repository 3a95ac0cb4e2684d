package review

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestPart: `webhook review` as main.go's table runs it: the flags the
// webhook registers offline are review's, beside its own, and a command
// line it cannot run exits 2.
func TestPart(t *testing.T) {
	offline := func(flags *flag.FlagSet) (func(io.Writer) http.Handler, error) {
		flags.String("policy-flag", "", "a flag of the policy's")
		return func(io.Writer) http.Handler { return &fakeWebhook{} }, nil
	}
	var help bytes.Buffer
	err := Part(offline).Command(context.Background(), []string{"-h"}, nil, io.Discard, &help)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(help.String(), "-policy-flag") || !strings.Contains(help.String(), "-audit-log") {
		t.Errorf("webhook review -h: got %v, %q; want flag.ErrHelp and the usage naming -policy-flag and -audit-log", err, help.String())
	}
	err = Part(offline).Command(context.Background(), nil, nil, io.Discard, io.Discard)
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Code != 2 || !strings.Contains(err.Error(), "-f is required") {
		t.Errorf("webhook review with no -f: got %v, want exit status 2 saying -f is required", err)
	}
}
