package app

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
)

// Log file limits: at start, a log over maxLogBytes is moved to .1 (the
// previous .1 is dropped), so the folder holds at most two files.
const (
	logFileName = "meshtray.log"
	maxLogBytes = 10 << 20
)

// NewLogger returns the node's structured logger: text records to w at
// level and above. Packages get children of it (logger.With("pkg", ...)).
func NewLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// OpenLogFile opens <stateDir>/logs/meshtray.log for appending (0600, dir
// 0700), rotating it first when it is over 10 MiB.
func OpenLogFile(stateDir string) (*os.File, error) {
	dir := filepath.Join(stateDir, logDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, logFileName)
	if fi, err := os.Stat(path); err == nil && fi.Size() > maxLogBytes {
		_ = os.Rename(path, path+".1")
	}
	return os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
}
