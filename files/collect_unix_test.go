//go:build unix

package files

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// TestCollectReportsSkipped: Collect names each entry of a folder it does
// not send (a link to a file, to a folder, a named pipe), counted past
// the listed bound.
func TestCollectReportsSkipped(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "Box")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o600)
	os.Symlink("a.txt", filepath.Join(dir, "file-link"))
	os.Symlink("sub", filepath.Join(dir, "dir-link"))
	if err := syscall.Mkfifo(filepath.Join(dir, "sub", "pipe"), 0o600); err != nil {
		t.Skip("no FIFO here:", err)
	}
	srcs, sk, err := Collect(dir)
	if err != nil || len(srcs) != 1 || srcs[0].Entry.Path != "Box/a.txt" {
		t.Fatalf("Collect = %+v, %v", srcs, err)
	}
	want := []NotSentEntry{{"Box/dir-link", "symbolic link"}, {"Box/file-link", "symbolic link"}, {"Box/sub/pipe", "named pipe"}}
	if sk.Count != 3 || !slices.Equal(sk.Entries, want) {
		t.Fatalf("skipped = %+v, want %+v", sk, want)
	}
	for i := range MaxNotSentListed + 5 {
		os.Symlink("a.txt", filepath.Join(dir, fmt.Sprintf("l%03d", i)))
	}
	if _, sk, _ = Collect(dir); sk.Count != MaxNotSentListed+8 || len(sk.Entries) != MaxNotSentListed {
		t.Fatalf("%d skipped, %d listed; want %d and %d", sk.Count, len(sk.Entries), MaxNotSentListed+8, MaxNotSentListed)
	}
}
