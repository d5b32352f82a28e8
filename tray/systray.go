package tray

import (
	"context"
	"sync"

	"fyne.io/systray"
)

// systrayMenu renders menu models with fyne.io/systray. Every render
// resets the menu and rebuilds it whole (STYLE.md "Render a whole
// snapshot"); the click goroutines of the previous build end first, so no
// one touches an item after its reset (fyne-io/systray#102).
type systrayMenu struct {
	clicks chan<- action

	mu     sync.Mutex
	cancel context.CancelFunc // ends the click goroutines of the current build
	wg     sync.WaitGroup
	icon   iconState
	iconOK bool
	tip    string
	icons  map[iconState][]byte
}

func newSystrayMenu(clicks chan<- action, icons map[iconState][]byte) *systrayMenu {
	return &systrayMenu{clicks: clicks, icons: icons}
}

// render replaces the menu with m's items.
func (s *systrayMenu) render(ctx context.Context, m menuModel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.iconOK || s.icon != m.Icon {
		systray.SetIcon(s.icons[m.Icon])
		s.icon, s.iconOK = m.Icon, true
	}
	if s.tip != m.Tooltip {
		systray.SetTooltip(m.Tooltip)
		s.tip = m.Tooltip
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	systray.ResetMenu()
	bctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	for _, it := range m.items() {
		s.add(bctx, nil, it)
	}
}

func (s *systrayMenu) add(ctx context.Context, parent *systray.MenuItem, it menuItem) {
	if it.Separator {
		if parent != nil {
			parent.AddSeparator()
		} else {
			systray.AddSeparator()
		}
		return
	}
	var mi *systray.MenuItem
	switch {
	case parent == nil && it.Check:
		mi = systray.AddMenuItemCheckbox(it.Label, it.Tooltip, it.Checked)
	case parent == nil:
		mi = systray.AddMenuItem(it.Label, it.Tooltip)
	case it.Check:
		mi = parent.AddSubMenuItemCheckbox(it.Label, it.Tooltip, it.Checked)
	default:
		mi = parent.AddSubMenuItem(it.Label, it.Tooltip)
	}
	if it.Disabled {
		mi.Disable()
	}
	for _, sub := range it.Sub {
		s.add(ctx, mi, sub)
	}
	if it.Act.kind == 0 || it.Disabled {
		return
	}
	s.wg.Add(1)
	go func(ch <-chan struct{}, a action) {
		defer s.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-ch:
				if !ok {
					return // the item was removed by a reset
				}
				select {
				case s.clicks <- a:
				case <-ctx.Done():
					return
				}
			}
		}
	}(mi.ClickedCh, it.Act)
}

// close ends the click goroutines.
func (s *systrayMenu) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
}
