//go:build !(linux || freebsd || openbsd || netbsd || dragonfly || darwin || windows)

package autostart

// Enabled reports false: no login-start mechanism here.
func (e Entry) Enabled() (bool, error) { return false, ErrUnsupported }

// Enable fails with ErrUnsupported.
func (e Entry) Enable() error { return ErrUnsupported }

// Disable fails with ErrUnsupported.
func (e Entry) Disable() error { return ErrUnsupported }
