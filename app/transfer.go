package app

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"path"
	"strings"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/files"
)

// File transfers as A2A tasks: the FilePart shape both sides share (the
// announcement of files/doc.go), the types of the control route
// POST /files/send, and the event the node publishes when a received
// transfer completes. The receiving task is receive.go, the sender
// send.go.

// EventFiles: a received transfer completed (GET /files/received lists the
// recent ones with their files.Result).
const EventFiles EventType = "files"

// SendRequest is POST /files/send: the files and folders at Paths
// (absolute, read by the node) to the paired device Device (its name, or
// its short or full device ID).
type SendRequest struct {
	Device string   `json:"device"`
	Paths  []string `json:"paths"`
}

// Types of SendEvent.
const (
	SendEventState    = "state"
	SendEventProgress = "progress"
	SendEventSkipped  = "skipped"
	SendEventRefused  = "refused"
	SendEventResult   = "result"
)

// refuseNames splits srcs into the files whose names the receiver takes
// and those it would refuse (files.CleanPath, the receiver's own rule:
// "..", a backslash or colon, control characters, ...), each with why. The
// others are sent: one odd name does not hold back a folder.
func refuseNames(srcs []files.Source) ([]files.Source, files.NotSent) {
	kept := srcs[:0:0]
	var ref files.NotSent
	for _, s := range srcs {
		_, err := files.CleanPath(s.Entry.Path)
		if err == nil {
			kept = append(kept, s)
			continue
		}
		why := strings.TrimPrefix(err.Error(), files.ErrBadName.Error()+": ")
		if _, after, ok := strings.Cut(why, " ("); ok {
			why = strings.TrimSuffix(after, ")")
		}
		ref.Add(s.Entry.Path, why)
	}
	return kept, ref
}

// SendEvent is one line of the NDJSON answer of POST /files/send:
//
//	{"type":"state","state":"submitted|working|input-required|completed|failed|rejected|canceled","message":"..."}
//	{"type":"progress","file":i,"path":"rel/path","done":N,"size":N,"total_done":N,"total":N}
//	{"type":"skipped","count":N,"entries":[{"path":"Trip/link","why":"symbolic link"}...]}
//	{"type":"refused","count":N,"entries":[{"path":"Trip/a\\b.txt","why":"backslash"}...]}
//	{"type":"result","task_id":"...","state":"...","message":"...","dir":"...","files":[files.Saved...],"skipped":{...},"refused":{...}}
//
// A skipped line (files.NotSent: the links and special files of the
// folders, not sent) and a refused line (Refused: files not sent for
// their names) come first when there are any, before anything is
// sent; a state line with each change of the receiver's task (state names
// of A2A 0.3); progress lines at most once per MiB per file and at the end
// of each file (after a resume done may step back to the receiver's
// offset); the result line is the last.
type SendEvent struct {
	Type    string `json:"type"`
	State   string `json:"state,omitempty"`
	Message string `json:"message,omitempty"`
	// progress
	File      int    `json:"file"`
	Path      string `json:"path,omitempty"`
	Done      int64  `json:"done"`
	Size      int64  `json:"size"`
	TotalDone int64  `json:"total_done"`
	Total     int64  `json:"total"`
	// skipped
	Skipped *files.NotSent `json:"-"`
	// refused
	Refused *files.NotSent `json:"-"`
	// result
	Result *SendResult `json:"-"`
}

// MarshalJSON writes the fields of the event's type only.
func (e SendEvent) MarshalJSON() ([]byte, error) {
	switch e.Type {
	case SendEventProgress:
		return json.Marshal(struct {
			Type      string `json:"type"`
			File      int    `json:"file"`
			Path      string `json:"path"`
			Done      int64  `json:"done"`
			Size      int64  `json:"size"`
			TotalDone int64  `json:"total_done"`
			Total     int64  `json:"total"`
		}{e.Type, e.File, e.Path, e.Done, e.Size, e.TotalDone, e.Total})
	case SendEventSkipped:
		return marshalNotSent(e.Type, e.Skipped)
	case SendEventRefused:
		return marshalNotSent(e.Type, e.Refused)
	case SendEventResult:
		r := SendResult{State: e.State, Message: e.Message}
		if e.Result != nil {
			r = *e.Result
		}
		if r.Files == nil {
			r.Files = []files.Saved{}
		}
		type plain SendResult
		return json.Marshal(struct {
			Type string `json:"type"`
			plain
		}{e.Type, plain(r)})
	}
	return json.Marshal(struct {
		Type    string `json:"type"`
		State   string `json:"state,omitempty"`
		Message string `json:"message,omitempty"`
	}{e.Type, e.State, e.Message})
}

