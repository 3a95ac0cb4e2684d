// Command webhook is a Kubernetes admission webhook: POST /mutate patches,
// /validate allows or denies, and GET /ping answers probes; each optional
// part (parts, below) adds its route, command or flags. The policy is all
// in policy.go; this file holds the server's flags and its lifecycle.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/example/webhook/authorize"
	"github.com/example/webhook/body"
	"github.com/example/webhook/certs"
	"github.com/example/webhook/cluster"
	"github.com/example/webhook/doctor"
	"github.com/example/webhook/limits"
	"github.com/example/webhook/part"
	"github.com/example/webhook/reload"
	"github.com/example/webhook/review"
	"github.com/example/webhook/rollout"
)

const (
	// defaultCertFile and defaultKeyFile are where a development
	// certificate is made when none is configured.
	defaultCertFile = "tls/tls.crt"
	defaultKeyFile  = "tls/tls.key"

	// defaultDevListen is where the server listens with the development
	// certificate, unless -listen says otherwise: only this host trusts
	// its CA, so nothing else needs to reach it.
	defaultDevListen = "localhost:8443"

	// readHeaderTimeout is how long a connection has for its first
	// request's header once its handshake is done: as long as an idle one,
	// as the apiserver may pool a connection it dialed and not use it yet.
	readHeaderTimeout = idleTimeout

	// writeTimeout bounds a request from the end of its header to the last
	// byte of its answer. No ReadTimeout: package body reads on its own clock.
	writeTimeout = maxWebhookTimeout

	// idleTimeout outlives apiserverIdleTimeout, so the apiserver closes first.
	idleTimeout = 120 * time.Second

	// apiserverIdleTimeout is how long the apiserver keeps a connection
	// it does not use: net/http's DefaultTransport's, which client-go's
	// transports take (k8s.io/apimachinery v0.37.2 pkg/util/net/http.go,
	// SetOldTransportDefaults).
	apiserverIdleTimeout = 90 * time.Second

	// keptAliveWait is how long a connection is idle before shutdown
	// takes the apiserver to have let it go: its idle timeout, and slack
	// for the apiserver reading its last answer later than the server
	// wrote it, where its timeout starts.
	keptAliveWait = apiserverIdleTimeout + 5*time.Second

	// maxLetGoWait bounds shutdown's wait for the apiserver to let go of
	// its kept-alive connections: a request begun before shutdown is
	// answered by writeTimeout, without closing its connection, which is
	// then let go keptAliveWait later.
	maxLetGoWait = writeTimeout + keptAliveWait

	// maxHeaderBytes is ample for the apiserver's and a probe's headers.
	maxHeaderBytes = 16 << 10

	// maxConnections is the most connections the review port holds open
	// (limits.Listener): what connectionBytes allows of connectionCost.
	// The apiserver's bursts need no more (docs/operations.md, "Hostile
	// clients").
	maxConnections = connectionBytes / connectionCost

	// connectionBytes is the memory the review port's connections may
	// hold, in memoryLimitBase.
	connectionBytes = 20 << 20

	// connectionCost is what an idle TLS connection holds after a review,
	// the most of any state: TLS and HTTP buffers, a goroutine's stack, as
	// measured by bench -slow-clients ("What one connection costs").
	connectionCost = 64 << 10

	// maxMetricsConnections is the most connections the metrics port holds
	// open: Prometheus scrapes over one, and a person's curl needs another.
	maxMetricsConnections = 16

	// metricsReadTimeout and metricsWriteTimeout bound each connection of
	// the metrics port, which serves one request per connection: so no
	// client holds one of its places for longer, and the kubelet's
	// readiness probe, first in line as its address holds none, gets in
	// well within its 5 s timeoutSeconds however the places are held
	// (TestProbeGetsInPastHeldPlaces).
	metricsReadTimeout  = 2 * time.Second
	metricsWriteTimeout = 10 * time.Second

	// shutdownTimeout is how long requests in flight get to finish once the
	// server stops: the longest a review can take.
	shutdownTimeout = maxWebhookTimeout

	// With -http2, one stream per connection and the smallest windows and
	// frames HTTP/2 allows, so that the connection cap bounds what a client
	// holds as with HTTP/1.1 (docs/operations.md, "Security").
	http2MaxConcurrentStreams = 1
	http2MaxReadFrameSize     = 16 << 10
	http2ReceiveBufferBytes   = 64 << 10 // per connection, the least allowed
	http2StreamBufferBytes    = 64 << 10 // what a client may send before it has the settings

	// defaultMaxInflightBytes is the budget of large review bodies (over
	// body.MaxSmallBodyBytes) held at once, as read and until answered:
	// with maxConnections, what keeps the shipped Deployment under its
	// 64Mi limit under any load (docs/operations.md, "Memory"), while
	// body.MaxBytes always fits.
	defaultMaxInflightBytes = 8 << 20

	// memoryLimitBase is, with -max-inflight-bytes, the Go runtime's soft
	// memory limit when GOMEMLIMIT is not set, as the Deployment sets it
	// from requests.memory: what a flood can hold outside the budget, its
	// connections, their small bodies, the newcomers waiting for a place
	// and the runtime's own, which docs/operations.md ("Memory") adds up.
	// Near the limit the runtime collects sooner and returns freed pages to
	// the kernel, where without one the heap grows to twice what is live.
	memoryLimitBase = 32 << 20
)

