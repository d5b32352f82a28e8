package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// DefaultNotifyTimeout bounds one notification: connecting to the
// notification service and its answer.
const DefaultNotifyTimeout = 5 * time.Second

// NotifierOptions configure a Notifier. The zero value is ready to use.
type NotifierOptions struct {
	// BusAddress is the D-Bus session bus address (Linux and the BSDs,
	// D-Bus Specification "Server Addresses"). "" means
	// DBUS_SESSION_BUS_ADDRESS, then $XDG_RUNTIME_DIR/bus when that socket
	// exists. The bus is never autolaunched: no session bus means headless.
	BusAddress string
	// AppName is the application name shown with the notification;
	// "" means "meshtray".
	AppName string
	// Icon is the freedesktop app_icon (an icon name or file:// URI); may be "".
	Icon string
	// Timeout bounds one notification; 0 means DefaultNotifyTimeout.
	Timeout time.Duration
	// Getenv reads DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR; nil means os.Getenv.
	Getenv func(string) string
	// Logger; nil discards.
	Logger *slog.Logger
}

// Notifier shows desktop notifications: through the freedesktop
// org.freedesktop.Notifications service on the D-Bus session bus on Linux
// and the BSDs (Desktop Notifications Specification 1.2), through
// github.com/gen2brain/beeep on macOS and Windows. It holds no connection
// between notifications, so it needs no Close; it is safe for concurrent
// use. The tray uses it too.
type Notifier struct {
	busAddress string
	appName    string
	icon       string
	timeout    time.Duration
	getenv     func(string) string
	log        *slog.Logger
}

// NewNotifier returns a Notifier.
func NewNotifier(o NotifierOptions) *Notifier {
	n := &Notifier{busAddress: o.BusAddress, appName: o.AppName, icon: o.Icon, timeout: o.Timeout, getenv: o.Getenv, log: o.Logger}
	if n.appName == "" {
		n.appName = "meshtray"
	}
	if n.timeout <= 0 {
		n.timeout = DefaultNotifyTimeout
	}
	if n.getenv == nil {
		n.getenv = os.Getenv
	}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	return n
}

// Delivery is the outcome of one notification; it is system.notify's result.
type Delivery struct {
	Delivered bool   `json:"delivered"`
	ID        uint32 `json:"id,omitempty"`     // the server's notification id (freedesktop), when it gave one
	Reason    string `json:"reason,omitempty"` // why it was not delivered
}

// Notify shows one notification with a title (the freedesktop "summary",
// plain text) and a body (plain text; escaped when the server interprets
// markup). A device with no desktop (no session bus, no notification
// service, no answer within the timeout) is not an error: the Delivery says
// Delivered false and why. The error is only ctx's, when ctx ends first.
func (n *Notifier) Notify(ctx context.Context, title, body string) (Delivery, error) {
	tctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	d, err := n.notify(tctx, title, body)
	if ctx.Err() != nil {
		return Delivery{}, ctx.Err()
	}
	if err != nil {
		if tctx.Err() != nil {
			return Delivery{Reason: fmt.Sprintf("the notification service did not answer within %s", n.timeout)}, nil
		}
		return Delivery{Reason: err.Error()}, nil
	}
	return d, nil
}

// NotifyAction is a button of a notification (Desktop Notifications
// Specification 1.2, "actions"): Key is what the server reports when it
// is invoked (ActionInvoked), Label what the person sees.
type NotifyAction struct {
	Key, Label string
}

// DefaultActionWait bounds how long NotifyActions listens for a click on
// one notification's actions.
const DefaultActionWait = 30 * time.Minute

// NotifyActions shows a notification like Notify, with actions, and calls
// onAction(key) (on a goroutine of its own) when the person invokes one.
// It returns once the notification was shown; it then listens on a
// connection of its own until the notification is closed, an action was
// invoked, ctx ends, or DefaultActionWait passed. A server without the
// "actions" capability shows the notification without them (onAction is
// never called); so do macOS and Windows.
func (n *Notifier) NotifyActions(ctx context.Context, title, body string, actions []NotifyAction, onAction func(key string)) (Delivery, error) {
	tctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	d, err := n.notifyActions(ctx, tctx, title, body, actions, onAction)
	if ctx.Err() != nil {
		return Delivery{}, ctx.Err()
	}
	if err != nil {
		if tctx.Err() != nil {
			return Delivery{Reason: fmt.Sprintf("the notification service did not answer within %s", n.timeout)}, nil
		}
		return Delivery{Reason: err.Error()}, nil
	}
	return d, nil
}

const (
	maxNotifyTitle = 256  // characters
	maxNotifyBody  = 4096 // characters
)

// NotifyParams are system.notify's parameters.
type NotifyParams struct {
	Title string `json:"title"`
	Body  string `json:"body"`
}

func notifyCapability(n *Notifier) *capability {
	return &capability{
		Capability: Capability{
			Name:        CapSystemNotify,
			Description: "Show a desktop notification on this device. On a device without a desktop the result says delivered false and why.",
			Params: json.RawMessage(fmt.Sprintf(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
"required":["title"],"additionalProperties":false,
"properties":{"title":{"type":"string","minLength":1,"maxLength":%d,"description":"notification title (plain text)"},
"body":{"type":"string","maxLength":%d,"description":"notification text (plain text)"}}}`, maxNotifyTitle, maxNotifyBody)),
			Result: json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","required":["delivered"],
"properties":{"delivered":{"type":"boolean"},"id":{"type":"integer","minimum":0},"reason":{"type":"string"}}}`),
			Effects: EffectWrite,
		},
		available: func() (bool, string) { return true, "" },
		run: func(ctx context.Context, call Call, raw json.RawMessage) (Result, error) {
			var p NotifyParams
			if err := json.Unmarshal(raw, &p); err != nil {
				return Result{}, err
			}
			body := p.Body
			if call.Caller != nil && !call.Caller.Local {
				// Say who sent it, so a paired device cannot pass its text off
				// as this device's own.
				if body != "" {
					body += "\n"
				}
				body += "(sent by " + call.Caller.DisplayName() + " via meshtray)"
			}
			d, err := n.Notify(ctx, p.Title, body)
			if err != nil {
				return Result{}, err
			}
			summary := fmt.Sprintf("notification %q shown", p.Title)
			if !d.Delivered {
				summary = "notification not delivered: " + d.Reason
			}
			return marshalResult(d, summary)
		},
	}
}
