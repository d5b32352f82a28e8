//go:build race

package tray

// raceEnabled: this test binary is built with -race, so the programs it
// builds for its children are too (their race reports fail the test, see
// startProc).
const raceEnabled = true
