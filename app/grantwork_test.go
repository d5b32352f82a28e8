package app_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/app"
	"meshtray/app/apptest"
)

// childSleeps returns the pids of the `sleep` processes whose parent is ppid.
func childSleeps(ppid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || !strings.HasSuffix(s[:i], "(sleep") {
			continue
		}
		if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == strconv.Itoa(ppid) {
			out = append(out, pid)
		}
	}
	return out
}

// streamTask sends msg as a streaming delegation and returns the channel of
// its events, closed when the stream ends.
func streamTask(t *testing.T, n *apptest.Node, token string, msg *a2a.Message) <-chan a2a.Event {
	t.Helper()
	client := apptest.A2AClient(t, n.BaseURL, token)
	events := make(chan a2a.Event, 64)
	go func() {
		defer close(events)
		for ev, err := range client.SendStreamingMessage(context.Background(), &a2a.MessageSendParams{Message: msg}) {
			if err != nil {
				return
			}
			events <- ev
		}
	}()
	return events
}

// lastEvent drains events (up to d) and returns the last one.
func lastEvent(t *testing.T, events <-chan a2a.Event, d time.Duration, what string) a2a.Event {
	t.Helper()
	var last a2a.Event
	timeout := time.After(d)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return last
			}
			last = ev
		case <-timeout:
			t.Fatalf("%s: stream still open after %v (last event %#v)", what, d, last)
		}
	}
}

// invoke posts a capability call with token; the answer's status arrives on
// the returned channel (0 when the request failed).
func invoke(t *testing.T, n *apptest.Node, token, body string) <-chan int {
	t.Helper()
	out := make(chan int, 1)
	req, err := http.NewRequest(http.MethodPost, n.BaseURL+"/nodes/invoke", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- 0
			return
		}
		resp.Body.Close()
		out <- resp.StatusCode
	}()
	return out
}

const sleepCall = `{"capability":"system.run","params":{"argv":["sleep","60"]}}`

func sleepMessage() *a2a.Message {
	return a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: map[string]any{
		"capability": "system.run", "params": map[string]any{"argv": []string{"sleep", "60"}}}})
}

// grantApprovals returns the pending approvals of grant id.
func grantApprovals(t *testing.T, n *apptest.Node, grantID string) []app.Approval {
	t.Helper()
	var out []app.Approval
	for _, a := range pendingApprovals(t, n) {
		if a.GrantID == grantID {
			out = append(out, a)
		}
	}
	return out
}

// TestPauseAndRevokeEndLiveWork: "Revoking bites at once" (README,
// "Security model") on work already under way. A grant has four things in
// flight: an approved delegation running `sleep 60`, a delegation waiting
// for the owner, a capability call (POST /nodes/invoke) running `sleep 60`
// and one waiting for the owner. Pausing or revoking the grant ends them
// all: both A2A streams get their final event, both HTTP calls return,
// the approvals are gone (deciding them later finds nothing) and no sleep
// runs under the node.
func TestPauseAndRevokeEndLiveWork(t *testing.T) {
	for _, action := range []string{app.ActionPause, app.ActionRevoke} {
		t.Run(action, func(t *testing.T) {
			n := apptest.StartNode(t, apptest.Options{Keychain: "file", Config: "tailscale = false\n[[nodes.run]]\nname = \"sleep\"\n"})
			id, token := grantToken(t, n, "--name", "worker", "--scope", "agent,node")
			n.CLI("a2a", "on")

			// 1: an approved delegation running sleep.
			running := streamTask(t, n, token, sleepMessage())
			d1 := waitApproval(t, n, app.KindDelegation)
			decide(t, n, d1.ID, true)
			apptest.WaitFor(t, 20*time.Second, "the delegated sleep to run", func() bool { return len(childSleeps(n.Cmd.Process.Pid)) == 1 })
			// 2: a capability call, approved, running sleep.
			invoked := invoke(t, n, token, sleepCall)
			c1 := waitApproval(t, n, app.KindCapability)
			decide(t, n, c1.ID, true)
			apptest.WaitFor(t, 20*time.Second, "the invoked sleep to run", func() bool { return len(childSleeps(n.Cmd.Process.Pid)) == 2 })
			// 3 and 4: a delegation and a capability call waiting for the owner.
			waiting := streamTask(t, n, token, sleepMessage())
			waitingCall := invoke(t, n, token, sleepCall)
			var pending []app.Approval
			apptest.WaitFor(t, 20*time.Second, "two requests waiting for the owner", func() bool {
				pending = grantApprovals(t, n, id)
				return len(pending) == 2
			})

			ptCLI(t, n, "grant", action, id)

			for name, events := range map[string]<-chan a2a.Event{"running delegation": running, "waiting delegation": waiting} {
				last := lastEvent(t, events, 20*time.Second, name)
				su, ok := last.(*a2a.TaskStatusUpdateEvent)
				if !ok || !su.Final || !su.Status.State.Terminal() {
					t.Errorf("%s: last stream event %#v, want a final status", name, last)
				}
			}
			for name, ch := range map[string]<-chan int{"running call": invoked, "waiting call": waitingCall} {
				select {
				case st := <-ch:
					if st == http.StatusOK {
						t.Errorf("%s ended 200 after %s", name, action)
					}
				case <-time.After(20 * time.Second):
					t.Errorf("%s still waiting 20s after %s", name, action)
				}
			}
			apptest.WaitFor(t, 20*time.Second, "no sleep under the node", func() bool { return len(childSleeps(n.Cmd.Process.Pid)) == 0 })
			if left := grantApprovals(t, n, id); len(left) != 0 {
				t.Errorf("approvals of the %sd grant still pending: %+v", action, left)
			}
			for _, a := range pending {
				if r := n.CLI("approve", a.ID); r.Code == 0 {
					t.Errorf("approving %s of the %sd grant succeeded: %s", a.ID, action, r.Stdout)
				}
			}
			if len(childSleeps(n.Cmd.Process.Pid)) != 0 {
				t.Error("a sleep started after the grant was " + action + "d")
			}
		})
	}
}
