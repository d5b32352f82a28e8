package app_test

// Texts a person meets in the tables and when another device, or the
// node itself, is gone.

import (
	"net"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/app/cli"
)

// TestGrantTablesShowFilesPolicy: grant list and devices show each
// grant's files policy beside its delegation policy (ask when never set),
// as --json has files_approval.
func TestGrantTablesShowFilesPolicy(t *testing.T) {
	n := ptStart(t, "alpha")
	var phone, agent app.GrantToken
	ptJSON(t, n, &phone, "grant", "create", "--name", "phone", "--scopes", "agent")
	ptJSON(t, n, &agent, "grant", "create", "--name", "ci", "--scopes", "agent", "--approval", "allow")
	ptCLI(t, n, "grant", "set", phone.ID, "--files", "allow")
	for _, cmd := range []string{"grant list", "devices"} {
		args := regexp.MustCompile(" ").Split(cmd, -1)
		out := ptCLI(t, n, args...).Stdout
		for _, want := range []string{
			`(?m)^ID\s+NAME\s+SCOPES\s+APPROVAL\s+FILES\s+STATUS\s+LAST USED$`,
			`(?m)^` + phone.ID + `\s+phone\s+agent\s+ask\s+allow\s+active\s`,
			`(?m)^` + agent.ID + `\s+ci\s+agent\s+allow\s+ask\s+active\s`,
		} {
			if !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("meshtray %s does not match %s:\n%s", cmd, want, out)
			}
		}
	}
}

// TestTextsWhenSomethingIsGone: what the CLI says when the other end is
// not there, in one plain sentence each (egress.Cause's words, no URL, no
// "mesh: hello", "Get", "dial tcp" chain): a peer added by an address
// nothing listens on, approvals --on a device whose node is down, and
// audit --follow whose node was killed.
func TestTextsWhenSomethingIsGone(t *testing.T) {
	laptop := ptStart(t, "laptop")
	desktop := ptStart(t, "desktop")
	ptPairByCLI(t, laptop, desktop, "agent,approve", "agent")
	jargon := func(what, s string) {
		t.Helper()
		for _, bad := range []string{"mesh:", `Get "`, "Get:", "dial tcp", "unreachable:", "EOF", "https://127.0.0.1"} {
			if strings.Contains(s, bad) {
				t.Errorf("%s says %q:\n%s", what, bad, s)
			}
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	r := desktop.CLI("peers", "add", "https://"+closed)
	if r.Code != cli.ExitError || !strings.Contains(r.Stderr, "meshtray: could not reach "+closed+": connection refused\n") {
		t.Errorf("peers add of a closed port: exit %d\n%s", r.Code, r.Stderr)
	}
	jargon("peers add", r.Stderr)

	// audit --follow on desktop, whose node is killed under it.
	follow := startCLI(t, desktop, "audit", "--follow")
	apptest.WaitFor(t, 20*time.Second, "audit --follow's first rows", func() bool { return strings.Contains(follow.stdout.String(), "TIME") })

	// laptop's node down: approvals --on laptop says so.
	if err := laptop.Stop(); err != nil {
		t.Fatal(err)
	}
	r = desktop.CLI("approvals", "--on", "laptop")
	if r.Code != cli.ExitError || !strings.Contains(r.Stderr, "meshtray: laptop is not reachable (connection refused); is meshtray running there?\n") {
		t.Errorf("approvals --on a stopped device: exit %d\n%s", r.Code, r.Stderr)
	}
	jargon("approvals --on", r.Stderr)

	if err := desktop.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r = follow.wait(t, 30*time.Second)
	if r.Code != cli.ExitError || !strings.Contains(r.Stderr, "meshtray: the node stopped, so the audit trail is no longer followed") {
		t.Errorf("audit --follow when its node was killed: exit %d\n%s", r.Code, r.Stderr)
	}
	jargon("audit --follow", r.Stderr)
}

// TestCancelUnknownID: cancel with an id nothing has names both kinds of
// id it takes and where to find them, without the outbound store's
// "a2a:" prefix; the exit code stays 1.
func TestCancelUnknownID(t *testing.T) {
	n := ptStart(t, "solo")
	r := n.CLI("cancel", "nonexistent")
	want := `no outbound task or incoming transfer has the id nonexistent (see meshtray outbound and meshtray status)`
	if !strings.Contains(r.Stderr, want) || strings.Contains(r.Stderr, "a2a:") {
		t.Errorf("cancel nonexistent: exit %d, stderr %q, want %q", r.Code, r.Stderr, want)
	}
	if r.Code != cli.ExitError {
		t.Errorf("cancel nonexistent: exit %d, want %d", r.Code, cli.ExitError)
	}
}
