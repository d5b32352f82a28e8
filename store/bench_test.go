package store

// The storage benchmark report (make bench, .ci/bench.sh "Storage"):
//
//	MESHTRAY_BENCH=1 go test -run TestBenchReport -v ./store
//
// Each figure is printed next to an in-memory map of the same shape (the
// same Task records, the same 512 bound with terminal eviction) measured in
// the same run. Figures are printed, never asserted.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// taskBackend is what the benchmark drives: the store or the map.
type taskBackend interface {
	CreateTask(ctx context.Context, t Task) error
	UpdateTask(ctx context.Context, t Task) error
	Task(ctx context.Context, id string) (Task, error)
}

// memTasks is the reference: the engine's in-memory store reduced to the
// same operations (map, terminal tasks in the order they ended, 512 bound).
type memTasks struct {
	mu       sync.Mutex
	max      int
	tasks    map[string]Task
	terminal []string
}

func newMemTasks(max int) *memTasks { return &memTasks{max: max, tasks: make(map[string]Task)} }

func (m *memTasks) CreateTask(_ context.Context, t Task) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.tasks[t.ID]; ok {
		return ErrExists
	}
	for len(m.tasks) >= m.max {
		if len(m.terminal) == 0 {
			return ErrFull
		}
		delete(m.tasks, m.terminal[0])
		m.terminal = m.terminal[1:]
	}
	m.tasks[t.ID] = t
	return nil
}

func (m *memTasks) UpdateTask(_ context.Context, t Task) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.tasks[t.ID]
	if !ok || old.Owner != t.Owner {
		return ErrNotFound
	}
	if old.State.Terminal() {
		return ErrTerminal
	}
	t.Created = old.Created
	m.tasks[t.ID] = t
	if t.State.Terminal() {
		m.terminal = append(m.terminal, t.ID)
	}
	return nil
}

func (m *memTasks) Task(_ context.Context, id string) (Task, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tasks[id]
	if !ok {
		return Task{}, ErrNotFound
	}
	return t, nil
}

var (
	benchHistory   = []byte(`[{"role":"user","messageId":"4b1c","parts":[{"kind":"text","text":"` + strings.Repeat("please run device.info ", 40) + `"}]}]`)
	benchArtifacts = []byte(`[{"artifactId":"a1","parts":[{"kind":"data","data":{"name":"laptop","os":"Debian GNU/Linux 13 (x86_64)","cpus":8}}]}]`)
	benchStatus    = []byte(`{"state":"completed","timestamp":"2026-12-01T09:00:00Z"}`)
)

var benchSeq atomic.Int64

// taskLife is one task's writes and a read: created submitted, read back
// (a tasks/get while it runs; a finished task may be evicted by the 512
// bound before a read, here as in the engine), completed with its
// artifacts (the acknowledged terminal state).
func taskLife(ctx context.Context, b taskBackend) error {
	id := fmt.Sprintf("task-%d", benchSeq.Add(1))
	t := Task{ID: id, Owner: "0123456789abcdef", ContextID: "ctx-" + id, State: StateSubmitted, History: benchHistory, Summary: "device.info"}
	if err := b.CreateTask(ctx, t); err != nil {
		return err
	}
	if _, err := b.Task(ctx, id); err != nil {
		return err
	}
	t.State, t.Status, t.Artifacts = StateCompleted, benchStatus, benchArtifacts
	return b.UpdateTask(ctx, t)
}

type latencies struct {
	p50, p99 time.Duration
	perSec   float64
}

