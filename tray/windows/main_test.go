package windows

import (
	"testing"

	"go.uber.org/goleak"
)

// Fyne's GLFW driver starts the goroutine of its main-thread function
// queue at package init (internal/driver/glfw/loop.go funcQueue); it lives
// as long as the process. Nothing else may be left running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("fyne.io/fyne/v2/internal/async.(*UnboundedChan[...]).processing"),
	)
}
