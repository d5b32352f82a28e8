package mesh

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tailscale.com/net/netns"
)

// Real multicast between network namespaces (DESIGN.md "Testing on real parts"): each node runs as
// a child process in its own namespace, joined by veth to a bridge in a
// namespace of its own, all made and removed by the test. Every packet
// stays inside those namespaces; the host's interfaces are never used.
// Addresses are from 198.18.0.0/15, the range RFC 2544 sets aside for
// benchmark test networks.

const (
	helperEnv  = "MESHTRAY_MESH_HELPER" // set in a child node's environment
	nsPrefix   = "mtmesh-"              // every namespace the tests make
	lanNet     = "198.18.7."
	bridgeAddr = lanNet + "254"
)

// netnsTiming makes liveness fast enough to test in seconds.
var netnsTiming = Timing{
	MDNSRefresh:  time.Second,
	MDNSExpiry:   3 * time.Second,
	Recheck:      500 * time.Millisecond,
	ProbeTimeout: time.Second,
	AddrPoll:     time.Second,
}

// benchTiming is DefaultTiming with a shorter liveness recheck, so a killed
// node's departure is measured in seconds: discovery of a new node rides on
// its announcement, not on the observer's re-browse (20 s here).
var benchTiming = Timing{Recheck: 2 * time.Second, ProbeTimeout: time.Second}

// helperTiming is the child's timing: netnsTiming, or benchTiming when
// MT_TIMING=bench.
func helperTiming() Timing {
	if os.Getenv("MT_TIMING") == "bench" {
		return benchTiming
	}
	return netnsTiming
}

// testLAN is a bridge namespace and n node namespaces.
type testLAN struct {
	t      testing.TB
	bridge string
	nodes  []string // namespace names
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root (CI runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("the ip command is missing: apt-get install -y iproute2")
	}
}

