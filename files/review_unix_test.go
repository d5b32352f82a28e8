//go:build unix

package files

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO or a device named on the command line is refused, not read: the
// open of a FIFO blocks until a writer comes, /dev/zero never ends.
func TestSourcesRefuseSpecialFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	link := filepath.Join(t.TempDir(), "zero-link")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero", link} {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		srcs, err := sourcesWithin(t, 10*time.Second, p)
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("Sources(%s) = %d sources, %v; want a not-a-regular-file error", p, len(srcs), err)
		}
	}
}
