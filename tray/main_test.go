package tray_test

import (
	"os"
	"testing"

	"meshtray/app/apptest"
	"meshtray/app/cli"
	"meshtray/tray"
)

// TestMain makes this test binary run as the meshtray command with the tray
// wired in (cli.Run, as main.go runs it) when tray.EnvTrayMain is set: the
// tray tests start it as a child process, next to the real meshtray-ui
// that the tray child starts for its windows (programs_linux_test.go). It
// is an external test file: app/cli imports the tray, so only package
// tray_test may import app/cli.
func TestMain(m *testing.M) {
	if os.Getenv(tray.EnvTrayMain) == "1" {
		os.Exit(cli.Run(os.Args[1:]))
	}
	tray.CLIExitError = cli.ExitError
	apptest.Main(m, cli.Run)
}
