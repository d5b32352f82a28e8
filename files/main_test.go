package files

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests under goleak, except in a bench child process.
func TestMain(m *testing.M) {
	if os.Getenv(benchChildEnv) != "" {
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}
