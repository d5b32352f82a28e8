//go:build headless

package main

import "meshtray/app"

// cliOptions of the headless build (-tags headless): no tray and no windows,
// so the binary needs neither cgo nor Fyne; `meshtray` runs the node.
func cliOptions() app.CLIOptions { return app.CLIOptions{} }
