package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"meshtray/pairing"
)

// helperEnv makes the test binary a helper process instead of running the
// tests: "run-sleep" is a node running `sleep $MESHTRAY_HELPER_ARG`
// through system.run until it is killed (TestRunDiesWithTheNode).
const helperEnv = "MESHTRAY_NODES_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "run-sleep" {
		os.Exit(helperRunSleep())
	}
	goleak.VerifyTestMain(m)
}

func helperRunSleep() int {
	r := New(Options{
		Device:   Device{ID: "HELPER", Name: "helper"},
		RunAllow: []RunRule{{Name: "sleep", Timeout: MaxRunTimeout}},
		Notifier: NewNotifier(NotifierOptions{Getenv: func(string) string { return "" }}),
		Getenv:   func(string) string { return "" },
	})
	params, _ := json.Marshal(RunParams{Argv: []string{"sleep", os.Getenv("MESHTRAY_HELPER_ARG")}})
	_, err := r.Invoke(context.Background(), Call{Capability: CapSystemRun, Params: params, Caller: &pairing.Principal{Local: true}, Approved: true})
	fmt.Fprintln(os.Stderr, "helper: system.run returned:", err)
	return 1
}

// waitFor polls cond every 10 ms until it holds, failing the test after d.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
