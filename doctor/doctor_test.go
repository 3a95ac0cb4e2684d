package doctor

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// runDoctorCmd runs `webhook doctor args...` as main would, with input on
// stdin, and returns what it wrote and the exit status main would give.
func runDoctorCmd(t *testing.T, input string, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := Run(context.Background(), args, strings.NewReader(input), &out, &errOut)
	var exit *ExitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		status = 0
	case errors.As(err, &exit):
		status = exit.Code
		if exit.Err != nil {
			fmt.Fprintln(&errOut, "webhook:", exit.Err)
		}
	default:
		t.Fatalf("webhook doctor %v returned %v, which main would exit 1 on; want an ExitError", args, err)
	}
	return out.String(), errOut.String(), status
}

// doctorJSON runs doctor with -o json and decodes the report.
func doctorJSON(t *testing.T, input string, args ...string) (jsonReport, int) {
	t.Helper()
	out, errOut, status := runDoctorCmd(t, input, append(args, "-f", "-", "-o", "json")...)
	var rep jsonReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("-o json wrote %q (stderr %q): %v", out, errOut, err)
	}
	return rep, status
}

// levels maps "webhook/check" to its level; a check reported more than once
// keeps its worst level.
func levels(rep jsonReport) map[string]level {
	rank := map[level]int{levelPass: 0, levelWarn: 1, levelFail: 2}
	m := map[string]level{}
	for _, f := range rep.Findings {
		k := f.Webhook + "/" + f.Check
		if old, ok := m[k]; !ok || rank[f.Level] > rank[old] {
			m[k] = f.Level
		}
	}
	return m
}

// findingOf returns the worst finding of check for webhook.
func findingOf(t *testing.T, rep jsonReport, webhook, check string) finding {
	t.Helper()
	var got *finding
	for i, f := range rep.Findings {
		if f.Webhook == webhook && f.Check == check && (got == nil || f.Level == levelFail || f.Level == levelWarn && got.Level == levelPass) {
			got = &rep.Findings[i]
		}
	}
	if got == nil {
		t.Fatalf("no finding %s for %q in %+v", check, webhook, rep.Findings)
	}
	return *got
}

// wantOnly checks that exactly the checks in want (webhook/check → level)
// are not passes: every other finding passed.
func wantOnly(t *testing.T, rep jsonReport, want map[string]level) {
	t.Helper()
	got := map[string]level{}
	for k, l := range levels(rep) {
		if l != levelPass {
			got[k] = l
		}
	}
	if !reflect.DeepEqual(got, want) {
		var lines []string
		for _, f := range rep.Findings {
			lines = append(lines, fmt.Sprintf("%s %s/%s: %s", f.Level, f.Webhook, f.Check, f.Found))
		}
		t.Errorf("got failures and warnings %v, want %v; findings:\n%s", got, want, strings.Join(lines, "\n"))
	}
}

// testHook is one webhook for a test configuration: a ValidatingWebhook,
// made mutating on request.
type testHook struct {
	admissionregistrationv1.ValidatingWebhook
	mutating     bool
	reinvocation *admissionregistrationv1.ReinvocationPolicyType
}

// goodHook is a webhook the apiserver would call happily at url: trusted
// through ca, scoped away from kube-system, no side effects, v1.
func goodHook(name, url string, ca []byte) testHook {
	none := admissionregistrationv1.SideEffectClassNone
	fail := admissionregistrationv1.Fail
	timeout := int32(5)
	return testHook{ValidatingWebhook: admissionregistrationv1.ValidatingWebhook{
		Name:         name,
		ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
		}},
		FailurePolicy: &fail,
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: namespaceNameLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system"},
		}}},
		SideEffects:             &none,
		TimeoutSeconds:          &timeout,
		AdmissionReviewVersions: []string{"v1"},
	}}
}

// configJSON writes each hook as a configuration of its own, one JSON
// document after another.
func configJSON(t *testing.T, hooks ...testHook) string {
	t.Helper()
	var b strings.Builder
	for _, h := range hooks {
		var obj any
		if h.mutating {
			w := h.ValidatingWebhook
			obj = &admissionregistrationv1.MutatingWebhookConfiguration{
				TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
				ObjectMeta: metav1.ObjectMeta{Name: h.Name},
				Webhooks: []admissionregistrationv1.MutatingWebhook{{
					Name: w.Name, ClientConfig: w.ClientConfig, Rules: w.Rules, FailurePolicy: w.FailurePolicy, MatchPolicy: w.MatchPolicy,
					NamespaceSelector: w.NamespaceSelector, ObjectSelector: w.ObjectSelector, SideEffects: w.SideEffects,
					TimeoutSeconds: w.TimeoutSeconds, AdmissionReviewVersions: w.AdmissionReviewVersions, ReinvocationPolicy: h.reinvocation,
				}},
			}
		} else {
			obj = &admissionregistrationv1.ValidatingWebhookConfiguration{
				TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
				ObjectMeta: metav1.ObjectMeta{Name: h.Name},
				Webhooks:   []admissionregistrationv1.ValidatingWebhook{h.ValidatingWebhook},
			}
		}
		out, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(out)
		b.WriteString("\n")
	}
	return b.String()
}

