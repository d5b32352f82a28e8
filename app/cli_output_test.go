package app_test

// What the CLI prints: usage errors, JSON as written, the status of a
// headless node.

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/app/cli"
)

// TestCLIPolish: the small things a person meets at the prompt.
func TestCLIPolish(t *testing.T) {
	n := ptStart(t, "lab<1>&co")
	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout or stderr
	}{
		{[]string{"lan"}, 0, "reachable on the local network: off"},
		{[]string{"a2a"}, 0, "A2A agent card not published"},
		{[]string{"pair", "--join", ""}, cli.ExitUsage, "--join needs the pairing URL"},
		{[]string{"pair", "--join", "https://127.0.0.1:1"}, cli.ExitUsage, "--code CODE"},
		{[]string{"pair", "--join", "http://127.0.0.1:1/pair#c=ABCDEFGH"}, cli.ExitUsage, "https"},
		{[]string{"pair", "--code", "ABCDEFGH"}, cli.ExitUsage, "--code goes with --join"},
	} {
		r := n.CLI(tc.args...)
		if r.Code != tc.code || !strings.Contains(r.Stdout+r.Stderr, tc.want) {
			t.Errorf("meshtray %q: exit %d, want %d with %q\n%s%s", tc.args, r.Code, tc.code, tc.want, r.Stdout, r.Stderr)
		}
	}
	// pair --help says --json does not wait.
	if r := n.CLI("pair", "--help"); !strings.Contains(r.Stdout, "without waiting") {
		t.Errorf("pair --help:\n%s", r.Stdout)
	}
	// JSON as written: no \u0026 in a pairing URL, no \u003c in a name.
	r := ptCLI(t, n, "pair", "--json")
	if strings.Contains(r.Stdout, `\u0026`) || !strings.Contains(r.Stdout, "&fp=") {
		t.Errorf("pair --json escapes HTML:\n%s", r.Stdout)
	}
	r = ptCLI(t, n, "status", "--json")
	if strings.Contains(r.Stdout, `\u003c`) || !strings.Contains(r.Stdout, "lab<1>&co") {
		t.Errorf("status --json escapes HTML:\n%s", r.Stdout)
	}
	req, _ := http.NewRequest(http.MethodGet, n.BaseURL+"/status", nil)
	req.Header.Set("Authorization", "Bearer "+controlToken(t, n))
	hr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(hr.Body)
	hr.Body.Close()
	if strings.Contains(string(body), `\u003c`) || !strings.Contains(string(body), "lab<1>&co") {
		t.Errorf("GET /status escapes HTML: %s", body)
	}
	// A headless node writes no log file: status names no log dir.
	var st app.Status
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil || st.LogDir != "" {
		t.Errorf("status of serve: log_dir %q (%v), want none", st.LogDir, err)
	}
	if r := ptCLI(t, n, "status"); strings.Contains(r.Stdout, "logs") {
		t.Errorf("status of serve shows a log dir:\n%s", r.Stdout)
	}
	// Status names the control socket, as daemon.json does.
	d, err := app.ReadDaemonInfo(n.StateDir)
	if err != nil || d.Socket == "" {
		t.Fatalf("daemon.json: %+v %v", d, err)
	}
	if st.ControlSocket != d.Socket {
		t.Errorf("status --json: control_socket %q, want %q", st.ControlSocket, d.Socket)
	}
	if r := ptCLI(t, n, "status"); !strings.Contains(r.Stdout, "control socket") || !strings.Contains(r.Stdout, d.Socket) {
		t.Errorf("status does not show the control socket %s:\n%s", d.Socket, r.Stdout)
	} else {
		t.Logf("meshtray status:\n%s", r.Stdout)
	}
}

func controlToken(t *testing.T, n *apptest.Node) string {
	t.Helper()
	d, err := app.ReadDaemonInfo(n.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	return d.Token
}
