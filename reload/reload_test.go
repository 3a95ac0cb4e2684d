package reload

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestLoad changes a file through good and bad states: each new state is
// tried once, and a bad one keeps the last good value.
func TestLoad(t *testing.T) {
	file := filepath.Join(t.TempDir(), "value")
	parse := func(c [][]byte) (*string, int, error) {
		v := string(c[0])
		if strings.HasPrefix(v, "bad") {
			return nil, 0, errors.New("bad value")
		}
		return &v, len(v), nil
	}
	f := New("test value", parse, file)
	for _, step := range []struct {
		write       string // "" leaves the file as it is
		wantChanged bool
		wantErr     string
		wantValue   string
	}{
		{"one", true, "", "one"},
		{"", false, "", "one"},
		{"two", true, "", "two"},
		{"bad", true, "the test value in [" + file + "] does not load: bad value", "two"},
		{"", false, "", "two"},
		{"three", true, "", "three"},
	} {
		if step.write != "" {
			if err := os.WriteFile(file, []byte(step.write), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		changed, info, err := f.Load()
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if changed != step.wantChanged || gotErr != step.wantErr || *f.Get() != step.wantValue {
			t.Errorf("after writing %q: got changed %v, err %q, value %q; want %v, %q, %q", step.write, changed, gotErr, *f.Get(), step.wantChanged, step.wantErr, step.wantValue)
		}
		if changed && err == nil && info != len(step.wantValue) {
			t.Errorf("after writing %q: got info %d, want %d", step.write, info, len(step.wantValue))
		}
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Load(); err == nil || !strings.HasPrefix(err.Error(), "reading the test value: ") {
		t.Errorf("a missing file: got %v, want an error reading it", err)
	}
}

// TestPoll: reload runs on the timer, and at once on SIGHUP after hup;
// neither runs once stop has returned.
func TestPoll(t *testing.T) {
	var hups, reloads atomic.Int32
	stop := Poll(20*time.Millisecond, func() { hups.Add(1) }, func() { reloads.Add(1) })
	waitFor := func(what string, n *atomic.Int32, want int32) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); n.Load() < want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: got %d calls, want %d", what, n.Load(), want)
			}
		}
	}
	waitFor("reload on the timer", &reloads, 2)
	self, err := os.FindProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := self.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("hup on SIGHUP", &hups, 1)
	stop()
	after := reloads.Load()
	time.Sleep(60 * time.Millisecond)
	if got := reloads.Load(); got != after {
		t.Errorf("reload ran %d times after stop, want none", got-after)
	}
}
