package app_test

import (
	"testing"

	"go.uber.org/goleak"

	"meshtray/app/apptest"
	"meshtray/app/cli"
)

// TestMain runs this test binary as the meshtray command (cli.Run) when
// apptest starts it as a node or CLI child, and otherwise runs the tests
// with a private Secret Service and a goroutine leak check. Every test file
// of package app (internal or external) shares this one TestMain.
//
// cli.Run links the tray, and while the tray package holds the Fyne
// windows, Fyne's GLFW driver starts the goroutine of its main-thread
// function queue at package init (internal/driver/glfw/loop.go funcQueue);
// it lives as long as the process.
func TestMain(m *testing.M) {
	apptest.Main(m, cli.Run,
		goleak.IgnoreTopFunction("fyne.io/fyne/v2/internal/async.(*UnboundedChan[...]).processing"),
	)
}
