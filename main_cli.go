//go:build !meshtray_ui

package main

import "meshtray/app/cli"

// run is the meshtray command: the CLI, the node and (unless built with
// -tags headless, see app/cli/tray.go) the tray menu on fyne.io/systray.
// Its windows are the meshtray-ui executable (main_ui.go).
func run(args []string) int { return cli.Run(args) }
