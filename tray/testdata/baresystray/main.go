// Command baresystray is the tray benchmark's reference: a
// bare fyne.io/systray app with one menu item and nothing else.
package main

import (
	_ "embed"

	"fyne.io/systray"
)

//go:embed icon.png
var icon []byte

func main() {
	systray.SetTitle("bare")
	systray.Run(func() {
		systray.SetIcon(icon)
		mQuit := systray.AddMenuItem("Quit", "")
		go func() {
			<-mQuit.ClickedCh
			systray.Quit()
		}()
	}, nil)
}
