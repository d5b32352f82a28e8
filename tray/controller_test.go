package tray

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/a2a/delegate"
	"meshtray/app"
	"meshtray/files"
	"meshtray/mesh"
)

func TestBuildMenu(t *testing.T) {
	t.Parallel()
	base := app.Status{Name: "laptop", OS: "Debian GNU/Linux 12 (x86_64)", DeviceID: "ID", Tailscale: "not running"}
	peer := func(name string, online, paired bool, src ...mesh.Source) mesh.Peer {
		return mesh.Peer{ID: name + "-id", Name: name, Online: online, Paired: paired, Sources: src}
	}
	for _, tc := range []struct {
		name   string
		mod    func(*snapshot)
		status string
		icon   iconState
		peers  []string
	}{
		{"idle", func(*snapshot) {}, "A2A off · not reachable from other devices", iconNormal, nil},
		{"published on the tailnet", func(s *snapshot) { s.Status.A2A.Enabled = true; s.Status.Tailscale = "running" },
			"A2A on · reachable via tailnet", iconPublished, nil},
		{"approval wins over published", func(s *snapshot) {
			s.Status.A2A.Enabled, s.Status.LAN, s.Status.Tailscale, s.Status.PendingApprovals = true, true, "running", 3
		}, "A2A on · reachable via tailnet and LAN · 3 approvals waiting", iconApproval, nil},
		{"one approval", func(s *snapshot) { s.Status.PendingApprovals = 1 }, "A2A off · not reachable from other devices · 1 approval waiting", iconApproval, nil},
		{"online peers only, by name", func(s *snapshot) {
			s.Peers = []mesh.Peer{peer("zed", true, false, mesh.SourceTailscale), peer("gone", false, true, mesh.SourceMDNS),
				peer("Amy", true, true, mesh.SourceMDNS, mesh.SourceTailscale)}
		}, "A2A off · not reachable from other devices", iconNormal, []string{"Amy — LAN, tailnet · paired", "zed — tailnet"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := snapshot{Status: base, AutostartOK: true}
			tc.mod(&s)
			m := buildMenu(s)
			if m.StatusLine != tc.status || m.Icon != tc.icon {
				t.Errorf("status %q icon %d, want %q %d", m.StatusLine, m.Icon, tc.status, tc.icon)
			}
			var got []string
			for _, p := range m.Peers {
				got = append(got, p.Label)
			}
			if strings.Join(got, "|") != strings.Join(tc.peers, "|") {
				t.Errorf("peers %q, want %q", got, tc.peers)
			}
			items := m.items()
			if items[0].Label != "laptop — Debian GNU/Linux 12 (x86_64)" || items[0].Act.kind != actCopyID {
				t.Errorf("first item %+v", items[0])
			}
			if items[9].Label != approvalsLabel(s.Status.PendingApprovals) {
				t.Errorf("approvals item %q", items[9].Label)
			}
		})
	}
	// The submenu is bounded.
	var many []mesh.Peer
	for i := range maxMenuPeers + 5 {
		many = append(many, peer(fmt.Sprintf("p%02d", i), true, false, mesh.SourceMDNS))
	}
	m := buildMenu(snapshot{Status: base, Peers: many})
	if len(m.Peers) != maxMenuPeers || m.MorePeers != 5 {
		t.Errorf("peers %d more %d", len(m.Peers), m.MorePeers)
	}
	sub := m.items()[5].Sub
	if sub[maxMenuPeers].Label != "and 5 more" || sub[len(sub)-1].Label != labelAllPeers {
		t.Errorf("submenu tail: %q %q", sub[maxMenuPeers].Label, sub[len(sub)-1].Label)
	}

	// A missing meshtray-ui: two disabled items under the status line,
	// naming the file and how to get it; the rest of the menu unchanged.
	full := buildMenu(snapshot{Status: base}).items()
	items := buildMenu(snapshot{Status: base, UIMissing: "/opt/meshtray/meshtray-ui"}).items()
	if len(items) != len(full)+2 {
		t.Fatalf("%d items with meshtray-ui missing, want %d", len(items), len(full)+2)
	}
	if it := items[2]; it.Label != "No windows: /opt/meshtray/meshtray-ui is missing" || !it.Disabled {
		t.Errorf("missing item %+v", it)
	}
	if it := items[3]; !strings.HasPrefix(it.Label, "Get it: ") || !strings.Contains(it.Label, "make build") || !it.Disabled {
		t.Errorf("hint item %+v", it)
	}
	for i := range full[2:] {
		if items[i+4].Label != full[i+2].Label {
			t.Errorf("item %d: %q, want %q", i+4, items[i+4].Label, full[i+2].Label)
		}
	}
}

