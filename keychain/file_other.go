//go:build !unix

package keychain

import "io/fs"

// On Windows the file's ACL is inherited from the user's profile directory;
// mode bits mean nothing there.
func checkFilePerm(path string, fi fs.FileInfo) error { return nil }

// Windows cannot fsync a directory; MoveFileEx is durable enough there.
func syncDir(dir string) error { return nil }
