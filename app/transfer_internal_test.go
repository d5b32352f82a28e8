package app

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/a2aproject/a2a-go/a2a"

	agent "meshtray/a2a"
	"meshtray/files"
)

// TestParseTransfer: which messages are transfers, and what each FilePart
// announces.
func TestParseTransfer(t *testing.T) {
	sum := sha256Hex([]byte("hello"))
	ann := announceParts(files.Manifest{Files: []files.Entry{{Name: "a.txt", Path: "Trip/a.txt", Size: 5, SHA256: sum, MediaType: "text/plain"}}})
	in, err := parseTransfer(a2a.NewMessage(a2a.MessageRoleUser, append(ann, a2a.TextPart{Text: "for you"})...))
	if err != nil || len(in.manifest.Files) != 1 || in.inline[0] != nil {
		t.Fatalf("announcement: %+v %v", in, err)
	}
	if e := in.manifest.Files[0]; e.Name != "a.txt" || e.Path != "Trip/a.txt" || e.Size != 5 || e.SHA256 != sum || e.MediaType != "text/plain" {
		t.Fatalf("entry %+v", e)
	}

	for name, msg := range map[string]*a2a.Message{
		"text only":       a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "device.info"}),
		"a data part":     a2a.NewMessage(a2a.MessageRoleUser, append(ann, a2a.DataPart{Data: map[string]any{"capability": "device.info"}})...),
		"no message":      nil,
		"no parts at all": a2a.NewMessage(a2a.MessageRoleUser),
	} {
		if _, err := parseTransfer(msg); !errors.Is(err, errNotTransfer) {
			t.Errorf("%s: %v, want not a transfer", name, err)
		}
	}

	b64 := base64.StdEncoding.EncodeToString([]byte("hello"))
	in, err = parseTransfer(a2a.NewMessage(a2a.MessageRoleUser,
		a2a.FilePart{File: a2a.FileBytes{FileMeta: a2a.FileMeta{Name: "h.txt", MimeType: "text/plain"}, Bytes: b64}},
		a2a.FilePart{File: a2a.FileBytes{FileMeta: a2a.FileMeta{MimeType: "image/png"}, Bytes: b64}}))
	if err != nil || string(in.inline[0]) != "hello" || in.manifest.Files[0].SHA256 != sum || in.manifest.Files[0].Size != 5 {
		t.Fatalf("inline: %+v %v", in, err)
	}
	if e := in.manifest.Files[1]; e.Name != "file-2.png" || e.Path != "file-2.png" {
		t.Errorf("an unnamed file: %+v", e)
	}

	for name, tc := range map[string]struct {
		part a2a.Part
		want string
	}{
		"https uri":  {a2a.FilePart{File: a2a.FileURI{URI: "https://example.com/x"}}, "does not fetch files from a URI (https URI given)"},
		"data uri":   {a2a.FilePart{File: a2a.FileURI{URI: "data:text/plain,hi"}}, "(data URI given)"},
		"weird uri":  {a2a.FilePart{File: a2a.FileURI{URI: "a/b:c"}}, "(a URI given)"},
		"ni no meta": {a2a.FilePart{File: a2a.FileURI{URI: files.NamedInfoURI(sum)}}, "needs its \"meshtray.file\" metadata"},
		"ni other digest": {a2a.FilePart{File: a2a.FileURI{URI: files.NamedInfoURI(sha256Hex(nil))},
			Metadata: map[string]any{files.PartMetadataKey: map[string]any{"path": "a", "size": 5, "sha256": sum}}}, "different SHA-256"},
		"bad base64": {a2a.FilePart{File: a2a.FileBytes{FileMeta: a2a.FileMeta{Name: "x"}, Bytes: "%%%"}}, "not base64"},
		"path and name differ": {a2a.FilePart{File: a2a.FileURI{FileMeta: a2a.FileMeta{Name: "b.txt"}, URI: files.NamedInfoURI(sum)},
			Metadata: map[string]any{files.PartMetadataKey: map[string]any{"path": "x/a.txt", "size": 5, "sha256": sum}}}, "does not end in its name"},
		"metadata not an object": {a2a.FilePart{File: a2a.FileURI{URI: files.NamedInfoURI(sum)},
			Metadata: map[string]any{files.PartMetadataKey: "yes"}}, "metadata"},
	} {
		_, err := parseTransfer(a2a.NewMessage(a2a.MessageRoleUser, tc.part))
		var et *errTransfer
		if !errors.As(err, &et) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal saying %q", name, err, tc.want)
		}
	}
}

// TestFilesConfig: files.* in config.toml, sizes with units.
func TestFilesConfig(t *testing.T) {
	var c Config
	if _, err := toml.Decode(`[files]
dir = "/srv/in"
max_file_size = "2GiB"
max_transfer_size = "10 GB"
max_files = 50
keep_free = 1048576
`, &c); err != nil {
		t.Fatal(err)
	}
	f := c.Files
	if f.Dir != "/srv/in" || f.MaxFileSize != 2<<30 || f.MaxTransferSize != 10e9 || f.MaxFiles != 50 || f.KeepFree != 1<<20 {
		t.Fatalf("%+v", f)
	}
	for _, bad := range []string{"lots", "-1GiB", "1e30GiB", "GiB"} {
		var b ByteSize
		if err := b.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("size %q accepted as %d", bad, b)
		}
	}
	c = Defaults()
	c.StateDir, c.Files.Dir = t.TempDir(), "relative/dir"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "files.dir") {
		t.Errorf("a relative files.dir: %v", err)
	}
}

