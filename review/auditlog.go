package review

// Reading the apiserver's audit log as its log backend writes it
// (--audit-log-path, --audit-log-format=json, the default): one
// audit.k8s.io/v1 Event per line, from a file, several files (rotated
// logs, gzip-compressed or not) or stdin, in bounded memory whatever the
// log's length.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// maxEventBytes bounds one line of the log. An event holds at most the
	// request's body (the apiserver takes 3 MiB), the object as stored
	// (etcd takes 1.5 MiB, more once written as JSON) and a mutating
	// webhook's patch in an annotation. A longer line is reported and
	// skipped without being held.
	maxEventBytes = 16 << 20

	// maxPendingRequests bounds the requests whose ResponseComplete stage
	// has not been read yet, though an earlier stage has: a watch's
	// ResponseStarted comes when it opens and its ResponseComplete when it
	// ends, minutes later. Past it, the oldest is replayed from the last
	// stage read.
	maxPendingRequests = 10000
)

// auditEvent is the part of an audit.k8s.io/v1 Event that replay reads
// (k8s.io/apiserver/pkg/apis/audit/v1/types.go; the root module does not
// import k8s.io/apiserver).
type auditEvent struct {
	Kind                     string                     `json:"kind"`
	APIVersion               string                     `json:"apiVersion"`
	Level                    string                     `json:"level"`
	AuditID                  string                     `json:"auditID"`
	Stage                    string                     `json:"stage"`
	RequestURI               string                     `json:"requestURI"`
	Verb                     string                     `json:"verb"`
	User                     authenticationv1.UserInfo  `json:"user"`
	ImpersonatedUser         *authenticationv1.UserInfo `json:"impersonatedUser"`
	ObjectRef                *objectReference           `json:"objectRef"`
	ResponseStatus           *metav1.Status             `json:"responseStatus"`
	RequestObject            json.RawMessage            `json:"requestObject"`
	ResponseObject           json.RawMessage            `json:"responseObject"`
	RequestReceivedTimestamp string                     `json:"requestReceivedTimestamp"`
	StageTimestamp           string                     `json:"stageTimestamp"`
	Annotations              map[string]string          `json:"annotations"`
}

// objectReference is an Event's objectRef: the request's resource, as the
// apiserver's RequestInfo names it (LogRequestMetadata in
// k8s.io/apiserver/pkg/audit/request.go), with the name and namespace of
// the object sent filled in where the URL had none (LogRequestObject).
type objectReference struct {
	Resource        string `json:"resource"`
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	APIGroup        string `json:"apiGroup"`
	APIVersion      string `json:"apiVersion"`
	ResourceVersion string `json:"resourceVersion"`
	Subresource     string `json:"subresource"`
}

// The stages of a request's events (audit/v1 Stage).
const (
	stageRequestReceived  = "RequestReceived"
	stageResponseStarted  = "ResponseStarted"
	stageResponseComplete = "ResponseComplete"
	stagePanic            = "Panic"
)

// logLine is where a line was read: the file (stdin for -) and its line
// number, from 1.
type logLine struct {
	file string
	line int
}

func (l logLine) String() string { return fmt.Sprintf("%s:%d", l.file, l.line) }

// readAuditLogs reads every line of the logs at paths, in the order given
// ("-" for stdin), and calls each with the event of each line that holds
// one, or with what kept it from being one. A file that cannot be opened
// is an error at line 0. read, when not nil, is told how many bytes each
// line took, for progress. It stops once ctx is done: before the next
// line, and while it waits to open a file or to read a file or stdin (a
// named pipe waits for its writer, and for its writer's lines).
func readAuditLogs(ctx context.Context, paths []string, stdin io.Reader, each func(at logLine, e *auditEvent, err error), read func(n int)) {
	stop := func() bool { return ctx.Err() != nil }
	for _, path := range paths {
		if stop() {
			return
		}
		if path == "-" {
			if err := readAuditLog("stdin", readerWithin{ctx, stdin}, each, read, stop); err != nil && !stop() {
				each(logLine{file: "stdin"}, nil, err)
			}
			continue
		}
		f, err := openWithin(ctx, path)
		if err == nil {
			unblock := context.AfterFunc(ctx, func() { f.Close() })
			err = readAuditLog(path, f, each, read, stop)
			unblock()
			f.Close()
		}
		if err != nil && !stop() {
			each(logLine{file: path}, nil, err)
		}
	}
}

