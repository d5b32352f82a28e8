//go:build !(linux || freebsd || openbsd || netbsd || dragonfly)

package tray

import (
	"os/exec"
	"runtime"
)

// desktopProblem: macOS and Windows always have a desktop for a user
// process.
func desktopProblem() string { return "" }

func trayHostProblem() string { return "" }

// openPath opens a folder in Finder or Explorer.
func openPath(p string) error {
	if runtime.GOOS == "windows" {
		return startDetached(exec.Command("explorer", p))
	}
	return startDetached(exec.Command("open", p))
}
