package kubeclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/example/webhook/jsonfield"
)

// Client sends GET, LIST and WATCH requests to one apiserver, over one
// HTTP/2 connection where the apiserver offers it (it does), pinged when
// idle so that a connection that died without a word (a node lost, a NAT
// entry dropped) is found within pingTimeout and replaced.
type Client struct {
	cfg       *Config
	tlsConfig *tls.Config
	userAgent string
	// pageTimeout is listPageTimeout, shorter in tests.
	pageTimeout time.Duration

	mu   sync.Mutex
	http *http.Client
	// certificate is the client certificate file's content when http was
	// made: once the file holds another, new requests go over a new
	// transport's connections, whose handshakes present it, as client-go
	// closes its connections when it changes (transport/cert_rotation.go).
	// The apiserver checks a certificate at each request, so an old one,
	// expired, would be refused on connections kept alive for ever.
	certificate []byte
	retired     *http.Client // the one it replaced last, whose requests under way carry on
}

const (
	// pingInterval and pingTimeout are the HTTP/2 health check of a
	// connection that has read nothing for pingInterval, as client-go sets
	// them (ReadIdleTimeout 30 s, PingTimeout 15 s in
	// k8s.io/client-go/transport, http2 configuration): a watch hears at
	// least a bookmark a minute, and a dead connection fails within 45 s.
	pingInterval = 30 * time.Second
	pingTimeout  = 15 * time.Second

	// errorBodyBytes is as much of a refusal's body as is read for its
	// Status: the apiserver's are a few hundred bytes.
	errorBodyBytes = 64 << 10

	// handshakeTimeout and idleTimeout are client-go's transport's
	// (k8s.io/client-go/transport/cache.go, and apimachinery's
	// SetTransportDefaults): the apiserver answers a handshake in
	// milliseconds, and the watch keeps the connection busy.
	handshakeTimeout = 10 * time.Second
	idleTimeout      = 90 * time.Second

	// listPageTimeout bounds each request of a list, its page read whole.
	// The apiserver ends a list at its --request-timeout, 60 s by default
	// (k8s.io/apiserver v0.37.2, pkg/server/config.go, RequestTimeout): one
	// not over by twice that is stuck (an apiserver, or a proxy whose
	// upstream died, holding the stream while the connection's pings are
	// answered), and would hold its view stale with no retry.
	listPageTimeout = 2 * time.Minute
)

// New returns a client of the apiserver cfg names, failing if its CA or
// client certificate does not load. userAgent names the client in the
// apiserver's audit log and metrics.
func New(cfg *Config, userAgent string) (*Client, error) {
	tlsConfig, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, tlsConfig: tlsConfig, userAgent: userAgent, pageTimeout: listPageTimeout}
	c.http = c.newHTTPClient(nil)
	if cfg.CertFile != "" {
		c.certificate, _ = os.ReadFile(cfg.CertFile)
	}
	return c, nil
}

// newHTTPClient is a client of new connections, which present pair, or
// the certificate the configuration had.
func (c *Client) newHTTPClient(pair *tls.Certificate) *http.Client {
	tlsConfig := c.tlsConfig.Clone() // a transport writes to its own
	if pair != nil {
		tlsConfig.Certificates = []tls.Certificate{*pair}
	}
	return &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: handshakeTimeout,
		ForceAttemptHTTP2:   true, // a TLSClientConfig of one's own turns it off otherwise
		HTTP2:               &http.HTTP2Config{SendPingTimeout: pingInterval, PingTimeout: pingTimeout},
		IdleConnTimeout:     idleTimeout,
	}}
}

// httpClient is the client to send the next request with: a new one, its
// connections new, once the client certificate file holds another
// certificate whose key pair loads (a renewal may write the key a moment
// after the certificate, or empty a file before writing it: until the
// pair loads, the current one serves). The old one's requests under way,
// watches above all, carry on to their end.
func (c *Client) httpClient() *http.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg.CertFile != "" {
		if now, err := os.ReadFile(c.cfg.CertFile); err == nil && !bytes.Equal(now, c.certificate) {
			if pair, err := tls.LoadX509KeyPair(c.cfg.CertFile, c.cfg.KeyFile); err == nil {
				c.http.CloseIdleConnections()
				c.retired, c.http, c.certificate = c.http, c.newHTTPClient(&pair), now
			}
		}
	}
	return c.http
}

// CloseIdleConnections closes the connections that carry no request, as
// the last step of stopping: their goroutines end with them.
func (c *Client) CloseIdleConnections() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range []*http.Client{c.retired, c.http} {
		if h != nil {
			h.CloseIdleConnections()
		}
	}
}

// Resource names what a request reads: a resource of a group and version,
// in one namespace or, with Namespace "", in all.
type Resource struct {
	Group, Version, Resource string
	Namespace                string
}

