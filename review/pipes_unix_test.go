//go:build unix

package review

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
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
	fifo := namedPipe(t, func(f *os.File) { f.WriteString(deployment("web", "shop", "")) })
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

// TestPipeNotText: of a pipe that is not text, such as a device like
// /dev/zero that never ends, review copies only the start that says so:
// before, it copied all of it, and /dev/zero filled the disk. (A pipe of
// 64 MiB of NUL bytes stands for the device, so that this test, were the
// fix undone, copies no more than that.)
func TestPipeNotText(t *testing.T) {
	fifo := namedPipe(t, func(f *os.File) {
		zeros := make([]byte, 1<<20)
		for range 64 {
			if _, err := f.Write(zeros); err != nil {
				return // review stopped reading, as it should
			}
		}
	})
	in, err := expandInputs(context.Background(), []string{fifo}, nil, expansion{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.close()
	if in.bytes > 4<<10 {
		t.Errorf("copied %d bytes of a pipe of NUL bytes, want 4 KiB at most: what says it is not text", in.bytes)
	}
	var got []unit
	if err := in.each(func(u unit) { got = append(got, u) }, func() bool { return false }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].err == nil || !strings.Contains(got[0].err.Error(), "not text (a NUL byte at offset 0)") {
		t.Errorf("got %+v, want one unit, not text", got)
	}
}

// namedPipe makes a named pipe, and a writer of it that write feeds once
// review opens it; it skips the test where there are none.
func namedPipe(t *testing.T, write func(*os.File)) string {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no named pipes here:", err)
	}
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer f.Close()
		write(f)
	}()
	return fifo
}

// TestStoppedWhileWaitingForInput: a signal ends review while it waits on
// its input, a named pipe with no writer or a stdin that sends nothing,
// with exit 130, as a signal ends it later; before, opening the pipe and
// reading stdin went on waiting, whatever the signal, and review never
// ended.
func TestStoppedWhileWaitingForInput(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no named pipes here:", err)
	}
	silent, feed := io.Pipe()
	defer feed.Close()
	manifest := filepath.Join(t.TempDir(), "web.yaml")
	if err := os.WriteFile(manifest, []byte(deployment("web", "shop", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		stdin io.Reader
		args  []string
	}{
		{"named pipe with no writer", nil, []string{"-f", fifo}},
		{"stdin that sends nothing", silent, []string{"-f", "-"}},
		{"-namespaces of a named pipe with no writer", nil, []string{"-f", manifest, "-namespaces", fifo}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- Run(ctx, flag.NewFlagSet("webhook review", flag.ContinueOnError), tc.args, tc.stdin, io.Discard, io.Discard, func() http.Handler { return &fakeWebhook{} })
			}()
			time.Sleep(100 * time.Millisecond) // review is waiting on its input by now, or soon after
			cancel(errors.New("stopped for the test"))
			select {
			case err := <-done:
				var exit *ExitError
				if !errors.As(err, &exit) || exit.Code != exitInterrupted || !strings.Contains(err.Error(), "interrupted (stopped for the test) before the input was read") {
					t.Errorf("got %v, want exit 130 and the stop named", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("review still waiting on its input 20 s after it was stopped")
			}
		})
	}
}

// TestReplayStoppedWhileWaitingForTheLog: a signal ends a replay while it
// waits on a log that is a named pipe, with no writer yet, or with one
// that sends nothing (`-audit-log <(ssh host tail -f audit.log)`); before,
// the open, and then the read, went on waiting whatever the signal.
func TestReplayStoppedWhileWaitingForTheLog(t *testing.T) {
	for _, writer := range []bool{false, true} {
		t.Run(fmt.Sprintf("writer %v", writer), func(t *testing.T) {
			fifo := filepath.Join(t.TempDir(), "pipe")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Skip("no named pipes here:", err)
			}
			if writer {
				w, err := os.OpenFile(fifo, os.O_RDWR, 0) // a writer that never writes; RDWR opens at once
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
			}
			stopReplayWaiting(t, fifo, nil)
		})
	}
	// -audit-log -, a stdin whose writer sends nothing, as
	// `ssh host tail -f audit.log | webhook review -audit-log -`.
	t.Run("stdin", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		defer r.Close()
		stopReplayWaiting(t, "-", r)
	})
}

// stopReplayWaiting replays the audit log at path (stdin for "-"), stops
// it once it waits on the log, and checks it exits 130.
func stopReplayWaiting(t *testing.T, path string, stdin io.Reader) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, flag.NewFlagSet("webhook review", flag.ContinueOnError), []string{"-audit-log", path}, stdin, io.Discard, io.Discard, func() http.Handler { return &fakeWebhook{} })
	}()
	time.Sleep(100 * time.Millisecond) // replay is waiting on the log by now, or soon after
	cancel(errors.New("stopped for the test"))
	select {
	case err := <-done:
		var exit *ExitError
		if !errors.As(err, &exit) || exit.Code != exitInterrupted {
			t.Errorf("got %v, want exit 130", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("replay still waiting on %s 20 s after it was stopped", path)
	}
}
