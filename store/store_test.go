package store

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashWriterEnv) != "" {
		crashWriter()
		return
	}
	goleak.VerifyTestMain(m)
}

func openTest(t *testing.T, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func tempDB(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), DefaultFile)
}

// rawDB opens the file with the driver alone, as an attacker or a newer
// binary would.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestOpenFreshAndReopen(t *testing.T) {
	path := tempDB(t)
	ctx := context.Background()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTask(ctx, Task{ID: "t1", Owner: "g1", ContextID: "c1", State: StateSubmitted}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v, want ErrClosed", err)
	}
	if err := s.CreateTask(ctx, Task{ID: "t2", Owner: "g1", State: StateSubmitted}); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after Close = %v, want ErrClosed", err)
	}

	db := rawDB(t, path)
	var versions []int
	rows, err := db.Query("SELECT version FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v int
		rows.Scan(&v)
		versions = append(versions, v)
	}
	rows.Close()
	if len(versions) != SchemaVersion || versions[len(versions)-1] != SchemaVersion {
		t.Fatalf("applied versions %v, want 1..%d", versions, SchemaVersion)
	}
	var mode string
	db.QueryRow("PRAGMA journal_mode").Scan(&mode)
	if mode != "wal" {
		t.Fatalf("journal_mode %q, want wal", mode)
	}
	db.Close()

	// Re-open: no migration runs twice, the data is there.
	s2 := openTest(t, path, Options{})
	got, err := s2.Task(ctx, "t1")
	if err != nil || got.ContextID != "c1" || got.State != StateSubmitted {
		t.Fatalf("after reopen Task = %+v, %v", got, err)
	}
	var n int
	s2.db.QueryRow("SELECT count(*) FROM schema_migrations").Scan(&n)
	if n != SchemaVersion {
		t.Fatalf("%d migration rows after reopen, want %d", n, SchemaVersion)
	}
	var fk int
	s2.wc.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk)
	var busy int
	s2.wc.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy)
	if fk != 1 || busy != int(DefaultBusyTimeout.Milliseconds()) {
		t.Fatalf("foreign_keys=%d busy_timeout=%d", fk, busy)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	path := tempDB(t)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db := rawDB(t, path)
	if _, err := db.Exec("INSERT INTO schema_migrations VALUES (?, 'from the future', 0)", SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before, _ := os.ReadFile(path)

	_, err = Open(path, Options{})
	if !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("Open = %v, want ErrNewerSchema", err)
	}
	for _, want := range []string{path, "newer", "never downgraded"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) {
		t.Fatal("a refused open changed the file")
	}
	db = rawDB(t, path)
	var v int
	db.QueryRow("SELECT max(version) FROM schema_migrations").Scan(&v)
	if v != SchemaVersion+1 {
		t.Fatalf("version now %d: downgraded", v)
	}
}

// TestNewDatabaseNeverEmpty: a new database is written under a temporary
// name and renamed into place with its header, so the file at the
// database's path is never an empty file, and no temporary is left.
func TestNewDatabaseNeverEmpty(t *testing.T) {
	path := tempDB(t)
	// A temporary left by an Open killed before its rename is replaced.
	os.WriteFile(path+".new", []byte("half"), 0o600)
	s := openTest(t, path, Options{})
	fi, err := os.Stat(path)
	if err != nil || fi.Size() < 100 {
		t.Fatalf("the new database: %v, %v", fi, err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("mode %o, want 600", m)
	}
	left, _ := filepath.Glob(path + ".new*")
	if len(left) != 0 {
		t.Errorf("temporaries left: %v", left)
	}
	s.Close()
	s2, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	s2.Close()
}

func TestFileModes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, DefaultFile)
	s := openTest(t, path, Options{})
	if err := s.CreateTask(context.Background(), Task{ID: "t", Owner: "g", State: StateWorking}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if m := fi.Mode().Perm(); m != 0o600 {
			t.Errorf("%s mode %o, want 600", filepath.Base(p), m)
		}
	}
	// A file made too open by someone else is narrowed at open.
	s.Close()
	os.Chmod(path, 0o644)
	s2 := openTest(t, path, Options{})
	_ = s2
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode after reopen %o", fi.Mode().Perm())
	}
}

// fillDB writes a database with some tasks and audit entries and closes it.
func fillDB(t *testing.T, path string, tasks int) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	blob := []byte(`[{"role":"user","parts":[{"kind":"text","text":"` + strings.Repeat("x", 3000) + `"}]}]`)
	for i := range tasks {
		if err := s.CreateTask(ctx, Task{ID: "t" + strconv.Itoa(i), Owner: "g", State: StateCompleted, History: blob}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, Entry{Kind: KindCapability, Subject: "device.info"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func wantCorrupt(t *testing.T, err error, path string) {
	t.Helper()
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open = %v, want a *CorruptError", err)
	}
	msg := err.Error()
	for _, want := range []string{path, ResetFlag} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %q", msg, want)
		}
	}
}

