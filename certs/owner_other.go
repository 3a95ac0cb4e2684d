//go:build !unix

package certs

import "os"

// sameOwner does nothing where files have no Unix owner.
func sameOwner(*os.File, os.FileInfo) error { return nil }
