package tray

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"fyne.io/systray"
	"github.com/atotto/clipboard"

	"meshtray/app"
	"meshtray/assets"
	"meshtray/nodes"
	"meshtray/tray/autostart"
)

// maxQueuedNotices bounds the notifications waiting to be shown.
const maxQueuedNotices = 8

// actionOpenFolder is the key of a received transfer's notification action
// "Open folder" (Desktop Notifications Specification, actions).
const actionOpenFolder = "open"

// Run is `meshtray` without a subcommand: it starts the node n, shows the
// tray menu (fyne.io/systray) and blocks on the calling goroutine (the main
// one: systray needs it on macOS) until ctx ends or the person picks Quit;
// then the node stops cleanly. With no display or no session bus it logs
// why once and runs as the node alone.
//
// One tray per user: a second start, on any state dir, fails with "the
// meshtray tray is already running (pid N) on state dir D" (the lock is in
// the user's runtime dir, see lock.go). A start on a state dir whose node
// already runs headless (`meshtray serve`) says so, with its pid.
func Run(ctx context.Context, n *app.Node) error {
	log := n.Logger().With("pkg", "tray")
	cfg := n.Config()
	ulock, err := acquireTrayLock(cfg.StateDir)
	if err != nil {
		return err
	}
	defer ulock.release()
	if err := n.Start(ctx); err != nil {
		var ar *app.ErrAlreadyRunning
		if errors.As(err, &ar) {
			// This user's tray lock is ours, so the node holding the state
			// dir is not a tray of this session: a headless one.
			pid := ""
			if ar.PID > 0 {
				pid = ", pid " + strconv.Itoa(ar.PID)
			}
			return fmt.Errorf("the node of state dir %s is already running (headless%s): `meshtray status --state-dir %s` talks to it; stop it first to run it with a tray icon", ar.StateDir, pid, ar.StateDir)
		}
		return err
	}
	if p := desktopProblem(); p != "" {
		log.Warn("no tray: " + p + "; running as the node only (the meshtray CLI controls it)")
		<-ctx.Done()
		return n.Close()
	}
	hostProblem := trayHostProblem()
	if hostProblem != "" {
		log.Warn(hostProblem)
	}
	// fyne.io/systray reports through the standard logger; its lines go
	// into the tray's structured log instead of raw onto stderr.
	defer routeStdLog(log.With("from", "systray"), hostProblem != "")()
	c := n.LocalClient()
	if c == nil {
		n.Close()
		return errors.New("tray: the node published no control address")
	}
	c.Where = app.WhereTray

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	notices := make(chan [2]string, maxQueuedNotices)
	fileNotices := make(chan [3]string, maxQueuedNotices) // title, body, folder
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
			case m := <-fileNotices:
				dir := m[2]
				d, err := notifier.NotifyActions(ctx, m[0], m[1], []nodes.NotifyAction{{Key: actionOpenFolder, Label: "Open folder"}}, func(key string) {
					if key != actionOpenFolder {
						return
					}
					if err := openPath(dir); err != nil {
						log.Warn("cannot open the receive folder", "dir", dir, "err", err)
					}
				})
				if err == nil && !d.Delivered {
					log.Debug("notification not shown", "reason", d.Reason)
				}
			}
		}
	}()

	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	launcher := &uiLauncher{api: c, argv: uiArgv(exe, cfg), log: log}
	if p := launcher.missing(); p != "" {
		log.Warn("no windows: "+p+" is missing; "+UIMissingHint, "path", p)
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
		notifyFiles: func(_ context.Context, title, body, dir string) {
			select {
			case fileNotices <- [3]string{title, body, dir}:
			default:
			}
		},
		copyText: clipboard.WriteAll,
		openPath: openPath,
		quit:     systray.Quit,
		log:      log,
		clicks:   clicks,
		settled:  returnStartupMemory,
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

// returnStartupMemory hands the heap freed after start-up back to the OS.
// The node's start (keys, certificates, TLS, the menu's first build)
// leaves garbage behind that the runtime's background scavenger returns
// only slowly and partly; the tray then idles for hours. One forced GC
// and release (runtime/debug.FreeOSMemory) at that moment costs a few
// milliseconds once.
func returnStartupMemory() { debug.FreeOSMemory() }

// routeStdLog sends the standard logger's lines (fyne.io/systray writes
// "systray error: ..." there) to log as records, and returns the function
// restoring the standard logger. A failed registration while no tray host
// is on the bus is expected (Run already said so once): it is logged at
// debug level; everything else at warn.
func routeStdLog(log *slog.Logger, noHost bool) (restore func()) {
	w, flags, prefix := stdlog.Writer(), stdlog.Flags(), stdlog.Prefix()
	stdlog.SetOutput(stdLogBridge{log: log, noHost: noHost})
	stdlog.SetFlags(0)
	stdlog.SetPrefix("")
	return func() {
		stdlog.SetOutput(w)
		stdlog.SetFlags(flags)
		stdlog.SetPrefix(prefix)
	}
}

type stdLogBridge struct {
	log    *slog.Logger
	noHost bool
}

func (b stdLogBridge) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := slog.LevelWarn
	if b.noHost && strings.HasPrefix(msg, "systray error: failed to register") {
		level = slog.LevelDebug
	}
	b.log.Log(context.Background(), level, strings.TrimPrefix(msg, "systray error: "))
	return len(p), nil
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
	return autostart.Entry{ID: app.AppID, Name: "meshtray", Comment: "Your devices as one private mesh", Exec: argv}
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
