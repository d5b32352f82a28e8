package app_test

import (
	"testing"

	"meshtray/app/apptest"
)

// TestMain runs this test binary as the meshtray command when apptest starts
// it as a node or CLI child, and otherwise runs the tests with a private
// Secret Service and a goroutine leak check. Every test file of package app
// (internal or external) shares this one TestMain.
func TestMain(m *testing.M) { apptest.Main(m) }