// version is the webhook's version, set where the image is built
// (-ldflags "-X main.version=..." in the Dockerfile and make image); empty
// otherwise, and buildVersion falls back to what the Go toolchain recorded.
var version string

// buildVersion is version, or the module's version as the toolchain
// stamped it from git (go build in a checkout), or "devel".
func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok || info.Main.Version == "" || info.Main.Version == "(devel)" {
		return "devel"
	}
	return info.Main.Version
}

// parts are the webhook's optional capabilities, each a folder of its own
// that plugs in as package part says (README.md, "Make it yours"). Delete
// a folder, its line here and its import, and the webhook builds and
// passes its tests without it: CI proves it, one at a time (.ci/parts).
func parts(p *policy) []part.Part {
	return []part.Part{
		authorize.Part(),           // POST /authorize, the authorization webhook, with -authorization, and its -deny rules
		rollout.Part(),             // -validation-action: /validate's denials warned or audited while a policy rolls out
		review.Part(offlineServer), // webhook review: the policy's verdicts on manifests and audit logs, without a cluster
		doctor.Part(),              // webhook doctor: a webhook configuration checked against its live endpoint
		cluster.Part(p),            // the policy's views of the cluster (its Reads method), and webhook reads
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal asks run to finish; a second, during
	// -shutdown-delay or a long review, ends the process at once.
	context.AfterFunc(ctx, stop)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if code := exitStatus(err, os.Stderr); code != 0 {
		os.Exit(code)
	}
}

// exitStatus is the status the process exits with after run returned err,
// and it writes to stderr what err says that the user has not read yet:
// doctor and review end with the status their checks and verdicts say;
// package flag has printed its own errors, with the usage.
func exitStatus(err error, stderr io.Writer) int {
	var exit interface{ ExitCode() int }
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &exit):
		if errors.Unwrap(err) != nil && !printedByFlag(err) {
			fmt.Fprintln(stderr, "webhook:", err)
		}
		return exit.ExitCode()
	}
	fmt.Fprintln(stderr, "webhook:", err)
	return 1
}

