// Package kubeclient is a small client of the kube-apiserver on net/http,
// for a webhook that reads the cluster: its credentials, from a kubeconfig
// or from inside a Pod; a GET, a LIST page by page and a WATCH, each object
// handed over as its JSON, undecoded; and a Reflector that keeps a Store in
// step with one resource, as client-go's reflector does (list, then watch
// from the list's resourceVersion with bookmarks, relist on 410 Gone, back
// off on errors). What to keep of each object is its caller's business.
package kubeclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/yaml"
)

// Config says where the apiserver is and who the client is to it: a bearer
// token, or a client certificate. It holds file names, not their contents,
// where the files may be replaced while the webhook runs: a token file is
// read again at each request and a certificate at each handshake, so a
// rotated ServiceAccount token or certificate is used as soon as it is
// written.
type Config struct {
	// Server is the apiserver's URL: https://host:port.
	Server string
	// ServerName is the name checked in its certificate, when it is not
	// Server's host.
	ServerName string
	// CAData is the PEM of the CAs its certificate is checked against;
	// nil checks it against the system's.
	CAData []byte
	// Insecure checks no certificate at all (a kubeconfig's
	// insecure-skip-tls-verify).
	Insecure bool

	// Token is a bearer token, or TokenFile a file holding one.
	Token     string
	TokenFile string
	// CertFile and KeyFile, or CertData and KeyData, are a client
	// certificate and its key, PEM.
	CertFile, KeyFile string
	CertData, KeyData []byte

	// Source says where this came from, for messages: "kubeconfig FILE,
	// context NAME" or "in-cluster".
	Source string
}

// serviceAccountDir is where kubelet mounts a Pod's ServiceAccount token
// and the cluster's CA (automountServiceAccountToken).
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// InCluster is the configuration of a Pod: the apiserver at
// KUBERNETES_SERVICE_HOST and _PORT, which kubelet sets, with the Pod's
// ServiceAccount token and the cluster's CA from where kubelet mounts them.
// kubelet rewrites the token before it expires (a projected token lives an
// hour by default); it is read again at each request. It fails, naming
// what is missing, outside a Pod or when the token is not mounted.
func InCluster(getenv func(string) string) (*Config, error) {
	return inClusterFrom(serviceAccountDir, getenv)
}

func inClusterFrom(dir string, getenv func(string) string) (*Config, error) {
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("not in a Pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set")
	}
	tokenFile := filepath.Join(dir, "token")
	if _, err := os.Stat(tokenFile); err != nil {
		return nil, fmt.Errorf("no ServiceAccount token is mounted (%w): set automountServiceAccountToken: true in the Deployment, as deploy/render.sh does for a policy that reads the cluster", err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("the cluster's CA: %w", err)
	}
	return &Config{
		Server:    "https://" + net.JoinHostPort(host, port),
		CAData:    ca,
		TokenFile: tokenFile,
		Source:    "in-cluster",
	}, nil
}

