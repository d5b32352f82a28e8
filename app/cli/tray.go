//go:build !headless

package cli

import "meshtray/tray"

// buildTray wires the tray app (fyne.io/systray) into the command:
// `meshtray` without a subcommand shows the tray menu around the node. Its
// windows are another executable, meshtray-ui, which the tray starts.
var buildTray = trayParts{run: tray.Run}
