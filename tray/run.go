package tray

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"fyne.io/systray"
	"github.com/atotto/clipboard"

	"meshtray/app"
	"meshtray/assets"
	"meshtray/nodes"
	"meshtray/tray/autostart"
)

// AppID is meshtray's application ID (FyneApp.toml, the autostart entry).
const AppID = "io.meshtray.app"

// maxQueuedNotices bounds the notifications waiting to be shown.
const maxQueuedNotices = 8

// Run is `meshtray` without a subcommand: it starts the node n, shows the
// tray menu (fyne.io/systray) and blocks on the calling goroutine (the main
// one: systray needs it on macOS) until ctx ends or the person picks Quit;
// then the node stops cleanly. With no display or no session bus it logs
// why once and runs as the node alone.
//
// A second start on the same state dir fails with "the meshtray tray is
// already running (pid N)".
func Run(ctx context.Context, n *app.Node) error {
	log := n.Logger().With("pkg", "tray")
	if err := n.Start(ctx); err != nil {
		var ar *app.ErrAlreadyRunning
		if errors.As(err, &ar) {
			pid := ""
			if ar.PID > 0 {
				pid = " (pid " + strconv.Itoa(ar.PID) + ")"
			}
			return fmt.Errorf("the meshtray tray is already running%s on state dir %s: its icon is in the system tray, and `meshtray status` talks to it", pid, ar.StateDir)
		}
		return err
	}
	if p := desktopProblem(); p != "" {
		log.Warn("no tray: " + p + "; running as the node only (the meshtray CLI controls it)")
		<-ctx.Done()
		return n.Close()
	}
	if p := trayHostProblem(); p != "" {
		log.Warn(p)
	}
	cfg := n.Config()
	c := n.LocalClient()
	if c == nil {
		n.Close()
		return errors.New("tray: the node published no control address")
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	notices := make(chan [2]string, maxQueuedNotices)
	notifier := nodes.NewNotifier(nodes.NotifierOptions{AppName: "meshtray", Icon: iconFile(cfg.StateDir), Logger: log})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-notices:
				if d, err := notifier.Notify(ctx, m[0], m[1]); err == nil && !d.Delivered {
					log.Debug("notification not shown", "reason", d.Reason)
				}
			}
		}
	}()

	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	launcher := &uiLauncher{
		api:  c,
		argv: []string{exe, "ui", "--state-dir", cfg.StateDir, "--port", strconv.Itoa(cfg.Port)},
		log:  log,
	}
	clicks := make(chan action)
	menu := newSystrayMenu(clicks, trayIcons())
	ctl := &controller{
		api:       c,
		menu:      menu,
		ui:        launcher,
		autostart: autostartEntry(exe, cfg),
		notify: func(_ context.Context, title, body string) {
			select {
			case notices <- [2]string{title, body}:
			default: // a storm: the popup shows them all anyway
			}
		},
		copyText: clipboard.WriteAll,
		openPath: openPath,
		quit:     systray.Quit,
		log:      log,
		clicks:   clicks,
	}

	// The title is the StatusNotifierItem Id and must be set before Run
	// (peers.md §1).
	systray.SetTitle("meshtray")
	go func() {
		<-ctx.Done()
		systray.Quit()
	}()
	systray.Run(func() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctl.run(ctx)
		}()
		log.Info("tray started")
	}, cancel)
	cancel()
	wg.Wait()
	menu.close()
	launcher.close()
	log.Info("tray stopped")
	return n.Close()
}

// autostartEntry is "Start at login": this program with the flags that
// make it find the same node again.
func autostartEntry(exe string, cfg app.Config) autostart.Entry {
	argv := []string{exe}
	if abs, err := filepath.Abs(cfg.StateDir); err == nil {
		if def, derr := filepath.Abs(app.DefaultStateDir()); derr != nil || def != abs {
			argv = append(argv, "--state-dir", abs)
		}
	}
	if cfg.Keychain == app.KeychainFile {
		argv = append(argv, "--keychain", app.KeychainFile)
	}
	return autostart.Entry{ID: AppID, Name: "meshtray", Comment: "Your devices as one private mesh", Exec: argv}
}

// iconFile writes the app icon next to the state for notifications (the
// freedesktop app_icon takes a file path) and returns its path, or "".
func iconFile(stateDir string) string {
	p := filepath.Join(stateDir, "icon.png")
	if err := os.WriteFile(p, scalePNG(assets.IconNormal, 128), 0o600); err != nil {
		return ""
	}
	return p
}
