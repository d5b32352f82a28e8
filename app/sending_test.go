package app_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/store"
)

// TestSendingFileImportedOnce: a node updated mid-transfer finds the
// sending.json an older build kept; it moves its entries into the
// database once, removes the file, and cancels them as any send a kill
// left: one past the receiver's idle bound is given up (and dropped), a
// recent one is kept while its receiver cannot be reached and is still
// there after the node closes.
func TestSendingFileImportedOnce(t *testing.T) {
	cfg := app.Defaults()
	cfg.StateDir = t.TempDir()
	cfg.Port = 0
	cfg.Keychain = app.KeychainFile
	cfg.Name = "ant"
	old := time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339Nano)
	recent := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
	file := filepath.Join(cfg.StateDir, "sending.json")
	if err := os.WriteFile(file, []byte(`[`+
		`{"task_id":"task-old","device":"AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA","name":"bee","started":"`+old+`"},`+
		`{"task_id":"task-recent","device":"BBBBBBB-BBBBBBB-BBBBBBB-BBBBBBB-BBBBBBB-BBBBBBB-BBBBBBB-BBBBBBB","name":"wasp","started":"`+recent+`"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	n, err := app.NewNode(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("sending.json after start: %v", err)
	}
	apptest.WaitFor(t, 30*time.Second, "the send past the idle bound given up, the recent one retried", func() bool {
		l := logs.String()
		return strings.Contains(l, "the receiver ends it by itself") && strings.Contains(l, "task=task-old") &&
			strings.Contains(l, "trying again") && strings.Contains(l, "task=task-recent")
	})
	got, err := n.Database().Sendings(ctx)
	if err != nil || len(got) != 1 || got[0].TaskID != "task-recent" || got[0].Name != "wasp" ||
		got[0].Started.UTC().Format(time.RFC3339Nano) != recent {
		t.Fatalf("sends under way in the database: %+v, %v", got, err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("sending.json after close: %v", err)
	}
	db, err := store.Open(filepath.Join(cfg.StateDir, store.DefaultFile), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got, err := db.Sendings(ctx); err != nil || len(got) != 1 || got[0].TaskID != "task-recent" {
		t.Fatalf("sends kept for the next start: %+v, %v", got, err)
	}
}