func ipcmd(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

var leftoversOnce sync.Once

// removeLeftovers deletes namespaces a crashed earlier run left behind.
func removeLeftovers(t testing.TB) {
	leftoversOnce.Do(func() {
		out, _ := exec.Command("ip", "netns", "list").Output()
		for _, line := range strings.Split(string(out), "\n") {
			name, _, _ := strings.Cut(line, " ")
			rest, ok := strings.CutPrefix(name, nsPrefix)
			if !ok {
				continue
			}
			// Names carry the pid of the run that made them: a run that is
			// still alive (another package's tests, a second checkout) keeps
			// its namespaces.
			pid, _, _ := strings.Cut(rest, "-")
			if p, err := strconv.Atoi(pid); err == nil && p != os.Getpid() {
				if _, err := os.Stat("/proc/" + pid); err == nil {
					continue
				}
			}
			exec.Command("ip", "netns", "del", name).Run()
		}
	})
}

var lanSeq atomic.Int32

func newTestLAN(t testing.TB, n int) *testLAN {
	t.Helper()
	requireRoot(t)
	removeLeftovers(t)
	tag := fmt.Sprintf("%s%d-%d-", nsPrefix, os.Getpid(), lanSeq.Add(1))
	l := &testLAN{t: t, bridge: tag + "br"}
	t.Cleanup(func() {
		for _, ns := range append(slices.Clone(l.nodes), l.bridge) {
			exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	ipcmd(t, "netns", "add", l.bridge)
	ipcmd(t, "-n", l.bridge, "link", "add", "br0", "type", "bridge")
	ipcmd(t, "-n", l.bridge, "link", "set", "br0", "type", "bridge", "mcast_snooping", "0")
	ipcmd(t, "-n", l.bridge, "link", "set", "br0", "up")
	ipcmd(t, "-n", l.bridge, "link", "set", "lo", "up")
	// The bridge's own address serves the test tailnet's control, DERP and
	// STUN (TestBothSourcesOneRow).
	ipcmd(t, "-n", l.bridge, "addr", "add", bridgeAddr+"/24", "dev", "br0")
	for i := 1; i <= n; i++ {
		ns := fmt.Sprintf("%sn%d", tag, i)
		l.nodes = append(l.nodes, ns)
		port := fmt.Sprintf("p%d", i)
		ipcmd(t, "netns", "add", ns)
		// Both ends are created inside the namespaces: nothing appears on
		// the host, even for a moment.
		ipcmd(t, "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", l.bridge)
		ipcmd(t, "-n", l.bridge, "link", "set", port, "master", "br0", "up")
		ipcmd(t, "-n", ns, "addr", "add", lanNet+strconv.Itoa(i)+"/24", "dev", "eth0")
		ipcmd(t, "-n", ns, "link", "set", "eth0", "up")
		ipcmd(t, "-n", ns, "link", "set", "lo", "up")
	}
	return l
}

// Child protocol: line-delimited JSON. The parent writes helperCmd lines to
// stdin; the child writes helperEvent lines to stdout.
type helperCmd struct {
	Cmd string `json:"cmd"` // "a2a", "lan", "quit"
	On  bool   `json:"on"`
}

type helperEvent struct {
	Ev    string `json:"ev"` // "ready", "peers", "control"
	ID    string `json:"id,omitempty"`
	URL   string `json:"url,omitempty"` // the control URL
	Peers []Peer `json:"peers,omitempty"`
}

// TestHelperProcess is a node when run as a child (helperEnv set); as a
// plain test it does nothing.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		return
	}
	if os.Getenv("MT_ROLE") == "control" {
		os.Exit(helperControl())
	}
	os.Exit(helperNode(os.Getenv("MT_NAME")))
}

// helperControl runs the test tailnet's control, DERP and STUN on the
// bridge address, inside the bridge namespace, until stdin closes.
func helperControl() int {
	url, _ := startTestControl(helperTB{}, bridgeAddr)
	json.NewEncoder(os.Stdout).Encode(helperEvent{Ev: "control", URL: url})
	io.Copy(io.Discard, os.Stdin)
	return 0
}

func helperNode(name string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	id := newTestIdentity(helperTB{})
	var a2a atomic.Bool
	self := func() Hello {
		h := Hello{ID: id.id, Name: name, OS: "Test OS", FP: id.fp, V: ProtocolVersion, A2A: a2a.Load()}
		return h
	}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(DefaultPort))
	if err != nil {
		return fail(err)
	}

	// With a control URL the node is also on the test tailnet, serving the
	// same hello on its tsnet listener.
	var tsAPI LocalAPI
	var tsDial func(ctx context.Context, network, addr string) (net.Conn, error)
	var tln net.Listener
	if url := os.Getenv("MT_CONTROL"); url != "" {
		upCtx, upCancel := context.WithTimeout(context.Background(), 60*time.Second)
		netnsOnce.Do(func() { netns.SetEnabled(false) })
		ts := startTSNode(helperTB{}, upCtx, url, name)
		upCancel()
		defer ts.Close()
		if tln, err = ts.Listen("tcp", ":"+strconv.Itoa(DefaultPort)); err != nil {
			return fail(err)
		}
		lc, err := ts.LocalClient()
		if err != nil {
			return fail(err)
		}
		tsAPI, tsDial = lc, ts.Dial
	}

	level := slog.LevelInfo
	if os.Getenv("MT_DEBUG") != "" {
		level = slog.LevelDebug
	}
	d := New(Options{
		Self:        self,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("node", name),
		NoTailscale: tsAPI == nil,
		Tailscale:   tsAPI,
		Dial:        tsDial,
		DeviceID:    testDeviceID,
		LAN:         true,
		Timing:      helperTiming(),
	})
	// As the app does: the hello is served (listeners up) before discovery
	// starts, by the Discovery's handler, which probes back tailnet callers.
	mux := http.NewServeMux()
	mux.Handle("GET "+HelloPath, d.HelloHandler())
	defer serveTLS(helperTB{}, ln, id, mux).Close()
	if tln != nil {
		defer serveTLS(helperTB{}, tln, id, mux).Close()
	}
	var outMu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(ev helperEvent) {
		outMu.Lock()
		defer outMu.Unlock()
		enc.Encode(ev)
	}
	ch, cancel := d.Table().Subscribe()
	defer cancel()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if err := d.Start(ctx); err != nil {
		return fail(err)
	}
	emit(helperEvent{Ev: "ready", ID: id.id})
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				emit(helperEvent{Ev: "peers", Peers: d.Table().Snapshot()})
			}
		}
	}()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var c helperCmd
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return fail(err)
		}
		switch c.Cmd {
		case "a2a":
			a2a.Store(c.On)
			d.SelfChanged()
		case "lan":
			d.SetLAN(c.On)
		case "quit":
			d.Close()
			return 0
		}
	}
	d.Close()
	return 0
}

// helperTB lets test helpers run in a child process, outside a test.
type helperTB struct{ testing.TB }

func (helperTB) Helper()                 {}
func (helperTB) Cleanup(func())          {} // the process exits
func (helperTB) Log(args ...any)         { fmt.Fprintln(os.Stderr, args...) }
func (helperTB) Logf(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }
func (helperTB) Fatal(args ...any)       { fmt.Fprintln(os.Stderr, args...); os.Exit(1) }
func (helperTB) Errorf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, f+"\n", a...)
	os.Exit(1)
}
func (helperTB) TempDir() string {
	dir, err := os.MkdirTemp(os.Getenv("MT_TMP"), "helper-") // under the parent test's TempDir
	if err != nil {
		panic(err)
	}
	return dir
}
func (helperTB) Fatalf(f string, args ...any) {
	fmt.Fprintf(os.Stderr, f+"\n", args...)
	os.Exit(1)
}

