// Command limit is the fastest a net/http admission webhook can be on this
// machine: the webhook's TLS and server settings, a handler that reads the
// whole body and answers one fixed, valid review without looking at it.
// The benchmark measures the webhook as a ratio to it.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// review is a valid v1 answer; its uid is not the request's, which the
// apiserver would reject, but a load generator does not check.
var review = []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"00000000-0000-0000-0000-000000000000","allowed":true}}`)

func main() {
	listen := flag.String("listen", "127.0.0.1:9443", "address")
	certFile := flag.String("tls-cert-file", "tls.crt", "certificate")
	keyFile := flag.String("tls-private-key-file", "tls.key", "key")
	flag.Parse()
	pair, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "limit:", err)
		os.Exit(1)
	}
	// The same settings as the webhook's main.go and serving.go.
	srv := &http.Server{
		Addr: *listen,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 7<<20))
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(review)
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    16 << 10,
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			CipherSuites: []uint16{
				tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
				tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
				tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
			},
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &pair, nil },
			NextProtos:     []string{"http/1.1"},
		},
	}
	fmt.Fprintln(os.Stderr, "limit: serving on", *listen)
	if err := srv.ListenAndServeTLS("", ""); err != nil {
		fmt.Fprintln(os.Stderr, "limit:", err)
		os.Exit(1)
	}
}