// fakeAPI is the control API as the tray sees it, in memory.
type fakeAPI struct {
	mu        sync.Mutex
	status    app.Status
	approvals []app.Approval
	outbound  []delegate.OutboundTask
	received  []app.ReceivedTransfer
	reads     int      // of received
	posts     []string // "METHOD ARGUMENT-AS-JSON" of each change asked for
	events    chan []app.EventType
}

// post records a change the tray asked for.
func (f *fakeAPI) post(method string, arg any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, _ := json.Marshal(arg)
	f.posts = append(f.posts, method+" "+string(b))
}

// read returns a copy of v made under the lock (the way the wire copies).
func read[T any](f *fakeAPI, v *T) (T, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out T
	b, _ := json.Marshal(*v)
	return out, json.Unmarshal(b, &out)
}

func (f *fakeAPI) Status(context.Context) (app.Status, error)        { return read(f, &f.status) }
func (f *fakeAPI) Approvals(context.Context) ([]app.Approval, error) { return read(f, &f.approvals) }
func (f *fakeAPI) Outbound(context.Context) ([]delegate.OutboundTask, error) {
	return read(f, &f.outbound)
}
func (f *fakeAPI) Peers(context.Context) ([]mesh.Peer, error) { return []mesh.Peer{}, nil }
func (f *fakeAPI) ReceivedFiles(context.Context) ([]app.ReceivedTransfer, error) {
	f.mu.Lock()
	f.reads++
	f.mu.Unlock()
	return read(f, &f.received)
}

func (f *fakeAPI) receivedReads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}
func (f *fakeAPI) PendingUI(context.Context) ([]app.UIRequest, error) {
	return nil, nil
}
func (f *fakeAPI) SetA2A(_ context.Context, on bool) (app.A2AStatus, error) {
	f.post("SetA2A", on)
	return app.A2AStatus{Enabled: on}, nil
}
func (f *fakeAPI) UpdateConfig(_ context.Context, u app.ConfigUpdate) (app.Settings, error) {
	f.post("UpdateConfig", u)
	return app.Settings{}, nil
}
func (f *fakeAPI) OpenUI(_ context.Context, r app.UIRequest) error {
	f.post("OpenUI", r)
	return nil
}

func (f *fakeAPI) Events(ctx context.Context, fn func([]app.EventType)) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ts := <-f.events:
			fn(ts)
		}
	}
}

func (f *fakeAPI) postsSnapshot() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string{}, f.posts...)
}

type recordMenu struct {
	mu     sync.Mutex
	models []menuModel
}

func (r *recordMenu) render(_ context.Context, m menuModel) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.models = append(r.models, m)
}

func (r *recordMenu) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.models)
}

type recordUI struct {
	api *fakeAPI
}

func (u recordUI) open(ctx context.Context, r app.UIRequest) error {
	return u.api.OpenUI(ctx, r)
}

func (u recordUI) missing() string { return "" }

type fakeAutostart struct{ on bool }