// openWithin opens path, unless ctx ends first: opening a named pipe
// waits for a writer, and that wait does not end for a signal.
func openWithin(ctx context.Context, path string) (*os.File, error) {
	type opened struct {
		f   *os.File
		err error
	}
	o, err := within(ctx, func() opened {
		f, err := os.Open(path)
		return opened{f, err}
	}, func(o opened) {
		if o.err == nil {
			o.f.Close()
		}
	})
	if err != nil {
		return nil, err
	}
	return o.f, o.err
}

// within returns what do returns, or ctx.Err() once ctx ends first: do
// then goes on unseen, and undo is given what it returns.
func within[T any](ctx context.Context, do func() T, undo func(T)) (T, error) {
	done := make(chan T, 1)
	abandoned := make(chan struct{})
	go func() {
		v := do()
		select {
		case done <- v:
		case <-abandoned:
			undo(v)
		}
	}()
	select {
	case v := <-done:
		return v, nil
	case <-ctx.Done():
		close(abandoned)
		var zero T
		return zero, ctx.Err()
	}
}

// readerWithin reads r until ctx ends: a read of stdin, unlike one of a
// file, cannot be ended by closing it.
type readerWithin struct {
	ctx context.Context
	r   io.Reader
}

func (rw readerWithin) Read(p []byte) (int, error) {
	type read struct {
		n   int
		err error
	}
	got, err := within(rw.ctx, func() read {
		n, err := rw.r.Read(p)
		return read{n, err}
	}, func(read) {})
	if err != nil {
		return 0, err
	}
	return got.n, got.err
}

// readAuditLog reads one log, gzip-compressed (as --audit-log-compress
// writes rotated files) or not. It returns an error only when the file
// itself cannot be read on; a bad line is handed to each.
func readAuditLog(name string, r io.Reader, each func(at logLine, e *auditEvent, err error), read func(n int), stop func() bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("not a gzip file, though it begins as one: %w", err)
		}
		defer gz.Close()
		br = bufio.NewReaderSize(gz, 64<<10)
	}
	var buf []byte
	for n := 1; !stop(); n++ {
		line, tooLong, err := readLine(br, buf[:0])
		buf = line
		if read != nil {
			read(len(line))
		}
		if tooLong {
			each(logLine{name, n}, nil, fmt.Errorf("the line is longer than %d MiB: not an event the apiserver writes", maxEventBytes>>20))
		} else if len(bytes.TrimSpace(line)) > 0 {
			e, perr := parseEvent(line)
			each(logLine{name, n}, e, perr)
		}
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return fmt.Errorf("after line %d: %w", n, err)
		}
		if cap(buf) > 1<<20 {
			buf = nil // a long line's buffer is not kept for the short ones
		}
	}
	return nil
}

// readLine reads one line into buf, without its newline. A line longer
// than maxEventBytes is read to its end but not kept: tooLong says so.
func readLine(br *bufio.Reader, buf []byte) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if len(buf)+len(chunk) > maxEventBytes {
			tooLong = true
		} else if !tooLong {
			buf = append(buf, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(buf, []byte("\n")), tooLong, err
	}
}

// parseEvent reads one line as an audit event, or says why it is not one.
// The error never quotes the line: it may hold a Secret.
func parseEvent(line []byte) (*auditEvent, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return nil, errors.New("not a JSON object: replay reads the log as --audit-log-format=json (the default) writes it, not legacy")
	}
	var e auditEvent
	if err := json.Unmarshal(line, &e); err != nil {
		var syntax *json.SyntaxError
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syntax):
			return nil, fmt.Errorf("not JSON at byte %d of the line", syntax.Offset)
		case errors.As(err, &typeErr):
			return nil, fmt.Errorf("not an audit event: %s is a JSON %s", cmpOr(typeErr.Field, "the line"), typeErr.Value)
		}
		return nil, errors.New("not JSON")
	}
	switch {
	case e.Kind != "Event" || !strings.HasPrefix(e.APIVersion, "audit.k8s.io/"):
		return nil, fmt.Errorf("not an audit event: kind %q, apiVersion %q; want Event of audit.k8s.io", e.Kind, e.APIVersion)
	case e.Stage != stageRequestReceived && e.Stage != stageResponseStarted && e.Stage != stageResponseComplete && e.Stage != stagePanic:
		return nil, fmt.Errorf("not an audit event: stage %q; want RequestReceived, ResponseStarted, ResponseComplete or Panic", e.Stage)
	case e.Verb == "":
		return nil, errors.New("not an audit event: it has no verb")
	}
	if e.ObjectRef != nil {
		e.ObjectRef.Namespace = requestNamespace(e.RequestURI, e.ObjectRef.Namespace)
	}
	return &e, nil
}

