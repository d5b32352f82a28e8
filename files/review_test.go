package files

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// sourcesWithin runs Sources in the background and fails the test when it
// has not returned within d (a FIFO blocks the open, /dev/zero never ends).
func sourcesWithin(t *testing.T, d time.Duration, paths ...string) ([]Source, error) {
	t.Helper()
	type out struct {
		s   []Source
		err error
	}
	ch := make(chan out, 1)
	go func() {
		s, err := Sources(paths...)
		ch <- out{s, err}
	}()
	select {
	case o := <-ch:
		return o.s, o.err
	case <-time.After(d):
		t.Fatalf("Sources(%v) still running after %v", paths, d)
		return nil, nil
	}
}

// A folder named through a symlink is sent as its files (it was sent as
// nothing: WalkDir does not follow a symlink root); symlinks inside a
// folder, to a file inside or outside it, are still skipped.
func TestSourcesSymlinkedFolder(t *testing.T) {
	tmp := t.TempDir()
	real := filepath.Join(tmp, "Photos")
	if err := os.MkdirAll(filepath.Join(real, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a.jpg", "sub/b.jpg"} {
		if err := os.WriteFile(filepath.Join(real, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(tmp, "secret")
	if err := os.WriteFile(secret, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(real, "out-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.jpg", filepath.Join(real, "in-link")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(tmp, "trip")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	srcs, err := sourcesWithin(t, 10*time.Second, link)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range srcs {
		got = append(got, s.Entry.Path)
	}
	if strings.Join(got, ",") != "trip/a.jpg,trip/sub/b.jpg" {
		t.Errorf("sent %v, want trip/a.jpg and trip/sub/b.jpg (no links)", got)
	}
}

// The numbered alternative of a name at the 255-byte component limit still
// fits it, cut at a rune boundary.
func TestNumberedLongNames(t *testing.T) {
	t.Parallel()
	for _, base := range []string{
		strings.Repeat("Q", 251) + ".txt",
		strings.Repeat("日", 85),
		"a." + strings.Repeat("e", 253),
		strings.Repeat("ü", 124) + ".tar.gz",
	} {
		for _, k := range []int{1, 10, maxNumbered} {
			got := numbered(base, k)
			if len(got) > maxComponentLen || !utf8.ValidString(got) {
				t.Errorf("numbered(%d bytes, %d) = %d bytes, valid UTF-8 %v", len(base), k, len(got), utf8.ValidString(got))
			}
			if _, err := CleanPath(got); err != nil {
				t.Errorf("numbered(%d bytes, %d): %v", len(base), k, err)
			}
		}
	}
}

// A second file of a 255-byte name is saved under a numbered name instead
// of failing with ENAMETOOLONG after every byte was sent.
func TestNeverOverwriteLongName(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, "", Limits{KeepFree: -1})
	name := strings.Repeat("Q", 251) + ".txt"
	srcs, err := Sources(writeRandom(t, filepath.Join(t.TempDir(), name), 1000, 3))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := range 3 {
		res, err := fx.send(t, "long"+string(rune('a'+i)), srcs)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		p := res.Files[0].Path
		if seen[p] || len(filepath.Base(p)) > maxComponentLen {
			t.Errorf("send %d saved as %q", i, p)
		}
		seen[p] = true
		if got := fileSHA(t, filepath.Join(fx.dir, p)); got != srcs[0].Entry.SHA256 {
			t.Errorf("%s has the wrong content", p)
		}
	}
}
