package app

import (
	"io"
	"log/slog"
)

// NewLogger returns the node's structured logger: text records to w at
// level and above. Packages get children of it (logger.With("pkg", ...)).
func NewLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}
