//go:build linux

package app_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshtray/app"
	"meshtray/app/apptest"
)

// TestCLIOfAnotherUserIsToldWhy: `meshtray status` run as another uid
// against a running node's state dir says the node belongs to another user
// (exit 1), whatever that uid can reach: the private state dir as made,
// the dir and daemon.json opened up (the 0600 socket refuses the connect),
// and the socket opened up too (the node hangs up on the peer uid). Before,
// these said "open daemon.json: permission denied", "meshtray is not
// running" (exit 4, while it ran) and "connection reset by peer".
func TestCLIOfAnotherUserIsToldWhy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the CLI as another uid (CI runs as root)")
	}
	n := apptest.StartNode(t, apptest.Options{Keychain: app.KeychainFile})
	d, err := app.ReadDaemonInfo(n.StateDir)
	if err != nil || d.Socket == "" {
		t.Fatalf("daemon.json: %+v, %v", d, err)
	}
	// A copy of this test binary that uid 65534 may run.
	binDir := t.TempDir()
	bin := filepath.Join(binDir, "meshtray")
	copyFile(t, os.Args[0], bin)
	for _, p := range []string{filepath.Dir(binDir), binDir} {
		os.Chmod(p, 0o755)
	}
	asNobody := func() apptest.Result {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := apptest.Command(ctx, nil, "status", "--state-dir", n.StateDir)
		cmd.Path, cmd.Args[0] = bin, bin
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		cmd.Env = append(cmd.Env, "HOME=/nonexistent")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return apptest.Result{Stdout: out.String(), Stderr: errb.String(), Code: code}
	}
	check := func(state string) {
		t.Helper()
		r := asNobody()
		if r.Code != 1 || !strings.Contains(r.Stderr, "runs as another user (uid 0)") || !strings.Contains(r.Stderr, "run this command as that user") {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 saying the node runs as another user", state, r.Code, r.Stderr)
		}
	}
	check("private state dir")
	for _, p := range []string{filepath.Dir(n.StateDir), n.StateDir} {
		os.Chmod(p, 0o755)
	}
	os.Chmod(filepath.Join(n.StateDir, "daemon.json"), 0o644)
	check("daemon.json readable, socket 0600")
	os.Chmod(d.Socket, 0o666)
	check("socket open to all, refused by the peer check")
	// The owner is still served.
	if r := n.CLI("status"); r.Code != 0 {
		t.Fatalf("owner: exit %d: %s", r.Code, r.Stderr)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