// node is the parent's handle on a child node.
type node struct {
	t       testing.TB
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	started time.Time
	done    chan struct{}

	mu      sync.Mutex
	id      string
	ready   time.Time
	url     string
	peers   []Peer
	changed chan struct{} // capacity 1
}

func (l *testLAN) start(t testing.TB, i int, name string, env ...string) *node {
	t.Helper()
	return l.startIn(t, l.nodes[i], name, env...)
}

// startControl runs the test tailnet's control in the bridge namespace and
// returns its URL.
func (l *testLAN) startControl(t testing.TB) string {
	t.Helper()
	n := l.startIn(t, l.bridge, "control", "MT_ROLE=control")
	n.wait(30*time.Second, "control URL", func() bool { return n.URL() != "" })
	return n.URL()
}

func (l *testLAN) startIn(t testing.TB, ns, name string, env ...string) *node {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, name: name, done: make(chan struct{}), changed: make(chan struct{}, 1)}
	n.cmd = exec.Command("ip", "netns", "exec", ns, exe, "-test.run=^TestHelperProcess$")
	n.cmd.Env = append(append(os.Environ(), helperEnv+"=1", "MT_NAME="+name, "MT_TMP="+t.TempDir()), env...)
	n.cmd.Stderr = &prefixWriter{t: t, prefix: name + ": "}
	stdout, err := n.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if n.stdin, err = n.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	n.started = time.Now()
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(n.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev helperEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue // go test's own output
			}
			n.mu.Lock()
			switch ev.Ev {
			case "ready":
				n.id = ev.ID
				n.ready = time.Now()
			case "control":
				n.url = ev.URL
			case "peers":
				n.peers = ev.Peers
			}
			n.mu.Unlock()
			select {
			case n.changed <- struct{}{}:
			default:
			}
		}
		n.cmd.Wait()
	}()
	t.Cleanup(n.kill)
	return n
}

func (n *node) send(c helperCmd) {
	b, _ := json.Marshal(c)
	if _, err := n.stdin.Write(append(b, '\n')); err != nil {
		n.t.Fatalf("%s: %v", n.name, err)
	}
}

// kill ends the child at once (SIGKILL: no goodbye, like a crash).
func (n *node) kill() {
	if n.cmd.Process != nil {
		n.cmd.Process.Kill()
	}
	<-n.done
}

func (n *node) ID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.id
}

func (n *node) URL() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.url
}

func (n *node) peer(id string) (Peer, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.peers {
		if p.ID == id {
			return p, true
		}
	}
	return Peer{}, false
}

func (n *node) snapshot() []Peer {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.peers)
}

// wait blocks until cond holds on n's latest table or d passes, and returns
// when it first held.
func (n *node) wait(d time.Duration, what string, cond func() bool) time.Time {
	n.t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		if cond() {
			return time.Now()
		}
		select {
		case <-n.changed:
		case <-n.done:
			if !cond() {
				n.t.Fatalf("%s exited while waiting for %s", n.name, what)
			}
		case <-deadline.C:
			n.t.Fatalf("%s: timed out after %v waiting for %s; table: %+v", n.name, d, what, n.snapshot())
		}
	}
}

func (n *node) waitReady(d time.Duration) string {
	n.wait(d, "ready", func() bool { return n.ID() != "" })
	return n.ID()
}

type prefixWriter struct {
	t      testing.TB
	prefix string
	mu     sync.Mutex
	buf    []byte
}

func (w *prefixWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := slices.Index(w.buf, '\n')
		if i < 0 {
			break
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		if testing.Verbose() || strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") || strings.Contains(line, "panic") {
			fmt.Fprintln(os.Stderr, w.prefix+line)
		}
	}
	return len(b), nil
}

