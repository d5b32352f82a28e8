package a2a

import (
	"bytes"
	"fmt"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/jsonout"
)

// taskJSON caches the A2A 0.3 JSON (a2a-go's encoding, written by
// jsonout.Marshal) of a task's messages, artifacts and status, so each is
// encoded once for both the database record (recordLocked) and the 0.3
// answers carrying the task (marshalTask03Locked): a task written through
// to the database then costs no more JSON than one kept in memory. Messages
// and artifacts are immutable once in the task (AppendArtifact replaces
// the artifact), so an entry holds while its pointer is in place. Guarded
// by the task's mu.
type taskJSON struct {
	msgs     [][]byte // msgs[i] is the JSON of history[i]
	arts     []artJSON
	status   []byte
	statusOf statusKey // the status status encodes
	size     int
}

type artJSON struct {
	a *a2a.Artifact
	b []byte
}

// statusKey identifies a TaskStatus value: setStatusLocked replaces the
// whole status, with a new message and timestamp.
type statusKey struct {
	state a2a.TaskState
	msg   *a2a.Message
	ts    *time.Time
}

// keepJSON bounds the cache a terminal task keeps for its first read (the
// blocking send's answer, the first tasks/get): a larger one is dropped
// when the task ends, and any is dropped at that read. 512 terminal tasks
// nobody read hold at most 8 MiB of it.
const keepJSON = 16 << 10

// historyJSONLocked returns the JSON of history[from:], encoding the
// messages not cached yet.
func (t *task) historyJSONLocked(from int) ([][]byte, error) {
	c := &t.json
	for i := len(c.msgs); i < len(t.history); i++ {
		b, err := jsonout.Marshal(t.history[i])
		if err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		c.msgs = append(c.msgs, b)
		c.size += len(b)
	}
	return c.msgs[from:len(t.history)], nil
}

// artifactsJSONLocked returns the JSON of every artifact, encoding those
// not cached (new or replaced).
func (t *task) artifactsJSONLocked() ([][]byte, error) {
	c := &t.json
	for i := len(t.artifacts); i < len(c.arts); i++ {
		c.size -= len(c.arts[i].b)
	}
	c.arts = c.arts[:min(len(c.arts), len(t.artifacts))]
	out := make([][]byte, len(t.artifacts))
	for i, a := range t.artifacts {
		if i < len(c.arts) && c.arts[i].a == a {
			out[i] = c.arts[i].b
			continue
		}
		b, err := jsonout.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("artifacts: %w", err)
		}
		out[i] = b
		if i < len(c.arts) {
			for _, e := range c.arts[i:] {
				c.size -= len(e.b)
			}
			c.arts = c.arts[:i]
		}
		if i == len(c.arts) && c.size+len(b) <= maxArtifactCache {
			c.arts = append(c.arts, artJSON{a, b})
			c.size += len(b)
		}
	}
	return out, nil
}

// maxArtifactCache bounds the cache (messages included) up to which
// artifacts are cached too: past it, a task's further artifacts are
// encoded at each write, so a task with large artifacts holds them once in
// memory, as a task without a store does.
const maxArtifactCache = 1 << 20

// statusJSONLocked returns the JSON of the task's status.
func (t *task) statusJSONLocked() ([]byte, error) {
	c := &t.json
	k := statusKey{t.status.State, t.status.Message, t.status.Timestamp}
	if c.status != nil && c.statusOf == k {
		return c.status, nil
	}
	b, err := jsonout.Marshal(t.status)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	c.size += len(b) - len(c.status)
	c.status, c.statusOf = b, k
	return b, nil
}

// dropJSONLocked empties the cache.
func (t *task) dropJSONLocked() { t.json = taskJSON{} }

// joinJSON is the JSON array of the encoded elements.
func joinJSON(elems [][]byte) []byte {
	n := 2
	for _, e := range elems {
		n += len(e) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, e := range elems {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return append(b, ']')
}

// marshalTask03Locked is the 0.3 JSON of the task as snapshotLocked(
// historyLength) would be marshaled (a2a-go's Task: "kind" first, then the
// fields in the order of its struct), built from the cache. A terminal
// task drops the cache after it: it was kept for this read.
func (t *task) marshalTask03Locked(historyLength int) ([]byte, error) {
	if t.lazy != nil {
		t.decodeLazyLocked()
	}
	from := 0
	if historyLength >= 0 && historyLength < len(t.history) {
		from = len(t.history) - historyLength
	}
	hist, err := t.historyJSONLocked(from)
	if err != nil {
		return nil, err
	}
	arts, err := t.artifactsJSONLocked()
	if err != nil {
		return nil, err
	}
	status, err := t.statusJSONLocked()
	if err != nil {
		return nil, err
	}
	id, err := jsonout.Marshal(t.id)
	if err != nil {
		return nil, err
	}
	ctxID, err := jsonout.Marshal(t.contextID)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Grow(64 + len(id) + len(ctxID) + len(status) + t.json.size)
	b.WriteString(`{"kind":"task","id":`)
	b.Write(id)
	if len(arts) > 0 {
		b.WriteString(`,"artifacts":`)
		b.Write(joinJSON(arts))
	}
	b.WriteString(`,"contextId":`)
	b.Write(ctxID)
	if len(hist) > 0 {
		b.WriteString(`,"history":`)
		b.Write(joinJSON(hist))
	}
	b.WriteString(`,"status":`)
	b.Write(status)
	b.WriteByte('}')
	if t.status.State.Terminal() {
		t.dropJSONLocked()
	}
	return b.Bytes(), nil
}
