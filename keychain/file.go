package keychain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"
)

// maxFileSize bounds how much of a store file is read (a full index of
// MaxItemSize items is far smaller; a larger file is not ours).
const maxFileSize = 16 << 20

// fileVersion is the "v" field of the store file.
const fileVersion = 1

// fileData is the store file: {"v":1,"items":{"<key>":"<base64 value>",...}}.
type fileData struct {
	V     int               `json:"v"`
	Items map[string][]byte `json:"items"`
}

// File is the Store in one JSON file (see OpenFile).
type File struct {
	path    string
	timeout time.Duration

	mu   sync.Mutex   // serialises this process's users of lock
	lock *flock.Flock // path + ".lock"; guarded by mu
}

var _ Store = (*File)(nil)

// OpenFile opens (creating if missing) the store file at path: one JSON
// object {"v":1,"items":{key: base64 value}}, mode 0600, its directory
// created 0700 if missing. This is the --keychain file backend: the secrets
// are protected by file permissions only, not encrypted.
//
// Every operation takes a github.com/gofrs/flock lock on path+".lock"
// (shared to read, exclusive to write; a separate file because the store
// file itself is replaced) and re-reads the file under it, so several
// processes interleave safely. Writes are atomic: a temp file in the same
// directory, fsync, rename over path, fsync of the directory. Waiting for
// the lock gives up after CallTimeout.
//
// Permissions (Unix): a file that group or others may access, or that
// another user owns, is refused with an error wrapping ErrInsecure that
// names the fix (chmod 600); it is not silently repaired, since its secrets
// may already have been read. The check runs at open and on every read.
// On Windows the file inherits the ACL of the user's profile directory.
func OpenFile(path string) (Store, error) {
	return openFile(path)
}

