package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/example/webhook/reload"
)

const (
	// certPollInterval is how often the certificate files are read for a
	// change (reload says why reading beats watching): two small files
	// every two seconds cost nothing.
	certPollInterval = 2 * time.Second

	// expiryWarning is how close to NotAfter a loaded certificate makes the
	// log warn: cert-manager renews at two thirds of the lifetime, so this
	// close means renewal is not happening.
	expiryWarning = 7 * 24 * time.Hour
)

// reloadable is a certificate or a CA pool kept current from its files
// (reload.Files), each load logged and its expiry in the metrics.
type reloadable[T any] struct {
	*reload.Files[T, loaded]
	what       string // names it in logs: "serving certificate", "client CA"
	logger     *slog.Logger
	metrics    *metrics // each load's expiry and each failed reload,
	metricName string   // under this name: "serving", "client-ca"
}

func newReloadable[T any](what, metricName string, logger *slog.Logger, m *metrics, parse func([][]byte) (*T, loaded, error), files ...string) *reloadable[T] {
	return &reloadable[T]{Files: reload.New(what, parse, files...), what: what, logger: logger, metrics: m, metricName: metricName}
}

// loaded is what a parse found besides the value: what to log, and the
// expiry.
type loaded struct {
	attrs    []any
	notAfter time.Time
}

// load loads the files if they changed (reload.Files.Load), and logs and
// counts a new value.
func (r *reloadable[T]) load() (changed bool, err error) {
	changed, info, err := r.Load()
	if changed && err == nil {
		r.metrics.certificate(r.metricName, info.notAfter)
		r.logger.Info("loaded the "+r.what, info.attrs...)
	}
	return changed, err
}

// reloadIfChanged is load for a running server: a change that does not
// load keeps the last good value serving, and says why.
func (r *reloadable[T]) reloadIfChanged() {
	if _, err := r.load(); err != nil {
		r.metrics.reloadFailed(r.metricName)
		r.logger.Error("keeping the last good "+r.what, "err", err)
	}
}

// newKeyPairReloader loads the serving certificate and key, and logs which
// one is served.
func newKeyPairReloader(certFile, keyFile string, logger *slog.Logger, m *metrics) *reloadable[tls.Certificate] {
	return newReloadable("serving certificate", "serving", logger, m, func(c [][]byte) (*tls.Certificate, loaded, error) {
		pair, err := tls.X509KeyPair(c[0], c[1])
		if err != nil {
			return nil, loaded{}, err
		}
		leaf := pair.Leaf // parsed by X509KeyPair
		attrs := []any{"subject", leaf.Subject.String(), "dns_names", leaf.DNSNames, "ip_addresses", leaf.IPAddresses, "not_after", leaf.NotAfter}
		warnIfExpiring(logger, "serving certificate", leaf)
		return &pair, loaded{attrs, leaf.NotAfter}, nil
	}, certFile, keyFile)
}

// newCAReloader loads a PEM bundle of CA certificates, such as the client
// CA; metricName names it in the metrics.
func newCAReloader(what, metricName, file string, logger *slog.Logger, m *metrics) *reloadable[x509.CertPool] {
	return newReloadable(what, metricName, logger, m, func(c [][]byte) (*x509.CertPool, loaded, error) {
		pool := x509.NewCertPool()
		var subjects []string
		var firstExpiry time.Time
		for rest := c[0]; ; {
			var block *pem.Block
			if block, rest = pem.Decode(rest); block == nil {
				if len(bytes.TrimSpace(rest)) > 0 {
					return nil, loaded{}, errors.New("trailing data that is not PEM")
				}
				break
			}
			if block.Type != "CERTIFICATE" {
				continue
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, loaded{}, err
			}
			pool.AddCert(cert)
			subjects = append(subjects, cert.Subject.String())
			if firstExpiry.IsZero() || cert.NotAfter.Before(firstExpiry) {
				firstExpiry = cert.NotAfter
			}
			warnIfExpiring(logger, what, cert)
		}
		if len(subjects) == 0 {
			return nil, loaded{}, errors.New("no PEM certificate in it")
		}
		return pool, loaded{[]any{"subjects", subjects}, firstExpiry}, nil
	}, file)
}

