package delegate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
)

// A delegated task whose agent restarted (a fresh a2asrv with an empty
// store answers -32001) ends failed instead of staying live forever.
func TestDelegatedTaskForgottenByARestartedAgent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := func(t *testing.T) (*upstream, *Outbound, string) {
		up := newUpstream(t, upstreamOpts{streaming: false})
		a, _ := newAgents(t, AgentsOptions{})
		ob := newOutbound(t, a, OutboundOptions{})
		ag, err := a.Add(ctx, up.hs.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		return up, ob, ag.ID
	}
	forgottenTask := func(t *testing.T, got OutboundTask) {
		t.Helper()
		if got.State != a2a.TaskStateFailed || got.Message != forgotten || got.Following || got.Error != "" {
			t.Fatalf("task %+v, want failed %q", got, forgotten)
		}
	}

	t.Run("while polling", func(t *testing.T) {
		t.Parallel()
		up, ob, agent := setup(t)
		task, err := ob.Delegate(ctx, DelegateRequest{Agent: agent, MessageInput: MessageInput{Text: "slow"}})
		if err != nil {
			t.Fatal(err)
		}
		up.restart() // before the first tasks/get (pollFirst)
		_, final := watchAll(t, ob, task.ID)
		forgottenTask(t, final)
		if ob.Live() != 0 {
			t.Fatalf("live %d", ob.Live())
		}
	})
	t.Run("an answer", func(t *testing.T) {
		t.Parallel()
		up, ob, agent := setup(t)
		task, err := ob.Delegate(ctx, DelegateRequest{Agent: agent, MessageInput: MessageInput{Text: "ask"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, asked := watchAll(t, ob, task.ID); asked.State != a2a.TaskStateInputRequired {
			t.Fatalf("asked %+v", asked)
		}
		up.restart()
		if _, err := ob.Answer(ctx, task.ID, MessageInput{Text: "Ada"}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("answer after the restart: %v", err)
		}
		got, _ := ob.Get(task.ID)
		forgottenTask(t, got)
	})
	t.Run("a cancel", func(t *testing.T) {
		t.Parallel()
		up, ob, agent := setup(t)
		task, err := ob.Delegate(ctx, DelegateRequest{Agent: agent, MessageInput: MessageInput{Text: "ask"}})
		if err != nil {
			t.Fatal(err)
		}
		watchAll(t, ob, task.ID)
		up.restart()
		got, err := ob.Cancel(ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		forgottenTask(t, got)
	})
}

// TestFollowIsBounded: an agent that works forever is followed for
// MaxFollow, then the view says the node stopped following.
func TestFollowIsBounded(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "poll"}[stream], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			up := newUpstream(t, upstreamOpts{streaming: true})
			a, _ := newAgents(t, AgentsOptions{})
			ob := newOutbound(t, a, OutboundOptions{MaxFollow: 300 * time.Millisecond})
			ag, err := a.Add(ctx, up.hs.URL, "")
			if err != nil {
				t.Fatal(err)
			}
			task, err := ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "sleep"}, Stream: &stream})
			if err != nil {
				t.Fatal(err)
			}
			<-up.started
			_, final := watchAll(t, ob, task.ID)
			if final.Following || final.State.Terminal() || !strings.Contains(final.Error, "stopped following this task after 300ms") {
				t.Fatalf("after MaxFollow: %+v", final)
			}
			// The task goes on at the agent; a cancel still reaches it.
			got, err := ob.Cancel(ctx, task.ID)
			if err != nil || got.State != a2a.TaskStateCanceled {
				t.Fatalf("cancel: %v %+v", err, got)
			}
			<-up.stopped
		})
	}
}