// printedByFlag reports whether err is one of package flag's parse
// errors, which its FlagSet has written with the usage before returning
// it (flag.go, failf).
func printedByFlag(err error) bool {
	msg := err.Error()
	for _, prefix := range []string{"flag provided but not defined: ", "bad flag syntax: ", "flag needs an argument: ", "invalid value ", "invalid boolean value ", "invalid boolean flag "} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

// config is everything run reads from its flags and environment.
type config struct {
	listen   string
	certFile string
	keyFile  string
	// certConfigured is true for a certificate from a flag or the
	// environment, never replaced by a development one.
	certConfigured bool
	policy         *policy // what policy.go's flags configured

	clientCAFile       string   // when set, every review route needs a client certificate
	allowedClientNames []string // Common Names admitted; empty admits any the CA signed
	tlsMinVersion      uint16
	http2              bool
	shutdownDelay      time.Duration
	logFormat          string
	maxInflightBytes   int64
	metricsListen      string // plain HTTP address for /metrics; empty: off
	// memoryLimit is the soft memory limit to set (memoryLimitBase), or 0
	// to leave the runtime's own: GOMEMLIMIT's, when it is set.
	memoryLimit int64
	// showVersion is -version: print the version, serve nothing.
	showVersion bool
	// replacedDefaults are the policy's flags given on the command line
	// that had defaults, which they replaced.
	replacedDefaults []replaced

	// parts are the optional parts (main.go's parts), and what they add
	// to the server once its flags are parsed: routes, and what becomes
	// of /validate's denials (nil: they are sent).
	parts         []part.Part
	routes        []part.Route
	rewriteDenial part.RewriteDenial
}

// replaced is a policy flag that replaced its defaults.
type replaced struct {
	flag     string
	defaults []string
}

// parseFlags reads the command line, falling back to the environment for the
// certificate paths as the Deployment of many webhooks sets them: the
// server's flags, the policy's (into p), and each part's.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer, p *policy, parts []part.Part) (config, error) {
	flags := flag.NewFlagSet("webhook", flag.ContinueOnError)
	flags.SetOutput(stderr)
	cfg := config{policy: p, parts: parts}
	flags.StringVar(&cfg.listen, "listen", ":8443", "`address` to serve HTTPS on; with the development certificate, which only this host trusts, localhost:8443 unless given")
	flags.StringVar(&cfg.certFile, "tls-cert-file", "", "serving certificate `file` (PEM, with any intermediates); env TLS_CERT; default "+defaultCertFile)
	flags.StringVar(&cfg.keyFile, "tls-private-key-file", "", "serving private key `file` (PEM); env TLS_KEY; default "+defaultKeyFile)
	flags.StringVar(&cfg.clientCAFile, "client-ca-file", "", "CA bundle `file` (PEM); when set, every review route requires a client certificate it signed")
	allowedNames := flags.String("allowed-client-names", "", "comma-separated client certificate Common `names` admitted with -client-ca-file; empty admits any it signed")
	minVersion := flags.String("tls-min-version", "1.2", "lowest TLS `version`: 1.2 or 1.3")
	flags.BoolVar(&cfg.http2, "http2", false, "offer HTTP/2 (the apiserver uses it only for loopback URLs)")
	flags.DurationVar(&cfg.shutdownDelay, "shutdown-delay", 0, "on SIGTERM, keep serving this `long` with /ping failing so endpoints drain; then close the listener, and wait, up to 125 s, for clients to let go of kept-alive connections")
	flags.StringVar(&cfg.logFormat, "log-format", "text", "log `format`: text or json")
	flags.Int64Var(&cfg.maxInflightBytes, "max-inflight-bytes", defaultMaxInflightBytes, "the most `bytes` of large reviews (over 16 KiB) held at once as they are read and decoded; one that finds no room waits for it in line, or is answered 429 when it could not be read by its deadline")
	showVersion := flags.Bool("version", false, "print the version and exit")
	flags.StringVar(&cfg.metricsListen, "metrics-listen", "", "`address` to serve Prometheus metrics on, at /metrics over plain HTTP, and /ping for probes; off when empty")
	if err := p.addFlags(flags); err != nil {
		return config{}, err
	}
	for _, pt := range parts {
		if pt.Flags != nil {
			pt.Flags(flags, false)
		}
	}
	if err := flags.Parse(args); err != nil {
		return config{}, err
	}
	listenGiven := false
	flags.Visit(func(f *flag.Flag) {
		listenGiven = listenGiven || f.Name == "listen"
		if d, ok := f.Value.(interface{ defaultsReplaced() []string }); ok && len(d.defaultsReplaced()) > 0 {
			cfg.replacedDefaults = append(cfg.replacedDefaults, replaced{f.Name, d.defaultsReplaced()})
		}
	})
	if flags.NArg() > 0 {
		if len(args) > 0 && args[0] == flags.Arg(0) {
			return config{}, fmt.Errorf("no such command %q: webhook help lists the commands; every setting of the server is a flag, see -help", flags.Arg(0))
		}
		return config{}, fmt.Errorf("unexpected argument %q: every setting is a flag, see -help", flags.Arg(0))
	}
	var ok bool
	if cfg.tlsMinVersion, ok = tlsMinVersions[*minVersion]; !ok {
		return config{}, fmt.Errorf("-tls-min-version %q: want 1.2 or 1.3", *minVersion)
	}
	if cfg.logFormat != "text" && cfg.logFormat != "json" {
		return config{}, fmt.Errorf("-log-format %q: want text or json", cfg.logFormat)
	}
	if cfg.shutdownDelay < 0 {
		return config{}, fmt.Errorf("-shutdown-delay %s: want zero or more", cfg.shutdownDelay)
	}
	for _, l := range []struct{ flag, addr string }{{"-listen", cfg.listen}, {"-metrics-listen", cfg.metricsListen}} {
		if err := checkListenAddress(l.addr); l.addr != "" && err != nil {
			return config{}, fmt.Errorf("%s %q: %w", l.flag, l.addr, err)
		}
	}
	if cfg.maxInflightBytes < body.MaxBytes {
		return config{}, fmt.Errorf("-max-inflight-bytes %d: want at least %d, the largest review, or such a review could never be served", cfg.maxInflightBytes, body.MaxBytes)
	}
	for _, n := range strings.Split(*allowedNames, ",") {
		if n = strings.TrimSpace(n); n != "" {
			cfg.allowedClientNames = append(cfg.allowedClientNames, n)
		}
	}
	if *showVersion {
		cfg.showVersion = true
		return cfg, nil
	}
	if len(cfg.allowedClientNames) > 0 && cfg.clientCAFile == "" {
		return config{}, errors.New("-allowed-client-names needs -client-ca-file: without a client CA no certificate is checked")
	}
	if getenv("GOMEMLIMIT") == "" {
		cfg.memoryLimit = memoryLimitBase + cfg.maxInflightBytes
	}
	for _, f := range []struct {
		path     *string
		env, def string
	}{{&cfg.certFile, "TLS_CERT", defaultCertFile}, {&cfg.keyFile, "TLS_KEY", defaultKeyFile}} {
		if *f.path == "" { // not given as a flag
			*f.path = getenv(f.env)
		}
		if *f.path == "" {
			*f.path = f.def
		} else {
			cfg.certConfigured = true
		}
	}
	if !cfg.certConfigured && !listenGiven {
		cfg.listen = defaultDevListen
	}
	return cfg, nil
}

