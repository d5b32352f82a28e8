package a2a

import (
	"context"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/nodes"
)

// What the caller sees while the owner is asked, and when the owner says
// no: the delegation's approval (engine) and a capability call's approval
// (node executor over the real nodes.Registry).

// streamStatuses runs message/stream and returns "state: text" of every
// status the caller saw (the first Task's included), in order.
func streamStatuses(t *testing.T, env *testEnv, msg *a2a.Message) []string {
	t.Helper()
	c := env.client(t, tokA)
	var out []string
	add := func(st a2a.TaskStatus) {
		if st.Message == nil {
			out = append(out, string(st.State)+": ")
			return
		}
		out = append(out, string(st.State)+": "+text(st.Message))
	}
	for ev, err := range c.SendStreamingMessage(context.Background(), &a2a.MessageSendParams{Message: msg}) {
		if err != nil {
			t.Fatal(err)
		}
		switch v := ev.(type) {
		case *a2a.Task:
			if v.Status.Message != nil {
				add(v.Status)
			} else {
				out = append(out, string(v.Status.State)+":")
			}
		case *a2a.TaskStatusUpdateEvent:
			add(v.Status)
		}
	}
	return out
}

func hasStatus(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// policyApprover decides without a person, reporting queues honestly: it
// never calls Queued.
type policyApprover struct{}

func (policyApprover) ApproveTask(context.Context, TaskApproval) Decision {
	return Decision{Approved: true}
}
func (policyApprover) ReportsQueued() bool { return true }

func TestWaitingForApprovalOnlyWhenQueued(t *testing.T) {
	t.Parallel()
	t.Run("policy allow: never said", func(t *testing.T) {
		t.Parallel()
		env := newEnv(t, Options{Approver: policyApprover{}})
		ss := streamStatuses(t, env, userMsg("echo hi"))
		if hasStatus(ss, "waiting for approval") || ss[len(ss)-1] != "completed: done" {
			t.Fatalf("statuses %q", ss)
		}
	})
	t.Run("queued for the owner: said once, before working", func(t *testing.T) {
		t.Parallel()
		ap := newManualApprover()
		env := newEnv(t, Options{Approver: ap})
		go func() { ap.next(t).answer <- Decision{Approved: true, ByOwner: true} }()
		ss := streamStatuses(t, env, userMsg("echo hi"))
		want := []string{"submitted:", "submitted: waiting for approval on testbox", "working: ", "completed: done"}
		if strings.Join(ss, "|") != strings.Join(want, "|") {
			t.Fatalf("statuses %q, want %q", ss, want)
		}
	})
	t.Run("an approver that does not report queues: said from the start", func(t *testing.T) {
		t.Parallel()
		env := newEnv(t, Options{Approver: approveAll{}})
		ss := streamStatuses(t, env, userMsg("echo hi"))
		if len(ss) == 0 || ss[0] != "submitted: waiting for approval on testbox" {
			t.Fatalf("statuses %q", ss)
		}
	})
}

// callApprover is the owner's answer to capability calls: it waits for
// the test to say yes or no.
type callApprover struct {
	asked  chan nodes.CallApproval
	answer chan bool
}

func (c *callApprover) ApproveCall(ctx context.Context, a nodes.CallApproval) (bool, string) {
	c.asked <- a
	select {
	case ok := <-c.answer:
		if ok {
			return true, ""
		}
		return false, "the owner said no"
	case <-ctx.Done():
		return false, "withdrawn"
	}
}

func TestCapabilityApprovalInsideATask(t *testing.T) {
	t.Parallel()
	run := dataMsg(map[string]any{"capability": "system.run", "params": map[string]any{"argv": []any{"sleep", "0.01"}}})
	const call = `system.run {"argv":["sleep","0.01"]}`
	for _, approve := range []bool{true, false} {
		t.Run(map[bool]string{true: "approved", false: "denied"}[approve], func(t *testing.T) {
			t.Parallel()
			ca := &callApprover{asked: make(chan nodes.CallApproval, 1), answer: make(chan bool, 1)}
			reg := realRegistry(t, ca)
			// The grant's policy allowed the delegation: no person saw it,
			// so the capability's own policy (ask) asks the owner.
			env := newEnv(t, Options{Executor: NewNodeExecutor(reg, nil), Approver: policyApprover{}})
			go func() {
				a := <-ca.asked
				if a.Summary != call {
					t.Errorf("capability approval summary %q", a.Summary)
				}
				ca.answer <- approve
			}()
			ss := streamStatuses(t, env, run)
			waiting := "working: waiting for the owner's approval of " + call
			i := -1
			for j, s := range ss {
				if s == waiting {
					i = j
				}
			}
			if i < 0 {
				t.Fatalf("statuses %q: no %q", ss, waiting)
			}
			last := ss[len(ss)-1]
			if approve {
				if !hasStatus(ss[i:], "working: running system.run") || last != "completed: sleep exited 0" {
					t.Fatalf("statuses %q", ss)
				}
				return
			}
			if last != "rejected: rejected: system.run: the owner said no" {
				t.Fatalf("statuses %q, want the task rejected with the owner's reason", ss)
			}
		})
	}
}

// TestCutSummaryIsNotConsent: the owner approved a summary cut at
// nodes.MaxSummaryRunes; the call it hid the end of is asked again.
func TestCutSummaryIsNotConsent(t *testing.T) {
	t.Parallel()
	reg := &fakeRegistry{}
	ap := newManualApprover()
	env := newEnv(t, Options{Executor: NewNodeExecutor(reg, nil), Approver: ap})
	c := env.client(t, tokA)
	for _, title := range []string{"short", strings.Repeat("x", 300)} {
		go func() {
			pa := ap.next(t)
			pa.answer <- Decision{Approved: true, ByOwner: true}
		}()
		task := sendTask(t, context.Background(), c, dataMsg(map[string]any{"capability": "system.notify", "params": map[string]any{"title": title}}))
		if task.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("task %+v", task.Status)
		}
		if got, want := reg.lastCall().Approved, len(title) < 100; got != want {
			t.Fatalf("title of %d bytes: call marked approved %v, want %v", len(title), got, want)
		}
	}
}

// TestApprovedLineNamesFiles: the owner approves a call whose message
// carries a file; the line names it, and the call is the one approved.
func TestApprovedLineNamesFiles(t *testing.T) {
	t.Parallel()
	reg := &fakeRegistry{}
	ap := newManualApprover()
	env := newEnv(t, Options{Executor: NewNodeExecutor(reg, nil), Approver: ap})
	msg := a2a.NewMessage(a2a.MessageRoleUser,
		a2a.DataPart{Data: map[string]any{"capability": "system.notify", "params": map[string]any{"title": "hi"}}},
		a2a.FilePart{File: a2a.FileBytes{FileMeta: a2a.FileMeta{Name: "invoice\u202efdp.exe"}, Bytes: "eA=="}})
	go func() {
		pa := ap.next(t)
		if want := `system.notify {"title":"hi"} [file invoice\u202Efdp.exe]`; pa.Summary != want {
			t.Errorf("approval line %q, want %q", pa.Summary, want)
		}
		pa.answer <- Decision{Approved: true, ByOwner: true}
	}()
	task := sendTask(t, context.Background(), env.client(t, tokA), msg)
	if task.Status.State != a2a.TaskStateCompleted || !reg.lastCall().Approved {
		t.Fatalf("task %s, call approved %v", task.Status.State, reg.lastCall().Approved)
	}
}
