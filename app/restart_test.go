package app_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	a2av1 "github.com/a2aproject/a2a-go/v2/a2a"
	a2aclientv1 "github.com/a2aproject/a2a-go/v2/a2aclient"
	agentcardv1 "github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	agent "meshtray/a2a"
	"meshtray/app/apptest"
	"meshtray/store"
)

// restartConfig lets one allow-policy grant run 32 tasks at once.
const restartConfig = "tailscale = false\n[a2a]\nmax_live_per_grant = 64\n"

// TestKillDuringSendsKeepsAcknowledgedTasks: kill -9 the node while 32
// clients (the official a2a-go client) send message/send device.info under
// an allow-policy grant; the database left behind passes PRAGMA
// integrity_check and the audit chain's check; restarted on the same state
// dir, the node has every task a client saw completed, completed, with
// its artifact; no task is left submitted or working (a send in flight at
// the kill was never acknowledged: its task is absent, or failed saying
// the node restarted); and a task left input-required before the kill is
// answered after it.
func TestKillDuringSendsKeepsAcknowledgedTasks(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Name: "laptop", Config: restartConfig})
	_, token := grantToken(t, n, "--name", "load", "--scope", "agent", "--approval", "allow")
	if r := n.CLI("a2a", "on"); r.Code != 0 {
		t.Fatalf("a2a on: exit %d: %s", r.Code, r.Stderr)
	}
	ctx := context.Background()
	deviceInfo := func() *a2a.Message {
		return a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: map[string]any{"capability": "device.info"}})
	}

	// A task waiting for its caller: a message naming no capability.
	c0 := apptest.A2AClient(t, n.BaseURL, token)
	res, err := c0.SendMessage(ctx, &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "what can you do?"})})
	if err != nil {
		t.Fatal(err)
	}
	asking, ok := res.(*a2a.Task)
	if !ok || asking.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("the asking task: %+v", res)
	}

	// 32 clients send until the node is gone; the kill comes once 150
	// tasks are acknowledged (a bound well under the 512 the node keeps).
	const clients, killAt = 32, 150
	var (
		mu    sync.Mutex
		acked = map[a2a.TaskID]bool{}
		count atomic.Int64
		wg    sync.WaitGroup
	)
	killed := make(chan struct{})
	sendCtx, stopSends := context.WithTimeout(ctx, 2*time.Minute)
	defer stopSends()
	for range clients {
		c := apptest.A2AClient(t, n.BaseURL, token)
		wg.Go(func() {
			for sendCtx.Err() == nil {
				res, err := c.SendMessage(sendCtx, &a2a.MessageSendParams{Message: deviceInfo()})
				if err != nil {
					select {
					case <-killed:
						return // the node is gone: this one was never acknowledged
					default:
					}
					t.Errorf("send before the kill: %v", err)
					return
				}
				task, ok := res.(*a2a.Task)
				if !ok || task.Status.State != a2a.TaskStateCompleted {
					t.Errorf("send: %+v", res)
					return
				}
				mu.Lock()
				acked[task.ID] = true
				mu.Unlock()
				count.Add(1)
			}
		})
	}
	apptest.WaitFor(t, time.Minute, "acknowledged tasks", func() bool { return count.Load() >= killAt })
	close(killed)
	kill9(t, n)
	wg.Wait()
	stopSends()
	mu.Lock()
	seen := len(acked)
	mu.Unlock()
	t.Logf("%d tasks acknowledged completed before the kill", seen)

	// The file the kill left: whole, and its audit chain too; the grant's
	// token is nowhere in it.
	path := filepath.Join(n.StateDir, store.DefaultFile)
	for _, f := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(token)) {
			t.Errorf("%s holds the grant token", f)
		}
	}
	if err := openDB(t, n.StateDir).Close(); err != nil { // integrity_check and audit verify
		t.Fatal(err)
	}

	n2 := apptest.StartNode(t, apptest.Options{Name: "laptop", Config: restartConfig, StateDir: n.StateDir})
	c := apptest.A2AClient(t, n2.BaseURL, token)
	mu.Lock()
	defer mu.Unlock()
	for id := range acked {
		got, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: id})
		if err != nil {
			t.Errorf("acknowledged task %s after the restart: %v", id, err)
			continue
		}
		if got.Status.State != a2a.TaskStateCompleted || len(got.Artifacts) != 1 {
			t.Errorf("acknowledged task %s after the restart: %s, %d artifacts", id, got.Status.State, len(got.Artifacts))
		}
	}

	// Over 1.0: the whole list, none left submitted or working.
	hc := &http.Client{}
	card, err := agentcardv1.NewResolver(hc).Resolve(ctx, n2.BaseURL)
	if err != nil {
		t.Fatal(err)
	}
	c1, err := a2aclientv1.NewFromCard(ctx, card, a2aclientv1.WithJSONRPCTransport(hc), a2aclientv1.WithCallInterceptors(bearerV1{token: token}))
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Destroy()
	states := map[a2av1.TaskState]int{}
	listed := 0
	for page := ""; ; {
		l, err := c1.ListTasks(ctx, &a2av1.ListTasksRequest{PageSize: 100, PageToken: page})
		if err != nil {
			t.Fatalf("ListTasks after the restart: %v", err)
		}
		for _, tk := range l.Tasks {
			listed++
			states[tk.Status.State]++
			switch tk.Status.State {
			case a2av1.TaskStateSubmitted, a2av1.TaskStateWorking:
				t.Errorf("task %s is %s after the restart", tk.ID, tk.Status.State)
			case a2av1.TaskStateFailed:
				if got := tk.Status.Message; got == nil || len(got.Parts) == 0 || got.Parts[0].Text() != agent.RestartedText {
					t.Errorf("failed task %s says %+v, want %q", tk.ID, got, agent.RestartedText)
				}
			}
		}
		if page = l.NextPageToken; page == "" {
			break
		}
	}
	if listed < seen+1 {
		t.Errorf("listed %d tasks after the restart, fewer than the %d acknowledged and the asking one", listed, seen)
	}
	t.Logf("after the restart: %d tasks, by state %v", listed, states)

	// The task left input-required before the kill is answered after it.
	answer := a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: map[string]any{"capability": "device.info"}})
	answer.TaskID = asking.ID
	res, err = c.SendMessage(ctx, &a2a.MessageSendParams{Message: answer})
	if err != nil {
		t.Fatalf("answering the restored task: %v", err)
	}
	if done, ok := res.(*a2a.Task); !ok || done.Status.State != a2a.TaskStateCompleted || len(done.Artifacts) != 1 {
		t.Fatalf("the answered task: %+v", res)
	}
}
