//go:build linux || freebsd || openbsd || netbsd || dragonfly

package tray

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/godbus/dbus/v5"
)

const watcherName = "org.kde.StatusNotifierWatcher"

// desktopProblem says why no tray can run here ("" when one can): no
// display, or no D-Bus session bus. It never autolaunches a bus. When the
// bus is only found at $XDG_RUNTIME_DIR/bus it exports
// DBUS_SESSION_BUS_ADDRESS, for systray and the UI process.
func desktopProblem() string {
	if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
		return "no display (DISPLAY and WAYLAND_DISPLAY are unset)"
	}
	addr := os.Getenv("DBUS_SESSION_BUS_ADDRESS")
	if addr == "" || addr == "autolaunch:" {
		rt := os.Getenv("XDG_RUNTIME_DIR")
		p := filepath.Join(rt, "bus")
		if fi, err := os.Stat(p); rt == "" || err != nil || fi.Mode()&os.ModeSocket == 0 {
			return "no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is unset)"
		}
		addr = "unix:path=" + dbus.EscapeBusAddressValue(p)
		os.Setenv("DBUS_SESSION_BUS_ADDRESS", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := dbus.Connect(addr, dbus.WithContext(ctx))
	if err != nil {
		return fmt.Sprintf("cannot reach the D-Bus session bus: %v", err)
	}
	conn.Close()
	return ""
}

// trayHostProblem says when no tray host (StatusNotifierWatcher) is on the
// session bus yet; the icon then appears when one starts (systray
// registers again when the watcher's name gets an owner).
func trayHostProblem() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := dbus.Connect(os.Getenv("DBUS_SESSION_BUS_ADDRESS"), dbus.WithContext(ctx))
	if err != nil {
		return fmt.Sprintf("cannot reach the D-Bus session bus: %v", err)
	}
	defer conn.Close()
	var has bool
	if err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.NameHasOwner", 0, watcherName).Store(&has); err != nil {
		return fmt.Sprintf("cannot ask the session bus for a tray host: %v", err)
	}
	if !has {
		return "no tray host on the session bus (" + watcherName + "): the menu appears when one starts " +
			"(GNOME needs the AppIndicator extension); windows and notifications work meanwhile"
	}
	return ""
}

// openPath opens a folder in the desktop's file manager.
func openPath(p string) error {
	return startDetached(exec.Command("xdg-open", p))
}
