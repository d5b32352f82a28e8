// Command meshtray turns a person's devices into one private mesh. See
// README.md; the code map is ARCHITECTURE.md.
//
// One module, two executables, chosen by build tag:
//
//	go build .                                     meshtray: the CLI, the node and the tray menu (no Fyne, no cgo on Linux)
//	go build -tags headless .                      meshtray without the tray (a server build)
//	go build -tags meshtray_ui -o meshtray-ui .    meshtray-ui: the Fyne windows the tray starts
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:]))
}