// TestMDNSNamespaces: three nodes discover each other over real multicast;
// toggling A2A on one changes its a2a TXT as the others see it; switching
// LAN reachability off on one withdraws it (its hello server stays up, so
// only the mDNS withdrawal can make it go); a killed one disappears within
// its expiry.
func TestMDNSNamespaces(t *testing.T) {
	lan := newTestLAN(t, 3)
	nodes := []*node{lan.start(t, 0, "alpha"), lan.start(t, 1, "bravo"), lan.start(t, 2, "charlie")}
	ids := make([]string, 3)
	for i, n := range nodes {
		ids[i] = n.waitReady(10 * time.Second)
	}
	sees := func(n *node, id string, cond func(Peer) bool) func() bool {
		return func() bool {
			p, ok := n.peer(id)
			return ok && cond(p)
		}
	}
	gone := func(n *node, id string) func() bool {
		return func() bool { _, ok := n.peer(id); return !ok }
	}

	for i, n := range nodes {
		for j := range nodes {
			if i == j {
				continue
			}
			n.wait(10*time.Second, nodes[j].name, sees(n, ids[j], func(p Peer) bool {
				return p.Online && slices.Equal(p.Sources, []Source{SourceMDNS}) &&
					slices.Equal(p.Addrs[SourceMDNS], []string{lanNet + strconv.Itoa(j+1) + ":" + strconv.Itoa(DefaultPort)}) &&
					p.Name == nodes[j].name && p.FP != "" && !p.A2A
			}))
		}
		if _, ok := n.peer(ids[i]); ok {
			t.Fatalf("%s lists itself", n.name)
		}
	}

	t.Run("a2a toggle", func(t *testing.T) {
		nodes[0].send(helperCmd{Cmd: "a2a", On: true})
		for _, n := range nodes[1:] {
			n.wait(5*time.Second, "alpha a2a=1", sees(n, ids[0], func(p Peer) bool { return p.A2A }))
		}
		nodes[0].send(helperCmd{Cmd: "a2a", On: false})
		for _, n := range nodes[1:] {
			n.wait(5*time.Second, "alpha a2a=0", sees(n, ids[0], func(p Peer) bool { return !p.A2A }))
		}
	})

	t.Run("lan off withdraws", func(t *testing.T) {
		nodes[1].send(helperCmd{Cmd: "lan", On: false})
		for _, n := range []*node{nodes[0], nodes[2]} {
			n.wait(netnsTiming.MDNSExpiry+3*time.Second, "bravo withdrawn", gone(n, ids[1]))
		}
		nodes[1].wait(2*time.Second, "bravo's table emptied at once",
			func() bool { return len(nodes[1].snapshot()) == 0 })
		nodes[1].send(helperCmd{Cmd: "lan", On: true})
		for _, n := range []*node{nodes[0], nodes[2]} {
			n.wait(5*time.Second, "bravo back", sees(n, ids[1], func(p Peer) bool { return p.Online }))
		}
	})

	t.Run("killed disappears", func(t *testing.T) {
		killed := time.Now()
		nodes[2].kill()
		for _, n := range nodes[:2] {
			at := n.wait(netnsTiming.MDNSExpiry+time.Second, "charlie gone", gone(n, ids[2]))
			t.Logf("%s dropped charlie %v after the kill (expiry %v)", n.name, at.Sub(killed).Round(time.Millisecond), netnsTiming.MDNSExpiry)
		}
	})
}

// TestBothSourcesOneRow: two nodes on one LAN and one tailnet (control,
// DERP and STUN run in the bridge namespace) see each other over mDNS and
// over the tailnet, as one row with two sources; when one switches LAN
// reachability off, the other keeps its row with the tailnet source alone.
func TestBothSourcesOneRow(t *testing.T) {
	lan := newTestLAN(t, 2)
	url := lan.startControl(t)
	nodes := []*node{lan.start(t, 0, "alpha", "MT_CONTROL="+url), lan.start(t, 1, "bravo", "MT_CONTROL="+url)}
	ids := []string{nodes[0].waitReady(90 * time.Second), nodes[1].waitReady(90 * time.Second)}
	for i, n := range nodes {
		j := 1 - i
		n.wait(30*time.Second, nodes[j].name+" over mDNS and the tailnet", func() bool {
			p, ok := n.peer(ids[j])
			return ok && p.Online && slices.Equal(p.Sources, []Source{SourceMDNS, SourceTailscale}) &&
				slices.Equal(p.Addrs[SourceMDNS], []string{lanNet + strconv.Itoa(j+1) + ":" + strconv.Itoa(DefaultPort)}) &&
				len(p.Addrs[SourceTailscale]) > 0 && strings.HasPrefix(p.Addrs[SourceTailscale][0], "100.") &&
				strings.HasPrefix(p.TailnetNode, nodes[j].name)
		})
		if len(n.snapshot()) != 1 {
			t.Fatalf("%s: want exactly one row, got %+v", n.name, n.snapshot())
		}
	}
	nodes[1].send(helperCmd{Cmd: "lan", On: false})
	nodes[0].wait(netnsTiming.MDNSExpiry+3*time.Second, "bravo on the tailnet only", func() bool {
		p, ok := nodes[0].peer(ids[1])
		return ok && p.Online && slices.Equal(p.Sources, []Source{SourceTailscale})
	})
}
