package files

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A large file received leaves at most two writeback batches of itself in
// the page cache (streamOut): the rest went to disk during the upload, so
// the fsync ending it had little left to write, and it did not push the
// rest of the cache out. Counted with mincore(2) on a mapping of the
// saved file.
func TestReceiveStreamsOutOfPageCache(t *testing.T) {
	fx := newFixture(t, "", Limits{KeepFree: -1})
	var st unix.Statfs_t
	if err := unix.Statfs(fx.dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC {
		t.Skip("the receive folder is in memory: its pages have no disk to go to")
	}
	const size = 6 * writebackEvery
	src := writeRandom(t, filepath.Join(t.TempDir(), "big.bin"), size, 9)
	srcs, err := Sources(src)
	if err != nil {
		t.Fatal(err)
	}
	res, err := fx.send(t, "wb", srcs)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(fx.dir, res.Files[0].Path)
	if n := residentBytes(t, p); n > 2*writebackEvery+2*bufSize {
		t.Errorf("%d of %d bytes of the received file still in the page cache; want at most two batches (%d)", n, size, 2*writebackEvery)
	}
	if got := fileSHA(t, p); got != srcs[0].Entry.SHA256 {
		t.Fatalf("saved hash %s, want %s", got, srcs[0].Entry.SHA256)
	}
}

// residentBytes counts the bytes of the file at p in the page cache.
func residentBytes(t *testing.T, p string) int64 {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	pg := os.Getpagesize()
	vec := make([]byte, (len(m)+pg-1)/pg)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	var n int64
	for _, v := range vec {
		if v&1 != 0 {
			n += int64(pg)
		}
	}
	return n
}