// checkListenAddress says what is wrong with a listen address that
// net.Listen could never take: no port, or a port out of range. Whether
// the port is free is for net.Listen to say.
func checkListenAddress(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port, such as :8443 or 127.0.0.1:8443: %w", err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err == nil || port == "" {
		return nil
	}
	if _, err := net.LookupPort("tcp", port); err == nil && strings.Trim(port, "0123456789") != "" {
		return nil // a service name, such as https
	}
	return fmt.Errorf("port %q: want a number from 0 to 65535", port)
}

// commandsUsage is what `webhook help` says, and `webhook -h` before the
// server's flags: the centre's commands, then each part's.
func commandsUsage(parts []part.Part) string {
	var b strings.Builder
	b.WriteString(`webhook is a Kubernetes admission webhook.

Usage:
  webhook [flags]            serve /mutate, /validate, /ping and the parts' routes (webhook -h: the flags)
  webhook certs [flags]      make a CA and a serving certificate (webhook certs -h)
`)
	for _, pt := range parts {
		if pt.Command != nil {
			b.WriteString("  webhook " + pt.Usage + "\n")
		}
	}
	b.WriteString(`  webhook help [COMMAND]     this, or a command's flags

Exit status: 0 success, 2 bad usage everywhere; each command's help says
more.

`)
	return b.String()
}

// commands are the commands `webhook help` gives the flags of.
func commands(parts []part.Part) []string {
	names := []string{"certs"}
	for _, pt := range parts {
		if pt.Command != nil {
			names = append(names, pt.Name)
		}
	}
	return names
}

// isHelpFlag reports whether arg asks package flag for the usage.
func isHelpFlag(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "--h"
}

// usageError is a command line the server cannot run with: exit status 2,
// as for every subcommand's, and as package flag exits.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }
func (e usageError) ExitCode() int { return 2 }

// run is the whole program: it serves until ctx is done, then shuts down
// gracefully, returning instead of exiting so that tests drive it. `webhook
// certs` (package certs), `webhook doctor` (package doctor), `webhook
// review` (package review; both read stdin for a file named "-") and
// `webhook reads` (reads.go) run instead when named, and `webhook help`
// says what there is. A command line it cannot run with is an error whose
// ExitCode is 2.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	// Help that was asked for is the output, as kubectl's and go's are:
	// every command writes its usage where it writes errors, stdout then.
	usageOut := stderr
	if slices.ContainsFunc(args, isHelpFlag) {
		usageOut = stdout
	}
	// A part's command sees the policy with its defaults.
	var cmdPolicy policy
	if err := cmdPolicy.addFlags(flag.NewFlagSet("webhook", flag.ContinueOnError)); err != nil {
		return err
	}
	all := parts(&cmdPolicy)
	if len(args) > 0 {
		switch args[0] {
		case "certs":
			return certs.Run(args[1:], time.Now(), stdout, usageOut)
		case "help":
			switch {
			case len(args) > 1 && slices.Contains(commands(all), args[1]):
				return run(ctx, []string{args[1], "-h"}, getenv, stdin, stdout, stderr)
			case len(args) > 1:
				_, _ = io.WriteString(stderr, commandsUsage(all))
				return usageError{fmt.Errorf("help %s: no such command; the commands are %s", args[1], strings.Join(commands(all), ", "))}
			}
			_, err := io.WriteString(stdout, commandsUsage(all))
			return err
		}
		for _, pt := range all {
			if pt.Command != nil && pt.Name == args[0] {
				return pt.Command(ctx, args[1:], stdin, stdout, usageOut)
			}
		}
	}
	if usageOut == stdout {
		_, _ = io.WriteString(stdout, commandsUsage(all))
	}
	var p policy
	cfg, err := parseFlags(args, getenv, usageOut, &p, parts(&p))
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		return usageError{err}
	}
	if cfg.showVersion {
		_, err := fmt.Fprintln(stdout, "webhook", buildVersion())
		return err
	}
	var logHandler slog.Handler = slog.NewTextHandler(stderr, nil)
	if cfg.logFormat == "json" {
		logHandler = slog.NewJSONHandler(stderr, nil)
	}
	logger := slog.New(logHandler)
	env := part.Env{Logger: logger, Getenv: getenv, ClientCertificates: cfg.clientCAFile != ""}
	if cfg.routes, cfg.rewriteDenial, err = partRoutes(cfg.parts, env); err != nil {
		return usageError{err}
	}
	// The parts run until the server has shut down, its last reviews
	// included, and stop before run returns.
	stopParts, err := startParts(cfg.parts, env)
	if err != nil {
		return err
	}
	defer stopParts()
	srv, err := newServer(cfg, logger)
	if err != nil {
		return err
	}
	return srv.serve(ctx)
}

