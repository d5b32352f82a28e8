package a2a

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/nodes"
)

// The node executor over the real nodes.Registry, driven by the official
// a2a-go client: device.info end to end, and tasks/cancel killing a real
// system.run process.

func realRegistry(t testing.TB, approver nodes.Approver) *nodes.Registry {
	t.Helper()
	return nodes.New(nodes.Options{
		Device:   nodes.Device{Name: "testbox", Version: "test"},
		RunAllow: []nodes.RunRule{{Name: "sleep"}},
		Approver: approver,
	})
}

func TestRealDeviceInfo(t *testing.T) {
	t.Parallel()
	reg := realRegistry(t, nil)
	env := newEnv(t, Options{Executor: NewNodeExecutor(reg, nil), Manifest: reg})
	c := env.client(t, tokA)

	task := sendTask(t, context.Background(), c, userMsg("please run device.info"))
	if task.Status.State != a2a.TaskStateCompleted || len(task.Artifacts) != 1 {
		t.Fatalf("device.info: %s %+v", task.Status.State, task.Status.Message)
	}
	data, ok := task.Artifacts[0].Parts[0].(a2a.DataPart)
	if !ok {
		t.Fatalf("artifact part %T", task.Artifacts[0].Parts[0])
	}
	host, _ := os.Hostname()
	if data.Data["hostname"] != host || data.Data["cpu_count"] == nil || data.Data["memory_total_bytes"] == nil {
		t.Fatalf("device.info data = %v", data.Data)
	}
	if len(task.Artifacts[0].Parts) != 1 || text(task.Status.Message) == "" {
		t.Fatalf("artifact parts %d, status message %q: want the data once and the summary once", len(task.Artifacts[0].Parts), text(task.Status.Message))
	}

	// The card's skills come from the same manifest.
	card, err := c.GetAgentCard(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range card.Skills {
		ids = append(ids, s.ID)
	}
	if !strings.Contains(strings.Join(ids, ","), "device.info") || !strings.Contains(strings.Join(ids, ","), "system.run") {
		t.Fatalf("card skills %v", ids)
	}
}

// TestRealCancelKillsSystemRun: the owner approves `system.run sleep`, the
// process starts, tasks/cancel ends the task canceled and the process is
// gone (pid no longer exists).
func TestRealCancelKillsSystemRun(t *testing.T) {
	t.Parallel()
	reg := realRegistry(t, nil) // no call approver: only the owner's task approval lets system.run (ask) run
	ap := newManualApprover()
	env := newEnv(t, Options{Executor: NewNodeExecutor(reg, nil), Manifest: reg, Approver: ap})
	c := env.client(t, tokA)
	ctx := context.Background()

	// A distinctive duration, to find our process among the machine's.
	secs := "317.25"
	res, err := c.SendMessage(ctx, &a2a.MessageSendParams{
		Message: dataMsg(map[string]any{"capability": "system.run", "params": map[string]any{"argv": []any{"sleep", secs}, "timeout_s": 600}}),
		Config:  &a2a.MessageSendConfig{Blocking: new(false)},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := res.(*a2a.Task).ID
	pa := ap.next(t)
	if !strings.HasPrefix(pa.Summary, `system.run {"argv":["sleep","317.25"]`) {
		t.Fatalf("approval summary %q", pa.Summary)
	}
	pa.answer <- Decision{Approved: true, ByOwner: true}

	var pid int
	waitFor(t, "the sleep process to start", func() bool {
		pid = findProcess(t, "sleep", secs)
		return pid != 0
	})
	got, err := c.CancelTask(ctx, &a2a.TaskIDParams{ID: id})
	if err != nil || got.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("cancel: %v %+v", err, got)
	}
	waitFor(t, fmt.Sprintf("pid %d to be gone", pid), func() bool {
		_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
		return os.IsNotExist(err)
	})
}

// findProcess returns the pid of a process running program name (argv[0]
// as given or resolved to a path ending in /name) with exactly args, or 0.
func findProcess(t *testing.T, name string, args ...string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("reading /proc: %v", err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimSuffix(string(cmd), "\x00"), "\x00")
		if len(argv) == len(args)+1 && (argv[0] == name || strings.HasSuffix(argv[0], "/"+name)) && slices.Equal(argv[1:], args) {
			return pid
		}
	}
	return 0
}
