package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/a2a/delegate"
)

// TestTaskPrinterSaysEachThingOnce: a followed task's result and its
// one-line summary reach stdout once each, whether the agent puts the
// summary in the artifact, in the completed status, or in both (the node
// executor did both).
func TestTaskPrinterSaysEachThingOnce(t *testing.T) {
	t.Parallel()
	const sum = "testbox: 2 CPUs"
	data := a2a.DataPart{Data: map[string]any{"hostname": "testbox", "note": "<b>&</b>"}}
	tests := []struct {
		name  string
		parts a2a.ContentParts
	}{
		{"data artifact, summary as the status", a2a.ContentParts{data}},
		{"summary in both", a2a.ContentParts{data, a2a.TextPart{Text: sum}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errw bytes.Buffer
			p := newTaskPrinter(&out, &errw, false)
			task := delegate.OutboundTask{ID: "abcd", AgentName: "bee", State: a2a.TaskStateWorking}
			p.event(delegate.OutboundEvent{Task: &task})
			p.event(delegate.OutboundEvent{Artifact: &delegate.OutboundArtifact{ID: "a1", Name: "device.info", Parts: tc.parts}})
			p.event(delegate.OutboundEvent{State: a2a.TaskStateCompleted, Message: sum})
			task.State, task.Message = a2a.TaskStateCompleted, sum
			task.Artifacts = []delegate.OutboundArtifact{{ID: "a1", Name: "device.info", Parts: tc.parts}}
			p.event(delegate.OutboundEvent{Task: &task, End: true})
			p.finish()
			got := out.String()
			if n := strings.Count(got, sum); n != 1 {
				t.Errorf("the summary is printed %d times:\n%s", n, got)
			}
			if n := strings.Count(got, `"hostname": "testbox"`); n != 1 {
				t.Errorf("the data is printed %d times:\n%s", n, got)
			}
			if !strings.Contains(got, `"note": "<b>&</b>"`) {
				t.Errorf("the data is not printed as written:\n%s", got)
			}
			if !strings.Contains(errw.String(), "completed") {
				t.Errorf("stderr:\n%s", errw.String())
			}
		})
	}
	// A final answer that says something else is printed.
	var out, errw bytes.Buffer
	p := newTaskPrinter(&out, &errw, false)
	p.event(delegate.OutboundEvent{Artifact: &delegate.OutboundArtifact{ID: "a1", Parts: a2a.ContentParts{a2a.TextPart{Text: "the report"}}}})
	p.event(delegate.OutboundEvent{State: a2a.TaskStateCompleted, Message: "done"})
	p.finish()
	if !strings.Contains(out.String(), "the report") || !strings.Contains(out.String(), "done") {
		t.Fatalf("stdout:\n%s", out.String())
	}
}