func warnIfExpiring(logger *slog.Logger, what string, cert *x509.Certificate) {
	if left := time.Until(cert.NotAfter); left < expiryWarning {
		logger.Warn("the "+what+" expires soon; renew it", "subject", cert.Subject.String(), "not_after", cert.NotAfter, "left", left.Round(time.Minute))
	}
}

// tlsMinVersions are the values -tls-min-version takes.
var tlsMinVersions = map[string]uint16{"1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13}

// tls12CipherSuites are the TLS 1.2 suites offered: ECDHE with AEAD only,
// for ECDSA and RSA certificates alike (a user's CA may issue either). TLS
// 1.3's are not configurable and all qualify.
var tls12CipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// newTLSConfig serves pair's current key pair, which must be loaded, and,
// when clientCAs is set, verifies a client certificate if one is given:
// only requested at the handshake, as kubelet probes /ping without one, so
// requireClient decides per route. One that does not verify fails it.
func newTLSConfig(minVersion uint16, http2 bool, pair *reloadable[tls.Certificate], clientCAs *reloadable[x509.CertPool]) *tls.Config {
	cfg := &tls.Config{
		MinVersion:   minVersion,
		CipherSuites: tls12CipherSuites,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return pair.Get(), nil
		},
		// The apiserver speaks HTTP/1.1 to every service-mode webhook and
		// every non-loopback URL; offering h2 would only add attack surface.
		NextProtos: []string{"http/1.1"},
	}
	if http2 {
		cfg.NextProtos = []string{"h2", "http/1.1"}
	}
	if clientCAs != nil {
		cfg.ClientAuth = tls.RequestClientCert
		// Called for every handshake, resumed ones included, so a change of
		// the client CA file applies to every new connection.
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return nil
			}
			intermediates := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots:         clientCAs.Get(),
				Intermediates: intermediates,
				KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			})
			return err
		}
	}
	return cfg
}

// requireClient lets a request through only with a client certificate,
// verified at the handshake, whose Common Name is in allowed (any, when
// empty), as kube-apiserver's --requestheader-client-ca-file and
// --requestheader-allowed-names do. Each refusal is counted, and logged at
// most refusalLogBurst times a refusalLogInterval with how many went
// unlogged: any client that reaches the port can send requests without a
// certificate, and must not be able to flood the log.
func requireClient(logger *slog.Logger, m *metrics, allowed []string, next http.Handler) http.Handler {
	logs := &logLimiter{burst: refusalLogBurst, interval: refusalLogInterval}
	refuse := func(w http.ResponseWriter, r *http.Request, reason, why string, code int, message string, attrs ...any) {
		m.clientRefused(reason)
		if ok, unlogged := logs.allow(time.Now()); ok {
			logger.Warn(why, append(attrs, "path", r.URL.Path, "remote", r.RemoteAddr, "unlogged_before", unlogged)...)
		}
		writeStatus(w, code, message)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			refuse(w, r, "missing", "refused a request without a client certificate", http.StatusUnauthorized, "a client certificate signed by the webhook's client CA is required")
			return
		}
		cn := r.TLS.PeerCertificates[0].Subject.CommonName
		if len(allowed) > 0 && !slices.Contains(allowed, cn) {
			refuse(w, r, "name", "refused a client certificate whose name is not allowed", http.StatusForbidden, fmt.Sprintf("client certificate name %q is not in -allowed-client-names", cn), "common_name", cn)
			return
		}
		next.ServeHTTP(w, r)
	})
}

const (
	// refusalLogBurst and refusalLogInterval bound the log lines of
	// refused client certificates: enough to see who is refused, too few
	// to flood anything.
	refusalLogBurst    = 5
	refusalLogInterval = time.Minute
)

// logLimiter lets at most burst lines a interval through, and counts those
// it holds back.
type logLimiter struct {
	burst    int
	interval time.Duration

	mu       sync.Mutex
	since    time.Time // the interval's start
	logged   int       // in the interval
	unlogged int       // since the last line let through
}

// allow reports whether a line may be logged now, and how many were held
// back since the last one that was.
func (l *logLimiter) allow(now time.Time) (ok bool, unlogged int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.since) >= l.interval {
		l.since, l.logged = now, 0
	}
	if l.logged >= l.burst {
		l.unlogged++
		return false, 0
	}
	l.logged++
	unlogged, l.unlogged = l.unlogged, 0
	return true, unlogged
}
