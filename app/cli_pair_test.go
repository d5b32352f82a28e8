package app_test

// The `pair` and `approve` commands against a running node.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/app/cli"
	"meshtray/pairing"
)

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

// codeShown waits for the code a background `meshtray pair` (startCLI;
// stdin is not a terminal) prints.
func codeShown(t *testing.T, p *bgCLI) string {
	t.Helper()
	var code string
	apptest.WaitFor(t, 20*time.Second, "meshtray pair to show its code", func() bool {
		for _, l := range strings.Split(p.stdout.String(), "\n") {
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
		p := startCLI(t, n, "pair")
		a := phoneClaim(t, n, codeShown(t, p), "pixel")
		apptest.WaitFor(t, 20*time.Second, "the approve hint", func() bool { return strings.Contains(p.stdout.String(), "meshtray approve "+a.ID) })
		ptCLI(t, n, "approve", a.ID, "--scopes", "node")
		r := p.wait(t, 20*time.Second)
		code, out, errs := r.Code, r.Stdout, r.Stderr
		if code != 0 || !strings.Contains(out, "Paired with pixel: granted node") {
			t.Fatalf("exit %d\n%s%s", code, out, errs)
		}
	})
	t.Run("denied", func(t *testing.T) {
		p := startCLI(t, n, "pair")
		a := phoneClaim(t, n, codeShown(t, p), "tablet")
		apptest.WaitFor(t, 20*time.Second, "the deny hint", func() bool { return strings.Contains(p.stdout.String(), "meshtray deny "+a.ID) })
		ptCLI(t, n, "deny", a.ID)
		r := p.wait(t, 20*time.Second)
		code, out, errs := r.Code, r.Stdout, r.Stderr
		if code == 0 || !strings.Contains(errs, "denied") {
			t.Fatalf("exit %d\n%s%s", code, out, errs)
		}
	})
	t.Run("ctrl-c", func(t *testing.T) {
		p := startCLI(t, n, "pair")
		codeShown(t, p)
		apptest.WaitFor(t, 20*time.Second, "the wait", func() bool { return strings.Contains(p.stdout.String(), "Waiting for a device") })
		p.cmd.Process.Signal(syscall.SIGINT)
		r := p.wait(t, 20*time.Second)
		code, out, errs := r.Code, r.Stdout, r.Stderr
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