// kubeconfig is the part of a kubeconfig file (kind Config, v1) that the
// client reads, and the fields it refuses, to say so rather than ignore
// them.
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Contexts       []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
	Clusters []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			TLSServerName            string `json:"tls-server-name"`
			CertificateAuthority     string `json:"certificate-authority"`
			CertificateAuthorityData []byte `json:"certificate-authority-data"`
			InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
			ProxyURL                 string `json:"proxy-url"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			Token                 string `json:"token"`
			TokenFile             string `json:"tokenFile"`
			ClientCertificate     string `json:"client-certificate"`
			ClientKey             string `json:"client-key"`
			ClientCertificateData []byte `json:"client-certificate-data"`
			ClientKeyData         []byte `json:"client-key-data"`
			Exec                  *struct {
				Command string `json:"command"`
			} `json:"exec"`
			AuthProvider *struct {
				Name string `json:"name"`
			} `json:"auth-provider"`
			Username string `json:"username"`
			As       string `json:"as"`
		} `json:"user"`
	} `json:"users"`
}

// LoadKubeconfig reads the kubeconfig file path, as kubectl does for its
// current context: the cluster's server, CA (certificate-authority, a file
// relative to the kubeconfig's directory, or -data) and
// insecure-skip-tls-verify; the user's token or tokenFile, or client
// certificate and key (files, or -data). It refuses, naming the file and
// the entry, what the webhook cannot do alone: an exec plugin or an
// auth-provider (give it a token or a certificate of its own), basic
// auth, impersonation, a proxy, a server that is not https.
func LoadKubeconfig(path string) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(raw, &kc); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	fail := func(format string, args ...any) (*Config, error) {
		return nil, fmt.Errorf("kubeconfig %s: "+format, append([]any{path}, args...)...)
	}
	if kc.CurrentContext == "" {
		return fail("current-context is not set")
	}
	i := indexOf(len(kc.Contexts), func(i int) bool { return kc.Contexts[i].Name == kc.CurrentContext })
	if i < 0 {
		return fail("current-context %q is not among its contexts", kc.CurrentContext)
	}
	context := kc.Contexts[i].Context
	c := indexOf(len(kc.Clusters), func(i int) bool { return kc.Clusters[i].Name == context.Cluster })
	if c < 0 {
		return fail("context %q names cluster %q, which it does not have", kc.CurrentContext, context.Cluster)
	}
	u := indexOf(len(kc.Users), func(i int) bool { return kc.Users[i].Name == context.User })
	if u < 0 {
		return fail("context %q names user %q, which it does not have", kc.CurrentContext, context.User)
	}
	cluster, user := kc.Clusters[c].Cluster, kc.Users[u].User
	dir := filepath.Dir(path)
	relative := func(file string) string {
		if file == "" || filepath.IsAbs(file) {
			return file
		}
		return filepath.Join(dir, file)
	}

	server, err := url.Parse(cluster.Server)
	switch {
	case err != nil || server.Host == "":
		return fail("cluster %q: server %q is not a URL such as https://10.0.0.1:6443", context.Cluster, cluster.Server)
	case server.Scheme != "https":
		return fail("cluster %q: server %q is not https: the webhook reads the cluster over TLS only", context.Cluster, cluster.Server)
	case cluster.ProxyURL != "":
		return fail("cluster %q: proxy-url is not supported; the webhook uses HTTPS_PROXY and NO_PROXY from its environment, as client-go does without it", context.Cluster)
	}
	cfg := &Config{
		Server:     strings.TrimSuffix(cluster.Server, "/"),
		ServerName: cluster.TLSServerName,
		CAData:     cluster.CertificateAuthorityData,
		Insecure:   cluster.InsecureSkipTLSVerify,
		Token:      user.Token,
		TokenFile:  relative(user.TokenFile),
		CertFile:   relative(user.ClientCertificate),
		KeyFile:    relative(user.ClientKey),
		CertData:   user.ClientCertificateData,
		KeyData:    user.ClientKeyData,
		Source:     fmt.Sprintf("kubeconfig %s, context %s", path, kc.CurrentContext),
	}
	if cluster.CertificateAuthority != "" {
		if cfg.CAData, err = os.ReadFile(relative(cluster.CertificateAuthority)); err != nil {
			return fail("cluster %q: certificate-authority: %w", context.Cluster, err)
		}
	}
	switch {
	case user.Exec != nil:
		return fail("user %q authenticates with an exec plugin (%s), which the webhook does not run: give it a user with a token, a tokenFile or a client certificate of its own", context.User, user.Exec.Command)
	case user.AuthProvider != nil:
		return fail("user %q authenticates with the auth-provider %q, which the webhook does not support: give it a user with a token, a tokenFile or a client certificate of its own", context.User, user.AuthProvider.Name)
	case user.Username != "":
		return fail("user %q has a username and password: the apiserver accepts no basic auth since 1.19; give it a token or a client certificate", context.User)
	case user.As != "":
		return fail("user %q impersonates %q, which the webhook does not: give it the credentials of the identity its RBAC is bound to", context.User, user.As)
	case cfg.Token == "" && cfg.TokenFile == "" && cfg.CertFile == "" && len(cfg.CertData) == 0:
		return fail("user %q has no token, tokenFile or client certificate", context.User)
	case (cfg.CertFile != "" || len(cfg.CertData) > 0) != (cfg.KeyFile != "" || len(cfg.KeyData) > 0):
		return fail("user %q has a client certificate without its key, or a key without its certificate", context.User)
	}
	return cfg, nil
}

func indexOf(n int, match func(int) bool) int {
	for i := range n {
		if match(i) {
			return i
		}
	}
	return -1
}

// tlsConfig is the client's TLS: the CA, the server name, and the client
// certificate as it is now.
func (c *Config) tlsConfig() (*tls.Config, error) {
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.Insecure}
	if len(c.CAData) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.CAData) {
			return nil, fmt.Errorf("%s: the CA holds no PEM certificate", c.Source)
		}
		t.RootCAs = pool
	}
	switch {
	case len(c.CertData) > 0:
		pair, err := tls.X509KeyPair(c.CertData, c.KeyData)
		if err != nil {
			return nil, fmt.Errorf("%s: client certificate: %w", c.Source, err)
		}
		t.Certificates = []tls.Certificate{pair}
	case c.CertFile != "":
		pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s: client certificate: %w", c.Source, err)
		}
		t.Certificates = []tls.Certificate{pair} // a renewed one: Client.httpClient
	}
	return t, nil
}

// token returns the bearer token to send, reading TokenFile again: a
// ServiceAccount token is rotated in place by kubelet. client-go reads it
// again at most every minute (transport.NewCachedFileTokenSource); the
// webhook sends a request at each list page and watch, rarely enough to
// read it every time.
func (c *Config) token() (string, error) {
	if c.TokenFile == "" {
		return c.Token, nil
	}
	b, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return "", fmt.Errorf("reading the token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("the token file %s is empty", c.TokenFile)
	}
	return t, nil
}
