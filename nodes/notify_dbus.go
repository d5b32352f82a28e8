//go:build linux || freebsd || openbsd || netbsd || dragonfly

package nodes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
)

// The freedesktop Desktop Notifications Specification 1.2
// (specifications.freedesktop.org/notification-spec).
const (
	notifyService   = "org.freedesktop.Notifications"
	notifyPath      = dbus.ObjectPath("/org/freedesktop/Notifications")
	notifyInterface = "org.freedesktop.Notifications"
)

// sessionBusAddress is the address of the session bus, or "" when there is
// none. It never autolaunches a bus.
func (n *Notifier) sessionBusAddress() string {
	if n.busAddress != "" {
		return n.busAddress
	}
	if a := n.getenv("DBUS_SESSION_BUS_ADDRESS"); a != "" && a != "autolaunch:" {
		return a
	}
	if rt := n.getenv("XDG_RUNTIME_DIR"); rt != "" {
		p := filepath.Join(rt, "bus")
		if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return "unix:path=" + dbus.EscapeBusAddressValue(p)
		}
	}
	return ""
}

func (n *Notifier) notify(ctx context.Context, title, body string) (Delivery, error) {
	addr := n.sessionBusAddress()
	if addr == "" {
		return Delivery{Reason: "no desktop session: no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is unset)"}, nil
	}
	conn, err := dbus.Connect(addr, dbus.WithContext(ctx))
	if err != nil {
		return Delivery{}, fmt.Errorf("cannot reach the D-Bus session bus: %w", err)
	}
	defer conn.Close()
	obj := conn.Object(notifyService, notifyPath)

	var caps []string
	if err := obj.CallWithContext(ctx, notifyInterface+".GetCapabilities", 0).Store(&caps); err != nil {
		return Delivery{}, describeNotifyError(err)
	}
	if slices.Contains(caps, "body-markup") {
		// The spec's markup is a small XML subset (b, i, u, a href, img);
		// the body is plain text from a caller, so it must not be
		// interpreted.
		body = escapeMarkup(body)
	}
	var id uint32
	err = obj.CallWithContext(ctx, notifyInterface+".Notify", 0,
		n.appName, uint32(0), n.icon, title, body, []string{}, map[string]dbus.Variant{}, int32(-1)).Store(&id)
	if err != nil {
		return Delivery{}, describeNotifyError(err)
	}
	return Delivery{Delivered: true, ID: id}, nil
}

// notifyActions is notify with actions on a connection that stays open
// (ctx bounds it, tctx the call) to hear ActionInvoked and
// NotificationClosed for the notification's id. The match rule is added
// before Notify, so a click that comes at once is not missed.
func (n *Notifier) notifyActions(ctx, tctx context.Context, title, body string, actions []NotifyAction, onAction func(string)) (Delivery, error) {
	addr := n.sessionBusAddress()
	if addr == "" {
		return Delivery{Reason: "no desktop session: no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is unset)"}, nil
	}
	// The connection lives as long as ctx (godbus closes it when its
	// context ends): the calls below are bounded by tctx.
	conn, err := dbus.Connect(addr, dbus.WithContext(ctx))
	if err != nil {
		return Delivery{}, fmt.Errorf("cannot reach the D-Bus session bus: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			conn.Close()
		}
	}()
	obj := conn.Object(notifyService, notifyPath)
	var caps []string
	if err := obj.CallWithContext(tctx, notifyInterface+".GetCapabilities", 0).Store(&caps); err != nil {
		return Delivery{}, describeNotifyError(err)
	}
	if slices.Contains(caps, "body-markup") {
		body = escapeMarkup(body)
	}
	var flat []string
	if slices.Contains(caps, "actions") {
		for _, a := range actions {
			flat = append(flat, a.Key, a.Label)
		}
	}
	signals := make(chan *dbus.Signal, 16)
	if len(flat) > 0 {
		if err := conn.AddMatchSignalContext(tctx, dbus.WithMatchObjectPath(notifyPath), dbus.WithMatchInterface(notifyInterface)); err != nil {
			return Delivery{}, fmt.Errorf("notification service: %w", err)
		}
		conn.Signal(signals)
	}
	var id uint32
	err = obj.CallWithContext(tctx, notifyInterface+".Notify", 0,
		n.appName, uint32(0), n.icon, title, body, flat, map[string]dbus.Variant{}, int32(-1)).Store(&id)
	if err != nil {
		return Delivery{}, describeNotifyError(err)
	}
	if len(flat) == 0 || onAction == nil {
		return Delivery{Delivered: true, ID: id}, nil
	}
	keep = true
	go func() {
		defer conn.Close()
		wait := time.NewTimer(DefaultActionWait)
		defer wait.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-wait.C:
				return
			case sig, ok := <-signals:
				if !ok {
					return
				}
				switch {
				case sig.Name == notifyInterface+".ActionInvoked" && len(sig.Body) == 2:
					if got, _ := sig.Body[0].(uint32); got == id {
						if key, ok := sig.Body[1].(string); ok {
							onAction(key)
						}
						return
					}
				case sig.Name == notifyInterface+".NotificationClosed" && len(sig.Body) >= 1:
					if got, _ := sig.Body[0].(uint32); got == id {
						return
					}
				}
			}
		}
	}()
	return Delivery{Delivered: true, ID: id}, nil
}

func describeNotifyError(err error) error {
	var de dbus.Error
	if errors.As(err, &de) && (de.Name == "org.freedesktop.DBus.Error.ServiceUnknown" || de.Name == "org.freedesktop.DBus.Error.NameHasNoOwner") {
		return errors.New("no notification service on the session bus (" + notifyService + ")")
	}
	return fmt.Errorf("notification service: %w", err)
}

var markupEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

func escapeMarkup(s string) string { return markupEscaper.Replace(s) }
