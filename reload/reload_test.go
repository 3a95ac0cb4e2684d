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

// TestReadTornByAChange: files that change while they are read, so that
// what was read does not parse, are read again: the change is loaded at
// once, with no error, as kubelet's swap of a Secret volume between the
// reads of tls.crt and tls.key is. Files that do not parse and do not
// change are reported, not read without end.
func TestReadTornByAChange(t *testing.T) {
	dir := t.TempDir()
	crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func(c, k string) {
		if err := os.WriteFile(crt, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(key, []byte(k), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A pair parses when its two halves are of one generation; the first
	// parse of "2" finds the files torn, and the change done by then.
	var parses atomic.Int32
	parse := func(c [][]byte) (*string, int, error) {
		parses.Add(1)
		if string(c[0]) == "crt2" && string(c[1]) == "key2" && parses.Load() == 2 {
			write("crt3", "key3")
			return nil, 0, errors.New("private key does not match public key")
		}
		if strings.TrimPrefix(string(c[0]), "crt") != strings.TrimPrefix(string(c[1]), "key") {
			return nil, 0, errors.New("private key does not match public key")
		}
		v := string(c[0])
		return &v, 0, nil
	}
	f := New("serving certificate", parse, crt, key)
	write("crt1", "key1")
	if _, _, err := f.Load(); err != nil || *f.Get() != "crt1" {
		t.Fatalf("got %v, %q; want crt1 loaded", err, *f.Get())
	}
	write("crt2", "key2")
	if changed, _, err := f.Load(); !changed || err != nil || *f.Get() != "crt3" {
		t.Errorf("files changed as they were read: got changed %v, err %v, value %q; want crt3 loaded with no error", changed, err, *f.Get())
	}
	write("crt4", "key5")
	before := parses.Load()
	if _, _, err := f.Load(); err == nil || *f.Get() != "crt3" {
		t.Errorf("a pair that does not match: got %v, value %q; want an error and crt3 kept", err, *f.Get())
	}
	if n := parses.Load() - before; n != 1 {
		t.Errorf("a pair that does not match, and does not change, was parsed %d times, want once", n)
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
