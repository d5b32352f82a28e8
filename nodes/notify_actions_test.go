//go:build linux

package nodes

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// startDunst runs dunst, a real freedesktop notification daemon, on the
// private bus and X display, and waits until it owns the name.
func startDunst(t *testing.T, addr, display string) (*dbus.Conn, *lockedBuffer) {
	t.Helper()
	bin := needTool(t, "dunst", "dunst")
	cfg := t.TempDir()
	// dunst opens a notification's actions in a menu program (dmenu); here
	// that program picks the first entry, as a person choosing "Open
	// folder" would.
	if err := os.MkdirAll(filepath.Join(cfg, "dunst"), 0o700); err != nil {
		t.Fatal(err)
	}
	head := needTool(t, "head", "coreutils")
	if err := os.WriteFile(filepath.Join(cfg, "dunst", "dunstrc"), []byte("[global]\n    dmenu = "+head+" -n 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-print", "-config", filepath.Join(cfg, "dunst", "dunstrc"))
	cmd.Env = []string{"DISPLAY=" + display, "DBUS_SESSION_BUS_ADDRESS=" + addr, "XDG_CONFIG_HOME=" + cfg, "HOME=" + cfg, "PATH=" + os.Getenv("PATH")}
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("dunst:\n%s", logs.String())
		}
	})
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		var has bool
		if err := conn.BusObject().Call("org.freedesktop.DBus.NameHasOwner", 0, notifyService).Store(&has); err == nil && has {
			return conn, logs
		}
		if time.Now().After(deadline) {
			t.Fatalf("dunst did not take %s in 20 s:\n%s", notifyService, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dunstProp reads one of dunst's org.dunstproject.cmd0 properties.
func dunstProp(t *testing.T, conn *dbus.Conn, name string) uint32 {
	t.Helper()
	v, err := conn.Object(notifyService, notifyPath).GetProperty("org.dunstproject.cmd0." + name)
	if err != nil {
		t.Fatalf("dunst %s: %v", name, err)
	}
	n, _ := v.Value().(uint32)
	return n
}

// TestNotifyActionsWithDunst: a notification with an "Open folder" action
// on a real notification daemon (dunst, on a private bus and X display);
// invoking the action there (dunst's own NotificationAction, what
// `dunstctl action` sends, which opens the actions' menu; its menu program
// picks "Open folder") reaches onAction with its key, once.
func TestNotifyActionsWithDunst(t *testing.T) {
	addr := startSessionBus(t)
	conn, dunstOut := startDunst(t, addr, startXvfb(t))
	n := NewNotifier(NotifierOptions{BusAddress: addr})
	got := make(chan string, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := n.NotifyActions(ctx, "3 files from Ada’s phone", "Saved in /home/ada/Downloads/meshtray", []NotifyAction{{Key: "open", Label: "Open folder"}}, func(k string) { got <- k })
	if err != nil || !d.Delivered || d.ID == 0 {
		t.Fatalf("NotifyActions: %+v %v", d, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for dunstProp(t, conn, "displayedLength") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("dunst shows no notification")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := conn.Object(notifyService, notifyPath).Call("org.dunstproject.cmd0.NotificationAction", 0, uint32(0)).Err; err != nil {
		t.Fatalf("dunst NotificationAction: %v", err)
	}
	select {
	case k := <-got:
		if k != "open" {
			t.Fatalf("action %q, want open", k)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the action never reached onAction")
	}
	// The content, as dunst printed it (-print).
	out := dunstOut.String()
	for _, want := range []string{"summary: '3 files from Ada’s phone'", "body: 'Saved in /home/ada/Downloads/meshtray'", `"open": "Open folder"`} {
		if !strings.Contains(out, want) {
			t.Errorf("dunst did not show %s:\n%s", want, out)
		}
	}
	select {
	case k := <-got:
		t.Errorf("a second action %q", k)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestNotifyActionsWithoutActionsCapability: a server that cannot show
// actions gets the notification without them.
func TestNotifyActionsWithoutActionsCapability(t *testing.T) {
	t.Parallel()
	addr := startSessionBus(t)
	srv := &notifyServer{caps: []string{"body"}}
	serveNotifications(t, addr, srv)
	n := NewNotifier(NotifierOptions{BusAddress: addr})
	d, err := n.NotifyActions(context.Background(), "t", "b", []NotifyAction{{Key: "open", Label: "Open folder"}}, func(string) { t.Error("action called") })
	if err != nil || !d.Delivered {
		t.Fatalf("%+v %v", d, err)
	}
	if got := srv.received(); len(got) != 1 || got[0].Summary != "t" {
		t.Fatalf("received %+v", got)
	}
}