func (r Resource) String() string {
	s := r.Resource
	if r.Group != "" {
		s += "." + r.Group
	}
	if r.Namespace != "" {
		s += " in namespace " + r.Namespace
	}
	return s
}

// path is r's URL path: /api/v1 for the core group, /apis/GROUP/VERSION
// for the others, then the namespace, the resource and a name.
func (r Resource) path(namespace, name string) string {
	p := "/apis/" + r.Group + "/" + r.Version
	if r.Group == "" {
		p = "/api/" + r.Version
	}
	if namespace != "" {
		p += "/namespaces/" + url.PathEscape(namespace)
	}
	p += "/" + r.Resource
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}

// Get returns the object name of r in namespace ("" for a kind of cluster
// scope), as its JSON, read from etcd (resourceVersion unset: the apiserver
// answers as of now, not from its watch cache). An object that does not
// exist is an error for which apierrors.IsNotFound is true.
func (c *Client) Get(ctx context.Context, r Resource, namespace, name string) ([]byte, error) {
	if name == "" {
		return nil, fmt.Errorf("a GET of %s needs a name: without one it would be a list", r)
	}
	resp, err := c.get(ctx, r.path(namespace, name), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// ListOptions are what a list asks for: the resourceVersion it is served
// at ("0": whatever the apiserver's watch cache holds, the cheapest; "":
// as of now, from etcd; else at least as new as that), and Limit objects a
// page (0: all at once). NextPage, when set, is asked before each page
// after the first is requested: an error of it stops the list, and is
// returned.
type ListOptions struct {
	ResourceVersion string
	Limit           int64
	NextPage        func() error
}

// List lists r page by page, handing each object to each as its JSON,
// which is valid only until each returns: the buffer is reused for the
// next, so that a list holds one object in memory at a time, however many
// the apiserver sends. It returns the list's resourceVersion, from which a
// watch carries on. An error of each stops it, and is returned.
func (c *Client) List(ctx context.Context, r Resource, opts ListOptions, each func(object []byte) error) (resourceVersion string, err error) {
	continueToken := ""
	var object json.RawMessage
	for {
		q := url.Values{}
		if opts.Limit > 0 {
			q.Set("limit", strconv.FormatInt(opts.Limit, 10))
		}
		if continueToken != "" {
			q.Set("continue", continueToken) // a page after the first is at the first's resourceVersion
		} else if opts.ResourceVersion != "" {
			q.Set("resourceVersion", opts.ResourceVersion)
		}
		pageCtx, cancel := context.WithTimeout(ctx, c.pageTimeout)
		resp, err := c.get(pageCtx, r.path(r.Namespace, ""), q)
		if err != nil {
			cancel()
			return "", c.pageFailed(ctx, r, err)
		}
		meta, err := readList(resp.Body, &object, each)
		resp.Body.Close()
		cancel()
		if err != nil {
			return "", c.pageFailed(ctx, r, fmt.Errorf("listing %s: %w", r, err))
		}
		if meta.Continue == "" {
			return meta.ResourceVersion, nil
		}
		if opts.NextPage != nil {
			if err := opts.NextPage(); err != nil {
				return "", err
			}
		}
		continueToken = meta.Continue
	}
}

// pageFailed is err, a list's page's failure, or says the page took
// pageTimeout, when it did and ctx, the list's, has not ended.
func (c *Client) pageFailed(ctx context.Context, r Resource, err error) error {
	if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("listing %s: a page not answered whole within %s, twice the apiserver's request timeout: %w", r, c.pageTimeout, err)
	}
	return err
}

// readList reads a list's JSON from body, an object at a time into
// object, whose buffer it reuses, and returns its metadata, wherever it
// comes (the apiserver writes it before the items).
func readList(body io.Reader, object *json.RawMessage, each func([]byte) error) (metav1.ListMeta, error) {
	var meta metav1.ListMeta
	dec := json.NewDecoder(body)
	if err := expectDelim(dec, '{'); err != nil {
		return meta, err
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return meta, err
		}
		switch key {
		case "metadata":
			if err := dec.Decode(&meta); err != nil {
				return meta, fmt.Errorf("metadata: %w", err)
			}
		case "items":
			if err := readItems(dec, object, each); err != nil {
				return meta, err
			}
		default:
			var skipped json.RawMessage
			if err := dec.Decode(&skipped); err != nil {
				return meta, err
			}
		}
	}
	return meta, expectDelim(dec, '}')
}

