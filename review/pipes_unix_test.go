//go:build unix

package review

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNamedPipe: a file that is not a regular one, a named pipe or the
// /dev/fd/63 of a shell's <(helm template …), is read once, as kubectl
// reads each file: before, review opened it again for its second pass,
// and waited for a writer forever (or, of /dev/fd/63, read nothing).
func TestNamedPipe(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "manifests")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no named pipes here:", err)
	}
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer f.Close()
		f.WriteString(deployment("web", "shop", ""))
	}()
	type outcome struct {
		out  string
		code int
	}
	done := make(chan outcome, 1)
	go func() {
		out, _, code, _ := reviewRun(t, &fakeWebhook{}, "", nil, "-f", fifo)
		done <- outcome{out, code}
	}()
	select {
	case o := <-done:
		if o.code != 0 || !strings.Contains(o.out, "1 reviewed") {
			t.Errorf("got exit %d:\n%s\nwant the Deployment reviewed", o.code, o.out)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("review of a named pipe still running after 20 s: it opened the pipe again")
	}
}
