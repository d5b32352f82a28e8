//go:build unix

package keychain

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// checkFilePerm refuses a store file that group or others may access, or
// that another user owns.
func checkFilePerm(path string, fi fs.FileInfo) error {
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %#o, readable or writable by other users; "+
			"its secrets may have been read: check who could, then run `chmod 600 %s`", ErrInsecure, path, perm, path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("%w: %s is owned by uid %d, not by this user (uid %d)", ErrInsecure, path, st.Uid, os.Getuid())
	}
	return nil
}

// syncDir fsyncs a directory, so a rename into it survives a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("keychain: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("keychain: sync %s: %w", dir, err)
	}
	return nil
}