// measure runs op n times over c workers.
func measure(t *testing.T, c, n int, op func() error) latencies {
	t.Helper()
	durs := make([]time.Duration, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := op(); err != nil {
					failed.Store(err)
					return
				}
				durs[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	slices.Sort(durs)
	return latencies{p50: durs[n/2], p99: durs[n*99/100], perSec: float64(n) / wall.Seconds()}
}

type benchRow struct {
	label string
	unit  string
	vals  []float64
}

func printTable(t *testing.T, title string, cols []string, rows []benchRow, note string) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s\n%-40s", title, "")
	for _, c := range cols {
		fmt.Fprintf(&b, " %18s", c)
	}
	b.WriteString("\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-40s", r.label)
		for i, v := range r.vals {
			cell := fmt.Sprintf("%.1f %s", v, r.unit)
			if i > 0 && r.vals[0] != 0 && v != 0 && r.unit != "" {
				cell = fmt.Sprintf("%.1f %s (%.2fx)", v, r.unit, v/r.vals[0])
			}
			fmt.Fprintf(&b, " %18s", cell)
		}
		b.WriteString("\n")
	}
	b.WriteString(note)
	t.Log(b.String())
	fmt.Print(b.String())
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func TestBenchReport(t *testing.T) {
	if os.Getenv("MESHTRAY_BENCH") != "1" {
		t.Skip("set MESHTRAY_BENCH=1 to run the benchmark report (make bench)")
	}
	ctx := context.Background()
	dir := t.TempDir()
	open := func(name string, d Durability) *Store {
		s, err := Open(filepath.Join(dir, name), Options{Durability: d})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	backends := []struct {
		name string
		b    taskBackend
	}{
		{"memory map", newMemTasks(DefaultMaxTasks)},
		{"sqlite, full", open("sync-full.db", DurableSync)},
		{"sqlite, normal", open("normal.db", DurableNormal)},
	}
	cols := []string{}
	for _, be := range backends {
		cols = append(cols, be.name)
	}

	// 1. The store's own cost: one task's life (create, complete, read).
	var rows []benchRow
	for _, c := range []int{1, 32} {
		n := 1500
		if c > 1 {
			n = 6400
		}
		res := make([]latencies, len(backends))
		for i, be := range backends {
			life := func() error {
				if err := taskLife(ctx, be.b); err != nil {
					return fmt.Errorf("%s: %w", be.name, err)
				}
				return nil
			}
			measure(t, c, 200, life) // warm
			res[i] = measure(t, c, n, life)
		}
		r50 := benchRow{label: fmt.Sprintf("task write+read c=%d p50", c), unit: "µs"}
		r99 := benchRow{label: fmt.Sprintf("task write+read c=%d p99", c), unit: "µs"}
		rps := benchRow{label: fmt.Sprintf("task write+read c=%d", c), unit: "op/s"}
		for _, r := range res {
			r50.vals = append(r50.vals, us(r.p50))
			r99.vals = append(r99.vals, us(r.p99))
			rps.vals = append(rps.vals, r.perSec)
		}
		rows = append(rows, r50, r99, rps)
	}

	// 2. The same writes behind a message/send-shaped HTTP exchange on
	// loopback (JSON-RPC request in, task JSON out), which is what the
	// engine will add them to.
	for _, c := range []int{1, 32} {
		n := 1500
		if c > 1 {
			n = 6400
		}
		res := make([]latencies, len(backends))
		for i, be := range backends {
			srv := httptest.NewServer(sendHandler(be.b))
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			call := func() error { return sendOnce(client, srv.URL) }
			measure(t, c, 200, call)
			res[i] = measure(t, c, n, call)
			client.CloseIdleConnections()
			srv.Close()
		}
		r50 := benchRow{label: fmt.Sprintf("message/send-shaped c=%d p50", c), unit: "µs"}
		rps := benchRow{label: fmt.Sprintf("message/send-shaped c=%d", c), unit: "req/s"}
		for _, r := range res {
			r50.vals = append(r50.vals, us(r.p50))
			rps.vals = append(rps.vals, r.perSec)
		}
		rows = append(rows, r50, rps)
	}
	printTable(t, fmt.Sprintf("Storage: task writes, %s, %d CPUs, %s", runtime.Version(), runtime.NumCPU(), runtime.GOARCH), cols, rows,
		"(ratio = the column / memory map; latency lower is better, op/s and req/s higher is better.\n"+
			" full (sync = \"full\"): terminal states synced to the disk before they return (survive a power loss);\n"+
			" normal (the default): committed only (survive kill -9, not a power loss). Writes are group-committed.)\n")

	// 3. Size after 10,000 tasks with the 512 bound, and 4. start-up time
	// with a full store (512 tasks, the contexts, approvals, outbound and
	// peers at their bounds, the audit trail at its default bound).
	path := filepath.Join(dir, "full.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	fill := func(n, c int, op func(i int) error) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range c {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
					if err := op(i); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	fill(10000, 32, func(int) error { return taskLife(ctx, s) })
	liveSize := fileSize(path) + fileSize(path+"-wal")
	total, _, _ := s.TaskCount(ctx)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	closedSize := fileSize(path) + fileSize(path+"-wal")
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	fill(DefaultAuditMaxEntries, 32, func(i int) error {
		_, err := s.Append(ctx, Entry{Kind: KindCapability, GrantID: "0123456789abcdef", Peer: "laptop", Via: "tailnet",
			Subject: "device.info", Params: `{"fields":["os","cpus"]}`, Result: "completed", Duration: 900 * time.Microsecond})
		return err
	})
	appendRate := float64(DefaultAuditMaxEntries) / time.Since(t0).Seconds()
	fill(DefaultMaxApprovals, 8, func(i int) error {
		return s.PutApproval(ctx, Approval{ID: fmt.Sprint("ap", i), Kind: ApprovalDelegation, GrantID: "0123456789abcdef",
			Summary: "run device.info", Detail: strings.Repeat("d", 300), Expires: time.Now().Add(time.Hour)})
	})
	fill(DefaultMaxOutbound, 8, func(i int) error {
		return s.PutOutbound(ctx, Outbound{ID: fmt.Sprint("o", i), Agent: "ag", State: StateCompleted, Artifacts: benchArtifacts})
	})
	fill(DefaultMaxContexts, 8, func(i int) error {
		return s.PutContext(ctx, ContextLink{Owner: "0123456789abcdef", ContextID: fmt.Sprint("c", i), Upstream: fmt.Sprint("u", i)})
	})
	fill(DefaultMaxPeers, 8, func(i int) error {
		return s.PutPeer(ctx, ManualPeer{URL: fmt.Sprintf("https://peer%d.example:47654", i), Name: "peer"})
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fullSize := fileSize(path) + fileSize(path+"-wal")

	var opens []time.Duration
	var loads, verifies []time.Duration
	var verified Verified
	for range 5 {
		t0 := time.Now()
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		opens = append(opens, time.Since(t0))
		t0 = time.Now()
		if _, err := s.Tasks(ctx, TaskFilter{}); err != nil {
			t.Fatal(err)
		}
		s.Approvals(ctx)
		s.OutboundTasks(ctx)
		s.Contexts(ctx)
		s.Peers(ctx)
		loads = append(loads, time.Since(t0))
		t0 = time.Now()
		if verified, err = s.Verify(ctx); err != nil {
			t.Fatal(err)
		}
		verifies = append(verifies, time.Since(t0))
		s.Close()
	}
	slices.Sort(opens)
	slices.Sort(loads)
	slices.Sort(verifies)
	memBytes := int64(len(benchHistory)+len(benchArtifacts)+len(benchStatus)) * DefaultMaxTasks
	var b strings.Builder
	fmt.Fprintf(&b, "\nStorage: size and start-up\n")
	fmt.Fprintf(&b, "%-52s %10d tasks kept of 10000 written\n", "tasks after 10,000 (bound 512)", total)
	fmt.Fprintf(&b, "%-52s %10.2f MiB (task JSON alone: %.2f MiB)\n", "database + WAL after 10,000 tasks, open", mib(liveSize), mib(memBytes))
	fmt.Fprintf(&b, "%-52s %10.2f MiB\n", "database after 10,000 tasks, closed", mib(closedSize))
	fmt.Fprintf(&b, "%-52s %10.2f MiB\n", "full store, closed (512 tasks, 100k audit, bounds)", mib(fullSize))
	fmt.Fprintf(&b, "%-52s %10.0f entries/s (c=32, committed)\n", "audit append", appendRate)
	fmt.Fprintf(&b, "%-52s %10.1f ms (median of 5; quick_check included)\n", "Open with a full store", ms(opens[2]))
	fmt.Fprintf(&b, "%-52s %10.1f ms\n", "read back every task, approval, outbound, link, peer", ms(loads[2]))
	fmt.Fprintf(&b, "%-52s %10.1f ms (%d entries)\n", "audit Verify", ms(verifies[2]), verified.Entries)
	t.Log(b.String())
	fmt.Print(b.String())
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func mib(n int64) float64        { return float64(n) / (1 << 20) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func sendOnce(c *http.Client, url string) error {
	body := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","messageId":"m1","parts":[{"kind":"text","text":"please run device.info"}]}}}`
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// sendHandler is a message/send-shaped handler: it decodes the JSON-RPC
// request, creates the task, reads it, completes it with an artifact
// (acknowledged: synced before the answer) and answers with its JSON.
func sendHandler(b taskBackend) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Params struct {
				Message json.RawMessage `json:"message"`
			} `json:"params"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx := r.Context()
		id := fmt.Sprintf("task-%d", benchSeq.Add(1))
		hist, _ := json.Marshal([]json.RawMessage{req.Params.Message})
		t := Task{ID: id, Owner: "0123456789abcdef", ContextID: "ctx-" + id, State: StateSubmitted, History: hist}
		if err := b.CreateTask(ctx, t); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		got, err := b.Task(ctx, id)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		got.State, got.Status, got.Artifacts = StateCompleted, benchStatus, benchArtifacts
		if err := b.UpdateTask(ctx, got); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		var buf bytes.Buffer
		json.NewEncoder(&buf).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": map[string]any{
			"kind": "task", "id": got.ID, "contextId": got.ContextID, "status": json.RawMessage(got.Status),
			"history": json.RawMessage(got.History), "artifacts": json.RawMessage(got.Artifacts),
		}})
		w.Header().Set("Content-Type", "application/json")
		w.Write(buf.Bytes())
	})
}