// marshalNotSent is a skipped or refused line: its type and the list
// (empty, never null, when ns is nil).
func marshalNotSent(typ string, ns *files.NotSent) ([]byte, error) {
	list := files.NotSent{Entries: []files.NotSentEntry{}}
	if ns != nil {
		list = *ns
	}
	return json.Marshal(struct {
		Type string `json:"type"`
		files.NotSent
	}{typ, list})
}

// UnmarshalJSON reads any of the three lines; a result line fills Result
// (and State and Message).
func (e *SendEvent) UnmarshalJSON(b []byte) error {
	type plain SendEvent
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*e = SendEvent(p)
	if e.Type == SendEventSkipped {
		var sk files.NotSent
		if err := json.Unmarshal(b, &sk); err != nil {
			return err
		}
		e.Skipped = &sk
	}
	if e.Type == SendEventRefused {
		var ref files.NotSent
		if err := json.Unmarshal(b, &ref); err != nil {
			return err
		}
		e.Refused = &ref
	}
	if e.Type == SendEventResult {
		var r SendResult
		if err := json.Unmarshal(b, &r); err != nil {
			return err
		}
		e.Result = &r
	}
	return nil
}

// SendResult is how a transfer ended: the receiver's task ID and final
// state (completed, failed, rejected, canceled), its message, and what the
// receiver saved (its folder and every file, from the task's artifact).
type SendResult struct {
	TaskID  string        `json:"task_id"`
	State   string        `json:"state"`
	Message string        `json:"message,omitempty"`
	Dir     string        `json:"dir,omitempty"`
	Files   []files.Saved `json:"files"`
	// Skipped are the entries of the folders that were not sent (links,
	// special files); nil when there were none.
	Skipped *files.NotSent `json:"skipped,omitempty"`
	// Refused are the files not sent for their names; nil when none were.
	Refused *files.NotSent `json:"refused,omitempty"`
}

// ReceivedTransfer is one completed incoming transfer (GET /files/received).
type ReceivedTransfer struct {
	TaskID string `json:"task_id"`
	// Peer is the sender's name (the grant's), DeviceID its device ID
	// ("" for an agent that is not a meshtray device).
	Peer     string       `json:"peer"`
	DeviceID string       `json:"device_id,omitempty"`
	Result   files.Result `json:"result"`
	Finished string       `json:"finished"` // RFC 3339
}

// maxReceivedKept bounds GET /files/received.
const maxReceivedKept = 32

// resultArtifact is the name of the artifact a transfer task ends with.
const resultArtifact = "files"

// octetStream is the media type of a file whose type is unknown.
const octetStream = "application/octet-stream"

// announceParts is the announcement of m: one FilePart per file, content
// the RFC 6920 name of its bytes, the rest of the entry in the metadata
// under files.PartMetadataKey (files/doc.go).
func announceParts(m files.Manifest) []a2a.Part {
	parts := make([]a2a.Part, 0, len(m.Files))
	for _, e := range m.Files {
		mt := e.MediaType
		if mt == "" {
			mt = octetStream
		}
		parts = append(parts, a2a.FilePart{
			File: a2a.FileURI{FileMeta: a2a.FileMeta{Name: e.Name, MimeType: mt}, URI: files.NamedInfoURI(e.SHA256)},
			Metadata: map[string]any{files.PartMetadataKey: map[string]any{
				"path": e.Path, "size": e.Size, "sha256": e.SHA256,
			}},
		})
	}
	return parts
}

// incoming is a transfer as a message announces it.
type incoming struct {
	manifest files.Manifest
	// inline holds the bytes of files sent inline (nil for an announced
	// file, whose bytes come by PUT).
	inline [][]byte
}

// errNotTransfer: the message is not a file transfer.
var errNotTransfer = errors.New("not a file transfer")

// errTransfer marks a message that is a transfer but cannot be taken
// (a URI to fetch, a malformed part); its text is said to the sender.
type errTransfer struct{ msg string }

func (e *errTransfer) Error() string { return e.msg }

