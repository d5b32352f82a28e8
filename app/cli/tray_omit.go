//go:build headless

package cli

// buildTray of the headless build (-tags headless): no tray and no
// windows, so the binary needs neither cgo nor Fyne; `meshtray` runs the
// node.
var buildTray = trayParts{}
