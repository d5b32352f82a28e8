package a2a

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
)

// bigExecutor writes an artifact of n chunks of size bytes each and
// records what AppendArtifact said.
type bigExecutor struct {
	n, size int
	mu      sync.Mutex
	errs    []error
}

func (x *bigExecutor) Execute(ctx context.Context, ex *Execution) error {
	chunk := a2a.TextPart{Text: strings.Repeat("x", x.size)}
	id := ex.Artifact("big", chunk)
	if id == "" {
		ex.Complete("artifact dropped")
		return nil
	}
	for i := 1; i < x.n; i++ {
		if err := ex.AppendArtifact(id, i == x.n-1, chunk); err != nil {
			x.mu.Lock()
			x.errs = append(x.errs, err)
			x.mu.Unlock()
			ex.Fail("artifact too big: " + err.Error())
			return nil
		}
	}
	ex.Complete("")
	return nil
}

func TestArtifactBytesAreBounded(t *testing.T) {
	t.Parallel()
	t.Run("per task", func(t *testing.T) {
		t.Parallel()
		x := &bigExecutor{n: 10, size: 300}
		env := newEnv(t, Options{Executor: x, MaxArtifactBytes: 1000})
		task := sendTask(t, context.Background(), env.client(t, tokA), userMsg("big"))
		if task.Status.State != a2a.TaskStateFailed || len(task.Artifacts) != 1 || len(task.Artifacts[0].Parts) != 3 {
			t.Fatalf("task %s, %d artifacts, parts %d", task.Status.State, len(task.Artifacts), len(task.Artifacts[0].Parts))
		}
		x.mu.Lock()
		defer x.mu.Unlock()
		if len(x.errs) != 1 || !errors.Is(x.errs[0], ErrUnavailable) {
			t.Fatalf("AppendArtifact errors %v, want one ErrUnavailable", x.errs)
		}
	})
	t.Run("in the store's bound", func(t *testing.T) {
		t.Parallel()
		// Two tasks of 3000 artifact bytes do not fit a 5000-byte store:
		// the second evicts the first, which is done.
		x := &bigExecutor{n: 3, size: 1000}
		env := newEnv(t, Options{Executor: x, MaxStoredBytes: 5000})
		c := env.client(t, tokA)
		first := sendTask(t, context.Background(), c, userMsg("big"))
		second := sendTask(t, context.Background(), c, userMsg("big"))
		if first.Status.State != a2a.TaskStateCompleted || second.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("states %s %s", first.Status.State, second.Status.State)
		}
		if _, err := c.GetTask(context.Background(), &a2a.TaskQueryParams{ID: first.ID}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("the first task was kept over the store's bound: %v", err)
		}
		env.srv.mu.Lock()
		held := env.srv.bytes
		env.srv.mu.Unlock()
		if held > 5000 || held < 3000 {
			t.Fatalf("the store counts %d bytes", held)
		}
	})
	t.Run("live tasks over the store's bound", func(t *testing.T) {
		t.Parallel()
		x := &bigExecutor{n: 10, size: 1000}
		env := newEnv(t, Options{Executor: x, MaxStoredBytes: 4000})
		task := sendTask(t, context.Background(), env.client(t, tokA), userMsg("big"))
		x.mu.Lock()
		defer x.mu.Unlock()
		if task.Status.State != a2a.TaskStateFailed || len(x.errs) != 1 || !errors.Is(x.errs[0], ErrStoreFull) {
			t.Fatalf("task %s, errors %v: want the append refused with ErrStoreFull", task.Status.State, x.errs)
		}
	})
}
