package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/a2a/delegate"
	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/app/cli"
)

// Delegating between two real meshtray nodes: two `meshtray
// serve` processes on loopback, paired through the real pairing flow
// (`pair --json` on B, `pair --join URL` on A, B's owner approves), then A's
// CLI delegates to B and B's owner approves through B's API.

// lockedBuffer is a bytes.Buffer safe for a child's writes and our reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// bgCLI is a CLI run in the background (it waits for the other owner).
type bgCLI struct {
	cmd         *exec.Cmd
	stdout, err lockedBuffer
	done        chan struct{}
	code        int
}

func startCLI(t *testing.T, n *apptest.Node, args ...string) *bgCLI {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	b := &bgCLI{done: make(chan struct{})}
	b.cmd = apptest.Command(ctx, nil, append(args, "--state-dir", n.StateDir)...)
	b.cmd.Stdout, b.cmd.Stderr = &b.stdout, &b.err
	if err := b.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		defer close(b.done)
		defer cancel()
		err := b.cmd.Wait()
		if ee, ok := err.(*exec.ExitError); ok {
			b.code = ee.ExitCode()
		} else if err != nil {
			b.code = -1
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-b.done
	})
	return b
}

// wait returns the run's result, failing the test after d.
func (b *bgCLI) wait(t *testing.T, d time.Duration) apptest.Result {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(d):
		t.Fatalf("meshtray %v still running after %v\nstdout:\n%s\nstderr:\n%s", b.cmd.Args[1:], d, b.stdout.String(), b.err.String())
	}
	return apptest.Result{Stdout: b.stdout.String(), Stderr: b.err.String(), Code: b.code}
}

// approvalOf waits until n has a pending approval of kind and returns it.
func approvalOf(t *testing.T, n *apptest.Node, kind app.ApprovalKind) app.Approval {
	t.Helper()
	var got app.Approval
	apptest.WaitFor(t, 30*time.Second, "a pending "+string(kind)+" approval on "+n.StateDir, func() bool {
		var as []app.Approval
		if err := n.Client.Do(context.Background(), http.MethodGet, "/approvals", nil, &as); err != nil {
			t.Fatalf("GET /approvals: %v", err)
		}
		for _, a := range as {
			if a.Kind == kind {
				got = a
				return true
			}
		}
		return false
	})
	return got
}

// decide answers an approval through n's control API.
func decide(t *testing.T, n *apptest.Node, id string, approve bool) {
	t.Helper()
	d := app.ApprovalDecision{Decision: app.DecisionDeny}
	if approve {
		d.Decision = app.DecisionApprove
	}
	if err := n.Client.Do(context.Background(), http.MethodPost, "/approvals/"+id, d, nil); err != nil {
		t.Fatalf("decide %s: %v", id, err)
	}
}

func mustCLI(t *testing.T, n *apptest.Node, args ...string) apptest.Result {
	t.Helper()
	r := n.CLI(args...)
	if r.Code != 0 {
		t.Fatalf("meshtray %v: exit %d\nstdout: %s\nstderr: %s", args, r.Code, r.Stdout, r.Stderr)
	}
	return r
}

// pairNodes pairs a with b through the real flow: b shows a code, a claims
// it (mutual pairing: a gives b a grant back), b's owner approves.
func pairNodes(t *testing.T, a, b *apptest.Node) {
	t.Helper()
	var ps struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, b, "pair", "--json").Stdout), &ps); err != nil || ps.URL == "" {
		t.Fatalf("pair --json: %+v %v", ps, err)
	}
	join := startCLI(t, a, "pair", "--join", ps.URL, "--json")
	ap := approvalOf(t, b, app.KindPairing)
	mustCLI(t, b, "approve", ap.ID)
	if r := join.wait(t, 60*time.Second); r.Code != 0 {
		t.Fatalf("pair --join: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
}

func outboundList(t *testing.T, n *apptest.Node) []delegate.OutboundTask {
	t.Helper()
	var ts []delegate.OutboundTask
	if err := json.Unmarshal([]byte(mustCLI(t, n, "outbound", "--json").Stdout), &ts); err != nil {
		t.Fatal(err)
	}
	return ts
}

// findPID returns the pid of a process with exactly argv, or 0.
func findPID(t *testing.T, argv ...string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		got := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if len(got) == len(argv) && (got[0] == argv[0] || strings.HasSuffix(got[0], "/"+argv[0])) && slices.Equal(got[1:], argv[1:]) {
			return pid
		}
	}
	return 0
}

