//go:build windows

package autostart

import (
	"errors"

	"golang.org/x/sys/windows/registry"
)

const runKey = `Software\Microsoft\Windows\CurrentVersion\Run`

func (e Entry) valueName() string {
	if e.Name != "" {
		return e.Name
	}
	return e.ID
}

// Enabled reports whether the Run value exists.
func (e Entry) Enabled() (bool, error) {
	if err := e.check(); err != nil {
		return false, err
	}
	k, err := registry.OpenKey(registry.CURRENT_USER, runKey, registry.QUERY_VALUE)
	if err != nil {
		return false, err
	}
	defer k.Close()
	_, _, err = k.GetStringValue(e.valueName())
	if errors.Is(err, registry.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// Enable sets the Run value to the quoted command line.
func (e Entry) Enable() error {
	if err := e.check(); err != nil {
		return err
	}
	k, _, err := registry.CreateKey(registry.CURRENT_USER, runKey, registry.SET_VALUE)
	if err != nil {
		return err
	}
	defer k.Close()
	return k.SetStringValue(e.valueName(), CommandLine(e.Exec))
}

// Disable deletes the Run value; deleting an absent one is not an error.
func (e Entry) Disable() error {
	if err := e.check(); err != nil {
		return err
	}
	k, err := registry.OpenKey(registry.CURRENT_USER, runKey, registry.SET_VALUE)
	if err != nil {
		return err
	}
	defer k.Close()
	if err := k.DeleteValue(e.valueName()); err != nil && !errors.Is(err, registry.ErrNotExist) {
		return err
	}
	return nil
}
