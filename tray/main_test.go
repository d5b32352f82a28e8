package tray

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"meshtray/app"
	"meshtray/app/apptest"
)

// envTrayMain makes this test binary run as the meshtray command with the
// tray wired in (tray.Run, tray.UI), the way main.go runs it: the tray
// tests start it as a child process, and the tray child re-executes it for
// the UI process.
const envTrayMain = "MESHTRAY_TRAYTEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envTrayMain) == "1" {
		os.Exit(app.Main(os.Args[1:], app.CLIOptions{RunTray: Run, UI: UI}))
	}
	// Fyne's GLFW driver starts the goroutine of its main-thread function
	// queue at package init (internal/driver/glfw/loop.go funcQueue); it
	// lives as long as the process. Nothing else may be left running.
	apptest.Main(m,
		goleak.IgnoreTopFunction("fyne.io/fyne/v2/internal/async.(*UnboundedChan[...]).processing"),
	)
}