// newDoctorPKI is a serving CA and a client CA that live a year, so that
// caBundle is not flagged as expiring.
func newDoctorPKI(t *testing.T) testPKI {
	t.Helper()
	var p testPKI
	for _, ca := range []struct {
		kp   **keyPair
		name string
	}{{&p.servingCA, "test serving CA"}, {&p.clientCA, "test client CA"}} {
		var err error
		if *ca.kp, err = newCA(ca.name, time.Now(), 365*24*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// servingPair makes a serving certificate of ca for hosts.
func servingPair(t *testing.T, ca *keyPair, hosts ...string) *keyPair {
	t.Helper()
	kp, err := newServingCert(ca, hosts, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// startTLS serves h over TLS on loopback with kp, with configure applied to
// the server's TLS configuration.
func startTLS(t *testing.T, kp *keyPair, h http.Handler, configure ...func(*tls.Config)) *httptest.Server {
	t.Helper()
	pair, err := tls.X509KeyPair(kp.certPEM, kp.keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // doctor's probes close connections early
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	for _, c := range configure {
		c(srv.TLS)
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// answering is a webhook that answers every review with answer(apiVersion,
// uid), after waiting delay.
func answering(delay time.Duration, answer func(apiVersion, uid string) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			APIVersion string `json:"apiVersion"`
			Request    struct {
				UID string `json:"uid"`
			} `json:"request"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			// Given up on: answer nothing, as a webhook still at work
			// would. (Returning would send an empty 200, which the client,
			// its deadline passed that instant, may take: CI saw it once,
			// loaded, as "webhook response was absent".)
			panic(http.ErrAbortHandler)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer(in.APIVersion, in.Request.UID))
	})
}

// review is an answer in apiVersion with response fields.
func review(apiVersion, response string) string {
	return fmt.Sprintf(`{"apiVersion":%q,"kind":"AdmissionReview","response":%s}`, apiVersion, response)
}

func TestDoctorHealthyWebhookPasses(t *testing.T) {
	pki := newDoctorPKI(t)
	srv := startTLS(t, servingPair(t, pki.servingCA, loopbackHosts...), modelWebhook())
	m := goodHook("mutate.example.com", srv.URL+"/mutate", pki.servingCA.certPEM)
	m.mutating = true
	m.AdmissionReviewVersions = []string{"v1", "v1beta1"}
	v := goodHook("validate.example.com", srv.URL+"/validate", pki.servingCA.certPEM)
	v.AdmissionReviewVersions = []string{"v1", "v1beta1"}

	rep, status := doctorJSON(t, configJSON(t, m, v))
	if status != 0 {
		t.Errorf("got exit status %d, want 0", status)
	}
	wantOnly(t, rep, map[string]level{})
	for _, check := range []string{"caBundle", "target", "tls", "tls.client", "tls.trust", "tls.name", "tls.validity", "tls.usage",
		"review.v1", "review.v1beta1", "latency.v1", "latency.v1beta1", "failurePolicy", "sideEffects", "rules", "admissionReviewVersions"} {
		for _, hook := range []string{m.Name, v.Name} {
			findingOf(t, rep, hook, check)
		}
	}
	// The mutating webhook patched doctor's Deployment, and the patch applied.
	if f := findingOf(t, rep, m.Name, "patch.v1"); !strings.Contains(f.Found, "add /metadata/labels") {
		t.Errorf("patch.v1: got %q, want the operation named", f.Found)
	}
	// The validating webhook denied it, which is an answer, not a failure.
	if f := findingOf(t, rep, v.Name, "review.v1"); !strings.Contains(f.Found, "denied with 403") || !strings.Contains(f.Found, "Deployment default/webhook-doctor") {
		t.Errorf("review.v1: got %q, want the denial of doctor's Deployment", f.Found)
	}
	if f := findingOf(t, rep, m.Name, "tls"); !strings.Contains(f.Found, "offered h2, http/1.1") {
		t.Errorf("tls for a loopback URL: got %q, want h2 offered as the apiserver offers it", f.Found)
	}
	if rep.Summary.Webhooks != 2 || rep.Summary.Fail != 0 || rep.Summary.Pass != len(rep.Findings)-rep.Summary.Warn {
		t.Errorf("got summary %+v for %d findings", rep.Summary, len(rep.Findings))
	}
}

func TestDoctorRoundTrip(t *testing.T) {
	pki := newDoctorPKI(t)
	kp := servingPair(t, pki.servingCA, loopbackHosts...)
	const hook = "hook.example.com"
	tests := []struct {
		name     string
		mutating bool
		versions []string
		timeout  int32
		handler  http.Handler
		want     map[string]level // the checks that do not pass
		wantIn   string           // what the first of them says
		status   int
	}{
		{
			name:    "answer without uid",
			handler: answering(0, func(v, _ string) string { return review(v, `{"allowed":true}`) }),
			want:    map[string]level{hook + "/review.v1": levelFail}, wantIn: `expected response.uid=`, status: 1,
		},
		{
			name: "answer in the wrong version",
			handler: answering(0, func(_, uid string) string {
				return review("admission.k8s.io/v1beta1", `{"uid":"`+uid+`","allowed":true}`)
			}),
			want: map[string]level{hook + "/review.v1": levelFail}, wantIn: "(it is admission.k8s.io/v1beta1 AdmissionReview)", status: 1,
		},
		{
			name:    "answer without apiVersion and kind",
			handler: answering(0, func(_, uid string) string { return `{"response":{"uid":"` + uid + `","allowed":true}}` }),
			want:    map[string]level{hook + "/review.v1": levelFail}, wantIn: "got /, Kind=", status: 1,
		},
		{
			name: "answer that would move the terminal",
			handler: answering(0, func(_, uid string) string {
				return `{"apiVersion":"admission.k8s.io/v1\u001b[2J","kind":"AdmissionReview","response":{"uid":"` + uid + `","allowed":true}}`
			}),
			want: map[string]level{hook + "/review.v1": levelFail}, wantIn: "(it is admission.k8s.io/v1[2J AdmissionReview)", status: 1,
		},
		{
			name:    "answer without response",
			handler: answering(0, func(v, _ string) string { return `{"apiVersion":"` + v + `","kind":"AdmissionReview"}` }),
			want:    map[string]level{hook + "/review.v1": levelFail}, wantIn: "webhook response was absent", status: 1,
		},
		{
			name:     "patch that does not apply",
			mutating: true,
			handler: answering(0, func(v, uid string) string {
				return review(v, `{"uid":"`+uid+`","allowed":true,"patchType":"JSONPatch","patch":"`+b64(`[{"op":"add","path":"/metadata/annotations/a~1b","value":"c"}]`)+`"}`)
			}),
			want: map[string]level{hook + "/patch.v1": levelFail}, wantIn: `add operation does not apply: doc is missing path: "/metadata/annotations/a~1b"`, status: 1,
		},
		{
			name:     "patch without patchType",
			mutating: true,
			handler: answering(0, func(v, uid string) string {
				return review(v, `{"uid":"`+uid+`","allowed":true,"patch":"`+b64(`[]`)+`"}`)
			}),
			want: map[string]level{hook + "/review.v1": levelFail}, wantIn: "webhook returned response.patch but not response.patchType", status: 1,
		},
		{
			name:     "patch of another type",
			mutating: true,
			handler: answering(0, func(v, uid string) string {
				return review(v, `{"uid":"`+uid+`","allowed":true,"patchType":"MergePatch","patch":"`+b64(`{}`)+`"}`)
			}),
			want: map[string]level{hook + "/patch.v1": levelFail}, wantIn: `unsupported patch type "MergePatch"`, status: 1,
		},
		{
			name: "validating webhook that patches",
			handler: answering(0, func(v, uid string) string {
				return review(v, `{"uid":"`+uid+`","allowed":true,"patchType":"JSONPatch","patch":"`+b64(`[]`)+`"}`)
			}),
			want: map[string]level{hook + "/review.v1": levelFail}, wantIn: "validating webhook may not return response.patch", status: 1,
		},
		{
			name: "HTTP 500 with a Status",
			handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				writeStatus(w, http.StatusInternalServerError, "the policy store is down")
			}),
			want: map[string]level{hook + "/review.v1": levelFail}, wantIn: `HTTP 500, a Status saying "the policy store is down"`, status: 1,
		},
		{
			name:    "no handler at the path",
			handler: http.NotFoundHandler(),
			want:    map[string]level{hook + "/review.v1": levelFail}, wantIn: "HTTP 404", status: 1,
		},
		{
			name:    "slower than timeoutSeconds",
			timeout: 1,
			handler: answering(3*time.Second, func(v, uid string) string { return review(v, `{"uid":"`+uid+`","allowed":true}`) }),
			want:    map[string]level{hook + "/review.v1": levelFail}, wantIn: "context deadline exceeded", status: 1,
		},
		{
			name:    "slower than half of timeoutSeconds",
			timeout: 1,
			handler: answering(600*time.Millisecond, func(v, uid string) string { return review(v, `{"uid":"`+uid+`","allowed":true}`) }),
			want:    map[string]level{hook + "/latency.v1": levelWarn}, wantIn: "more than half of timeoutSeconds (1s)", status: 0,
		},
		{
			name:     "wrong only in a version the apiserver does not send",
			versions: []string{"v1", "v1beta1"},
			handler:  answering(0, func(_, uid string) string { return review("admission.k8s.io/v1", `{"uid":"`+uid+`","allowed":true}`) }),
			want:     map[string]level{hook + "/review.v1beta1": levelWarn}, wantIn: "The apiserver sends v1, the first version listed that it knows", status: 0,
		},
		{
			name:     "v1beta1 checks neither uid nor kind",
			versions: []string{"v1beta1"},
			handler:  answering(0, func(v, _ string) string { return `{"apiVersion":"` + v + `","response":{"allowed":true}}` }),
			want:     map[string]level{hook + "/admissionReviewVersions": levelWarn}, wantIn: "has no v1", status: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := startTLS(t, kp, tc.handler)
			h := goodHook(hook, srv.URL+"/admit", pki.servingCA.certPEM)
			h.mutating = tc.mutating
			if tc.versions != nil {
				h.AdmissionReviewVersions = tc.versions
			}
			if tc.timeout != 0 {
				h.TimeoutSeconds = &tc.timeout
			}
			rep, status := doctorJSON(t, configJSON(t, h))
			if status != tc.status {
				t.Errorf("got exit status %d, want %d", status, tc.status)
			}
			wantOnly(t, rep, tc.want)
			for k := range tc.want {
				check := strings.TrimPrefix(k, hook+"/")
				f := findingOf(t, rep, hook, check)
				if !strings.Contains(f.Found, tc.wantIn) {
					t.Errorf("%s: got %q, want it to say %q", check, f.Found, tc.wantIn)
				}
				if f.Level == levelFail && f.Fix == "" {
					t.Errorf("%s failed with no fix", check)
				}
			}
		})
	}
}

func b64(s string) string {
	out, _ := json.Marshal([]byte(s)) // []byte encodes as a base64 JSON string
	return strings.Trim(string(out), `"`)
}

func TestDoctorConnection(t *testing.T) {
	pki := newDoctorPKI(t)
	kp := servingPair(t, pki.servingCA, loopbackHosts...)

	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		rep, status := doctorJSON(t, configJSON(t, goodHook("down.example.com", "https://"+addr+"/validate", pki.servingCA.certPEM)))
		if status != 1 {
			t.Errorf("got exit status %d, want 1", status)
		}
		wantOnly(t, rep, map[string]level{"down.example.com/tls": levelFail})
		if f := findingOf(t, rep, "down.example.com", "tls"); !strings.Contains(f.Found, "connection refused: nothing listens on "+addr) {
			t.Errorf("got %q, want connection refused named", f.Found)
		}
	})

	t.Run("plain HTTP", func(t *testing.T) {
		srv := httptest.NewServer(modelWebhook())
		t.Cleanup(srv.Close)
		url := strings.Replace(srv.URL, "http://", "https://", 1) + "/validate"
		rep, _ := doctorJSON(t, configJSON(t, goodHook("plain.example.com", url, pki.servingCA.certPEM)))
		if f := findingOf(t, rep, "plain.example.com", "tls"); f.Level != levelFail || !strings.Contains(f.Found, "does not speak TLS") {
			t.Errorf("got %s %q, want a failure saying it does not speak TLS", f.Level, f.Found)
		}
	})

	t.Run("client certificate", func(t *testing.T) {
		requestOnly := func(c *tls.Config) { c.ClientAuth = tls.RequestClientCert }
		requireOne := func(c *tls.Config) { c.ClientAuth = tls.RequireAnyClientCert }
		otherClientCA, err := newCA("another client CA", time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		trustsOtherCA := func(c *tls.Config) {
			c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, x509.NewCertPool()
			c.ClientCAs.AddCert(otherClientCA.cert)
		}
		dir := t.TempDir()
		client, err := issue(&x509.Certificate{
			Subject: pkix.Name{CommonName: "kube-apiserver"}, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}, pki.clientCA)
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
		writeFile(t, certFile, client.certPEM)
		writeFile(t, keyFile, client.keyPEM)

		for _, tc := range []struct {
			name      string
			configure func(*tls.Config)
			args      []string
			want      map[string]level
			clientIn  string
		}{
			{"not asked", func(*tls.Config) {}, nil, map[string]level{}, "did not ask"},
			{"asked, none given", requestOnly, nil, map[string]level{"c.example.com/tls.client": levelWarn}, "doctor presented none"},
			{"asked and given", requestOnly, []string{"-client-cert", certFile, "-client-key", keyFile}, map[string]level{}, `presented "CN=kube-apiserver"`},
			{"required, none given", requireOne, nil, map[string]level{"c.example.com/tls.client": levelWarn, "c.example.com/review.v1": levelFail}, "doctor presented none"},
			// The webhook trusts another CA than the one that signed
			// doctor's certificate: in TLS 1.3 the refusal comes after
			// doctor's side of the handshake is done.
			{"given, from another CA", trustsOtherCA, []string{"-client-cert", certFile, "-client-key", keyFile},
				map[string]level{"c.example.com/tls.client": levelFail, "c.example.com/review.v1": levelFail}, `refused the one doctor presented, "CN=kube-apiserver" issued by "CN=test client CA"`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				srv := startTLS(t, kp, modelWebhook(), tc.configure)
				rep, _ := doctorJSON(t, configJSON(t, goodHook("c.example.com", srv.URL+"/validate", pki.servingCA.certPEM)), tc.args...)
				wantOnly(t, rep, tc.want)
				if f := findingOf(t, rep, "c.example.com", "tls.client"); !strings.Contains(f.Found, tc.clientIn) {
					t.Errorf("tls.client: got %q, want %q", f.Found, tc.clientIn)
				}
				if f := findingOf(t, rep, "c.example.com", "review.v1"); strings.Contains(f.Fix, "check that the webhook is running") {
					t.Errorf("review.v1: got %q, fix %q; want the refusal named, not a webhook that is not running", f.Found, f.Fix)
				}
			})
		}
		// In TLS 1.2 the handshake itself fails.
		srv := startTLS(t, kp, modelWebhook(), trustsOtherCA, func(c *tls.Config) { c.MaxVersion = tls.VersionTLS12 })
		rep, _ := doctorJSON(t, configJSON(t, goodHook("c.example.com", srv.URL+"/validate", pki.servingCA.certPEM)), "-client-cert", certFile, "-client-key", keyFile)
		if f := findingOf(t, rep, "c.example.com", "tls"); f.Level != levelFail || !strings.Contains(f.Found, "refused the client certificate presented") || strings.Contains(f.Fix, "is running") {
			t.Errorf("TLS 1.2, a client certificate of another CA: got %s %q (%s), want the refusal named", f.Level, f.Found, f.Fix)
		}

		// The review call's own error need not be the alert: net/http can
		// report the connection as closed when its write meets the
		// webhook's close first. Here the TLS check meets the refusal, and
		// every later connection is closed after the handshake without an
		// alert, so the call sees only EOF; the refusal must still be named.
		pair, err := tls.X509KeyPair(kp.certPEM, kp.keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		refusing := &tls.Config{Certificates: []tls.Certificate{pair}}
		trustsOtherCA(refusing)
		silent := &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequestClientCert}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for first := true; ; first = false {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				config := silent
				if first {
					config = refusing
				}
				go func() {
					defer conn.Close()
					server := tls.Server(conn, config)
					if server.Handshake() == nil {
						_, _ = server.Read(make([]byte, 1)) // the refusal, or the request
					}
				}()
			}
		}()
		rep, _ = doctorJSON(t, configJSON(t, goodHook("c.example.com", "https://"+ln.Addr().String()+"/validate", pki.servingCA.certPEM)), "-client-cert", certFile, "-client-key", keyFile)
		if f := findingOf(t, rep, "c.example.com", "review.v1"); f.Level != levelFail || !strings.Contains(f.Found, "refused the client certificate presented") {
			t.Errorf("review.v1 after a refusal, its call closed without an alert: got %s %q (%s), want the refusal named", f.Level, f.Found, f.Fix)
		}
	})
}

func TestDoctorTLS(t *testing.T) {
	now := time.Now()
	pki := newDoctorPKI(t)
	// A CA valid for days on either side, for certificates dated in the
	// past or the future.
	longCA, err := newCA("long CA", now.Add(-120*time.Hour), 400*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := newCA("other CA", now, 365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sameNameCA, err := newCA("test serving CA", now, 365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(ca *keyPair, tmpl x509.Certificate) *keyPair {
		t.Helper()
		if tmpl.NotBefore.IsZero() {
			tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Minute), now.Add(time.Hour)
		}
		if tmpl.ExtKeyUsage == nil {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		}
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		kp, err := issue(&tmpl, ca)
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	tests := []struct {
		name     string
		serving  *keyPair
		caBundle []byte
		host     string // in the URL; 127.0.0.1 unless set
		check    string
		wantIn   []string
	}{
		{"caBundle from another CA", servingPair(t, pki.servingCA, loopbackHosts...), otherCA.certPEM, "", "tls.trust",
			[]string{`was issued by "CN=test serving CA"`, `the apiserver trusts only caBundle's "CN=other CA"`, "x509: certificate signed by unknown authority"}},
		{"caBundle from another CA of the same name", servingPair(t, pki.servingCA, loopbackHosts...), sameNameCA.certPEM, "", "tls.trust",
			[]string{`the apiserver trusts only caBundle's "CN=test serving CA"`, "Another CA of the same name signed it: the served certificate's authority key id is " + hex.EncodeToString(pki.servingCA.cert.SubjectKeyId),
				`caBundle's "CN=test serving CA" has subject key id ` + hex.EncodeToString(sameNameCA.cert.SubjectKeyId)}},
		{"certificate without the IP", servingPair(t, pki.servingCA, "webhook.example.com"), pki.servingCA.certPEM, "", "tls.name",
			[]string{"valid for DNS:webhook.example.com, not 127.0.0.1", "doesn't contain any IP SANs"}},
		{"certificate without the name", servingPair(t, pki.servingCA, "webhook.example.com"), pki.servingCA.certPEM, "localhost", "tls.name",
			[]string{"x509: certificate is valid for webhook.example.com, not localhost"}},
		{"Common Name only", leaf(pki.servingCA, x509.Certificate{Subject: pkix.Name{CommonName: "localhost"}}), pki.servingCA.certPEM, "localhost", "tls.name",
			[]string{`only the Common Name "localhost"`, "relies on legacy Common Name field"}},
		{"expired", leaf(longCA, x509.Certificate{Subject: pkix.Name{CommonName: "old"}, IPAddresses: loopback, NotBefore: now.Add(-96 * time.Hour), NotAfter: now.Add(-72 * time.Hour)}), longCA.certPEM, "", "tls.validity",
			[]string{`"CN=old" expired on`, "3 days ago", "x509: certificate has expired or is not yet valid"}},
		{"not yet valid", leaf(longCA, x509.Certificate{Subject: pkix.Name{CommonName: "new"}, IPAddresses: loopback, NotBefore: now.Add(24 * time.Hour), NotAfter: now.Add(48 * time.Hour)}), longCA.certPEM, "", "tls.validity",
			[]string{`"CN=new" is not valid before`}},
		{"no serverAuth", leaf(pki.servingCA, x509.Certificate{Subject: pkix.Name{CommonName: "client"}, IPAddresses: loopback, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}), pki.servingCA.certPEM, "", "tls.usage",
			[]string{"does not include serverAuth", "x509: certificate specifies an incompatible key usage"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := startTLS(t, tc.serving, modelWebhook())
			url := srv.URL + "/validate"
			if tc.host != "" {
				url = strings.Replace(url, "127.0.0.1", tc.host, 1)
			}
			rep, status := doctorJSON(t, configJSON(t, goodHook("tls.example.com", url, tc.caBundle)))
			if status != 1 {
				t.Errorf("got exit status %d, want 1", status)
			}
			// Only the check at fault fails: the review still went through.
			wantOnly(t, rep, map[string]level{"tls.example.com/" + tc.check: levelFail})
			f := findingOf(t, rep, "tls.example.com", tc.check)
			for _, want := range tc.wantIn {
				if !strings.Contains(f.Found, want) {
					t.Errorf("%s: got %q, want it to say %q", tc.check, f.Found, want)
				}
			}
		})
	}
}

func TestDoctorServiceMode(t *testing.T) {
	pki := newDoctorPKI(t)
	kp := servingPair(t, pki.servingCA, "webhook.webhook-system.svc")
	srv := startTLS(t, kp, modelWebhook())
	addr := strings.TrimPrefix(srv.URL, "https://")
	path, port := "/validate", int32(443)
	h := goodHook("svc.example.com", "", pki.servingCA.certPEM)
	h.ClientConfig = admissionregistrationv1.WebhookClientConfig{
		Service:  &admissionregistrationv1.ServiceReference{Namespace: "webhook-system", Name: "webhook", Path: &path, Port: &port},
		CABundle: pki.servingCA.certPEM,
	}
	h.NamespaceSelector.MatchExpressions[0].Values = []string{"kube-system", "webhook-system"}

	t.Run("without -address", func(t *testing.T) {
		rep, status := doctorJSON(t, configJSON(t, h))
		if status != 1 {
			t.Errorf("got exit status %d, want 1", status)
		}
		wantOnly(t, rep, map[string]level{"svc.example.com/tls": levelFail})
		if f := findingOf(t, rep, "svc.example.com", "tls"); !strings.Contains(f.Fix, "kubectl port-forward -n webhook-system svc/webhook 8443:443") || !strings.Contains(f.Fix, "-address 127.0.0.1:8443") {
			t.Errorf("got fix %q, want kubectl port-forward and -address", f.Fix)
		}
	})
	t.Run("with -address", func(t *testing.T) {
		rep, status := doctorJSON(t, configJSON(t, h), "-address", addr)
		if status != 0 {
			t.Errorf("got exit status %d, want 0", status)
		}
		wantOnly(t, rep, map[string]level{})
		if f := findingOf(t, rep, "svc.example.com", "tls.name"); !strings.Contains(f.Found, "valid for webhook.webhook-system.svc") {
			t.Errorf("tls.name: got %q, want the service name checked", f.Found)
		}
		if f := findingOf(t, rep, "svc.example.com", "tls"); !strings.Contains(f.Found, "(offered http/1.1)") {
			t.Errorf("tls: got %q, want only http/1.1 offered to a service", f.Found)
		}
	})
	t.Run("own namespace not excluded", func(t *testing.T) {
		h := h
		h.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: namespaceNameLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system"}}}}
		rep, _ := doctorJSON(t, configJSON(t, h), "-address", addr)
		wantOnly(t, rep, map[string]level{"svc.example.com/failurePolicy": levelFail})
		if f := findingOf(t, rep, "svc.example.com", "failurePolicy"); !strings.Contains(f.Found, "webhook-system (webhook-system is the webhook's own namespace)") {
			t.Errorf("got %q, want the own namespace named", f.Found)
		}
	})
}

// checkOne runs the checks that need no webhook on one, and returns its
// findings.
func checkOne(t *testing.T, config string) []finding {
	t.Helper()
	hooks, _, err := readWebhooks(strings.NewReader(config))
	if err != nil || len(hooks) != 1 {
		t.Fatalf("got %d webhooks, %v", len(hooks), err)
	}
	r := &report{hook: &hooks[0]}
	checkCABundle(r, &hooks[0], time.Now())
	checkTarget(r, &hooks[0], "")
	lintWebhook(r, &hooks[0])
	return r.findings
}

func TestDoctorConfigurationChecks(t *testing.T) {
	now := time.Now()
	pki := newDoctorPKI(t)
	expiring, err := newCA("expiring CA", now, 10*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	expired, err := newCA("expired CA", now.Add(-48*time.Hour), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	some, unknown := admissionregistrationv1.SideEffectClassSome, admissionregistrationv1.SideEffectClassUnknown
	ignore := admissionregistrationv1.Ignore
	tests := []struct {
		name   string
		change func(*testHook)
		check  string
		level  level
		wantIn string
	}{
		{"good", func(*testHook) {}, "", "", ""},
		{"caBundle expiring", func(h *testHook) { h.ClientConfig.CABundle = expiring.certPEM }, "caBundle", levelWarn, `"CN=expiring CA" (not_after`},
		// Each CA by its fingerprint, as openssl prints it: two CAs of one
		// name are told apart.
		{"caBundle's fingerprint", func(h *testHook) { h.ClientConfig.CABundle = expiring.certPEM }, "caBundle", levelWarn,
			"sha256 " + strings.ToUpper(strings.Join(regexp.MustCompile("..").FindAllString(fmt.Sprintf("%x", sha256.Sum256(expiring.cert.Raw)), -1), ":"))},
		{"caBundle expired", func(h *testHook) { h.ClientConfig.CABundle = expired.certPEM }, "caBundle", levelFail, `"CN=expired CA" expired on`},
		{"caBundle not PEM", func(h *testHook) { h.ClientConfig.CABundle = []byte("not a certificate") }, "caBundle", levelFail, "holds no PEM certificate"},
		{"caBundle with a key", func(h *testHook) { h.ClientConfig.CABundle = append(pki.servingCA.certPEM, pki.servingCA.keyPEM...) }, "caBundle", levelFail, "PEM block 2 is a PRIVATE KEY"},
		{"caBundle empty, URL", func(h *testHook) { h.ClientConfig.CABundle = nil }, "caBundle", levelWarn, "trusts its host's system roots"},
		{"http URL", func(h *testHook) { u := "http://127.0.0.1:8443/validate"; h.ClientConfig.URL = &u }, "target", levelFail, "'https' is the only allowed URL scheme"},
		{"URL with a query", func(h *testHook) { u := "https://127.0.0.1:8443/validate?x=1"; h.ClientConfig.URL = &u }, "target", levelFail, "query parameters are not permitted"},
		{"URL with user and fragment", func(h *testHook) { u := "https://me@127.0.0.1:8443/validate#x"; h.ClientConfig.URL = &u }, "target", levelFail, "user information is not permitted in the URL; fragments are not permitted"},
		{"service path with capitals", func(h *testHook) {
			p := "/Validate"
			h.ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "ns", Name: "svc", Path: &p}, CABundle: pki.servingCA.certPEM}
			h.NamespaceSelector.MatchExpressions[0].Values = []string{"kube-system", "ns"}
		}, "target", levelFail, "path segment[0]: a lowercase RFC 1123 subdomain"},
		{"service without caBundle", func(h *testHook) {
			h.ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "ns", Name: "svc"}}
			h.NamespaceSelector.MatchExpressions[0].Values = []string{"kube-system", "ns"}
		}, "caBundle", levelFail, "no public CA issues certificates for a .svc name"},
		{"no clientConfig target", func(h *testHook) { h.ClientConfig.URL = nil }, "target", levelFail, "neither url nor service"},
		{"Fail with no selector", func(h *testHook) { h.NamespaceSelector = nil }, "failurePolicy", levelFail, "neither namespaceSelector nor objectSelector excludes kube-system"},
		{"Fail with no failurePolicy set", func(h *testHook) { h.FailurePolicy, h.NamespaceSelector = nil, nil }, "failurePolicy", levelFail, "excludes kube-system"},
		{"Fail with matchLabels on the name", func(h *testHook) {
			h.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{namespaceNameLabel: "team-a"}}
		}, "failurePolicy", levelPass, "namespaceSelector excludes kube-system"},
		{"Fail with an opt-in objectSelector", func(h *testHook) {
			h.NamespaceSelector = nil
			h.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"webhook.example.com/enabled": "true"}}
		}, "failurePolicy", levelWarn, "objectSelector (webhook.example.com/enabled=true) sends only labelled objects"},
		{"Fail with an objectSelector that excludes nothing", func(h *testHook) {
			h.NamespaceSelector = nil
			h.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "skip", Operator: metav1.LabelSelectorOpDoesNotExist}}}
		}, "failurePolicy", levelFail, "neither namespaceSelector nor objectSelector excludes kube-system"},
		{"Ignore", func(h *testHook) { h.FailurePolicy, h.NamespaceSelector = &ignore, nil }, "failurePolicy", levelPass, "Ignore"},
		{"sideEffects Some", func(h *testHook) { h.SideEffects = &some }, "sideEffects", levelFail, `admission webhook "hook.example.com" does not support dry run`},
		{"sideEffects Unknown", func(h *testHook) { h.SideEffects = &unknown }, "sideEffects", levelFail, "Unknown: the apiserver refuses every dry-run request"},
		{"sideEffects unset", func(h *testHook) { h.SideEffects = nil }, "sideEffects", levelFail, "Webhook SideEffects is nil"},
		{"rules on everything", func(h *testHook) {
			h.Rules = []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}},
			}}
		}, "rules", levelWarn, "tokenreviews, selfsubjectreviews, subjectaccessreviews"},
		{"rules on leases, kube-node-lease excluded", func(h *testHook) {
			h.Rules = []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"leases"}},
			}}
			h.NamespaceSelector.MatchExpressions[0].Values = []string{"kube-system", "kube-node-lease"}
		}, "rules", levelPass, "no node leases"},
		{"rules on leases", func(h *testHook) {
			h.Rules = []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"leases"}},
			}}
		}, "rules", levelWarn, "leases in kube-node-lease"},
		{"only v1beta1", func(h *testHook) { h.AdmissionReviewVersions = []string{"v1beta1"} }, "admissionReviewVersions", levelWarn, "v1beta1 has no v1"},
		{"no known version", func(h *testHook) { h.AdmissionReviewVersions = []string{"v2"} }, "admissionReviewVersions", levelFail, "webhook does not accept known AdmissionReview versions"},
		{"timeoutSeconds over 30", func(h *testHook) { seconds := int32(45); h.TimeoutSeconds = &seconds }, "timeoutSeconds", levelFail, "45: the apiserver refuses the configuration"},
		{"timeoutSeconds 0", func(h *testHook) { seconds := int32(0); h.TimeoutSeconds = &seconds }, "timeoutSeconds", levelFail, "0: the apiserver refuses the configuration"},
		// x509.CertPool.AppendCertsFromPEM, as client-go reads caBundle,
		// skips a block with headers.
		{"caBundle's certificate with a header", func(h *testHook) {
			block, _ := pem.Decode(expiring.certPEM)
			block.Headers = map[string]string{"Comment": "rotated"}
			h.ClientConfig.CABundle = append(pem.EncodeToMemory(block), pki.servingCA.certPEM...)
		}, "caBundle", levelWarn, "PEM block 1 is a CERTIFICATE with headers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := goodHook("hook.example.com", "https://127.0.0.1:8443/validate", pki.servingCA.certPEM)
			tc.change(&h)
			found := false
			for _, f := range checkOne(t, configJSON(t, h)) {
				switch {
				case f.Check == tc.check && f.Level == tc.level && strings.Contains(f.Found, tc.wantIn):
					found = true
					if f.Level == levelFail && f.Fix == "" {
						t.Errorf("%s failed with no fix", tc.check)
					}
				case f.Level != levelPass:
					t.Errorf("%s: %s %q; want only %s %s saying %q", f.Check, f.Level, f.Found, tc.check, tc.level, tc.wantIn)
				}
			}
			if tc.check != "" && !found {
				t.Errorf("no %s %s saying %q", tc.check, tc.level, tc.wantIn)
			}
		})
	}
}

