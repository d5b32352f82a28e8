package app_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/a2a/delegate"
	"meshtray/app"
	"meshtray/app/apptest"
)

// freePort is a loopback TCP port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// A delegation from ant to bee while bee's owner has not decided yet, and
// bee restarts (on its port, so ant finds it where it was):
//   - a clean stop (SIGTERM): ant is never told a final state (bee ends
//     ant's stream with "restarting", not "canceled"); after the restart
//     bee asks again, its owner approves, and ant's outbound ends
//     completed;
//   - a kill -9 for longer than ant used to follow it (~13 s): ant keeps
//     the task live, says it cannot reach bee and when it tries again,
//     `outbound ID --follow` waits, and once bee is back and approves, the
//     task completes; ant is not restarted.
func TestDelegationFollowedAcrossTheAgentsRestarts(t *testing.T) {
	bOpts := apptest.Options{Name: "bee", Config: "tailscale = false\n", Args: []string{"--port", strconv.Itoa(freePort(t))}}
	b := apptest.StartNode(t, bOpts)
	bOpts.StateDir = b.StateDir
	a := apptest.StartNode(t, apptest.Options{Name: "ant", Config: "tailscale = false\n"})
	pairNodes(t, a, b)
	mustCLI(t, b, "a2a", "on")
	mustCLI(t, a, "agents", "refresh", "bee")
	completed := func(x delegate.OutboundTask) bool {
		return x.State == a2a.TaskStateCompleted && !x.Following && x.Error == "" && len(x.Artifacts) == 1
	}

	// A clean stop of bee.
	one := delegateDetached(t, a, "bee", "device.info")
	approvalOf(t, b, app.KindDelegation)
	if err := b.Stop(); err != nil {
		t.Fatalf("bee's clean stop: %v", err)
	}
	stopped := waitOutbound(t, a, one.ID, "told bee is away", func(x delegate.OutboundTask) bool { return x.Error != "" })
	if stopped.State.Terminal() {
		t.Fatalf("ant after bee's clean stop: %+v", stopped)
	}
	b = apptest.StartNode(t, bOpts)
	decide(t, b, approvalOf(t, b, app.KindDelegation).ID, true)
	waitOutbound(t, a, one.ID, "completed after bee's restart", completed)

	// bee killed for longer than polling tolerates.
	two := delegateDetached(t, a, "bee", "device.info")
	approvalOf(t, b, app.KindDelegation)
	kill9(t, b)
	follow := startCLI(t, a, "outbound", two.ID, "--follow")
	time.Sleep(17 * time.Second)
	away := waitOutbound(t, a, two.ID, "live, cannot reach bee", func(x delegate.OutboundTask) bool {
		return strings.HasPrefix(x.Error, "cannot reach the agent: ") && strings.Contains(x.Error, "trying again at ")
	})
	if away.State.Terminal() || away.RetryAt.IsZero() && !away.Following {
		t.Fatalf("ant while bee is down: %+v", away)
	}
	if r := mustCLI(t, a, "outbound"); !strings.Contains(r.Stdout, "cannot reach the agent") {
		t.Fatalf("outbound list while bee is down:\n%s", r.Stdout)
	}
	select {
	case <-follow.done:
		r := follow.wait(t, time.Second)
		t.Fatalf("outbound --follow ended while bee was down: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	default:
	}
	b = apptest.StartNode(t, bOpts)
	decide(t, b, approvalOf(t, b, app.KindDelegation).ID, true)
	waitOutbound(t, a, two.ID, "completed after bee's kill and restart", completed)
	r := follow.wait(t, 60*time.Second)
	if r.Code != 0 || !strings.Contains(r.Stderr, "waiting: cannot reach the agent") || !strings.Contains(r.Stdout, "device.info") {
		t.Fatalf("outbound --follow: exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
}

// Approvals that nobody decided because they went away are recorded as
// withdrawn, in words: A2A switched off with a delegation waiting, and a
// caller canceling its waiting task. Never Go's "context canceled".
func TestWithdrawnApprovalsAudited(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Keychain: "file", Name: "laptop"})
	mustCLI(t, n, "a2a", "on")
	grantID, token := grantToken(t, n, "--name", "agent-1", "--scope", "agent")

	sendWaiting(t, n, token, 0)
	mustCLI(t, n, "a2a", "off")
	apptest.WaitFor(t, 30*time.Second, "the switch-off withdrawal in the audit trail", func() bool {
		_, ok := findEntry(auditEntries(t, n, "--kind", "approval"), app.AuditEntry{Kind: "approval", GrantID: grantID,
			Result: "withdrawn", DecidedBy: "node", Params: "withdrawn: A2A was switched off"})
		return ok
	})

	mustCLI(t, n, "a2a", "on")
	ap := sendWaiting(t, n, token, 0)
	if _, err := apptest.A2AClient(t, n.BaseURL, token).CancelTask(context.Background(), &a2a.TaskIDParams{ID: a2a.TaskID(ap.TaskID)}); err != nil {
		t.Fatalf("tasks/cancel of the waiting task: %v", err)
	}
	apptest.WaitFor(t, 30*time.Second, "the caller's cancel in the audit trail", func() bool {
		_, ok := findEntry(auditEntries(t, n), app.AuditEntry{Kind: "approval", GrantID: grantID,
			Result: "withdrawn", DecidedBy: "node", Params: "withdrawn: the caller canceled it"})
		return ok
	})
	out := mustCLI(t, n, "audit", "--kind", "approval").Stdout
	if strings.Contains(out, "context canceled") || strings.Count(out, "withdrawn") < 4 {
		t.Fatalf("audit --kind approval:\n%s", out)
	}
	for _, e := range auditEntries(t, n, "--kind", "approval") {
		if e.Result == "denied" || strings.Contains(e.Params, "context") {
			t.Errorf("an approval nobody denied: %+v", e)
		}
	}
}