// requestNamespace is the namespace of the request to requestURI as the
// apiserver read it from the path ("" for a cluster-scoped resource:
// k8s.io/apiserver pkg/endpoints/request/requestinfo.go, NewRequestInfo),
// or logged, the objectRef's, for a path that is not an API one. The
// objectRef's may be the object's: audit's LogRequestObject fills an
// empty one from the object (pkg/audit/request.go), and a Helm chart's
// ClusterRole may name a namespace, which the apiserver then clears.
func requestNamespace(requestURI, logged string) string {
	path, _, _ := strings.Cut(requestURI, "?")
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) > 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) > 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return logged
	}
	if parts[0] == "watch" || parts[0] == "proxy" { // specialVerbs: the deprecated /watch/ and /proxy/ paths
		parts = parts[1:]
	}
	if len(parts) > 1 && parts[0] == "namespaces" {
		return parts[1]
	}
	return ""
}

func cmpOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}

// completer turns the events of each request into one: the apiserver
// writes an event per stage (k8s.io/apiserver/pkg/endpoints/filters/
// audit.go, WithAudit), RequestReceived before anything is decided,
// ResponseStarted when a long-running request (a watch) answers, and
// ResponseComplete (or Panic) last, with the response and every
// annotation. A request is replayed from its ResponseComplete or Panic
// event when it comes; otherwise from the last stage read, when the log
// ends or maxPendingRequests wait. A failed authentication has only
// ResponseStarted (WithFailedAuthenticationAudit): it is replayed at once.
// A request replayed early is not replayed again when its later stages
// come.
type completer struct {
	pending map[string]pendingEvent // by auditID
	order   []string                // auditIDs in the order first read, some already done
	// early holds the auditIDs of the last maxPendingRequests requests
	// replayed before their last stage, in earlyOrder.
	early      map[string]bool
	earlyOrder []string
	replay     func(at logLine, e *auditEvent)
}

type pendingEvent struct {
	at logLine
	e  *auditEvent
}

func newCompleter(replay func(at logLine, e *auditEvent)) *completer {
	return &completer{pending: map[string]pendingEvent{}, early: map[string]bool{}, replay: replay}
}

// add takes the next event of the log.
func (c *completer) add(at logLine, e *auditEvent) {
	final := e.Stage == stageResponseComplete || e.Stage == stagePanic ||
		(e.Stage == stageResponseStarted && e.ResponseStatus != nil && e.ResponseStatus.Code == 401)
	if e.AuditID == "" {
		c.replay(at, e)
		return
	}
	if c.early[e.AuditID] {
		return // replayed already, from an earlier stage
	}
	if final {
		delete(c.pending, e.AuditID)
		c.replay(at, e)
		return
	}
	if _, ok := c.pending[e.AuditID]; !ok {
		c.order = append(c.order, e.AuditID)
	}
	c.pending[e.AuditID] = pendingEvent{at, e}
	for len(c.pending) > maxPendingRequests {
		if id := c.replayOldest(); id != "" {
			c.early[id] = true
			if c.earlyOrder = append(c.earlyOrder, id); len(c.earlyOrder) > maxPendingRequests {
				delete(c.early, c.earlyOrder[0])
				c.earlyOrder = c.earlyOrder[1:]
			}
		}
	}
	if len(c.order) > 2*maxPendingRequests {
		// Forget the ids of requests already replayed.
		kept := c.order[:0]
		for _, id := range c.order {
			if _, ok := c.pending[id]; ok {
				kept = append(kept, id)
			}
		}
		c.order = kept
	}
}

// replayOldest replays the request waiting longest from the stage read,
// and returns its auditID.
func (c *completer) replayOldest() string {
	for len(c.order) > 0 {
		id := c.order[0]
		c.order = c.order[1:]
		if p, ok := c.pending[id]; ok {
			delete(c.pending, id)
			c.replay(p.at, p.e)
			return id
		}
	}
	return ""
}

// flush replays every request still waiting, at the end of the log.
func (c *completer) flush() {
	for len(c.pending) > 0 {
		c.replayOldest()
	}
	c.order = nil
}
