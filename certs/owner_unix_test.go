//go:build unix

package certs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestRenewalKeepsModeAndOwner: renewing in place keeps each file's mode
// and owner as the operator set them for the service that reads the key
// (deploy/url-mode/webhook.service: root:webhook, 0640). Before, the key
// came back root's and 0600, and the service could not read it until the
// operator did the chown and chmod again.
func TestRenewalKeepsModeAndOwner(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := certsRun(t, "-dir", dir, "-hosts", "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "tls.key")
	if err := os.Chmod(key, 0o640); err != nil {
		t.Fatal(err)
	}
	gid := os.Getgid()
	if os.Geteuid() == 0 {
		gid = 65532 // the service's group; only root may give it
		if err := os.Chown(key, 0, gid); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := certsRun(t, "-dir", dir, "-hosts", "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(key)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o640 || int(st.Gid) != gid {
		t.Errorf("renewed, tls.key is %v, group %d; want 0640 and group %d, as it was", fi.Mode().Perm(), st.Gid, gid)
	}
}
