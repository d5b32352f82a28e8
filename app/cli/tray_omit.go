//go:build headless

package cli

// buildTray of the headless build (-tags headless): no tray, so the
// binary needs no cgo on any OS and links no systray; `meshtray` runs the
// node.
var buildTray = trayParts{}