// offlineServer is the server as `webhook review` runs it, in process,
// for a client of its own (review.Part): it registers on flags the
// policy's flags, those each part takes offline, and -cluster, and
// returns what makes, once they are parsed, every review route, each part
// started offline and the views of the cluster filled from -cluster's
// files. (Nothing it starts needs stopping: a part runs nothing offline.)
func offlineServer(flags *flag.FlagSet) (build func(stderr io.Writer) http.Handler, err error) {
	p := &policy{}
	all := parts(p)
	if err := p.addFlags(flags); err != nil {
		return nil, err
	}
	for _, pt := range all {
		if pt.Flags != nil {
			pt.Flags(flags, true)
		}
	}
	return func(stderr io.Writer) http.Handler {
		env := part.Env{Logger: slog.New(slog.DiscardHandler), Getenv: func(string) string { return "" }, Offline: true}
		rs := &reviewRoutes{logger: env.Logger, bodyBudget: body.NewBudget(defaultMaxInflightBytes)}
		anyClient := func(h http.Handler) http.Handler { return h }
		extra, rewriteDenial, err := partRoutes(all, env)
		if err == nil {
			_, err = startParts(all, env)
		}
		if err != nil {
			fmt.Fprintln(stderr, "webhook review:", err)
		}
		return routes(rs, *p, rewriteDenial, extra, anyClient)
	}, nil
}

// partRoutes asks each part for its route, given env, and for what becomes
// of /validate's denials.
func partRoutes(parts []part.Part, env part.Env) (extra []part.Route, rewriteDenial part.RewriteDenial, err error) {
	for _, pt := range parts {
		if pt.Route != nil {
			r, err := pt.Route(env)
			if err != nil {
				return nil, nil, err
			}
			if r.Path != "" {
				extra = append(extra, r)
			}
		}
		if pt.Denials != nil {
			if r := pt.Denials(); r != nil {
				rewriteDenial = r
			}
		}
	}
	return extra, rewriteDenial, nil
}

// startParts starts each part that runs something, and returns what stops
// them all, last first; a part that fails to start stops the ones before.
func startParts(parts []part.Part, env part.Env) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	for _, pt := range parts {
		if pt.Start == nil {
			continue
		}
		s, err := pt.Start(env)
		if err != nil {
			stop()
			return nil, fmt.Errorf("%s: %w", pt.Name, err)
		}
		stops = append(stops, s)
	}
	return stop, nil
}

// server is the webhook built from its configuration, ready to serve.
type server struct {
	cfg         config
	logger      *slog.Logger
	reviews     *http.Server
	listener    *limits.Listener
	bodyBudget  *body.Budget // the review routes', whose refusals the log sums up
	metrics     *http.Server // nil without -metrics-listen
	metricsLn   net.Listener // its listener
	reloadables []interface{ reloadIfChanged() }
	serving     *atomic.Bool // from serving until shutdown begins: /ping's readiness
	http1Conns  *openConns   // the review port's HTTP/1 connections, which shutdown waits out
}

