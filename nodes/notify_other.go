//go:build !linux && !freebsd && !openbsd && !netbsd && !dragonfly && !darwin && !windows

package nodes

import "context"

func (n *Notifier) notify(ctx context.Context, title, body string) (Delivery, error) {
	return Delivery{Reason: "desktop notifications are not supported on this OS"}, nil
}

func (n *Notifier) notifyActions(_, tctx context.Context, title, body string, _ []NotifyAction, _ func(string)) (Delivery, error) {
	return n.notify(tctx, title, body)
}