func openFile(path string) (*File, error) {
	if path == "" {
		return nil, errors.New("keychain: empty store file path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("keychain: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("keychain: store file directory: %w", err)
	}
	f := &File{path: abs, timeout: CallTimeout, lock: flock.New(abs + ".lock")}
	// Create the file now, so a backend that cannot write fails at start.
	err = f.locked(true, func() error {
		_, err := f.read()
		if errors.Is(err, fs.ErrNotExist) {
			return f.writeFile(fileData{V: fileVersion, Items: map[string][]byte{}})
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Get returns the value under key, ErrNotFound or ErrInvalidKey.
func (f *File) Get(key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	var v []byte
	err := f.locked(false, func() error {
		d, err := f.read()
		if err != nil {
			return err
		}
		var ok bool
		if v, ok = d.Items[key]; !ok {
			return ErrNotFound
		}
		return nil
	})
	return v, err
}

// Set stores value under key; ErrTooBig over MaxItemSize, ErrInvalidKey.
func (f *File) Set(key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := checkSize(value); err != nil {
		return err
	}
	return f.update(func(d *fileData) error {
		d.Items[key] = slices.Clone(value)
		return nil
	})
}

// Delete removes key, or returns ErrNotFound.
func (f *File) Delete(key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return f.update(func(d *fileData) error {
		if _, ok := d.Items[key]; !ok {
			return ErrNotFound
		}
		delete(d.Items, key)
		return nil
	})
}

// Keys returns the keys starting with prefix, sorted.
func (f *File) Keys(prefix string) ([]string, error) {
	var keys []string
	err := f.locked(false, func() error {
		d, err := f.read()
		if err != nil {
			return err
		}
		for k := range d.Items {
			if strings.HasPrefix(k, prefix) {
				keys = append(keys, k)
			}
		}
		return nil
	})
	slices.Sort(keys)
	return keys, err
}

// update re-reads the file under the exclusive lock, applies fn and writes
// the result back; nothing is written when fn fails.
func (f *File) update(fn func(*fileData) error) error {
	return f.locked(true, func() error {
		d, err := f.read()
		if err != nil {
			return err
		}
		if err := fn(&d); err != nil {
			return err
		}
		return f.writeFile(d)
	})
}

// locked runs fn holding mu and the lock file (exclusive or shared).
func (f *File) locked(exclusive bool, fn func() error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	try := f.lock.TryRLockContext
	if exclusive {
		try = f.lock.TryLockContext
	}
	ok, err := try(ctx, lockRetry)
	if !ok || err != nil {
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("keychain: %w: gave up after %v waiting for lock file %s, held by another process", ErrTimeout, f.timeout, f.lock.Path())
		}
		return fmt.Errorf("keychain: lock %s: %w", f.lock.Path(), err)
	}
	err = fn()
	if uerr := f.lock.Unlock(); uerr != nil && err == nil {
		err = fmt.Errorf("keychain: unlock %s: %w", f.lock.Path(), uerr)
	}
	return err
}

// read reads and checks the store file. A missing file is fs.ErrNotExist
// (only OpenFile creates it; later a missing file is an error, since
// someone removed it under us).
func (f *File) read() (fileData, error) {
	fh, err := os.Open(f.path)
	if err != nil {
		return fileData{}, fmt.Errorf("keychain: %w", err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return fileData{}, fmt.Errorf("keychain: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fileData{}, fmt.Errorf("keychain: %s is not a regular file", f.path)
	}
	if err := checkFilePerm(f.path, fi); err != nil {
		return fileData{}, err
	}
	if fi.Size() > maxFileSize {
		return fileData{}, fmt.Errorf("keychain: %s is %d bytes, over %d: not a meshtray keychain file", f.path, fi.Size(), maxFileSize)
	}
	raw, err := io.ReadAll(io.LimitReader(fh, maxFileSize+1))
	if err != nil {
		return fileData{}, fmt.Errorf("keychain: read %s: %w", f.path, err)
	}
	var d fileData
	if err := json.Unmarshal(raw, &d); err != nil {
		return fileData{}, fmt.Errorf("keychain: %s is corrupt: %w", f.path, err)
	}
	if d.V != fileVersion {
		return fileData{}, fmt.Errorf("keychain: %s has format version %d, this meshtray reads %d", f.path, d.V, fileVersion)
	}
	if d.Items == nil {
		d.Items = map[string][]byte{}
	}
	return d, nil
}

// writeFile replaces the store file atomically (WriteFile).
func (f *File) writeFile(d fileData) error {
	raw, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("keychain: %w", err)
	}
	return WriteFile(f.path, raw)
}

// WriteFile replaces path with data, mode 0600, so that a reader or a
// crash sees the old file or the new one, never a part: temp file in the
// same directory, fsync, rename, fsync of the directory. The state dir's
// other small files (settings, daemon.json, agents.json) are written with
// it too.
func WriteFile(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("keychain: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("keychain: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("keychain: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("keychain: sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("keychain: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("keychain: %w", err)
	}
	return syncDir(dir)
}

// RemoveStaleTemps removes the temp files WriteFile left beside the store
// file at path when its writer died between creating and renaming one
// (kill -9, power loss): each is a whole copy of the store, secrets
// included. It takes the store's exclusive lock (writers hold it while a
// temp file exists), so only dead writers' files go; with no temp file
// present it takes no lock and creates nothing. It returns the names it
// removed.
func RemoveStaleTemps(path string) ([]string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("keychain: %w", err)
	}
	pattern := filepath.Join(filepath.Dir(abs), "."+filepath.Base(abs)+".tmp*")
	if m, _ := filepath.Glob(pattern); len(m) == 0 {
		return nil, nil
	}
	f := &File{path: abs, timeout: CallTimeout, lock: flock.New(abs + ".lock")}
	var removed []string
	err = f.locked(true, func() error {
		m, err := filepath.Glob(pattern)
		if err != nil {
			return err
		}
		var errs []error
		for _, p := range m {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, filepath.Base(p))
		}
		return errors.Join(errs...)
	})
	return removed, err
}