// TestDoctorPostsWhereTheAPIServerDoes: doctor posts to the path the
// apiserver's client does, which joins it as path.Join does (client-go
// rest/request.go): a URL's trailing "/", "//" and "%2F" are not posted as
// written.
func TestDoctorPostsWhereTheAPIServerDoes(t *testing.T) {
	for url, want := range map[string]string{
		"https://127.0.0.1:8443/validate":  "/validate",
		"https://127.0.0.1:8443/validate/": "/validate",
		"https://127.0.0.1:8443//validate": "/validate",
		"https://127.0.0.1:8443/a%2Fb":     "/a/b",
		"https://127.0.0.1:8443":           "/",
	} {
		target, ok := urlTarget(&report{}, url, "")
		if !ok || target.url.RequestURI() != want {
			t.Errorf("url %s: doctor posts to %q, want %q", url, target.url.RequestURI(), want)
		}
	}
}

func TestDoctorFileLint(t *testing.T) {
	ifNeeded := admissionregistrationv1.IfNeededReinvocationPolicy
	mutating := func(name string, seconds int32, policy *admissionregistrationv1.ReinvocationPolicyType) testHook {
		h := goodHook(name, "https://127.0.0.1:8443/mutate", nil)
		h.mutating, h.TimeoutSeconds, h.reinvocation = true, &seconds, policy
		return h
	}
	validating := func(name string, seconds int32) testHook {
		h := goodHook(name, "https://127.0.0.1:8443/validate", nil)
		h.TimeoutSeconds = &seconds
		return h
	}
	tests := []struct {
		name   string
		hooks  []testHook
		want   map[string]level
		wantIn string
	}{
		{"one of each, short", []testHook{mutating("m", 5, nil), validating("v", 5)},
			map[string]level{"timeoutSeconds": levelPass}, "a write waits 10s (mutating one after another: m 5s; then the slowest validating: 5s)"},
		{"long timeouts add up", []testHook{mutating("a", 30, nil), mutating("b", 25, nil), validating("v", 10)},
			map[string]level{"timeoutSeconds": levelWarn, "reinvocationPolicy": levelWarn}, "a write waits 65s"},
		{"reinvocation counts twice", []testHook{mutating("a", 20, &ifNeeded), mutating("b", 15, &ifNeeded), validating("v", 1)},
			map[string]level{"timeoutSeconds": levelWarn, "reinvocationPolicy": levelPass}, "a write waits 71s"},
		{"several mutating, one never reinvoked", []testHook{mutating("a", 1, &ifNeeded), mutating("b", 1, nil)},
			map[string]level{"timeoutSeconds": levelPass, "reinvocationPolicy": levelWarn}, "2 mutating webhooks, and b has reinvocationPolicy Never"},
		{"one defaulted timeout", []testHook{func() testHook { h := mutating("m", 0, nil); h.TimeoutSeconds = nil; return h }()},
			map[string]level{"timeoutSeconds": levelPass}, "m 10s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hooks, _, err := readWebhooks(strings.NewReader(configJSON(t, tc.hooks...)))
			if err != nil {
				t.Fatal(err)
			}
			r := &report{}
			lintFile(r, hooks)
			got := map[string]level{}
			said := ""
			for _, f := range r.findings {
				got[f.Check] = f.Level
				said += f.Found + "\n"
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			if !strings.Contains(said, tc.wantIn) {
				t.Errorf("got %q, want it to say %q", said, tc.wantIn)
			}
		})
	}
}