func TestCorruptAndTruncatedFiles(t *testing.T) {
	t.Run("garbage", func(t *testing.T) {
		path := tempDB(t)
		garbage := []byte(strings.Repeat("this is not a database\n", 400))
		os.WriteFile(path, garbage, 0o600)
		_, err := Open(path, Options{})
		wantCorrupt(t, err, path)
		if got, _ := os.ReadFile(path); string(got) != string(garbage) {
			t.Fatal("a refused open changed the file")
		}
	})
	t.Run("truncated", func(t *testing.T) {
		path := tempDB(t)
		fillDB(t, path, 60)
		fi, _ := os.Stat(path)
		if err := os.Truncate(path, fi.Size()/2); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path, Options{})
		wantCorrupt(t, err, path)
	})
	t.Run("zero bytes", func(t *testing.T) {
		// Open never leaves its database empty (createFile), so an empty
		// file was truncated or replaced: refused like a truncated one,
		// with or without its WAL.
		for _, wal := range []bool{false, true} {
			path := tempDB(t)
			fillDB(t, path, 3)
			if wal {
				os.WriteFile(path+"-wal", []byte("left over"), 0o600)
			}
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
			_, err := Open(path, Options{})
			wantCorrupt(t, err, path)
			if !strings.Contains(err.Error(), "empty") {
				t.Errorf("the error does not say the file is empty: %v", err)
			}
			if fi, _ := os.Stat(path); fi == nil || fi.Size() != 0 {
				t.Fatal("a refused open changed the empty file")
			}
		}
	})
	t.Run("page overwritten", func(t *testing.T) {
		path := tempDB(t)
		fillDB(t, path, 60)
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		// Page 2 onwards: b-tree pages of the schema's tables.
		junk := []byte(strings.Repeat("\xff\x00\x13", 4096))
		f.WriteAt(junk, 4096)
		f.Close()
		_, err = Open(path, Options{})
		wantCorrupt(t, err, path)
	})
	t.Run("move aside and start fresh", func(t *testing.T) {
		path := tempDB(t)
		fillDB(t, path, 5)
		fi, _ := os.Stat(path)
		os.Truncate(path, fi.Size()/2)
		os.WriteFile(path+"-wal", []byte("stale"), 0o600)
		_, err := Open(path, Options{})
		wantCorrupt(t, err, path)
		now := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
		moved, err := MoveAside(path, now)
		if err != nil {
			t.Fatal(err)
		}
		if want := path + ".corrupt-20261201T093000Z"; moved != want {
			t.Fatalf("moved to %s, want %s", moved, want)
		}
		if got, _ := os.Stat(moved); got == nil || got.Size() != fi.Size()/2 {
			t.Fatal("the bad file was not kept")
		}
		if b, _ := os.ReadFile(moved + "-wal"); string(b) != "stale" {
			t.Fatal("the bad file's WAL was not kept beside it")
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatal("the bad file is still in place")
		}
		// A second move in the same second does not overwrite the first.
		fillDB(t, path, 1)
		moved2, err := MoveAside(path, now)
		if err != nil || moved2 == moved {
			t.Fatalf("second MoveAside = %s, %v", moved2, err)
		}
		s := openTest(t, path, Options{})
		if total, _, _ := s.TaskCount(context.Background()); total != 0 {
			t.Fatalf("fresh database has %d tasks", total)
		}
		if _, err := MoveAside(filepath.Join(t.TempDir(), "none.db"), now); !errors.Is(err, ErrNotFound) {
			t.Fatalf("MoveAside of nothing = %v", err)
		}
	})
}

func TestIntegrityCheck(t *testing.T) {
	s := openTest(t, tempDB(t), Options{})
	if err := s.IntegrityCheck(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A database of an older schema is brought up to date at Open, one
// recorded step at a time, keeping its data; a failing step changes
// nothing and is reported.
func TestMigrationUpgradesOlderDatabase(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTask(ctx, Task{ID: "old", Owner: "g", State: StateCompleted}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	saved, savedVersion := migrations, SchemaVersion
	t.Cleanup(func() { migrations, SchemaVersion = saved, savedVersion })
	migrations = append(slices.Clone(saved), migration{"broken step", "ALTER TABLE tasks ADD COLUMN x TEXT; SELECT * FROM no_such_table"})
	SchemaVersion = len(migrations)
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "broken step") {
		t.Fatalf("Open with a failing migration = %v", err)
	}
	migrations[len(migrations)-1] = migration{"task labels", "ALTER TABLE tasks ADD COLUMN label TEXT NOT NULL DEFAULT 'none'"}
	s = openTest(t, path, Options{})
	var label string
	var version int
	if _, err := s.db.Exec("SELECT x FROM tasks"); err == nil {
		t.Fatal("the failed step's first statement was kept")
	}
	if err := s.db.QueryRow("SELECT label FROM tasks WHERE id = 'old'").Scan(&label); err != nil || label != "none" {
		t.Fatalf("the upgraded table: %q, %v", label, err)
	}
	s.db.QueryRow("SELECT max(version) FROM schema_migrations").Scan(&version)
	if version != SchemaVersion {
		t.Fatalf("schema version %d, want %d", version, SchemaVersion)
	}
	if got, err := s.Task(ctx, "old"); err != nil || got.State != StateCompleted {
		t.Fatalf("data across the upgrade: %+v, %v", got, err)
	}
}
