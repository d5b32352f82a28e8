package tray

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"meshtray/app"
)

// UIProgram is the file name of the window process's executable
// (meshtray-ui, built with -tags meshtray_ui; ".exe" on Windows). The tray
// runs it from the directory of its own executable.
const UIProgram = "meshtray-ui"

// uiProgramPath is the window process's executable next to exe (the
// tray's own, os.Executable): same directory, ".exe" on Windows.
func uiProgramPath(exe string) string {
	name := UIProgram
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	return filepath.Join(filepath.Dir(exe), name)
}

// uiArgv is the command line of the window process for the node of cfg.
func uiArgv(exe string, cfg app.Config) []string {
	return []string{uiProgramPath(exe), "--state-dir", cfg.StateDir, "--port", strconv.Itoa(cfg.Port)}
}

// UIMissingHint says how to get the window process's executable.
const UIMissingHint = "`make build` builds it next to meshtray; the release archive has both"

// ErrUIMissing is why no window opens: the window process's executable
// is not next to the tray's (see UIProgram).
type ErrUIMissing struct{ Path string }

func (e *ErrUIMissing) Error() string {
	return fmt.Sprintf("the windows need %s, which is missing (%s)", e.Path, UIMissingHint)
}

// Restart policy of the UI process.
const (
	// quickExit: a UI process that fails sooner than this counts as a
	// failed start (no GL, no display...).
	quickExit = 2 * time.Second
	// maxQuickFails failed starts in a row stop the automatic restarts
	// until the next click.
	maxQuickFails = 3
	// uiStopTimeout bounds the wait for the UI process at Quit.
	uiStopTimeout = 5 * time.Second
)

// uiLauncher runs the one UI process (meshtray-ui) on demand. A window
// request is queued in the node (POST /ui/open) and the process is started
// when none runs; when it exits with requests still queued, it is started
// again, so a request that arrives while it closes is not lost.
type uiLauncher struct {
	api  controlAPI
	argv []string // the program and its arguments: meshtray-ui --state-dir D --port P
	env  []string // nil = this process's environment
	log  *slog.Logger

	mu         sync.Mutex
	cmd        *exec.Cmd // guarded by mu; the running UI process, or nil
	quickFails int       // guarded by mu
	closed     bool      // guarded by mu
	wg         sync.WaitGroup
}

// open queues r for the UI process and makes sure one runs.
func (l *uiLauncher) open(ctx context.Context, r app.UIRequest) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := l.api.OpenUI(ctx, r); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.quickFails = 0 // a click is a new attempt
	return l.startLocked()
}

// missing is the path of the window process's executable when it is not
// there (not a regular file, or not executable on Unix), else "".
func (l *uiLauncher) missing() string {
	fi, err := os.Stat(l.argv[0])
	if err != nil || !fi.Mode().IsRegular() || (runtime.GOOS != "windows" && fi.Mode().Perm()&0o111 == 0) {
		return l.argv[0]
	}
	return ""
}

// running reports whether a UI process runs now.
func (l *uiLauncher) running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cmd != nil
}

func (l *uiLauncher) startLocked() error {
	if l.closed || l.cmd != nil || l.quickFails >= maxQuickFails {
		return nil
	}
	if p := l.missing(); p != "" {
		return &ErrUIMissing{Path: p}
	}
	cmd := exec.Command(l.argv[0], l.argv[1:]...)
	cmd.Env = l.env
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	l.cmd = cmd
	l.log.Debug("UI process started", "pid", cmd.Process.Pid)
	started := time.Now()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		err := cmd.Wait()
		l.mu.Lock()
		l.cmd = nil
		if err != nil && time.Since(started) < quickExit {
			l.quickFails++
		} else {
			l.quickFails = 0
		}
		fails, closed := l.quickFails, l.closed
		l.mu.Unlock()
		if closed {
			return
		}
		if err != nil {
			l.log.Warn("UI process exited", "err", err)
		}
		if fails >= maxQuickFails {
			l.log.Error("the UI process keeps failing at start; windows stay closed until the next menu click", "err", err)
			return
		}
		// Requests that arrived while it was closing: start it again.
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		pending, perr := l.api.PendingUI(ctx)
		cancel()
		if perr == nil && len(pending) > 0 {
			l.mu.Lock()
			if serr := l.startLocked(); serr != nil {
				l.log.Warn("cannot restart the UI process", "err", serr)
			}
			l.mu.Unlock()
		}
	}()
	return nil
}

// close stops the UI process (SIGTERM, then kill) and waits for it.
func (l *uiLauncher) close() {
	l.mu.Lock()
	l.closed = true
	cmd := l.cmd
	l.mu.Unlock()
	if cmd != nil {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			_ = cmd.Process.Kill()
		}
		done := make(chan struct{})
		go func() { l.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(uiStopTimeout):
			_ = cmd.Process.Kill()
		}
	}
	l.wg.Wait()
}