// TestSendEventJSON: the NDJSON lines of POST /files/send are exactly the
// contract's (CONTRACTS.md "transfer <-> filesui"), and read back.
func TestSendEventJSON(t *testing.T) {
	res := &SendResult{TaskID: "T1", State: "completed", Message: "saved 1 file(s) in /d", Dir: "/d",
		Files: []files.Saved{{Path: "a.txt", Size: 3, MediaType: "text/plain", SHA256: "ab"}}}
	for _, tc := range []struct {
		ev   SendEvent
		want string
	}{
		{SendEvent{Type: SendEventState, State: "working", Message: "receiving"}, `{"type":"state","state":"working","message":"receiving"}`},
		{SendEvent{Type: SendEventProgress, File: 0, Path: "Trip/a b.jpg", Done: 0, Size: 10, TotalDone: 0, Total: 20},
			`{"type":"progress","file":0,"path":"Trip/a b.jpg","done":0,"size":10,"total_done":0,"total":20}`},
		{SendEvent{Type: SendEventResult, Result: res},
			`{"type":"result","task_id":"T1","state":"completed","message":"saved 1 file(s) in /d","dir":"/d","files":[{"path":"a.txt","size":3,"media_type":"text/plain","sha256":"ab"}]}`},
		{SendEvent{Type: SendEventResult, State: "rejected", Message: "no"}, `{"type":"result","task_id":"","state":"rejected","message":"no","files":[]}`},
		{SendEvent{Type: SendEventSkipped, Skipped: &files.NotSent{Count: 1, Entries: []files.NotSentEntry{{Path: "Trip/l", Why: "symbolic link"}}}},
			`{"type":"skipped","count":1,"entries":[{"path":"Trip/l","why":"symbolic link"}]}`},
	} {
		b, err := tc.ev.MarshalJSON()
		if err != nil || string(b) != tc.want {
			t.Errorf("%s\nwant %s (%v)", b, tc.want, err)
			continue
		}
		var back SendEvent
		if err := back.UnmarshalJSON(b); err != nil || back.Type != tc.ev.Type {
			t.Errorf("read back %s: %+v %v", b, back, err)
		}
		if back.Type == SendEventSkipped && (back.Skipped == nil || back.Skipped.Count != 1 || back.Skipped.Entries[0].Path != "Trip/l") {
			t.Errorf("skipped read back: %+v", back)
		}
		if back.Type == SendEventResult && (back.Result == nil || back.Result.State != back.State) {
			t.Errorf("result read back: %+v", back)
		}
	}
}

// TestSendStatusText: the receiver's status message is said for the
// sender: the engine's state word in front is not repeated, and the
// receiver's restart is said as what it means for the sender.
func TestSendStatusText(t *testing.T) {
	msg := func(s ...string) *a2a.Message {
		var ps []a2a.Part
		for _, x := range s {
			ps = append(ps, a2a.TextPart{Text: x})
		}
		return a2a.NewMessage(a2a.MessageRoleAgent, ps...)
	}
	for _, c := range []struct {
		state a2a.TaskState
		m     *a2a.Message
		want  string
	}{
		{a2a.TaskStateRejected, msg("rejected: denied by the owner"), "denied by the owner"},
		{a2a.TaskStateFailed, msg(agent.RestartedText), ReceiverRestartedText},
		{a2a.TaskStateCanceled, msg(agent.ShutdownText), ReceiverShutDownText},
		{a2a.TaskStateWorking, msg("receiving 1 file(s)", "into x"), "receiving 1 file(s) into x"},
		{a2a.TaskStateFailed, msg("rejected: not a prefix of failed"), "rejected: not a prefix of failed"},
		{a2a.TaskStateCompleted, nil, ""},
	} {
		if got := statusText(c.state, c.m); got != c.want {
			t.Errorf("statusText(%s, %v) = %q, want %q", c.state, c.m, got, c.want)
		}
	}
}

// TestByteSizeSpellings: config sizes are read by go-humanize's
// ParseBytes ("MB" = 10^6, "MiB" = 2^20, "Mi" too), except a lone K, M,
// G, T, P or E, which meshtray always read as the binary unit and still
// does; anything after the unit is refused, never ignored.
func TestByteSizeSpellings(t *testing.T) {
	for in, want := range map[string]int64{
		"4GiB": 4 << 30, "4 gib": 4 << 30, "4Gi": 4 << 30, "4G": 4 << 30, "4 g": 4 << 30,
		"100 MB": 100e6, "100MiB": 100 << 20, "512K": 512 << 10, "512k": 512 << 10, "512KB": 512e3,
		"1.5GiB": 3 << 29, "2T": 2 << 40, "1,000 KB": 1e6, "1048576": 1 << 20, " 7 B ": 7,
	} {
		var b ByteSize
		if err := b.UnmarshalText([]byte(in)); err != nil || int64(b) != want {
			t.Errorf("size %q = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "-1GiB", "1e30GiB", "GiB", "5 potatoes", "4GiBs", "9EiB"} {
		var b ByteSize
		if err := b.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("size %q accepted as %d", bad, b)
		}
	}
}
