package review

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// FuzzAuditLog feeds any bytes to the audit log's reader, and to the
// replay behind it. Whatever comes in: no panic; each line that is not
// blank is exactly one event or one error, named by its number, in order;
// the replay's -o json is a JSON array of one element per request or bad
// line (at most), and it exits 0, 1 or 2. The seeds are the events a real
// kube-apiserver wrote (testdata/audit/e2e.log, from e2e TestAuditReplay),
// alone, together, gzip-compressed and broken.
func FuzzAuditLog(f *testing.F) {
	log, err := os.ReadFile(filepath.Join("testdata", "audit", "e2e.log"))
	if err != nil {
		f.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(log), []byte("\n"))
	for _, l := range lines {
		f.Add(l)
		f.Add(l[:len(l)/2])
	}
	f.Add(log)
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(lines[0])
	w.Close()
	f.Add(gz.Bytes())
	f.Add(gz.Bytes()[:gz.Len()/2])
	f.Add([]byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","stage":"RequestReceived","auditID":"a","verb":"create"}` + "\n" +
		`{"kind":"Event","apiVersion":"audit.k8s.io/v1","stage":"ResponseComplete","auditID":"a","verb":"create","objectRef":{"resource":"pods","subresource":"exec","name":"p"},"requestURI":"/api/v1/namespaces/x/pods/p/exec?command=ls&ports=x"}`))
	f.Add([]byte("\n\r\n  \n{}\n[]\nnull\n"))

	f.Fuzz(func(t *testing.T, data []byte) {
		gzipped := len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b
		var want []int // the numbers of the lines that are not blank
		if !gzipped {
			for i, l := range bytes.Split(data, []byte("\n")) {
				if len(bytes.TrimSpace(l)) > 0 {
					want = append(want, i+1)
				}
			}
		}
		var got []int
		err := readAuditLog("fuzz", bytes.NewReader(data), func(at logLine, e *auditEvent, err error) {
			if (e == nil) == (err == nil) {
				t.Fatalf("line %d: got event %v and error %v; want one of them", at.line, e, err)
			}
			if len(got) > 0 && at.line <= got[len(got)-1] {
				t.Fatalf("line %d after line %d", at.line, got[len(got)-1])
			}
			got = append(got, at.line)
		}, nil, func() bool { return false })
		if !gzipped && (err != nil || !slices.Equal(got, want)) {
			t.Fatalf("got lines %v (%v), want %v", got, err, want)
		}

		out, _, code := runReplayArgs(t, &fakeWebhook{}, string(data), "-audit-log", "-", "-o", "json")
		var results []replayResult
		if err := json.Unmarshal([]byte(out), &results); err != nil {
			t.Fatalf("-o json printed %q: %v", out, err)
		}
		if code != 0 && code != exitRefused && code != exitUsage && code != exitUnknown {
			t.Fatalf("got exit %d, want 0, 1, 2 or 3", code)
		}
		// The stages of one request are replayed once.
		if !gzipped && len(results) > len(want) {
			t.Fatalf("got %d results for %d lines", len(results), len(want))
		}
	})
}
