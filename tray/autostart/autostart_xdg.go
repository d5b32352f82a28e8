//go:build linux || freebsd || openbsd || netbsd || dragonfly

package autostart

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// dir is $XDG_CONFIG_HOME/autostart, or ~/.config/autostart (XDG Base
// Directory Specification 0.8; Autostart Specification "Autostart Directories").
func (e Entry) dir() (string, error) {
	if e.Dir != "" {
		return e.Dir, nil
	}
	if x := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "autostart"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".config", "autostart"), nil
}

func (e Entry) path() (string, error) {
	d, err := e.dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, e.ID+".desktop"), nil
}

// Enabled reports whether the entry exists and is not hidden
// (Hidden=true means deleted, per the Autostart Specification).
func (e Entry) Enabled() (bool, error) {
	if err := e.check(); err != nil {
		return false, err
	}
	p, err := e.path()
	if err != nil {
		return false, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && strings.TrimSpace(k) == "Hidden" && strings.TrimSpace(v) == "true" {
			return false, nil
		}
	}
	return true, nil
}

// Enable writes the entry (0644, atomically).
func (e Entry) Enable() error {
	if err := e.check(); err != nil {
		return err
	}
	p, err := e.path()
	if err != nil {
		return err
	}
	return writeFile(p, []byte(DesktopEntry(e)))
}

// Disable removes the entry; removing an absent one is not an error.
func (e Entry) Disable() error {
	if err := e.check(); err != nil {
		return err
	}
	p, err := e.path()
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
