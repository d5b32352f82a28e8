//go:build linux || darwin || freebsd || openbsd

package files

import "golang.org/x/sys/unix"

func knownDownloads() (string, error) { return "", nil }

// freeSpace is the number of bytes an unprivileged user may still write on
// the file system holding dir (statfs f_bavail × f_bsize: the root-reserved
// blocks do not count).
func freeSpace(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}
