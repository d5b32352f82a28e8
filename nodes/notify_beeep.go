//go:build darwin || windows

package nodes

import (
	"context"
	"fmt"

	"github.com/gen2brain/beeep"
)

func init() {
	// beeep reads its application name from this package variable (the
	// Windows toast AppID); set it once, before any notification.
	beeep.AppName = "meshtray"
}

func (n *Notifier) notify(ctx context.Context, title, body string) (Delivery, error) {
	done := make(chan error, 1)
	// beeep takes no context; on timeout the goroutine finishes on its own
	// and its result is dropped (the channel is buffered).
	go func() { done <- beeep.Notify(title, body, n.icon) }()
	select {
	case err := <-done:
		if err != nil {
			return Delivery{}, fmt.Errorf("notification: %w", err)
		}
		return Delivery{Delivered: true}, nil
	case <-ctx.Done():
		return Delivery{}, ctx.Err()
	}
}

// notifyActions: beeep has no actions; the notification is shown without
// them.
func (n *Notifier) notifyActions(_, tctx context.Context, title, body string, _ []NotifyAction, _ func(string)) (Delivery, error) {
	return n.notify(tctx, title, body)
}
