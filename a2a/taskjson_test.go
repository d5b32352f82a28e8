package a2a

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/jsonout"
)

// The 0.3 answer built from the JSON cache is the bytes a2a-go's Task
// marshals to (jsonout.Marshal of the snapshot), through every change the
// cache must follow: new messages, a new and a replaced artifact, a new
// status, historyLength, and characters JSON may escape.
func TestTaskJSONCacheMatchesSnapshot(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tk := &task{id: "t-1", contextID: `ctx "<&>"`}
	tk.history = []*a2a.Message{{ID: "m1", Role: a2a.MessageRoleUser, TaskID: tk.id, ContextID: tk.contextID,
		Parts: a2a.ContentParts{a2a.TextPart{Text: "hi <b> & \u2028"}}}}
	ts := now
	tk.status = a2a.TaskStatus{State: a2a.TaskStateSubmitted, Timestamp: &ts}
	check := func(step string, hl int) {
		t.Helper()
		want, err := jsonout.Marshal(tk.snapshotLocked(hl))
		if err != nil {
			t.Fatal(err)
		}
		got, err := tk.marshalTask03Locked(hl)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s (historyLength %d):\n got %s\nwant %s", step, hl, got, want)
		}
		if !json.Valid(got) {
			t.Fatalf("%s: invalid JSON %s", step, got)
		}
	}
	check("submitted", -1)
	tk.setStatusLocked(a2a.TaskStateWorking, nil, now.Add(time.Second))
	art := &a2a.Artifact{ID: "a1", Name: "out", Parts: a2a.ContentParts{a2a.DataPart{Data: map[string]any{"k": "<v>", "n": 1.5}}}}
	tk.artifacts = append(tk.artifacts, art)
	check("working with an artifact", -1)
	// AppendArtifact replaces the pointer: the cache must notice.
	na := *art
	na.Parts = append(append(a2a.ContentParts(nil), art.Parts...), a2a.TextPart{Text: "more"})
	tk.artifacts[0] = &na
	tk.artifacts = append(tk.artifacts, &a2a.Artifact{ID: "a2", Parts: a2a.ContentParts{a2a.TextPart{Text: "second"}}})
	check("replaced and added artifacts", -1)
	// Past maxArtifactCache, artifacts are encoded at each use, not kept.
	big := &a2a.Artifact{ID: "big", Parts: a2a.ContentParts{a2a.TextPart{Text: strings.Repeat("x", maxArtifactCache)}}}
	tk.artifacts = append(tk.artifacts, big, &a2a.Artifact{ID: "after", Parts: a2a.ContentParts{a2a.TextPart{Text: "small"}}})
	check("an artifact over the cache bound", -1)
	if tk.json.size > maxArtifactCache || len(tk.json.arts) != 2 {
		t.Fatalf("cache holds %d bytes, %d artifacts; want the big one and those after it left out", tk.json.size, len(tk.json.arts))
	}
	check("an artifact over the cache bound, again", -1)
	tk.artifacts = tk.artifacts[:2]
	tk.setStatusLocked(a2a.TaskStateInputRequired, agentMessage("which one?"), now.Add(2*time.Second))
	check("input-required", 0)
	tk.history = append(tk.history, tk.status.Message, &a2a.Message{ID: "m3", Role: a2a.MessageRoleUser, Parts: a2a.ContentParts{a2a.TextPart{Text: "this one"}}})
	tk.setStatusLocked(a2a.TaskStateWorking, nil, now.Add(3*time.Second))
	check("answered, last 2", 2)
	check("answered, all", -1)
	check("answered, more than there are", 10)
	tk.setStatusLocked(a2a.TaskStateCompleted, agentMessage("done"), now.Add(4*time.Second))
	check("completed", -1)
	if tk.json.size != 0 || tk.json.msgs != nil {
		t.Errorf("a terminal task keeps its cache after its first read: %d bytes", tk.json.size)
	}
	check("completed, read again", 1)
}
