package files

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"
)

// TestHashReader: the pipelined hash is SHA-256 of exactly the bytes read,
// in order, at every size around the buffer boundaries, through short
// reads, and a read error comes back with the count so far.
func TestHashReader(t *testing.T) {
	data := make([]byte, 3*bufSize+7)
	for i := range data {
		data[i] = byte(i*7 + i>>11)
	}
	for _, n := range []int{0, 1, bufSize - 1, bufSize, bufSize + 1, 2 * bufSize, len(data)} {
		for _, half := range []bool{false, true} {
			var r io.Reader = bytes.NewReader(data[:n])
			if half {
				r = iotest.HalfReader(r)
			}
			h := sha256.New()
			got, err := hashReader(h, r)
			if err != nil || got != int64(n) {
				t.Fatalf("n=%d half=%v: %d bytes, %v", n, half, got, err)
			}
			if want := sha256.Sum256(data[:n]); !bytes.Equal(h.Sum(nil), want[:]) {
				t.Fatalf("n=%d half=%v: wrong hash", n, half)
			}
		}
	}
	boom := errors.New("boom")
	got, err := hashReader(sha256.New(), io.MultiReader(bytes.NewReader(data[:bufSize+3]), iotest.ErrReader(boom)))
	if !errors.Is(err, boom) || got != bufSize+3 {
		t.Fatalf("error: %d bytes, %v", got, err)
	}
}

// BenchmarkSources is the sender's up-front hash of a file in the page
// cache (Sources) beside a plain io.Copy into SHA-256, the reference.
func BenchmarkSources(b *testing.B) {
	const size = 64 << 20
	p := writeRandom(b, filepath.Join(b.TempDir(), "f"), size, 3)
	b.Run("io.Copy", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			f, _ := os.Open(p)
			io.Copy(sha256.New(), f)
			f.Close()
		}
	})
	b.Run("Sources", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if _, err := Sources(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