func TestReadWebhooks(t *testing.T) {
	const mutatingYAML = `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: m
webhooks:
- name: m1.example.com
  clientConfig:
    url: https://127.0.0.1:8443/mutate
  sideEffects: None
  admissionReviewVersions: ["v1"]
- name: m2.example.com
  clientConfig:
    service: {name: webhook, namespace: webhook-system}
  sideEffects: None
  admissionReviewVersions: ["v1"]
  timeoutSeconds: 3
  failurePolicy: Ignore
  reinvocationPolicy: IfNeeded
`
	const validatingYAML = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: v
webhooks:
- name: v1.example.com
  clientConfig:
    url: https://127.0.0.1:8443/validate
  sideEffects: None
  admissionReviewVersions: ["v1"]
`
	const secret = `apiVersion: v1
kind: Secret
metadata: {name: webhook-tls}
data: {tls.key: c2VjcmV0LWtleS1tYXRlcmlhbA==}
`
	indent := func(s string) string { return "- " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n  ") + "\n" }
	tests := []struct {
		name        string
		input       string
		wantNames   []string
		wantSkipped []string
	}{
		{"one document", validatingYAML, []string{"v1.example.com"}, nil},
		{"several documents, empty ones and other kinds", "---\n" + mutatingYAML + "---\n" + secret + "---\n---\n" + validatingYAML + "---\n",
			[]string{"m1.example.com", "m2.example.com", "v1.example.com"}, []string{"Secret"}},
		{"a List, as kubectl get prints several", "apiVersion: v1\nkind: List\nmetadata: {resourceVersion: \"\"}\nitems:\n" + indent(mutatingYAML) + indent(validatingYAML),
			[]string{"m1.example.com", "m2.example.com", "v1.example.com"}, nil},
		{"a typed list in JSON", `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfigurationList","items":[` +
			`{"metadata":{"name":"a"},"webhooks":[{"name":"a.example.com","clientConfig":{"url":"https://a"},"sideEffects":"None","admissionReviewVersions":["v1"]}]},` +
			`{"metadata":{"name":"b"},"webhooks":[{"name":"b.example.com","clientConfig":{"url":"https://b"},"sideEffects":"None","admissionReviewVersions":["v1"]}]}]}`,
			[]string{"a.example.com", "b.example.com"}, nil},
		{"JSON documents one after another", `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration","metadata":{"name":"a"},"webhooks":[{"name":"a.example.com"}]}
{"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingWebhookConfiguration","metadata":{"name":"b"},"webhooks":[{"name":"b.example.com"}]}`,
			[]string{"a.example.com", "b.example.com"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hooks, skipped, err := readWebhooks(strings.NewReader(tc.input))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, h := range hooks {
				names = append(names, h.name)
			}
			if !reflect.DeepEqual(names, tc.wantNames) || !reflect.DeepEqual(skipped, tc.wantSkipped) {
				t.Errorf("got webhooks %v, skipped %v; want %v and %v", names, skipped, tc.wantNames, tc.wantSkipped)
			}
		})
	}

	t.Run("deploy/webhooks.yaml, its caBundle a placeholder", func(t *testing.T) {
		committed, err := os.ReadFile(filepath.Join("..", "deploy", "webhooks.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = readWebhooks(bytes.NewReader(committed))
		if err == nil || !strings.Contains(err.Error(), "caBundle is the placeholder __CA_BUNDLE__") || !strings.Contains(err.Error(), "deploy/render.sh") || strings.Contains(err.Error(), "base64") {
			t.Errorf("got %v, want the placeholder and render.sh named, not base64", err)
		}
	})

	t.Run("defaults are the apiserver's", func(t *testing.T) {
		hooks, _, err := readWebhooks(strings.NewReader(mutatingYAML))
		if err != nil {
			t.Fatal(err)
		}
		m1, m2 := hooks[0], hooks[1]
		if m1.timeout != 10*time.Second || m1.failurePolicy != admissionregistrationv1.Fail || m1.reinvocation != admissionregistrationv1.NeverReinvocationPolicy ||
			m1.namespaceSelector == nil || m1.objectSelector == nil || !m1.mutating || m1.kind != "MutatingWebhookConfiguration" || m1.config != "m" {
			t.Errorf("got %+v, want timeout 10s, failurePolicy Fail, reinvocationPolicy Never, empty selectors", m1)
		}
		if m2.timeout != 3*time.Second || m2.failurePolicy != admissionregistrationv1.Ignore || m2.reinvocation != admissionregistrationv1.IfNeededReinvocationPolicy {
			t.Errorf("got %+v, want the values set kept", m2)
		}
	})
}

func TestDoctorUsage(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "webhooks.yaml")
	writeFile(t, good, []byte(configJSON(t, goodHook("a.example.com", "https://127.0.0.1:1/validate", nil))))
	tests := []struct {
		name   string
		args   []string
		stdin  string
		status int
		wantIn string // in stderr
	}{
		{"no -f", nil, "", 2, "-f is required"},
		{"unknown flag", []string{"-x"}, "", 2, "flag provided but not defined: -x"},
		{"extra argument", []string{"-f", good, "more"}, "", 2, `unexpected argument "more"`},
		{"bad -o", []string{"-f", good, "-o", "yaml"}, "", 2, `-o "yaml": want text or json`},
		{"bad -address", []string{"-f", good, "-address", "127.0.0.1"}, "", 2, "want host:port"},
		{"client cert without key", []string{"-f", good, "-client-cert", "c.crt"}, "", 2, "-client-cert and -client-key go together"},
		{"unreadable client cert", []string{"-f", good, "-client-cert", "c.crt", "-client-key", "c.key"}, "", 2, "-client-cert c.crt"},
		{"missing file", []string{"-f", filepath.Join(dir, "nope.yaml")}, "", 2, "no such file"},
		{"not YAML", []string{"-f", "-"}, "a: [b", 2, "document 1 is not YAML or JSON"},
		{"empty", []string{"-f", "-"}, "", 2, "holds no MutatingWebhookConfiguration or ValidatingWebhookConfiguration"},
		{"only other kinds", []string{"-f", "-"}, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n", 2, "holds no MutatingWebhookConfiguration"},
		{"v1beta1", []string{"-f", "-"}, "apiVersion: admissionregistration.k8s.io/v1beta1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: a}\n", 2, "doctor reads admissionregistration.k8s.io/v1"},
		{"no kind, and a secret it must not print", []string{"-f", "-"}, "metadata: {name: a}\ndata: {key: hunter2}\n", 2, "document 1: an object has no apiVersion or kind"},
		{"-h", []string{"-h"}, "", 0, "usage: webhook doctor -f FILE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, status := runDoctorCmd(t, tc.stdin, tc.args...)
			if status != tc.status {
				t.Errorf("got exit status %d, want %d (stderr %q)", status, tc.status, stderr)
			}
			if !strings.Contains(stderr, tc.wantIn) {
				t.Errorf("got stderr %q, want %q", stderr, tc.wantIn)
			}
			if strings.Contains(stderr+stdout, "hunter2") {
				t.Errorf("the file's content reached the output: %q", stderr)
			}
		})
	}
}

