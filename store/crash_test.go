package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// crashWriterEnv makes the test binary a writer (TestMain): it writes to the
// database named by the variable until it is killed, printing one line per
// acknowledged write.
const crashWriterEnv = "MESHTRAY_STORE_CRASH_WRITER"

func readFileIfAny(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// crashWriter is the child: 16 goroutines each loop over a task's life
// (created, completed: synced), an approval (posted, decided: synced with
// its audit entry) and a capability-run audit entry (committed), and print
// a line once each method returned.
func crashWriter() {
	path := os.Getenv(crashWriterEnv)
	s, err := Open(path, Options{MaxTasks: 1 << 20, MaxApprovals: 1 << 20})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	ack := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush() // the line leaves the process only once the write returned
		mu.Unlock()
	}
	hist := []byte(`[{"role":"user","parts":[{"kind":"text","text":"` + strings.Repeat("w", 600) + `"}]}]`)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("p%d-g%d-%d", os.Getpid(), g, i)
				if err := s.CreateTask(ctx, Task{ID: id, Owner: "grant", ContextID: "c", State: StateSubmitted, History: hist}); err != nil {
					fmt.Fprintln(os.Stderr, "create:", err)
					os.Exit(3)
				}
				if err := s.UpdateTask(ctx, Task{ID: id, Owner: "grant", ContextID: "c", State: StateCompleted, History: hist,
					Artifacts: []byte(`[{"artifactId":"a","parts":[{"kind":"text","text":"done"}]}]`)}); err != nil {
					fmt.Fprintln(os.Stderr, "update:", err)
					os.Exit(3)
				}
				ack("task %s", id)
				// A task left waiting for its caller: committed before
				// CreateTask returns.
				if err := s.CreateTask(ctx, Task{ID: "wait-" + id, Owner: "grant", ContextID: "c", State: StateInputRequired,
					History: hist, ExecState: []byte(`{"turn":1}`)}); err != nil {
					fmt.Fprintln(os.Stderr, "create waiting:", err)
					os.Exit(3)
				}
				ack("waiting wait-%s", id)
				if err := s.PutApproval(ctx, Approval{ID: id, Kind: ApprovalDelegation, GrantID: "grant", Expires: time.Now().Add(time.Hour)}); err != nil {
					fmt.Fprintln(os.Stderr, "approval:", err)
					os.Exit(3)
				}
				e, err := s.ResolveApproval(ctx, id, Entry{Kind: KindApproval, GrantID: "grant", Subject: id, Result: "approved", DecidedVia: WhereCLI})
				if err != nil {
					fmt.Fprintln(os.Stderr, "decide:", err)
					os.Exit(3)
				}
				ack("decision %s %d", id, e.Seq)
				e, err = s.Append(ctx, Entry{Kind: KindCapability, Subject: "device.info", TaskID: id, Result: "completed"})
				if err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(3)
				}
				ack("run %s %d", id, e.Seq)
			}
		}()
	}
	wg.Wait()
}

func TestKillDuringWritesLosesNothingAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a writer process")
	}
	path := tempDB(t)
	ctx := context.Background()
	for round := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashWriterEnv+"="+path)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		tasks := map[string]bool{}
		waiting := map[string]bool{}
		decisions := map[string]int64{}
		runs := map[int64]string{}
		sc := bufio.NewScanner(stdout)
		killed := false
		n := 0
		deadline := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch f[0] {
			case "task":
				tasks[f[1]] = true
			case "waiting":
				waiting[f[1]] = true
			case "decision":
				seq, _ := strconv.ParseInt(f[2], 10, 64)
				decisions[f[1]] = seq
			case "run":
				seq, _ := strconv.ParseInt(f[2], 10, 64)
				runs[seq] = f[1]
			}
			// Kill mid-writes, at a different point each round.
			if n++; n == 600+round*400 && !killed {
				killed = true
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
		}
		deadline.Stop()
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("writer ended with %v (not killed); stderr: %s", err, stderr.String())
		}
		if len(tasks) == 0 || len(decisions) == 0 {
			t.Fatalf("writer acknowledged nothing; stderr: %s", stderr.String())
		}

		s, err := Open(path, Options{MaxTasks: 1 << 20, MaxApprovals: 1 << 20})
		if err != nil {
			t.Fatalf("round %d: reopen after kill -9: %v", round, err)
		}
		if err := s.IntegrityCheck(ctx); err != nil {
			t.Fatalf("integrity_check: %v", err)
		}
		for id := range tasks {
			got, err := s.Task(ctx, id)
			if err != nil || got.State != StateCompleted || len(got.Artifacts) == 0 {
				t.Fatalf("acknowledged terminal task %s: %+v, %v", id, got.State, err)
			}
		}
		for id := range waiting {
			got, err := s.Task(ctx, id)
			if err != nil || got.State != StateInputRequired || string(got.ExecState) != `{"turn":1}` {
				t.Fatalf("acknowledged input-required task %s: %+v, %v", id, got.State, err)
			}
		}
		pending, _ := s.Approvals(ctx)
		decided := map[string]bool{}
		for id := range decisions {
			decided[id] = true
		}
		for _, a := range pending {
			if decided[a.ID] {
				t.Fatalf("decided approval %s is pending again", a.ID)
			}
		}
		entries, err := s.Query(ctx, Filter{Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		bySeq := map[int64]Entry{}
		for _, e := range entries {
			bySeq[e.Seq] = e
		}
		for id, seq := range decisions {
			if e, ok := bySeq[seq]; !ok || e.Subject != id || e.Kind != KindApproval {
				t.Fatalf("acknowledged decision %s (entry %d) missing: %+v", id, seq, e)
			}
		}
		for seq, id := range runs {
			if e, ok := bySeq[seq]; !ok || e.TaskID != id {
				t.Fatalf("acknowledged run entry %d missing", seq)
			}
		}
		v, err := s.Verify(ctx)
		if err != nil {
			t.Fatalf("audit Verify after kill -9: %v", err)
		}
		t.Logf("round %d: killed after %d acks: %d terminal and %d input-required tasks, %d decisions, %d runs acknowledged; %d entries verified",
			round, n, len(tasks), len(waiting), len(decisions), len(runs), v.Entries)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
