// Command meshtray turns a person's devices into one private mesh. See
// README.md; the code map is ARCHITECTURE.md.
package main

import (
	"os"

	"meshtray/app"
	"meshtray/tray"
)

func main() {
	os.Exit(app.Main(os.Args[1:], app.CLIOptions{RunTray: tray.Run, UI: tray.UI}))
}
