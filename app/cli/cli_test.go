package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestRunInProcess: the command runs in-process on the writers it is
// given, and its exit codes are the documented ones: 0 for version, 2 for
// a usage error (checked before any node is dialed), 4 with a hint when no
// node runs on the state dir.
func TestRunInProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"version"}, ExitOK, "meshtray ", ""},
		{[]string{"a2a", "sideways"}, ExitUsage, "", `a2a "sideways": want on, off or status`},
		{[]string{"grant", "create", "--name", "x", "--scope", "admin"}, ExitUsage, "", `scope "admin": want agent, node, full or approve`},
		{[]string{"grant", "create", "--name", "x", "--scopes", "admin"}, ExitUsage, "", `scope "admin": want agent, node, full or approve`},
		{[]string{"grant", "set", "G", "--approval", "maybe"}, ExitUsage, "", "--approval ask|allow|deny is required"},
		{[]string{"approve", "A", "--scopes", ","}, ExitUsage, "", "no scope given"},
		{[]string{"status"}, ExitNotRunning, "", "start it with `meshtray`"},
	}
	for _, tc := range tests {
		var out, errw bytes.Buffer
		args := append(tc.args, "--state-dir", dir)
		code := run(args, options{Stdout: &out, Stderr: &errw, Stdin: strings.NewReader("")})
		if code != tc.code || !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errw.String(), tc.stderr) {
			t.Errorf("meshtray %s: exit %d, stdout %q, stderr %q; want exit %d, %q, %q",
				strings.Join(tc.args, " "), code, out.String(), errw.String(), tc.code, tc.stdout, tc.stderr)
		}
	}
}

// TestScopesFlagOneSpelling: grant create and approve take the scopes as
// --scopes; grant create's first spelling --scope still works but is not
// shown in the help.
func TestScopesFlagOneSpelling(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"grant", "create", "--help"}, {"approve", "--help"}} {
		var out, errw bytes.Buffer
		if code := run(args, options{Stdout: &out, Stderr: &errw, Stdin: strings.NewReader("")}); code != ExitOK {
			t.Fatalf("meshtray %s: exit %d %s", strings.Join(args, " "), code, errw.String())
		}
		if h := out.String(); !strings.Contains(h, "--scopes") || strings.Contains(h, "--scope ") {
			t.Errorf("meshtray %s:\n%s", strings.Join(args, " "), h)
		}
	}
}

// TestAuditHelpWhere: audit --help lists every WHERE the trail records,
// device (a decision made on another meshtray) included, and says what
// verify cannot find.
func TestAuditHelpWhere(t *testing.T) {
	t.Parallel()
	var out, errw bytes.Buffer
	if code := run([]string{"audit", "--help"}, options{Stdout: &out, Stderr: &errw, Stdin: strings.NewReader("")}); code != ExitOK {
		t.Fatalf("audit --help: exit %d %s", code, errw.String())
	}
	h := strings.Join(strings.Fields(out.String()), " ")
	for _, want := range []string{"WHERE (tray, cli, phone, device: another meshtray holding the approve scope, policy, timeout,", "the chain has no key"} {
		if !strings.Contains(h, want) {
			t.Errorf("audit --help lacks %q:\n%s", want, out.String())
		}
	}
}
