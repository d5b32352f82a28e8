//go:build linux

package nodes

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startXvfb starts a private X server on a display number it picks itself
// (-displayfd) and returns the DISPLAY value; it is stopped at cleanup.
func startXvfb(t testing.TB) string {
	t.Helper()
	bin := needTool(t, "Xvfb", "xvfb")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(bin, "-displayfd", "3", "-nolisten", "tcp", "-screen", "0", "320x240x24", "-noreset")
	// Die with the test binary, even when a timeout panic skips cleanups.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.ExtraFiles = []*os.File{w}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	_ = r.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("Xvfb did not report its display: %v\n%s", err, stderr.String())
	}
	return ":" + strings.TrimSpace(line)
}

func displayEnv(display string) func(string) string {
	return func(k string) string {
		if k == "DISPLAY" {
			return display
		}
		return ""
	}
}

// xclipRun runs xclip itself against display: the independent check that
// text really is on (or came from) the X clipboard.
func xclipRun(t testing.TB, display string, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(needTool(t, "xclip", "xclip"), args...)
	cmd.Env = append(os.Environ(), "DISPLAY="+display)
	cmd.Stdin = strings.NewReader(stdin)
	if args[0] == "-in" {
		// xclip forks a child that serves the selection and keeps stdout:
		// leave it none to hold.
		if err := cmd.Run(); err != nil {
			t.Fatalf("xclip %v: %v", args, err)
		}
		return ""
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("xclip %v: %v", args, err)
	}
	return string(out)
}

func clipRegistry(t testing.TB, display string) *Registry {
	t.Helper()
	return newTestRegistry(t, Options{Getenv: displayEnv(display)})
}

func clipRead(t testing.TB, r *Registry) (ClipboardText, Result) {
	t.Helper()
	res, err := r.Invoke(context.Background(), Call{Capability: CapClipboardRead, Approved: true})
	if err != nil {
		t.Fatal(err)
	}
	var ct ClipboardText
	if err := json.Unmarshal(res.Data, &ct); err != nil {
		t.Fatal(err)
	}
	return ct, res
}

func TestClipboardRoundTrip(t *testing.T) {
	t.Parallel()
	needTool(t, "xclip", "xclip")
	display := startXvfb(t)
	r := clipRegistry(t, display)
	for _, c := range r.Manifest().Capabilities {
		if (c.Name == CapClipboardRead || c.Name == CapClipboardWrite) && !c.Available {
			t.Fatalf("%s unavailable under Xvfb: %s", c.Name, c.Reason)
		}
	}

	// A fresh X server has no clipboard owner: an empty read, not an error.
	if ct, _ := clipRead(t, r); ct.Text != "" || ct.Truncated {
		t.Fatalf("fresh clipboard = %+v", ct)
	}

	text := "héllo ✓ meshtray\nsecond line\t<&>"
	res, err := r.Invoke(context.Background(), Call{Capability: CapClipboardWrite, Params: mustJSON(t, ClipboardWrite{Text: text}), Approved: true})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, CapClipboardWrite, res)
	if got := xclipRun(t, display, "", "-out", "-selection", "clipboard"); got != text {
		t.Fatalf("xclip sees %q after clipboard.write, want %q", got, text)
	}
	ct, res := clipRead(t, r)
	checkResult(t, r, CapClipboardRead, res)
	if ct.Text != text || ct.Bytes != len(text) || ct.Truncated {
		t.Fatalf("clipboard.read = %+v, want %q", ct, text)
	}

	// Text another program put there.
	// xclip returns before its forked child owns the selection: poll.
	xclipRun(t, display, "from xclip", "-in", "-selection", "clipboard")
	waitFor(t, "clipboard.read to see xclip's text", 5*time.Second, func() bool {
		ct, _ := clipRead(t, r)
		return ct.Text == "from xclip"
	})
}