func TestDoctorTextAndJSONAgree(t *testing.T) {
	pki := newDoctorPKI(t)
	srv := startTLS(t, servingPair(t, pki.servingCA, loopbackHosts...), modelWebhook())
	bad := goodHook("bad.example.com", srv.URL+"/validate", pki.servingCA.certPEM)
	bad.NamespaceSelector = nil
	input := configJSON(t, goodHook("good.example.com", srv.URL+"/validate", pki.servingCA.certPEM), bad)

	text, _, status := runDoctorCmd(t, input, "-f", "-")
	if status != 1 {
		t.Errorf("got exit status %d, want 1", status)
	}
	rep, _ := doctorJSON(t, input)
	// Two runs take different times.
	latency := regexp.MustCompile(`answered in [0-9.]+[µm]?s`)
	text = latency.ReplaceAllString(text, "answered in T")
	for i := range rep.Findings {
		rep.Findings[i].Found = latency.ReplaceAllString(rep.Findings[i].Found, "answered in T")
	}
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "  ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != len(rep.Findings) {
		t.Fatalf("text has %d finding lines, JSON %d findings:\n%s", len(lines), len(rep.Findings), text)
	}
	for i, f := range rep.Findings {
		want := fmt.Sprintf("  %s %s: %s", levelSymbols[f.Level], f.Check, f.Found)
		if f.Fix != "" {
			want += " Fix: " + f.Fix
		}
		if lines[i] != want {
			t.Errorf("line %d: got %q, want %q", i, lines[i], want)
		}
		if f.Level == levelFail && f.Fix == "" {
			t.Errorf("finding %+v fails with no fix", f)
		}
	}
	for _, want := range []string{
		"webhook doctor: 2 webhooks from stdin\n",
		"\ngood.example.com (ValidatingWebhookConfiguration good.example.com)\n",
		"\nbad.example.com (ValidatingWebhookConfiguration bad.example.com)\n",
		"  ✗ failurePolicy: Fail, and neither namespaceSelector nor objectSelector excludes kube-system",
		"\nall webhooks in the file\n",
		fmt.Sprintf("\n2 webhooks: %d passed, 0 warnings, 1 failed\n", rep.Summary.Pass),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text report lacks %q:\n%s", want, text)
		}
	}

	// The JSON shape scripts rely on.
	var raw map[string]any
	out, _, _ := runDoctorCmd(t, input, "-f", "-", "-o", "json")
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	first := raw["findings"].([]any)[0].(map[string]any)
	for _, key := range []string{"kind", "configuration", "webhook", "check", "level", "found"} {
		if _, ok := first[key]; !ok {
			t.Errorf("a finding has no %q: %v", key, first)
		}
	}
	if got := raw["summary"]; !reflect.DeepEqual(got, map[string]any{"webhooks": 2.0, "pass": float64(rep.Summary.Pass), "warn": 0.0, "fail": 1.0}) {
		t.Errorf("got summary %v", got)
	}
}

