package app_test

// The `pair` and `approve` commands against a running node.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/app/cli"
	"meshtray/pairing"
)

// waitingPair is a non-interactive `meshtray pair` (stdin is not a
// terminal) running in the background.
type waitingPair struct {
	cmd      *exec.Cmd
	mu       sync.Mutex
	out, err bytes.Buffer
	done     chan struct{}
	code     int
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func startPair(t *testing.T, n *apptest.Node) *waitingPair {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	p := &waitingPair{done: make(chan struct{})}
	p.cmd = apptest.Command(ctx, nil, "pair", "--state-dir", n.StateDir)
	p.cmd.Stdout, p.cmd.Stderr = lockedWriter{&p.mu, &p.out}, lockedWriter{&p.mu, &p.err}
	if err := p.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		defer cancel()
		err := p.cmd.Wait()
		if ee, ok := err.(*exec.ExitError); ok {
			p.code = ee.ExitCode()
		} else if err != nil {
			p.code = -1
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

func (p *waitingPair) stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *waitingPair) result(t *testing.T, d time.Duration) (code int, stdout, stderr string) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("meshtray pair still waiting %v after the decision:\n%s", d, p.stdout())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.code, p.out.String(), p.err.String()
}

// phoneClaim claims code as a phone would and returns the pairing approval
// it makes.
func phoneClaim(t *testing.T, n *apptest.Node, code, name string) app.Approval {
	t.Helper()
	var nonce [32]byte
	rand.Read(nonce[:])
	body, _ := json.Marshal(pairing.ClaimRequest{Code: code, Name: name, OS: "Android 14", Nonce: base64.RawURLEncoding.EncodeToString(nonce[:]),
		RequestedScopes: pairing.Scopes{pairing.ScopeAgent, pairing.ScopeNode}})
	if st, _, resp := ptDo(t, n.BaseURL, ptReq{method: "POST", path: "/pair/claim", body: string(body)}); st != 200 {
		t.Fatalf("claim: %d %s", st, resp)
	}
	var got app.Approval
	apptest.WaitFor(t, 20*time.Second, "the pairing request of "+name, func() bool {
		for _, a := range pendingApprovals(t, n) {
			if a.Kind == app.KindPairing && a.Peer == name {
				got = a
				return true
			}
		}
		return false
	})
	return got
}

// codeShown waits for the code a background `meshtray pair` prints.
func codeShown(t *testing.T, p *waitingPair) string {
	t.Helper()
	var code string
	apptest.WaitFor(t, 20*time.Second, "meshtray pair to show its code", func() bool {
		for _, l := range strings.Split(p.stdout(), "\n") {
			if rest, ok := strings.CutPrefix(l, "One-time code: "); ok {
				code, _, _ = strings.Cut(rest, " ")
				return true
			}
		}
		return false
	})
	return code
}

// TestPairNoticesDecisionsMadeElsewhere: a `meshtray pair` that is not on a
// terminal says how to decide, then notices the decision made with
// `meshtray approve`/`deny` (the request leaves the queue; the devices list
// has the new grant, or not) and says so at once, instead of waiting for
// the code to expire; stopped with Ctrl-C it says it stopped.
func TestPairNoticesDecisionsMadeElsewhere(t *testing.T) {
	n := ptStart(t, "laptop")
	t.Run("approved", func(t *testing.T) {
		p := startPair(t, n)
		a := phoneClaim(t, n, codeShown(t, p), "pixel")
		apptest.WaitFor(t, 20*time.Second, "the approve hint", func() bool { return strings.Contains(p.stdout(), "meshtray approve "+a.ID) })
		ptCLI(t, n, "approve", a.ID, "--scopes", "node")
		code, out, errs := p.result(t, 20*time.Second)
		if code != 0 || !strings.Contains(out, "Paired with pixel: granted node") {
			t.Fatalf("exit %d\n%s%s", code, out, errs)
		}
	})
	t.Run("denied", func(t *testing.T) {
		p := startPair(t, n)
		a := phoneClaim(t, n, codeShown(t, p), "tablet")
		apptest.WaitFor(t, 20*time.Second, "the deny hint", func() bool { return strings.Contains(p.stdout(), "meshtray deny "+a.ID) })
		ptCLI(t, n, "deny", a.ID)
		code, out, errs := p.result(t, 20*time.Second)
		if code == 0 || !strings.Contains(errs, "denied") {
			t.Fatalf("exit %d\n%s%s", code, out, errs)
		}
	})
	t.Run("ctrl-c", func(t *testing.T) {
		p := startPair(t, n)
		codeShown(t, p)
		apptest.WaitFor(t, 20*time.Second, "the wait", func() bool { return strings.Contains(p.stdout(), "Waiting for a device") })
		p.cmd.Process.Signal(syscall.SIGINT)
		code, out, errs := p.result(t, 20*time.Second)
		if code == 0 || !strings.Contains(errs, "stopped waiting") || strings.Contains(errs, "expired") {
			t.Fatalf("after Ctrl-C: exit %d\n%s%s", code, out, errs)
		}
	})
}

// TestApproveSaysWhatItGranted: `approve` names what it granted; --scopes
// on anything but a pairing and --always on anything but a delegation are
// usage errors that leave the request pending.
func TestApproveSaysWhatItGranted(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Keychain: "file", Config: "tailscale = false\n"})
	var sess struct {
		Code string `json:"code"`
	}
	ptJSON(t, n, &sess, "pair")
	a := phoneClaim(t, n, sess.Code, "pixel")
	if r := n.CLI("approve", a.ID, "--always"); r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, "--always is for delegations") {
		t.Fatalf("approve --always on a pairing: exit %d: %s", r.Code, r.Stderr)
	}
	r := ptCLI(t, n, "approve", a.ID)
	if !strings.Contains(r.Stdout, "paired with pixel, granted agent,node") {
		t.Fatalf("approve of a pairing says %q", r.Stdout)
	}

	_, token := grantToken(t, n, "--name", "agent-x", "--scope", "agent")
	n.CLI("a2a", "on")
	client := apptest.A2AClient(t, n.BaseURL, token)
	go client.SendMessage(context.Background(), &a2a.MessageSendParams{Message: deviceInfoMessage()})
	d := waitApproval(t, n, app.KindDelegation)
	if r := n.CLI("approve", d.ID, "--scopes", "agent"); r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, "--scopes is for pairing requests") {
		t.Fatalf("approve --scopes on a delegation: exit %d: %s", r.Code, r.Stderr)
	}
	r = ptCLI(t, n, "approve", d.ID, "--always")
	if !strings.Contains(r.Stdout, "delegation from agent-x") || !strings.Contains(r.Stdout, "without asking") {
		t.Fatalf("approve --always of a delegation says %q", r.Stdout)
	}
	if r := n.CLI("approve", "NOSUCHAPPROVAL"); r.Code == 0 || !strings.Contains(r.Stderr, "no pending approval") {
		t.Fatalf("approve of an unknown id: exit %d: %s", r.Code, r.Stderr)
	}
}