func readItems(dec *json.Decoder, object *json.RawMessage, each func([]byte) error) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if t == nil { // "items": null, an empty list
		return nil
	}
	if d, ok := t.(json.Delim); !ok || d != '[' {
		return fmt.Errorf("items is %v, not a list", t)
	}
	for dec.More() {
		*object = (*object)[:0]
		if err := dec.Decode(object); err != nil {
			return fmt.Errorf("items: %w", err)
		}
		if err := each(*object); err != nil {
			return err
		}
	}
	return expectDelim(dec, ']')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := t.(json.Delim); !ok || d != want {
		return fmt.Errorf("got %v where the JSON should have %v", t, want)
	}
	return nil
}

// Watch watches r from resourceVersion, with bookmarks, for timeout (the
// apiserver then ends the watch, as client-go's reflector asks it to, to
// spread its watchers' reconnections); it returns once the apiserver has
// answered, with the stream of events. An answer other than 200 is an
// error with the apiserver's Status (apierrors.IsResourceExpired: 410,
// the resourceVersion is too old).
func (c *Client) Watch(ctx context.Context, r Resource, resourceVersion string, timeout time.Duration) (*Watch, error) {
	q := url.Values{}
	q.Set("watch", "true")
	q.Set("resourceVersion", resourceVersion)
	q.Set("allowWatchBookmarks", "true")
	q.Set("timeoutSeconds", strconv.Itoa(int(timeout.Seconds())))
	resp, err := c.get(ctx, r.path(r.Namespace, ""), q)
	if err != nil {
		return nil, err
	}
	return &Watch{body: resp.Body, dec: json.NewDecoder(resp.Body)}, nil
}

// Watch is a watch's stream of events.
type Watch struct {
	body  io.ReadCloser
	dec   *json.Decoder
	event struct {
		Type   string          `json:"type"`
		Object json.RawMessage `json:"object"`
	}
}

// Event is one event of a watch: Type is ADDED, MODIFIED, DELETED or
// BOOKMARK, Object the object's JSON (a bookmark's holds only its
// metadata.resourceVersion), valid until the next call of Next, and
// ResourceVersion its metadata.resourceVersion.
type Event struct {
	Type            string
	Object          []byte
	ResourceVersion string
}

// Next returns the next event. At the end of the watch, the apiserver
// having closed it at its timeout, it returns io.EOF. An ERROR event is
// returned as an error with its Status (a 410 when the watch's
// resourceVersion has been compacted away while it ran).
func (w *Watch) Next() (Event, error) {
	w.event.Type, w.event.Object = "", w.event.Object[:0]
	if err := w.dec.Decode(&w.event); err != nil {
		if errors.Is(err, io.EOF) {
			return Event{}, io.EOF
		}
		return Event{}, fmt.Errorf("reading the watch: %w", err)
	}
	if w.event.Type == "ERROR" {
		var status metav1.Status
		if err := json.Unmarshal(w.event.Object, &status); err != nil {
			return Event{}, fmt.Errorf("the watch sent an ERROR event that is not a Status: %w", err)
		}
		return Event{}, apierrors.FromObject(&status)
	}
	rv, err := resourceVersionOf(w.event.Object)
	if err != nil {
		return Event{}, fmt.Errorf("a %s event: %w", w.event.Type, err)
	}
	return Event{Type: w.event.Type, Object: w.event.Object, ResourceVersion: rv}, nil
}

// Close ends the watch.
func (w *Watch) Close() error { return w.body.Close() }

// resourceVersionOf returns an object's metadata.resourceVersion, reading
// it only as far as its metadata.
func resourceVersionOf(object []byte) (string, error) {
	meta, found, err := jsonfield.Top(object, "metadata")
	if err != nil || !found {
		return "", fmt.Errorf("the object has no metadata (%v)", err)
	}
	fields, err := jsonfield.Members(meta, "resourceVersion")
	if err != nil || fields[0] == nil {
		return "", fmt.Errorf("the object has no metadata.resourceVersion (%v)", err)
	}
	var rv string
	if err := json.Unmarshal(fields[0], &rv); err != nil {
		return "", fmt.Errorf("metadata.resourceVersion: %w", err)
	}
	return rv, nil
}

// get sends a GET of path with query and the credentials, and returns the
// response when it is 200; any other answer is an error carrying the
// apiserver's Status when it sent one.
func (c *Client) get(ctx context.Context, path string, query url.Values) (*http.Response, error) {
	target := c.cfg.Server + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	token, err := c.cfg.token()
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyBytes))
	var status metav1.Status
	if json.Unmarshal(body, &status) != nil || status.Kind != "Status" {
		status = metav1.Status{Status: metav1.StatusFailure, Code: int32(resp.StatusCode), Reason: apierrors.ReasonForError(nil),
			Message: fmt.Sprintf("the apiserver answered GET %s with %s: %s", path, resp.Status, bytes.TrimSpace(body[:min(len(body), 256)]))}
	}
	if status.Code == 0 {
		status.Code = int32(resp.StatusCode)
	}
	return nil, apierrors.FromObject(&status)
}