// TestApplyJSONPatch: doctor applies a patch as the apiserver does
// (package jsonpatch, fuzzed against its library), with its error texts,
// and says which operations applied before one that failed.
func TestApplyJSONPatch(t *testing.T) {
	const doc = `{"metadata":{"name":"a","annotations":{"x":"1"}},"spec":{"list":[1,2,3]}}`
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		From  string `json:"from,omitempty"`
		Value any    `json:"value,omitempty"`
	}
	tests := []struct {
		name        string
		doc         string
		patch       []op
		want        string // the patched document, as JSON
		wantErr     string
		wantApplied []string
	}{
		{name: "add a member", patch: []op{{Op: "add", Path: "/metadata/annotations/a~1b~0c", Value: "v"}},
			want: `{"metadata":{"annotations":{"a/b~c":"v","x":"1"},"name":"a"},"spec":{"list":[1,2,3]}}`},
		{name: "add the whole map", doc: `{"metadata":{"name":"a"}}`, patch: []op{{Op: "add", Path: "/metadata/annotations", Value: map[string]any{"k": "v"}}},
			want: `{"metadata":{"annotations":{"k":"v"},"name":"a"}}`},
		{name: "add under a missing parent", doc: `{"metadata":{"name":"a"}}`, patch: []op{{Op: "add", Path: "/metadata/labels", Value: map[string]any{}}, {Op: "add", Path: "/metadata/annotations/k", Value: "v"}},
			wantErr: `add operation does not apply: doc is missing path: "/metadata/annotations/k": missing value`, wantApplied: []string{"add /metadata/labels"}},
		{name: "add to the end of an array", patch: []op{{Op: "add", Path: "/spec/list/-", Value: 4.0}},
			want: `{"metadata":{"annotations":{"x":"1"},"name":"a"},"spec":{"list":[1,2,3,4]}}`},
		{name: "insert past the end", patch: []op{{Op: "add", Path: "/spec/list/5", Value: 9.0}},
			wantErr: "error in add for path: '/spec/list/5': Unable to access invalid index: 5"},
		{name: "negative index counts from the end", patch: []op{{Op: "remove", Path: "/spec/list/-1"}},
			want: `{"metadata":{"annotations":{"x":"1"},"name":"a"},"spec":{"list":[1,2]}}`},
		{name: "remove a missing member", patch: []op{{Op: "remove", Path: "/metadata/annotations/y"}},
			wantErr: "error in remove for path: '/metadata/annotations/y': Unable to remove nonexistent key: y: missing value"},
		{name: "replace of a missing member adds it, as json-patch v4 does", patch: []op{{Op: "replace", Path: "/metadata/labels", Value: map[string]any{}}},
			want: `{"metadata":{"annotations":{"x":"1"},"labels":{},"name":"a"},"spec":{"list":[1,2,3]}}`},
		{name: "replace under a missing parent", patch: []op{{Op: "replace", Path: "/status/phase", Value: "x"}},
			wantErr: "replace operation does not apply: doc is missing path: /status/phase: missing value"},
		{name: "move", patch: []op{{Op: "move", From: "/metadata/annotations/x", Path: "/metadata/name"}},
			want: `{"metadata":{"annotations":{},"name":"1"},"spec":{"list":[1,2,3]}}`},
		{name: "a test that fails", patch: []op{{Op: "test", Path: "/metadata/name", Value: "b"}}, wantErr: "testing value /metadata/name failed"},
		{name: "unknown operation", patch: []op{{Op: "merge", Path: "/a"}}, wantErr: "Unexpected kind: merge"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			patch, err := json.Marshal(tc.patch)
			if err != nil {
				t.Fatal(err)
			}
			patched, applied, err := applyJSONPatch([]byte(cmp.Or(tc.doc, doc)), patch)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !reflect.DeepEqual(applied, tc.wantApplied) {
					t.Errorf("got error %v after %q, want %q after %q", err, applied, tc.wantErr, tc.wantApplied)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got, want any
			if err := json.Unmarshal(patched, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %s, want %s", patched, tc.want)
			}
		})
	}
	if _, _, err := applyJSONPatch([]byte(doc), []byte(`{"op":"add"}`)); err == nil || !strings.Contains(err.Error(), "undecodable patch") {
		t.Errorf("a patch that is not an array: got %v, want undecodable", err)
	}
}

