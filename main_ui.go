//go:build meshtray_ui

package main

import "meshtray/tray/windows"

// run is meshtray-ui (-tags meshtray_ui): the Fyne windows, the only
// executable linking Fyne and OpenGL. The tray starts it from its own
// directory.
func run(args []string) int { return windows.Main(args) }
