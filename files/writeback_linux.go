package files

import (
	"os"

	"golang.org/x/sys/unix"
)

// streamOut spreads a PUT's disk writes over the upload and keeps what it
// wrote out of the page cache once it is on disk: every writebackEvery
// bytes it asks the kernel to start writing the newest ones
// (sync_file_range(2), SYNC_FILE_RANGE_WRITE, which does not wait), waits
// for the batch before that to reach the disk and drops it from the cache
// (posix_fadvise(2), POSIX_FADV_DONTNEED). So the fsync ending the PUT
// has at most two batches left to write, not the whole file, and a large
// file received does not push everything else out of the page cache (at
// most two batches of it sit there at a time). Neither call promises
// durability (the fsync does), and a file system that cannot do them is
// not an error.
type streamOut struct {
	f               *os.File
	kicked, dropped int64 // bytes before kicked are being written; before dropped, on disk and out of the cache
}

func newStreamOut(f *os.File, off int64) *streamOut {
	return &streamOut{f: f, kicked: off, dropped: off}
}

// wrote reports that the file's first pos bytes are written.
func (s *streamOut) wrote(pos int64) {
	if pos-s.kicked < writebackEvery {
		return
	}
	fd := int(s.f.Fd())
	_ = unix.SyncFileRange(fd, s.kicked, pos-s.kicked, unix.SYNC_FILE_RANGE_WRITE)
	if s.kicked > s.dropped {
		n := s.kicked - s.dropped
		if unix.SyncFileRange(fd, s.dropped, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER) == nil {
			_ = unix.Fadvise(fd, s.dropped, n, unix.FADV_DONTNEED)
		}
		s.dropped = s.kicked
	}
	s.kicked = pos
}