func TestClipboardReadBounded(t *testing.T) {
	t.Parallel()
	needTool(t, "xclip", "xclip")
	display := startXvfb(t)
	r := clipRegistry(t, display)
	// 300 KiB on the clipboard, with a 2-byte character straddling the cut.
	big := strings.Repeat("a", MaxClipboardBytes-1) + "é" + strings.Repeat("b", 40<<10)
	xclipRun(t, display, big, "-in", "-selection", "clipboard")
	var ct ClipboardText
	waitFor(t, "clipboard.read to see xclip's text", 5*time.Second, func() bool {
		ct, _ = clipRead(t, r)
		return ct.Text != ""
	})
	if !ct.Truncated || ct.Bytes != MaxClipboardBytes-1 || ct.Text != big[:MaxClipboardBytes-1] {
		t.Fatalf("read of %d bytes: truncated %v, %d bytes", len(big), ct.Truncated, ct.Bytes)
	}
}

func TestClipboardXsel(t *testing.T) {
	t.Parallel()
	xsel := needTool(t, "xsel", "xsel")
	display := startXvfb(t)
	c := &clipboard{getenv: displayEnv(display), xsel: xsel} // no xclip: xsel is used
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.write(ctx, "via xsel ✓"); err != nil {
		t.Fatal(err)
	}
	got, truncated, err := c.read(ctx)
	if err != nil || got != "via xsel ✓" || truncated {
		t.Fatalf("read %q %v %v", got, truncated, err)
	}
}

func TestClipboardUnavailable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		c      *clipboard
		reason string
	}{
		{"no display", &clipboard{getenv: displayEnv(""), xclip: "/usr/bin/xclip"}, "no graphical session (DISPLAY and WAYLAND_DISPLAY are unset)"},
		{"no X tool", &clipboard{getenv: displayEnv(":0")}, "no clipboard tool: install xclip or xsel"},
		{"no Wayland tool", &clipboard{getenv: func(k string) string {
			if k == "WAYLAND_DISPLAY" {
				return "wayland-0"
			}
			return ""
		}, xclip: "/usr/bin/xclip"}, "no clipboard tool: install wl-clipboard"},
	}
	for _, tt := range tests {
		if ok, reason := tt.c.available(); ok || reason != tt.reason {
			t.Errorf("%s: available %v %q, want false %q", tt.name, ok, reason, tt.reason)
		}
		if _, _, err := tt.c.read(context.Background()); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: read = %v", tt.name, err)
		}
		if err := tt.c.write(context.Background(), "x"); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: write = %v", tt.name, err)
		}
	}
	// Through the registry, with the real tool lookup and no DISPLAY.
	r := clipRegistry(t, "")
	for _, name := range []string{CapClipboardRead, CapClipboardWrite} {
		_, err := r.Invoke(context.Background(), Call{Capability: name, Params: json.RawMessage(`{"text":"x"}`)[:map[string]int{CapClipboardRead: 0, CapClipboardWrite: 12}[name]], Approved: true})
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no graphical session") {
			t.Errorf("%s without DISPLAY: %v", name, err)
		}
	}
	// A display that does not exist: available (a GUI is configured) but the
	// call fails with the tool's message.
	if _, err := exec.LookPath("xclip"); err == nil {
		r := clipRegistry(t, ":999")
		_, err := r.Invoke(context.Background(), Call{Capability: CapClipboardWrite, Params: json.RawMessage(`{"text":"x"}`), Approved: true})
		if err == nil || !strings.Contains(err.Error(), "Can't open display") {
			t.Errorf("write to a missing display: %v", err)
		}
	}
}

func TestCutUTF8(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in        string
		max       int
		want      string
		truncated bool
	}{
		{"abc", 5, "abc", false},
		{"abc", 3, "abc", false},
		{"abcd", 3, "abc", true},
		{"aé", 2, "a", true},   // é is 2 bytes
		{"a✓", 3, "a", true},   // ✓ is 3 bytes: cut after 2 of them
		{"a✓", 2, "a", true},   // after 1 of them
		{"a✓b", 4, "a✓", true}, // whole rune kept
		{"a😀", 4, "a", true},   // 4-byte rune cut after 3
		{"😀😀", 4, "😀", true},   // cut exactly after one
	}
	for _, tt := range tests {
		got, tr := cutUTF8([]byte(tt.in), tt.max)
		if string(got) != tt.want || tr != tt.truncated {
			t.Errorf("cutUTF8(%q, %d) = %q %v, want %q %v", tt.in, tt.max, got, tr, tt.want, tt.truncated)
		}
	}
}

func mustJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
