//go:build darwin

package autostart

import (
	"errors"
	"os"
	"path/filepath"
)

// path is ~/Library/LaunchAgents/ID.plist, read by launchd at login.
func (e Entry) path() (string, error) {
	d := e.Dir
	if d == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		d = filepath.Join(home, "Library", "LaunchAgents")
	}
	return filepath.Join(d, e.ID+".plist"), nil
}

// Enabled reports whether the LaunchAgent exists.
func (e Entry) Enabled() (bool, error) {
	if err := e.check(); err != nil {
		return false, err
	}
	p, err := e.path()
	if err != nil {
		return false, err
	}
	_, err = os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// Enable writes the LaunchAgent; it takes effect at the next login.
func (e Entry) Enable() error {
	if err := e.check(); err != nil {
		return err
	}
	p, err := e.path()
	if err != nil {
		return err
	}
	return writeFile(p, []byte(LaunchAgent(e)))
}

// Disable removes the LaunchAgent; removing an absent one is not an error.
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
