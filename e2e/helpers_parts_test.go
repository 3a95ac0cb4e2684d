package e2e

// What the tests of more than one part share, in a file of no part's, so
// that a copy that deletes a part's tests (README.md's "Make it yours")
// keeps them; and skipWithoutPart, by which a part's tests skip in a copy
// without it.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// skipWithoutPart skips t when the repository has no folder name, the
// part README.md's "Make it yours" says a copy may delete, saying what
// the test would have shown.
func skipWithoutPart(t *testing.T, name, what string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(repoRoot, name)); err != nil {
		t.Skipf("the %s part is deleted (%s/ is gone): no %s", name, name, what)
	}
}

// waitUntil polls cond for a few seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// auditEvent is the part of an audit.k8s.io/v1 Event these tests read.
type auditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *metav1.Status    `json:"responseStatus"`
	Annotations    map[string]string `json:"annotations"`
}

// requestEvent waits for the ResponseComplete event of r in the audit log
// at path, and returns it. Its verb is the operation's (a create, an
// update, a delete; a create for a CONNECT, a POST), and its objectRef names r's resource, subresource,
// namespace and object: what r stores first may be of the same resource
// and name in another namespace.
func requestEvent(t *testing.T, path string, r *preparedRequest) auditEvent {
	t.Helper()
	verb := strings.ToLower(string(r.Operation))
	if r.Operation == admissionregistrationv1.Connect {
		verb = "create" // a CONNECT is a POST of its subresource
	}
	e, _ := waitForAuditEvent(t, path, fmt.Sprintf("the ResponseComplete event of the %s", r), func(e auditEvent) bool {
		return e.Stage == "ResponseComplete" && e.Verb == verb && e.ObjectRef != nil &&
			e.ObjectRef.Resource == r.resource.Resource && e.ObjectRef.Subresource == r.Subresource && e.ObjectRef.Namespace == r.namespace() && e.ObjectRef.Name == r.name()
	})
	return e
}

// waitForAuditEvent reads the audit log at path until an event matches,
// and returns it with its line number, or fails the test, naming what it
// waited for, after auditLogTimeout. A line that does not decode is
// skipped: the apiserver may be writing it as it is read.
func waitForAuditEvent(t *testing.T, path, what string, matches func(auditEvent) bool) (auditEvent, int) {
	t.Helper()
	deadline := time.Now().Add(auditLogTimeout)
	for {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 16<<20)
		for n := 1; sc.Scan(); n++ {
			var e auditEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil && matches(e) {
				f.Close()
				return e, n
			}
		}
		f.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the audit log %s has no %s after %s", path, what, auditLogTimeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
