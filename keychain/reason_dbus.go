//go:build (dragonfly && cgo) || (freebsd && cgo) || linux || netbsd || openbsd

package keychain

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/godbus/dbus/v5"
)

// sessionBusCheck fails when this process has no session bus to talk to.
// Without one, godbus (dbus.SessionBus, used by go-keyring) runs
// `dbus-launch --autolaunch`, which forks a session dbus-daemon and, through
// activation, a gnome-keyring-daemon that both outlive meshtray (seen here:
// a headless `meshtray serve` over SSH would leave them running). So we look
// where godbus looks (DBUS_SESSION_BUS_ADDRESS, then /run/user/<uid>/bus and
// /run/user/<uid>/dbus-session, conn_other.go) and refuse before it
// autolaunches.
func sessionBusCheck() error {
	if a := os.Getenv("DBUS_SESSION_BUS_ADDRESS"); a != "" && a != "autolaunch:" {
		return nil
	}
	run := filepath.Join("/run/user", strconv.Itoa(os.Getuid()))
	for _, name := range []string{"bus", "dbus-session"} {
		if _, err := os.Stat(filepath.Join(run, name)); err == nil {
			return nil
		}
	}
	return &unavailableError{op: "probe", reason: "no D-Bus session bus: DBUS_SESSION_BUS_ADDRESS is unset and there is no " +
		run + "/bus (meshtray does not autolaunch one: it would outlive meshtray); use --keychain file, or run in a desktop session"}
}

// These platforms use go-keyring's Secret Service provider (the same build
// constraint as its keyring_unix.go), which talks D-Bus through godbus.

// isUnavailable reports whether err means the Secret Service cannot be used
// at all (as opposed to one item failing).
func isUnavailable(err error) bool {
	return unavailableClass(err) != ""
}

// unavailableReason names, for a person, why the Secret Service failed.
func unavailableReason(err error) string {
	if r := unavailableClass(err); r != "" {
		return r
	}
	return "the Secret Service refused the probe"
}

func unavailableClass(err error) string {
	var de dbus.Error
	if errors.As(err, &de) {
		switch de.Name {
		case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner":
			return "no Secret Service on the session bus (start gnome-keyring or KeePassXC's Secret Service, or use --keychain file)"
		case "org.freedesktop.DBus.Error.UnknownObject", "org.freedesktop.DBus.Error.UnknownMethod":
			return "the Secret Service has no login or default collection"
		case "org.freedesktop.Secret.Error.IsLocked":
			return "the keyring collection is locked"
		}
	}
	// go-keyring's Unlock returns this plain error when the unlock prompt
	// was dismissed or could not be shown (secret_service.go Unlock).
	if strings.Contains(err.Error(), "failed to unlock correct collection") {
		return "the login collection is locked and could not be unlocked (or there is no login or default collection)"
	}
	var oe *net.OpError
	if errors.As(err, &oe) || errors.Is(err, os.ErrNotExist) ||
		strings.Contains(err.Error(), "couldn't determine address of session bus") {
		return "no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS unset or nothing listening there)"
	}
	if errors.Is(err, dbus.ErrClosed) {
		return "the D-Bus session bus connection is closed"
	}
	return ""
}