// parseTransfer reads a message as a file transfer: at least one FilePart
// and no DataPart (text parts are a note). Each FilePart is an
// announcement (an "ni" URI and the metadata), or inline bytes (name and
// media type from the part; metadata, when present, must match the bytes).
// errNotTransfer for other messages; an *errTransfer for a transfer that
// cannot be taken.
func parseTransfer(msg *a2a.Message) (*incoming, error) {
	if msg == nil {
		return nil, errNotTransfer
	}
	var fps []a2a.FilePart
	for _, p := range msg.Parts {
		switch p := p.(type) {
		case a2a.DataPart, *a2a.DataPart:
			return nil, errNotTransfer
		case a2a.FilePart:
			fps = append(fps, p)
		case *a2a.FilePart:
			fps = append(fps, *p)
		}
	}
	if len(fps) == 0 {
		return nil, errNotTransfer
	}
	in := &incoming{inline: make([][]byte, len(fps))}
	for i, fp := range fps {
		e, data, err := entryOfPart(i, fp)
		if err != nil {
			return nil, err
		}
		in.manifest.Files = append(in.manifest.Files, e)
		in.inline[i] = data
	}
	return in, nil
}

// entryOfPart is the manifest entry of FilePart i, and its bytes when sent
// inline.
func entryOfPart(i int, fp a2a.FilePart) (files.Entry, []byte, error) {
	bad := func(format string, args ...any) (files.Entry, []byte, error) {
		return files.Entry{}, nil, &errTransfer{fmt.Sprintf("file %d: ", i) + fmt.Sprintf(format, args...)}
	}
	meta, hasMeta, err := partMetadata(fp.Metadata)
	if err != nil {
		return bad("%v", err)
	}
	var fm a2a.FileMeta
	var data []byte
	switch f := fp.File.(type) {
	case a2a.FileBytes:
		fm = f.FileMeta
		if data, err = base64.StdEncoding.DecodeString(f.Bytes); err != nil {
			return bad("its bytes are not base64")
		}
	case a2a.FileURI:
		fm = f.FileMeta
		if !files.IsNamedInfoURI(f.URI) {
			scheme, _, _ := strings.Cut(f.URI, ":")
			if len(scheme) > 16 || strings.ContainsAny(scheme, "/?#") {
				scheme = "a"
			}
			return bad("meshtray does not fetch files from a URI (%s URI given); send the bytes in the part (file.bytes in A2A 0.3, raw in 1.0)", scheme)
		}
		sum, err := files.ParseNamedInfoURI(f.URI)
		if err != nil {
			return bad("%v", err)
		}
		if !hasMeta {
			return bad("an announced file needs its %q metadata (path, size, sha256)", files.PartMetadataKey)
		}
		if meta.SHA256 != sum {
			return bad("the ni URI and the metadata name different SHA-256 digests")
		}
	default:
		return bad("a file part without bytes or uri")
	}
	e := files.Entry{Name: fm.Name, MediaType: fm.MimeType, Path: meta.Path, Size: meta.Size, SHA256: meta.SHA256}
	if e.MediaType == octetStream {
		e.MediaType = ""
	}
	if data != nil || !hasMeta {
		e.Size = int64(len(data))
		sum := sha256Hex(data)
		if hasMeta && (meta.Size != e.Size || meta.SHA256 != sum) {
			return bad("its metadata does not match its bytes")
		}
		e.SHA256 = sum
	}
	switch {
	case e.Path == "" && e.Name == "":
		e.Name = fmt.Sprintf("file-%d", i+1)
		if exts, _ := mime.ExtensionsByType(e.MediaType); len(exts) > 0 {
			e.Name += exts[0]
		}
		e.Path = e.Name
	case e.Path == "":
		e.Path = e.Name
	case e.Name == "":
		e.Name = path.Base(e.Path)
	}
	if path.Base(e.Path) != e.Name {
		return bad("its path %q does not end in its name", e.Path)
	}
	return e, data, nil
}

// partMetadata reads the files.PartMetadataKey object of a part's metadata.
func partMetadata(md map[string]any) (files.PartMetadata, bool, error) {
	v, ok := md[files.PartMetadataKey]
	if !ok {
		return files.PartMetadata{}, false, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return files.PartMetadata{}, false, err
	}
	var m files.PartMetadata
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&m); err != nil {
		return files.PartMetadata{}, false, fmt.Errorf("%s metadata: %v", files.PartMetadataKey, err)
	}
	return m, true, nil
}
