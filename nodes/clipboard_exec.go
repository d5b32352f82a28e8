//go:build !windows

package nodes

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// clipboard reads and writes the clipboard through the same command-line
// tools github.com/atotto/clipboard uses on these systems (wl-clipboard on
// Wayland, xclip or xsel on X11, pbcopy/pbpaste on macOS), but under a
// context, with the read bounded, and with the graphical session's
// variables passed explicitly to the tool (atotto reads them once from the
// process environment and cannot be cancelled or bounded).
type clipboard struct {
	getenv func(string) string
	// tools found with exec.LookPath when the registry was built
	xclip, xsel, wlcopy, wlpaste, pbcopy, pbpaste string
}

// sessionVars are the variables a clipboard tool needs to find the
// graphical session.
var sessionVars = []string{"DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "XDG_RUNTIME_DIR"}

func newClipboard(getenv func(string) string) *clipboard {
	look := func(name string) string {
		p, err := exec.LookPath(name)
		if err != nil {
			return ""
		}
		return p
	}
	c := &clipboard{getenv: getenv}
	if runtime.GOOS == "darwin" {
		c.pbcopy, c.pbpaste = look("pbcopy"), look("pbpaste")
		return c
	}
	c.xclip, c.xsel = look("xclip"), look("xsel")
	c.wlcopy, c.wlpaste = look("wl-copy"), look("wl-paste")
	return c
}

// clipTool is one tool's read and write command lines.
type clipTool struct {
	read, write []string
	forks       bool // the write tool leaves a child that owns the selection
}

// tool picks the tool for the current session, in atotto's order, or says
// why there is none.
func (c *clipboard) tool() (clipTool, string) {
	if runtime.GOOS == "darwin" {
		if c.pbcopy == "" || c.pbpaste == "" {
			return clipTool{}, "pbcopy/pbpaste not found"
		}
		return clipTool{read: []string{c.pbpaste}, write: []string{c.pbcopy}}, ""
	}
	wayland, x11 := c.getenv("WAYLAND_DISPLAY") != "", c.getenv("DISPLAY") != ""
	switch {
	case !wayland && !x11:
		return clipTool{}, "no graphical session (DISPLAY and WAYLAND_DISPLAY are unset)"
	case wayland && c.wlcopy != "" && c.wlpaste != "":
		return clipTool{read: []string{c.wlpaste, "--no-newline"}, write: []string{c.wlcopy}, forks: true}, ""
	case x11 && c.xclip != "":
		return clipTool{read: []string{c.xclip, "-out", "-selection", "clipboard"}, write: []string{c.xclip, "-in", "-selection", "clipboard"}, forks: true}, ""
	case x11 && c.xsel != "":
		return clipTool{read: []string{c.xsel, "--output", "--clipboard"}, write: []string{c.xsel, "--input", "--clipboard"}, forks: true}, ""
	case wayland:
		return clipTool{}, "no clipboard tool: install wl-clipboard"
	}
	return clipTool{}, "no clipboard tool: install xclip or xsel"
}

func (c *clipboard) available() (bool, string) {
	_, reason := c.tool()
	return reason == "", reason
}

// env is the process environment with the session variables taken from
// c.getenv.
func (c *clipboard) env() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(sessionVars, k)
	})
	for _, k := range sessionVars {
		if v := c.getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// emptyClipboard matches what the tools print when the clipboard holds no
// text; that is an empty read, not an error.
var emptyClipboard = []string{"target STRING not available", "target UTF8_STRING not available", "Nothing is copied", "No selection"}

func (c *clipboard) read(ctx context.Context) (string, bool, error) {
	t, reason := c.tool()
	if reason != "" {
		return "", false, fmt.Errorf("%w: %s", ErrUnavailable, reason)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.read[0], t.read[1:]...)
	cmd.Env = c.env()
	stderr := &boundedBuffer{max: 4 << 10}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", false, err
	}
	if err := cmd.Start(); err != nil {
		return "", false, err
	}
	data, readErr := io.ReadAll(io.LimitReader(out, MaxClipboardBytes+1))
	data, truncated := cutUTF8(data, MaxClipboardBytes)
	if truncated {
		cancel() // stop the tool rather than read the rest
	}
	err = cmd.Wait()
	if ctx.Err() != nil && !truncated {
		return "", false, ctx.Err()
	}
	if err != nil && !truncated {
		msg := strings.TrimSpace(string(stderr.buf))
		for _, e := range emptyClipboard {
			if strings.Contains(msg, e) {
				return "", false, nil
			}
		}
		return "", false, fmt.Errorf("%s: %w: %s", t.read[0], err, msg)
	}
	if readErr != nil && !truncated {
		return "", false, readErr
	}
	return string(data), truncated, nil
}

func (c *clipboard) write(ctx context.Context, text string) error {
	t, reason := c.tool()
	if reason != "" {
		return fmt.Errorf("%w: %s", ErrUnavailable, reason)
	}
	cmd := exec.CommandContext(ctx, t.write[0], t.write[1:]...)
	cmd.Env = c.env()
	cmd.Stdin = strings.NewReader(text)
	// xclip, xsel and wl-copy fork a child that stays to serve the
	// selection and keeps the stdout and stderr it inherited: a pipe there
	// would never reach EOF. Stdout goes to the null device; stderr to a
	// pipe we read only when the tool failed (then it did not fork).
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd.Stderr = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		return err
	}
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		_ = r.SetReadDeadline(time.Now().Add(time.Second))
		msg, _ := io.ReadAll(io.LimitReader(r, 4<<10))
		return fmt.Errorf("%s: %w: %s", t.write[0], err, strings.TrimSpace(string(msg)))
	}
	if t.forks {
		c.awaitOwner(ctx, t, text)
	}
	return nil
}

// awaitOwner waits, up to a second, until the clipboard reads back text.
// xclip, xsel and wl-copy return once they have forked the child that owns
// the selection, and that child may not have taken ownership yet (xsel
// forks first and owns after), so a read right after the write could see
// the old text. A clipboard manager may take the text over and change it;
// the write still succeeded, so the wait just ends.
func (c *clipboard) awaitOwner(ctx context.Context, t clipTool, text string) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	want, _ := cutUTF8([]byte(text), MaxClipboardBytes)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		got, _, err := c.read(ctx)
		if err == nil && got == string(want) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