// newServer builds the server: its certificates, the review port's
// listener and routes, and the metrics port. Nothing is wired after it is
// built, and nothing is served until serve.
func newServer(cfg config, logger *slog.Logger) (*server, error) {
	if cfg.memoryLimit > 0 {
		debug.SetMemoryLimit(cfg.memoryLimit)
	}
	bodies := body.NewBudget(cfg.maxInflightBytes)
	m := newMetrics(bodies)
	for _, pt := range cfg.parts {
		if pt.Metrics != nil {
			m.parts = append(m.parts, pt.Metrics)
		}
	}
	// The client CA, then the port, then the certificate: a configuration
	// that cannot serve holds no port, and leaves no development
	// certificate behind.
	var clientCAs *reloadable[x509.CertPool]
	if cfg.clientCAFile != "" {
		clientCAs = newCAReloader("client CA", "client-ca", cfg.clientCAFile, logger, m)
		if _, err := clientCAs.load(); err != nil {
			return nil, fmt.Errorf("-client-ca-file: %w", err)
		}
	}
	rawLn, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return nil, fmt.Errorf("-listen %s: %w", cfg.listen, err)
	}
	keyPair, err := loadOrCreateKeyPair(cfg, logger, m)
	if err != nil {
		rawLn.Close()
		return nil, err
	}
	tlsConfig := newTLSConfig(cfg.tlsMinVersion, cfg.http2, keyPair, clientCAs)
	listener := limits.NewListener(rawLn, tlsConfig, maxConnections)
	m.listener = listener
	s := &server{cfg: cfg, logger: logger, listener: listener, bodyBudget: bodies, serving: &atomic.Bool{},
		http1Conns: &openConns{idle: map[net.Conn]time.Time{}}, reloadables: []interface{ reloadIfChanged() }{keyPair}}
	if clientCAs != nil {
		s.reloadables = append(s.reloadables, clientCAs)
	}
	rs := &reviewRoutes{logger: logger, metrics: m, bodyBudget: bodies}
	checkClient := func(h http.Handler) http.Handler { return h }
	if clientCAs != nil {
		checkClient = func(h http.Handler) http.Handler { return requireClient(logger, m, cfg.allowedClientNames, h) }
	}
	mux := routes(rs, *cfg.policy, cfg.rewriteDenial, cfg.routes, checkClient)
	mux.HandleFunc("GET /ping", s.ping)
	mux.HandleFunc("GET /livez", live)
	s.reviews = reviewServer(s.closeWhenDraining(mux), tlsConfig, cfg.http2, serverErrorLog(logger))
	s.reviews.ConnState = s.http1Conns.track

	if cfg.metricsListen != "" {
		rawMetricsLn, err := net.Listen("tcp", cfg.metricsListen)
		if err != nil {
			s.listener.Close()
			return nil, fmt.Errorf("-metrics-listen %s: %w", cfg.metricsListen, err)
		}
		metricsLn := limits.NewListener(rawMetricsLn, nil, maxMetricsConnections)
		metricsMux := http.NewServeMux()
		metricsMux.Handle("/metrics", m)
		// Probes here wait in no line of the review port's, where the
		// kubelet's connections can share an address with the
		// apiserver's burst (a webhook on a control-plane node).
		metricsMux.HandleFunc("GET /ping", s.ping)
		s.metricsLn = metricsLn
		s.metrics = &http.Server{
			Handler:        metricsMux,
			ReadTimeout:    metricsReadTimeout,
			WriteTimeout:   metricsWriteTimeout,
			MaxHeaderBytes: maxHeaderBytes,
			ErrorLog:       serverErrorLog(logger),
		}
		// A probe and a scrape each connect anew: a connection kept alive
		// would hold its place between them.
		s.metrics.SetKeepAlivesEnabled(false)
	}
	return s, nil
}

// ping answers probes: ready while serving once the policy's views of the
// cluster have synced, 503 before and once shutdown begins. It
// is served without a client certificate, as kubelet probes have none.
func (s *server) ping(w http.ResponseWriter, _ *http.Request) {
	if !s.serving.Load() {
		writeStatus(w, http.StatusServiceUnavailable, "shutting down")
		return
	}
	for _, pt := range s.cfg.parts {
		if pt.NotReady == nil {
			continue
		}
		if err := pt.NotReady(); err != nil {
			writeStatus(w, http.StatusServiceUnavailable, err.Error())
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("pong"))
}

// live answers liveness probes: the server serves. Not /ping, which fails
// until the parts are ready (a view of the cluster not yet listed) and
// while draining: kubelet would restart a replica that is only waiting.
func live(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok"))
}

// reviewServer is the review port's server of handler: the timeouts above,
// the body reader's clock (body.ConnContext), and HTTP/2 with http2 alone.
// The listener, not it, does the TLS handshakes.
func reviewServer(handler http.Handler, tlsConfig *tls.Config, http2 bool, errorLog *log.Logger) *http.Server {
	s := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: readHeaderTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          errorLog,
		TLSConfig:         tlsConfig, // for net/http's HTTP/2
		ConnContext:       body.ConnContext,
	}
	if !http2 {
		// A non-nil, empty map is how net/http is told not to speak HTTP/2.
		s.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
		return s
	}
	s.HTTP2 = &http.HTTP2Config{
		MaxConcurrentStreams:          http2MaxConcurrentStreams,
		MaxReadFrameSize:              http2MaxReadFrameSize,
		MaxReceiveBufferPerConnection: http2ReceiveBufferBytes,
		MaxReceiveBufferPerStream:     http2StreamBufferBytes,
	}
	return s
}

