//go:build unix

package certs

import (
	"os"
	"syscall"
)

// sameOwner gives f the owner and group of old.
func sameOwner(f *os.File, old os.FileInfo) error {
	st, ok := old.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	return f.Chown(int(st.Uid), int(st.Gid))
}
