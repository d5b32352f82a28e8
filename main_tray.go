//go:build !headless

package main

import (
	"meshtray/app"
	"meshtray/tray"
)

// cliOptions wires the tray app (fyne.io/systray) and the window process
// (Fyne) into the command.
func cliOptions() app.CLIOptions { return app.CLIOptions{RunTray: tray.Run, UI: tray.UI} }
