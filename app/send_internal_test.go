package app

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/pairing"
	"meshtray/store"
)

// TestSendRecordedBeforeUpload: the receiver's first answer may already
// say it takes the bytes (working, with its status message: an owner who
// always allows the device). The send's row is in the database (a real
// SQLite file) before s.ready lets the upload start: read from the first
// line the event reports, which comes after s.ready is closed.
func TestSendRecordedBeforeUpload(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), store.DefaultFile), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const device = "AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA"
	var rowsAtReady []store.Sending
	var readyClosed bool
	s := &sendRun{
		n: &Node{db: db, log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		h: pairing.Held{PeerID: device, Name: "bee"},
	}
	s.ready, s.final = make(chan struct{}), make(chan struct{})
	s.emit = func(ev SendEvent) {
		if ev.Type != SendEventState || readyClosed {
			return
		}
		select {
		case <-s.ready:
			readyClosed = true
			if rowsAtReady, err = db.Sendings(context.Background()); err != nil {
				t.Error(err)
			}
		default:
		}
	}
	msg := a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "receiving 1 file"})
	s.onEvent(&a2a.Task{ID: "task-1", ContextID: "ctx-1", Status: a2a.TaskStatus{State: a2a.TaskStateWorking, Message: msg}})
	if !readyClosed {
		t.Fatal("the working status with a message did not let the upload start")
	}
	if len(rowsAtReady) != 1 || rowsAtReady[0].TaskID != "task-1" || rowsAtReady[0].Device != device {
		t.Fatalf("sends in the database when the upload may start: %+v; want task-1", rowsAtReady)
	}
	s.unrecord()
	if rows, _ := db.Sendings(context.Background()); len(rows) != 0 {
		t.Fatalf("left after unrecord: %+v", rows)
	}
}
