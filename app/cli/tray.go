//go:build !headless

package cli

import "meshtray/tray"

// buildTray wires the tray app (fyne.io/systray) and the window process
// (Fyne) into the command: `meshtray` without a subcommand shows the tray
// menu around the node, `meshtray ui` opens windows.
var buildTray = trayParts{run: tray.Run, ui: tray.UI}