func TestSyntheticObject(t *testing.T) {
	rule := func(group, version, resource string, scope admissionregistrationv1.ScopeType) admissionregistrationv1.RuleWithOperations {
		r := admissionregistrationv1.RuleWithOperations{Rule: admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{version}, Resources: []string{resource}}}
		if scope != "" {
			r.Scope = &scope
		}
		return r
	}
	tests := []struct {
		name  string
		rules []admissionregistrationv1.RuleWithOperations
		want  string
	}{
		{"no rules", nil, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"webhook-doctor","namespace":"default"}}`},
		{"everything", []admissionregistrationv1.RuleWithOperations{rule("*", "*", "*", "")}, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"webhook-doctor","namespace":"default"}}`},
		{"deployments", []admissionregistrationv1.RuleWithOperations{rule("apps", "v1", "deployments", "")}, `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"webhook-doctor","namespace":"default"}}`},
		{"pods and their subresources", []admissionregistrationv1.RuleWithOperations{rule("", "v1", "pods/*", "")}, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"webhook-doctor","namespace":"default"}}`},
		{"only a subresource", []admissionregistrationv1.RuleWithOperations{rule("apps", "v1", "deployments/scale", ""), rule("batch", "*", "jobs", "")}, `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"webhook-doctor","namespace":"default"}}`},
		{"cluster scope", []admissionregistrationv1.RuleWithOperations{rule("*", "*", "*", admissionregistrationv1.ClusterScope)}, `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"webhook-doctor"}}`},
		{"a custom resource", []admissionregistrationv1.RuleWithOperations{rule("example.com", "v1", "widgets", "")}, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"webhook-doctor","namespace":"default"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(syntheticObject(tc.rules).json); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestReviewRequestIsWhatAWebhookReads(t *testing.T) {
	obj := syntheticObject(nil)
	for _, version := range knownReviewVersions {
		uid := newUID()
		body, err := json.Marshal(reviewRequest(version, uid, obj))
		if err != nil {
			t.Fatal(err)
		}
		gotVersion, req, err := decodeTestReview(body)
		if err != nil {
			t.Fatalf("%s: the Kubernetes API types cannot decode doctor's review: %v", version, err)
		}
		if gotVersion != version || req.UID != uid || req.Operation != admissionv1.Create || req.DryRun == nil || !*req.DryRun ||
			req.Namespace != doctorNamespace || req.Name != doctorObjectName || string(req.Object.Raw) != string(obj.json) {
			t.Errorf("%s: got %s %+v", version, gotVersion, req)
		}
	}
	if a, b := newUID(), newUID(); a == b || len(a) != 36 {
		t.Errorf("got uids %q and %q, want two different UUIDs", a, b)
	}
}