// closeWhenDraining serves h, and once shutdown begins (s.serving false)
// closes each connection after its answer, so that clients move to other
// replicas while all that arrives is still answered (docs/operations.md).
// An HTTP/1 body that h leaves unread, which net/http reads before the
// answer, ends at body.StallTimeout, not never, answer and shutdown with it.
func (s *server) closeWhenDraining(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.serving.Load() {
			w.Header().Set("Connection", "close")
		}
		if r.ProtoMajor == 1 && r.ContentLength != 0 {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(body.StallTimeout))
		}
		h.ServeHTTP(w, r)
	})
}

// serve serves until ctx is done, then drains for -shutdown-delay and shuts
// down (http.Server.Shutdown): requests in flight get shutdownTimeout to
// finish, and connections idle, and newcomers still waiting for a place or
// in their handshake, are closed. After a delay, the listener closes
// first, and Shutdown waits until the HTTP/1 clients have let go of their
// kept-alive connections, for at most maxLetGoWait: closing one idle
// races with a review being written into it, which then fails.
func (s *server) serve(ctx context.Context) error {
	metricsErr := make(chan error, 1)
	if s.metrics != nil {
		go func() {
			metricsErr <- fmt.Errorf("serving metrics on %s: %w", s.metricsLn.Addr(), s.metrics.Serve(s.metricsLn))
		}()
		// On every way out; after the graceful Shutdown below it is a no-op.
		defer s.metrics.Close()
		s.logger.Info("serving metrics", "addr", s.metricsLn.Addr().String(), "path", "/metrics")
	}
	s.serving.Store(true)
	reviewsErr := make(chan error, 1)
	go func() { reviewsErr <- s.reviews.Serve(s.listener) }()
	cfg := s.cfg
	routes := []string{"/mutate", "/validate"}
	for _, r := range cfg.routes {
		routes = append(routes, r.Path)
	}
	s.logger.Info("serving", "addr", s.listener.Addr().String(), "version", buildVersion(), "routes", routes, "mtls", cfg.clientCAFile != "", "http2", cfg.http2,
		"max_inflight_bytes", cfg.maxInflightBytes, "memory_limit", debug.SetMemoryLimit(-1))
	// What the policy enforces, and where an operator's flag replaced the
	// defaults policy.go gives: a rule on by default is gone once a flag of
	// its kind is given.
	s.logger.Info("policy in force", "policy", cfg.policy)
	for _, r := range cfg.replacedDefaults {
		s.logger.Info("a policy flag replaced its defaults", "flag", "-"+r.flag, "defaults", r.defaults)
	}

	defer logRefusals(s.logger, s.bodyBudget.Stats, refusalSummaryInterval)()

	// Certificates are re-read on a timer and on SIGHUP, until shutdown.
	stopReloading := reload.Poll(certPollInterval, func() { s.logger.Info("SIGHUP: re-reading certificates") }, func() {
		for _, r := range s.reloadables {
			r.reloadIfChanged()
		}
	})
	defer stopReloading()

	servingErr := func(err error) error { return fmt.Errorf("serving on %s: %w", s.listener.Addr(), err) }
	select {
	case err := <-reviewsErr:
		return servingErr(err)
	case err := <-metricsErr:
		return err
	case <-ctx.Done():
	}

	// Drain: fail readiness so the endpoint is removed, and close each
	// connection after its next response so clients move to other
	// replicas, while still answering everything that arrives.
	s.serving.Store(false)
	s.logger.Info("shutting down: /ping fails and every answer closes its connection while endpoints drain", "shutdown_delay", cfg.shutdownDelay)
	closing := "shutting down: closing the listener and waiting for requests in flight"
	if cfg.shutdownDelay > 0 {
		select {
		case <-time.After(cfg.shutdownDelay):
		case err := <-reviewsErr:
			return servingErr(err)
		case err := <-metricsErr:
			return err
		}
		s.logger.Info("shutting down: closing the listener and waiting for clients to let go of kept-alive connections", "at_most", maxLetGoWait)
		s.listener.Close()
		if err := <-reviewsErr; !errors.Is(err, net.ErrClosed) {
			return servingErr(err)
		}
		if open := s.http1Conns.waitLetGo(keptAliveWait, maxLetGoWait); open > 0 {
			s.logger.Info("shutting down: done waiting for clients to let go of kept-alive connections", "still_open", open)
		}
		closing = "shutting down: waiting for requests in flight"
	}
	s.logger.Info(closing, "timeout", shutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := s.reviews.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	// Metrics are served to the end, so the last scrape sees the drain.
	if s.metrics != nil {
		if err := s.metrics.Shutdown(shutdownCtx); err != nil {
			return fmt.Errorf("shutting down the metrics server: %w", err)
		}
	}
	s.logger.Info("stopped")
	return nil
}

// openConns is a server's open HTTP/1 connections, and since when each
// has been idle, which shutdown waits on. HTTP/2 ones are left out:
// Shutdown's GOAWAY moves their clients off without a race.
type openConns struct {
	mu   sync.Mutex
	idle map[net.Conn]time.Time // zero while a request is being served
}

// track is the server's ConnState hook. A connection is new once its
// handshake is done (limits.Listener), so its protocol is known.
func (o *openConns) track(c net.Conn, state http.ConnState) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch state {
	case http.StateNew:
		if tc, ok := c.(*tls.Conn); !ok || tc.ConnectionState().NegotiatedProtocol != "h2" {
			o.idle[c] = time.Now()
		}
	case http.StateActive: // for HTTP/2 connections too, which are not in idle
		if _, ok := o.idle[c]; ok {
			o.idle[c] = time.Time{}
		}
	case http.StateIdle:
		if _, ok := o.idle[c]; ok {
			o.idle[c] = time.Now()
		}
	case http.StateClosed, http.StateHijacked:
		delete(o.idle, c)
	}
}

