package review

import (
	"context"
	"flag"
	"io"
	"net/http"

	"github.com/example/webhook/part"
)

// Part is `webhook review`, as main.go's table of parts lists it. offline
// is the webhook as review runs it, in process: it registers on flags what
// the policy and the other parts take offline, and returns what builds,
// once flags are parsed, the webhook's routes, writing to stderr what
// went wrong in building them.
func Part(offline func(flags *flag.FlagSet) (routes func(stderr io.Writer) http.Handler, err error)) part.Part {
	return part.Part{
		Name:  "review",
		Usage: "review -f FILE     the policy's verdict on manifests, or on an audit log, without a cluster (webhook review -h)",
		Command: func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
			flags := flag.NewFlagSet("webhook review", flag.ContinueOnError)
			routes, err := offline(flags)
			if err != nil {
				return err
			}
			return Run(ctx, flags, args, stdin, stdout, stderr, func() http.Handler { return routes(stderr) })
		},
	}
}
