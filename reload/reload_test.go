package reload

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