// waitLetGo waits until each open connection is closed, or has been idle
// for keep, after which its client no longer holds it; for at most atMost.
// It returns how many are still open.
func (o *openConns) waitLetGo(keep, atMost time.Duration) int {
	deadline := time.Now().Add(atMost)
	for {
		o.mu.Lock()
		open, held := len(o.idle), 0
		for _, since := range o.idle {
			if since.IsZero() || time.Since(since) < keep {
				held++
			}
		}
		o.mu.Unlock()
		if held == 0 || !time.Now().Before(deadline) {
			return open
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// serverErrorLog is net/http's error log, as warnings. Failed TLS
// handshakes, one per connection of a client that sends nothing or not
// TLS, are not in it: the listener does the handshakes, and counts those
// that fail (webhook_connections_closed_total{reason="handshake"}).
func serverErrorLog(logger *slog.Logger) *log.Logger {
	return log.New(logWriterFunc(func(p []byte) (int, error) {
		logger.Warn(strings.TrimSuffix(string(p), "\n"))
		return len(p), nil
	}), "", 0)
}

type logWriterFunc func([]byte) (int, error)

func (f logWriterFunc) Write(p []byte) (int, error) { return f(p) }

// loadOrCreateKeyPair loads the serving certificate, first making a
// development one when none is configured and the default does not exist,
// or is a development one that has expired, so that a new user's `go run .`
// serves at once, and again after DevValidity.
func loadOrCreateKeyPair(cfg config, logger *slog.Logger, m *metrics) (*reloadable[tls.Certificate], error) {
	if !cfg.certConfigured {
		made := "" // a user's, or one still valid: loaded as it is
		if _, err := os.Stat(cfg.certFile); errors.Is(err, fs.ErrNotExist) {
			made = "no certificate configured: made"
		} else if old, err := tls.LoadX509KeyPair(cfg.certFile, cfg.keyFile); err == nil && old.Leaf.Issuer.CommonName == certs.DevCAName && !time.Now().Before(old.Leaf.NotAfter) {
			made = "the development certificate in tls/ expired: made anew"
		}
		if made != "" {
			if err := certs.WriteDev("tls", time.Now()); err != nil {
				return nil, fmt.Errorf("making a development certificate in tls/: %w", err)
			}
			logger.Info(made+" a development CA and a certificate for localhost in tls/; trust tls/ca.crt", "hosts", certs.DevHosts, "valid_for", certs.DevValidity.String())
		}
	}
	pair := newKeyPairReloader(cfg.certFile, cfg.keyFile, logger, m)
	if _, err := pair.load(); err != nil {
		return nil, fmt.Errorf("-tls-cert-file %s, -tls-private-key-file %s: %w", cfg.certFile, cfg.keyFile, err)
	}
	return pair, nil
}