func (a *fakeAutostart) Enabled() (bool, error) { return a.on, nil }
func (a *fakeAutostart) Enable() error          { a.on = true; return nil }
func (a *fakeAutostart) Disable() error         { a.on = false; return nil }

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestControllerLoop runs the tray's event loop against an in-memory
// control API: renders only changed menus, announces each approval once
// (a notification and one popup request), and turns clicks into calls.
func TestControllerLoop(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{status: app.Status{Name: "laptop", OS: "Linux", DeviceID: "DEV-ID", LogDir: "/tmp/logs"}, events: make(chan []app.EventType)}
	menu := &recordMenu{}
	var mu sync.Mutex
	var notices, copied, opened []string
	as := &fakeAutostart{}
	quit := make(chan struct{})
	c := &controller{
		api: api, menu: menu, ui: recordUI{api}, autostart: as,
		notify: func(_ context.Context, title, body string) {
			mu.Lock()
			notices = append(notices, title)
			mu.Unlock()
		},
		copyText: func(s string) error { mu.Lock(); copied = append(copied, s); mu.Unlock(); return nil },
		openPath: func(s string) error { mu.Lock(); opened = append(opened, s); mu.Unlock(); return nil },
		quit:     func() { close(quit) },
		log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		clicks:   make(chan action),
	}
	var settled int // start-up memory returned: once, after the first render
	c.settled = func() {
		if menu.count() != 1 {
			t.Errorf("settled before the first render")
		}
		settled++
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.run(ctx); close(done) }()
	defer func() {
		cancel()
		<-done
		if settled != 1 {
			t.Errorf("settled ran %d times, want once", settled)
		}
	}()

	waitUntil(t, "the first render", func() bool { return menu.count() == 1 })
	// A notice that changes nothing visible renders nothing.
	api.events <- []app.EventType{app.EventPeers}
	api.events <- []app.EventType{app.EventStatus}
	// A new approval: one render, one notification, one popup request.
	api.mu.Lock()
	api.approvals = []app.Approval{{ID: "A1", Kind: app.KindDelegation, Peer: "phone", Summary: "device.info"}}
	api.mu.Unlock()
	api.events <- []app.EventType{app.EventApprovals}
	waitUntil(t, "the approval render", func() bool { return menu.count() == 2 })
	mu.Lock()
	gotNotices := append([]string{}, notices...)
	mu.Unlock()
	if len(gotNotices) != 1 || gotNotices[0] != "Delegation from phone" {
		t.Fatalf("notices %q", gotNotices)
	}
	if p := api.postsSnapshot(); len(p) != 1 || p[0] != `OpenUI {"window":"approvals"}` {
		t.Fatalf("posts %q", p)
	}
	menu.mu.Lock()
	last := menu.models[1]
	menu.mu.Unlock()
	if last.Icon != iconApproval || last.Approvals != 1 {
		t.Errorf("menu after the approval: icon %d approvals %d", last.Icon, last.Approvals)
	}
	// The same approval again: no second notice.
	api.events <- []app.EventType{app.EventApprovals}
	c.clicks <- action{kind: actToggleA2A}
	c.clicks <- action{kind: actCopyID}
	c.clicks <- action{kind: actOpenPeer, arg: "PEER"}
	c.clicks <- action{kind: actAutostart}
	c.clicks <- action{kind: actOpenLogs}
	waitUntil(t, "the log folder opened", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(opened) == 1
	})
	menu.mu.Lock()
	if !menu.models[len(menu.models)-1].Autostart {
		t.Error("Start at login not checked after the click")
	}
	menu.mu.Unlock()
	want := []string{`OpenUI {"window":"approvals"}`, `SetA2A true`, `OpenUI {"window":"peer","arg":"PEER"}`}
	if p := api.postsSnapshot(); strings.Join(p, "\n") != strings.Join(want, "\n") {
		t.Errorf("posts:\n%s\nwant:\n%s", strings.Join(p, "\n"), strings.Join(want, "\n"))
	}
	mu.Lock()
	if len(notices) != 2 || notices[1] != "Device ID copied" || strings.Join(copied, ",") != "DEV-ID" || strings.Join(opened, ",") != "/tmp/logs" {
		t.Errorf("notices %q copied %q opened %q", notices, copied, opened)
	}
	mu.Unlock()
	c.clicks <- action{kind: actQuit}
	select {
	case <-quit:
	case <-time.After(5 * time.Second):
		t.Fatal("Quit did not quit")
	}
}

func TestApprovalNotice(t *testing.T) {
	t.Parallel()
	title, body := approvalNotice(app.Approval{Kind: app.KindPairing, Peer: "phone", Summary: "pair with phone, asking for agent", SAS: "123456"})
	if title != "phone wants to pair" || !strings.Contains(body, "Code on both screens: 123456") {
		t.Errorf("%q %q", title, body)
	}
}

// TestControllerQuestions: a delegated task whose agent asks for input
// (input-required, A2A 0.3.0 §6.3) shows in the status line and the icon, is announced once
// per question with the question, and the menu opens the questions
// window; answered, it leaves the menu.
func TestControllerQuestions(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{status: app.Status{Name: "laptop", OS: "Linux"}, events: make(chan []app.EventType)}
	menu := &recordMenu{}
	var mu sync.Mutex
	type notice struct{ title, body string }
	var notices []notice
	c := &controller{
		api: api, menu: menu, ui: recordUI{api},
		notify: func(_ context.Context, title, body string) {
			mu.Lock()
			notices = append(notices, notice{title, body})
			mu.Unlock()
		},
		log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		clicks: make(chan action),
	}
	got := func() []notice { mu.Lock(); defer mu.Unlock(); return append([]notice{}, notices...) }
	lastModel := func() menuModel { menu.mu.Lock(); defer menu.mu.Unlock(); return menu.models[len(menu.models)-1] }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, "the first render", func() bool { return menu.count() == 1 })

	ask := func(state, q string) {
		api.mu.Lock()
		api.status.OutboundWaiting = 0
		if app.WaitsForOwner(state) {
			api.status.OutboundWaiting = 1
		}
		api.outbound = []delegate.OutboundTask{
			{ID: "T1", Agent: "bee-id", AgentName: "bee", Request: "hello there", State: a2a.TaskState(state), Message: q},
			{ID: "T0", Agent: "bee-id", AgentName: "bee", Request: "old", State: "completed"},
		}
		api.mu.Unlock()
		api.events <- []app.EventType{app.EventTasks}
	}
	ask("input-required", "Which capability? Available: device.info, system.notify.")
	waitUntil(t, "the question's notice", func() bool { return len(got()) == 1 })
	if n := got()[0]; n.title != "bee asks" || !strings.Contains(n.body, "Which capability?") || !strings.Contains(n.body, "Questions from agents") {
		t.Fatalf("notice %+v", n)
	}
	waitUntil(t, "the question in the menu", func() bool { return lastModel().Questions == 1 })
	m := lastModel()
	if !strings.HasSuffix(m.StatusLine, " · 1 question from an agent") || m.Icon != iconApproval {
		t.Fatalf("menu with a question: status %q icon %d", m.StatusLine, m.Icon)
	}
	if it := m.items()[10]; it.Label != "Questions from agents (1)…" || it.Act.kind != actQuestions {
		t.Fatalf("questions item %+v", it)
	}
	// The same question again (another task event): no second notice; a
	// new question of the same task: one more.
	renders := menu.count()
	ask("input-required", "Which capability? Available: device.info, system.notify.")
	c.clicks <- action{kind: actQuestions} // the loop handled the event before the click
	waitUntil(t, "the questions window request", func() bool {
		p := api.postsSnapshot()
		return len(p) > 0 && p[len(p)-1] == `OpenUI {"window":"questions"}`
	})
	if len(got()) != 1 || menu.count() != renders {
		t.Fatalf("the same question again: %d notices, %d renders (was %d)", len(got()), menu.count(), renders)
	}
	ask("auth-required", "Sign in first.")
	waitUntil(t, "the new question's notice", func() bool { return len(got()) == 2 })
	// Answered: the task works again; the menu lets go of it.
	ask("working", "")
	waitUntil(t, "no question in the menu", func() bool { return lastModel().Questions == 0 })
	if m := lastModel(); strings.Contains(m.StatusLine, "question") || m.Icon != iconNormal || len(m.items()) != 16 {
		t.Fatalf("menu after the answer: %q icon %d, %d items", m.StatusLine, m.Icon, len(m.items()))
	}
	if len(got()) != 2 {
		t.Fatalf("notices %+v", got())
	}
}