func TestDelegateBetweenPairedNodes(t *testing.T) {
	b := apptest.StartNode(t, apptest.Options{Name: "bee", Config: `
[[nodes.run]]
name = "sleep"
`})
	a := apptest.StartNode(t, apptest.Options{Name: "ant"})
	pairNodes(t, a, b)
	host, _ := os.Hostname()

	// B has not published A2A: A knows B as an agent that is not ready.
	var as []delegate.Agent
	if err := json.Unmarshal([]byte(mustCLI(t, a, "agents", "--json").Stdout), &as); err != nil {
		t.Fatal(err)
	}
	if len(as) != 1 || as[0].Kind != delegate.AgentPeer || as[0].Name != "bee" || as[0].Status != delegate.AgentUnpublished {
		t.Fatalf("agents before A2A on B: %+v", as)
	}
	if r := a.CLI("delegate", "bee", "device.info"); r.Code != 1 || !strings.Contains(r.Stderr, "has not published its A2A agent card") {
		t.Fatalf("delegate to unpublished B: exit %d, stderr %q", r.Code, r.Stderr)
	}
	mustCLI(t, b, "a2a", "on")
	// B's card is signed with its identity; A checks it against the
	// certificate it pinned, and speaks 0.3 with it.
	var bee delegate.Agent
	if err := json.Unmarshal([]byte(mustCLI(t, a, "agents", "refresh", "bee", "--json").Stdout), &bee); err != nil {
		t.Fatal(err)
	}
	if bee.Card == nil || bee.Card.Signature != "signed" || bee.Card.SignedBy != bee.DeviceID || bee.Card.ProtocolVersion == "" {
		t.Fatalf("B's card as A sees it: %+v", bee)
	}
	if r := mustCLI(t, a, "agents"); !strings.Contains(r.Stdout, "A2A") || !strings.Contains(r.Stdout, bee.Card.ProtocolVersion) {
		t.Fatalf("agents list: %s", r.Stdout)
	}

	t.Run("device.info, approved on B", func(t *testing.T) {
		run := startCLI(t, a, "delegate", "bee", "device.info")
		ap := approvalOf(t, b, app.KindDelegation)
		if ap.Peer != "ant" || ap.Summary != "device.info" {
			t.Fatalf("B's approval: %+v", ap)
		}
		decide(t, b, ap.ID, true)
		r := run.wait(t, 60*time.Second)
		if r.Code != 0 || !strings.Contains(r.Stdout, "── device.info ──") || !strings.Contains(r.Stdout, `"hostname": "`+host+`"`) {
			t.Fatalf("delegate: exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
		}
		if !strings.Contains(r.Stderr, "waiting for approval on bee") || !strings.Contains(r.Stderr, "completed") {
			t.Fatalf("progress on stderr:\n%s", r.Stderr)
		}
	})

	t.Run("input-required round trip, polled", func(t *testing.T) {
		run := startCLI(t, a, "delegate", "bee", "hello there", "--stream=false")
		decide(t, b, approvalOf(t, b, app.KindDelegation).ID, true)
		r := run.wait(t, 60*time.Second)
		if r.Code != cli.ExitTaskInputRequired || !strings.Contains(r.Stdout, "device.info") || !strings.Contains(r.Stderr, "meshtray answer") {
			t.Fatalf("delegate: exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
		}
		var asked delegate.OutboundTask
		for _, o := range outboundList(t, a) {
			if o.Request == "hello there" {
				asked = o
			}
		}
		if asked.State != a2a.TaskStateInputRequired || !strings.Contains(asked.Message, "device.info") || asked.Streaming {
			t.Fatalf("outbound view: %+v", asked)
		}
		// The list shows the question.
		if r := mustCLI(t, a, "outbound"); !strings.Contains(r.Stdout, "↳ asks:") {
			t.Fatalf("outbound list:\n%s", r.Stdout)
		}
		// The answer resumes the same task on B (no new delegation to
		// approve); the call it names now is not the one B's owner approved,
		// so B asks about the capability call itself.
		ans := startCLI(t, a, "answer", asked.ID, "device.info")
		capAp := approvalOf(t, b, app.KindCapability)
		if capAp.Summary != "device.info" {
			t.Fatalf("B's capability approval: %+v", capAp)
		}
		for _, p := range approvalsOf(t, b) {
			if p.Kind == app.KindDelegation {
				t.Fatalf("the answer was approved again as a new delegation: %+v", p)
			}
		}
		decide(t, b, capAp.ID, true)
		r = ans.wait(t, 60*time.Second)
		if r.Code != 0 || !strings.Contains(r.Stdout, `"hostname": "`+host+`"`) {
			t.Fatalf("answer: exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
		}
		var got delegate.OutboundTask
		if err := json.Unmarshal([]byte(mustCLI(t, a, "outbound", asked.ID, "--json").Stdout), &got); err != nil {
			t.Fatal(err)
		}
		if got.State != a2a.TaskStateCompleted || got.TaskID != asked.TaskID || len(got.Artifacts) != 1 {
			t.Fatalf("after the answer: %+v", got)
		}
	})

	t.Run("cancel stops the work on B", func(t *testing.T) {
		secs := "293.75" // distinctive, to find the process
		run := startCLI(t, a, "delegate", "bee", "--data", `{"capability":"system.run","params":{"argv":["sleep","`+secs+`"]}}`)
		ap := approvalOf(t, b, app.KindDelegation)
		if !strings.HasPrefix(ap.Summary, `system.run {"argv":["sleep","`+secs+`"]`) {
			t.Fatalf("B's approval: %+v", ap)
		}
		decide(t, b, ap.ID, true)
		var pid int
		apptest.WaitFor(t, 30*time.Second, "sleep to run on B", func() bool {
			pid = findPID(t, "sleep", secs)
			return pid != 0
		})
		var id string
		for _, o := range outboundList(t, a) {
			if strings.Contains(o.Request, secs) {
				id = o.ID
			}
		}
		r := mustCLI(t, a, "cancel", id)
		if !strings.Contains(r.Stdout, "canceled") {
			t.Fatalf("cancel printed %q", r.Stdout)
		}
		if r := run.wait(t, 30*time.Second); r.Code != cli.ExitTaskCanceled {
			t.Fatalf("delegate after cancel: exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
		}
		apptest.WaitFor(t, 10*time.Second, fmt.Sprintf("pid %d to be gone", pid), func() bool {
			_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
			return os.IsNotExist(err)
		})
		var st app.A2AStatus
		if err := b.Client.Do(context.Background(), http.MethodGet, "/a2a/status", nil, &st); err != nil || st.LiveTasks != 0 {
			t.Fatalf("B's live tasks after cancel: %+v %v", st, err)
		}
	})

	t.Run("B revokes A: A's next call fails with the revoked token", func(t *testing.T) {
		var aid struct {
			ID string `json:"id"`
		}
		json.Unmarshal([]byte(mustCLI(t, a, "id", "--json").Stdout), &aid)
		var issued []struct {
			ID     string `json:"id"`
			PeerID string `json:"peer_id"`
		}
		if err := json.Unmarshal([]byte(mustCLI(t, b, "grant", "list", "--json").Stdout), &issued); err != nil {
			t.Fatal(err)
		}
		gid := ""
		for _, g := range issued {
			if g.PeerID == aid.ID {
				gid = g.ID
			}
		}
		if gid == "" {
			t.Fatalf("no grant of B for A (%s) in %+v", aid.ID, issued)
		}
		mustCLI(t, b, "grant", "revoke", gid)
		r := a.CLI("delegate", "bee", "device.info")
		if r.Code != 1 || !strings.Contains(r.Stderr, "revoked") || !strings.Contains(r.Stderr, "pair again") {
			t.Fatalf("delegate after revocation: exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
		}
		if len(approvalsOf(t, b)) != 0 {
			t.Fatal("a revoked grant reached B's approvals")
		}
		if err := json.Unmarshal([]byte(mustCLI(t, a, "agents", "--json").Stdout), &as); err != nil {
			t.Fatal(err)
		}
		if len(as) != 1 || as[0].Status != delegate.AgentRevoked {
			t.Fatalf("agents after revocation: %+v", as)
		}
	})
}

func approvalsOf(t *testing.T, n *apptest.Node) []app.Approval {
	t.Helper()
	var as []app.Approval
	if err := n.Client.Do(context.Background(), http.MethodGet, "/approvals", nil, &as); err != nil {
		t.Fatal(err)
	}
	return as
}

// TestPeerAddressesAreHTTPS: a paired peer found in the mesh table at a
// loopback address (added by hand) is called over pinned HTTPS like any
// other: plain http would hand the held token to whoever holds that port.
func TestPeerAddressesAreHTTPS(t *testing.T) {
	b := apptest.StartNode(t, apptest.Options{Name: "bee", Keychain: "file"})
	a := apptest.StartNode(t, apptest.Options{Name: "ant", Keychain: "file"})
	pairNodes(t, a, b)
	mustCLI(t, b, "a2a", "on")
	mustCLI(t, a, "peers", "add", fmt.Sprintf("https://127.0.0.1:%d", b.Port))
	var as []delegate.Agent
	if err := json.Unmarshal([]byte(mustCLI(t, a, "agents", "--json").Stdout), &as); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ag := range as {
		if ag.Name != "bee" {
			continue
		}
		found = true
		if !strings.HasPrefix(ag.URL, "https://127.0.0.1:") {
			t.Fatalf("paired peer called at %q, want pinned https", ag.URL)
		}
	}
	if !found {
		t.Fatalf("paired peer missing from agents: %+v", as)
	}
}
