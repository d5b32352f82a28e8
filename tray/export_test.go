package tray

// envTrayMain makes this test binary run as the meshtray command with the
// tray wired in (main_test.go's TestMain).
const envTrayMain = "MESHTRAY_TRAYTEST_MAIN"

// EnvTrayMain is envTrayMain for main_test.go (package tray_test).
const EnvTrayMain = envTrayMain

// CLIExitError is cli.ExitError, set by TestMain (package tray_test): this
// package's tests cannot import app/cli, which imports the tray.
var CLIExitError int
