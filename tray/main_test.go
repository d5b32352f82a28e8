package tray_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"meshtray/app/apptest"
	"meshtray/app/cli"
	"meshtray/tray"
)

// TestMain makes this test binary run as the meshtray command with the tray
// wired in (cli.Run, as main.go runs it) when tray.EnvTrayMain is set: the
// tray tests start it as a child process, and the tray child re-executes
// it for the UI process. It is an external test file: app/cli imports the
// tray, so only package tray_test may import app/cli.
func TestMain(m *testing.M) {
	if os.Getenv(tray.EnvTrayMain) == "1" {
		os.Exit(cli.Run(os.Args[1:]))
	}
	tray.CLIExitError = cli.ExitError
	// Fyne's GLFW driver starts the goroutine of its main-thread function
	// queue at package init (internal/driver/glfw/loop.go funcQueue); it
	// lives as long as the process. Nothing else may be left running.
	apptest.Main(m, cli.Run,
		goleak.IgnoreTopFunction("fyne.io/fyne/v2/internal/async.(*UnboundedChan[...]).processing"),
	)
}
