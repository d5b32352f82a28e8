//go:build !linux

package keychaintest

import (
	"errors"
	"os"
	"syscall"
)

// The private Secret Service needs Linux (dbus-daemon, gnome-keyring-daemon,
// Pdeathsig); elsewhere Start fails and these values are never used.
var sigStop, sigCont, sigTerm os.Signal = os.Kill, os.Kill, os.Kill

func supported() error {
	return errors.New("keychaintest: the private Secret Service needs Linux")
}

func sysProcAttr() *syscall.SysProcAttr { return nil }
