package doctor

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// The tests' own certificates and webhook. Doctor shares no code with the
// server it checks, and its tests do not either: what they check with is
// written here, from the standard library and the Kubernetes API types.

// loopbackHosts are the names a test webhook's certificate is valid for.
var loopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// keyPair is a certificate with its private key, both parsed and PEM encoded.
type keyPair struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

// testPKI is a serving CA and a client CA, kept apart as they must be.
type testPKI struct {
	servingCA, clientCA *keyPair
}

// newCA makes a self-signed CA named commonName, valid from a minute before
// now for validity.
func newCA(commonName string, now time.Time, validity time.Duration) (*keyPair, error) {
	return issue(&x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}, nil)
}

// newServingCert makes a serving certificate of ca for hosts, each an IP
// address or a DNS name.
func newServingCert(ca *keyPair, hosts []string, now time.Time, validity time.Duration) (*keyPair, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: hosts[0]},
		NotBefore:   now.Add(-time.Minute),
		NotAfter:    now.Add(validity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return issue(tmpl, ca)
}

// issue signs tmpl with a new P-256 key, by parent or, when parent is nil,
// by that new key itself.
func issue(tmpl *x509.Certificate, parent *keyPair) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128)); err != nil {
		return nil, err
	}
	signerCert, signerKey := tmpl, key
	if parent != nil {
		signerCert, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, &key.PublicKey, signerKey)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &keyPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// testCodecs decodes AdmissionReview in both versions, as a webhook built on
// the Kubernetes API types does.
var testCodecs = func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	// AddToScheme only fails on conflicting registrations.
	_ = admissionv1.AddToScheme(scheme)
	_ = admissionv1beta1.AddToScheme(scheme)
	return serializer.NewCodecFactory(scheme)
}()

// decodeTestReview decodes an AdmissionReview of either version and returns
// its version and its request's uid, operation, dry-run, namespace, name and
// object.
func decodeTestReview(body []byte) (version string, req *admissionv1.AdmissionRequest, err error) {
	obj, gvk, err := testCodecs.UniversalDeserializer().Decode(body, nil, nil)
	if err != nil {
		return "", nil, err
	}
	switch review := obj.(type) {
	case *admissionv1.AdmissionReview:
		req = review.Request
	case *admissionv1beta1.AdmissionReview:
		if r := review.Request; r != nil {
			req = &admissionv1.AdmissionRequest{
				UID: r.UID, Kind: r.Kind, Operation: admissionv1.Operation(r.Operation), DryRun: r.DryRun,
				Namespace: r.Namespace, Name: r.Name, Object: r.Object,
			}
		}
	default:
		return "", nil, fmt.Errorf("got a %v, want an AdmissionReview", gvk)
	}
	if req == nil {
		return "", nil, fmt.Errorf("%v has no request", gvk)
	}
	return gvk.Version, req, nil
}

// modelWebhook is a webhook that answers well, as the apiserver wants:
// /mutate adds a label map to what it is sent (the object doctor sends has
// none), and /validate denies it, naming it. Each answer is in the
// version asked, with the request's uid.
func modelWebhook() http.Handler {
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, r *http.Request, decide func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) {
		var body json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeStatus(w, http.StatusBadRequest, err.Error())
			return
		}
		version, req, err := decodeTestReview(body)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, err.Error())
			return
		}
		resp := decide(req)
		resp.UID = req.UID
		var out any = &admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Response: resp}
		if version == "v1beta1" {
			out = &admissionv1beta1.AdmissionReview{
				TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1beta1", Kind: "AdmissionReview"},
				Response: &admissionv1beta1.AdmissionResponse{UID: resp.UID, Allowed: resp.Allowed, Result: resp.Result, Patch: resp.Patch, PatchType: (*admissionv1beta1.PatchType)(resp.PatchType)},
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}
	mux.HandleFunc("/mutate", func(w http.ResponseWriter, r *http.Request) {
		answer(w, r, func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			jsonPatch := admissionv1.PatchTypeJSONPatch
			return &admissionv1.AdmissionResponse{Allowed: true, PatchType: &jsonPatch,
				Patch: []byte(`[{"op":"add","path":"/metadata/labels","value":{"doctor.test/seen":"true"}}]`)}
		})
	})
	mux.HandleFunc("/validate", func(w http.ResponseWriter, r *http.Request) {
		answer(w, r, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			return &admissionv1.AdmissionResponse{Result: &metav1.Status{
				Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
				Message: fmt.Sprintf("the tests refuse %s %s/%s", req.Kind.Kind, req.Namespace, req.Name),
			}}
		})
	})
	return mux
}

// writeStatus answers with a metav1.Status, as a webhook does when it has no
// review to answer.
func writeStatus(w http.ResponseWriter, code int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(&metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure, Code: int32(code), Message: message,
	})
}
