//go:build !((dragonfly && cgo) || (freebsd && cgo) || linux || netbsd || openbsd)

package keychain

// On macOS and Windows go-keyring reports failures as plain errors from
// /usr/bin/security or the Credential Manager API; only timeouts (handled
// by the caller) are known to mean "unavailable" there.

func isUnavailable(err error) bool { return false }

func unavailableReason(err error) string { return "the OS keychain refused the probe" }

func sessionBusCheck() error { return nil }
