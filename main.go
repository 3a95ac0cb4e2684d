// Command webhook is a Kubernetes admission webhook: POST /mutate adds the
// configured annotations with a JSON Patch, POST /validate denies objects that
// lack the required ones, and GET /ping answers probes.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const (
	// defaultAnnotation is what /mutate adds and /validate requires unless
	// told otherwise: the demonstration this project started from.
	defaultAnnotation = "webhook.example.com/allow=true"

	// defaultCertFile and defaultKeyFile are where a development
	// certificate is made when none is configured.
	defaultCertFile = "tls/tls.crt"
	defaultKeyFile  = "tls/tls.key"

	// readHeaderTimeout cuts off clients that open a connection and dribble
	// headers; the apiserver sends its few headers at once.
	readHeaderTimeout = 5 * time.Second

	// readTimeout and writeTimeout bound one review. The apiserver never
	// waits longer than the largest webhook timeout, so neither need be
	// longer.
	readTimeout  = maxWebhookTimeout
	writeTimeout = maxWebhookTimeout

	// idleTimeout outlives the apiserver's own 90 s idle timeout, so it is
	// always the client that closes a pooled connection. Were the server to
	// close first, a review sent on that connection at the same moment
	// would fail.
	idleTimeout = 120 * time.Second

	// maxHeaderBytes is ample for the apiserver's and a probe's headers.
	maxHeaderBytes = 16 << 10

	// shutdownTimeout is how long requests in flight get to finish once the
	// server stops: the longest a review can take.
	shutdownTimeout = maxWebhookTimeout
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, "webhook:", err)
		os.Exit(1)
	}
}

// config is everything run reads from its flags and environment.
type config struct {
	listen   string
	certFile string
	keyFile  string
	// certConfigured is true when the certificate came from a flag or the
	// environment, and so must not be replaced by a development one.
	certConfigured bool
	policy         policy
}

// parseFlags reads the command line, falling back to the environment for the
// certificate paths as the Deployment of many webhooks sets them.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	annotate := newAnnotationsFlag(defaultAnnotation)
	require := newAnnotationsFlag(defaultAnnotation)
	fs.StringVar(&cfg.listen, "listen", ":8443", "`address` to serve HTTPS on")
	fs.StringVar(&cfg.certFile, "tls-cert-file", "", "serving certificate `file` (PEM, with any intermediates); env TLS_CERT; default "+defaultCertFile)
	fs.StringVar(&cfg.keyFile, "tls-private-key-file", "", "serving private key `file` (PEM); env TLS_KEY; default "+defaultKeyFile)
	fs.Var(annotate, "annotate", "annotation `key=value` that /mutate sets (repeatable)")
	fs.Var(require, "require", "annotation `key=value` that /validate requires (repeatable)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q: every setting is a flag, see -help", fs.Arg(0))
	}
	cfg.policy = policy{annotate: annotate.list, require: require.list}

	for _, f := range []struct {
		path      *string
		env, def  string
		flagIsSet bool
	}{
		{&cfg.certFile, "TLS_CERT", defaultCertFile, cfg.certFile != ""},
		{&cfg.keyFile, "TLS_KEY", defaultKeyFile, cfg.keyFile != ""},
	} {
		if !f.flagIsSet {
			*f.path = getenv(f.env)
		}
		if *f.path == "" {
			*f.path = f.def
		} else {
			cfg.certConfigured = true
		}
	}
	return cfg, nil
}

// annotationsFlag is a repeatable -flag key=value. The first use replaces the
// default; each key is checked as the apiserver checks annotation keys, so a
// typo fails at start-up rather than on the first review.
type annotationsFlag struct {
	list    []annotation
	changed bool
}

func newAnnotationsFlag(def string) *annotationsFlag {
	f := &annotationsFlag{}
	// The default is a constant known to be valid.
	_ = f.Set(def)
	f.changed = false
	return f
}

func (f *annotationsFlag) String() string {
	if f == nil {
		return ""
	}
	s := make([]string, len(f.list))
	for i, a := range f.list {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

func (f *annotationsFlag) Set(s string) error {
	key, value, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("want key=value, such as %s", defaultAnnotation)
	}
	if !f.changed {
		f.list, f.changed = nil, true
	}
	all := map[string]string{key: value}
	for _, a := range f.list {
		if a.Key == key {
			return fmt.Errorf("annotation key %q is given twice", key)
		}
		all[a.Key] = a.Value
	}
	if errs := apivalidation.ValidateAnnotations(all, field.NewPath("metadata", "annotations")); len(errs) > 0 {
		return errs.ToAggregate()
	}
	f.list = append(f.list, annotation{Key: key, Value: value})
	return nil
}

// run is the whole program: it serves until ctx is done, then shuts down
// gracefully. It returns instead of exiting, so tests drive it directly.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	cert, err := loadOrCreateCertificate(cfg, logger)
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("/mutate", serve(logger, mutate(cfg.policy)))
	mux.Handle("/validate", serve(logger, validate(cfg.policy)))
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "pong")
	})

	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		TLSConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{cert},
		},
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("-listen %s: %w", cfg.listen, err)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.ServeTLS(ln, "", "") }()
	logger.Info("serving", "addr", ln.Addr().String(), "annotate", cfg.policy.annotate, "require", cfg.policy.require)

	select {
	case err := <-serveErr:
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	logger.Info("shutting down", "timeout", shutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	logger.Info("stopped")
	return nil
}

// loadOrCreateCertificate loads the serving certificate. When none is
// configured and the default one does not exist, it first makes a
// development one, so that a new user's `go run .` serves at once.
func loadOrCreateCertificate(cfg config, logger *slog.Logger) (tls.Certificate, error) {
	if !cfg.certConfigured {
		if _, err := os.Stat(cfg.certFile); errors.Is(err, fs.ErrNotExist) {
			if err := writeDevCertificates("tls", time.Now()); err != nil {
				return tls.Certificate{}, fmt.Errorf("making a development certificate in tls/: %w", err)
			}
			logger.Info("no certificate configured: made a development CA and a certificate for localhost in tls/; trust tls/ca.crt", "hosts", devHosts, "valid_for", devCertValidity)
		}
	}
	cert, err := tls.LoadX509KeyPair(cfg.certFile, cfg.keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("loading the serving certificate (-tls-cert-file %s, -tls-private-key-file %s): %w", cfg.certFile, cfg.keyFile, err)
	}
	return cert, nil
}