// TestControllerReceivedFiles: a received transfer (EventFiles, then GET
// /files/received) is announced once, with its sender, its files and the
// folder the "Open folder" action opens; those there before the tray
// watched are not.
func TestControllerReceivedFiles(t *testing.T) {
	t.Parallel()
	old := app.ReceivedTransfer{TaskID: "T0", Peer: "phone", Result: files.Result{Dir: "/d", Files: []files.Saved{{Path: "old.txt"}}}}
	api := &fakeAPI{status: app.Status{Name: "laptop", OS: "Linux"}, received: []app.ReceivedTransfer{old}, events: make(chan []app.EventType)}
	type notice struct{ title, body, dir string }
	var mu sync.Mutex
	var got []notice
	c := &controller{
		api: api, menu: &recordMenu{}, ui: recordUI{api},
		notify: func(context.Context, string, string) {},
		notifyFiles: func(_ context.Context, title, body, dir string) {
			mu.Lock()
			got = append(got, notice{title, body, dir})
			mu.Unlock()
		},
		log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		clicks: make(chan action),
	}
	notices := func() []notice { mu.Lock(); defer mu.Unlock(); return append([]notice{}, got...) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	api.events <- []app.EventType{app.EventFiles} // the stream's first notice
	waitUntil(t, "the first read", func() bool { c2 := notices(); return len(c2) == 0 && api.receivedReads() > 0 })

	many := app.ReceivedTransfer{TaskID: "T1", Peer: "Ada’s phone", Result: files.Result{Dir: "/home/ada/Downloads/meshtray",
		Files: []files.Saved{{Path: "a.jpg"}, {Path: "Trip/b.jpg"}, {Path: "c.jpg"}, {Path: "d.jpg"}}}}
	api.mu.Lock()
	api.received = []app.ReceivedTransfer{many, old}
	api.mu.Unlock()
	api.events <- []app.EventType{app.EventFiles}
	waitUntil(t, "the notice", func() bool { return len(notices()) == 1 })
	n := notices()[0]
	if n.title != "4 files from Ada’s phone" || n.dir != "/home/ada/Downloads/meshtray" ||
		n.body != "a.jpg\nTrip/b.jpg\nc.jpg\n… and 1 more\nSaved in /home/ada/Downloads/meshtray" {
		t.Errorf("notice %+v", n)
	}
	one := app.ReceivedTransfer{TaskID: "T2", Peer: "laptop", Result: files.Result{Dir: "/d", Files: []files.Saved{{Path: "Docs/report.pdf"}}}}
	api.mu.Lock()
	api.received = []app.ReceivedTransfer{one, many, old}
	api.mu.Unlock()
	api.events <- []app.EventType{app.EventFiles}
	waitUntil(t, "the second notice", func() bool { return len(notices()) == 2 })
	if n := notices()[1]; n.title != "report.pdf from laptop" {
		t.Errorf("notice %+v", n)
	}
}
