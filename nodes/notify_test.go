//go:build linux

package nodes

import (
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"meshtray/keychain/keychaintest"
	"meshtray/pairing"
)

// needTool returns the path of a program the test needs, or fails the test
// with the command that installs it.
func needTool(t testing.TB, name, debPackage string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is needed by this test and is not installed: run `apt-get install %s`", name, debPackage)
	}
	return p
}

// startSessionBus starts a private session bus with no service on it
// (keychaintest.StartBus: no service activation, so no notification daemon
// of this machine can be started behind the test's back). It returns the
// bus address; the daemon is stopped at cleanup.
func startSessionBus(t testing.TB) string {
	t.Helper()
	d, err := keychaintest.StartBus()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	return d.Addr()
}

// lockedBuffer collects a child's stderr for error messages.
type lockedBuffer struct {
	mu  sync.Mutex
	buf boundedBuffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.max == 0 {
		b.buf.max = 64 << 10
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf.buf)
}

// notification is one Notify call the test server received.
type notification struct {
	AppName, Icon, Summary, Body string
	Expire                       int32
}

// notifyServer is a test-side org.freedesktop.Notifications service,
// exported with godbus on the private bus.
type notifyServer struct {
	caps  []string
	block chan struct{} // when non-nil, Notify waits for it to close
	mu    sync.Mutex
	got   []notification
	next  uint32
}

func (s *notifyServer) GetCapabilities() ([]string, *dbus.Error) { return s.caps, nil }

func (s *notifyServer) GetServerInformation() (string, string, string, string, *dbus.Error) {
	return "meshtray-test", "meshtray", "1", "1.2", nil
}

func (s *notifyServer) Notify(appName string, replacesID uint32, appIcon, summary, body string, actions []string, hints map[string]dbus.Variant, expire int32) (uint32, *dbus.Error) {
	if s.block != nil {
		<-s.block
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	s.got = append(s.got, notification{appName, appIcon, summary, body, expire})
	return s.next, nil
}

func (s *notifyServer) received() []notification {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]notification(nil), s.got...)
}

func serveNotifications(t testing.TB, addr string, s *notifyServer) {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.Export(s, notifyPath, notifyInterface); err != nil {
		t.Fatal(err)
	}
	reply, err := conn.RequestName(notifyService, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName: %v %v", reply, err)
	}
}

func TestNotifyDelivered(t *testing.T) {
	t.Parallel()
	addr := startSessionBus(t)
	srv := &notifyServer{caps: []string{"body"}}
	serveNotifications(t, addr, srv)
	n := NewNotifier(NotifierOptions{BusAddress: addr, Icon: "dialog-information"})

	d, err := n.Notify(context.Background(), "Backup done", "3 files <copied> & checked")
	if err != nil {
		t.Fatal(err)
	}
	if !d.Delivered || d.ID != 1 || d.Reason != "" {
		t.Fatalf("delivery %+v", d)
	}
	got := srv.received()
	want := notification{AppName: "meshtray", Icon: "dialog-information", Summary: "Backup done", Body: "3 files <copied> & checked", Expire: -1}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("server received %+v, want %+v", got, want)
	}
}

func TestNotifyEscapesMarkup(t *testing.T) {
	t.Parallel()
	addr := startSessionBus(t)
	srv := &notifyServer{caps: []string{"body", "body-markup", "body-hyperlinks"}}
	serveNotifications(t, addr, srv)
	n := NewNotifier(NotifierOptions{BusAddress: addr})
	if _, err := n.Notify(context.Background(), "<b>title</b>", `<a href="http://evil">click</a> & <img src="x"/>`); err != nil {
		t.Fatal(err)
	}
	got := srv.received()
	if len(got) != 1 || got[0].Body != `&lt;a href="http://evil"&gt;click&lt;/a&gt; &amp; &lt;img src="x"/&gt;` || got[0].Summary != "<b>title</b>" {
		t.Fatalf("server received %+v", got)
	}
}

// TestNotifyCapability goes through the registry: the manifest entry, the
// sender named for a remote caller, and the headless answers.
func TestNotifyCapability(t *testing.T) {
	t.Parallel()
	addr := startSessionBus(t)
	srv := &notifyServer{caps: []string{"body"}}
	serveNotifications(t, addr, srv)
	r := newTestRegistry(t, Options{Notifier: NewNotifier(NotifierOptions{BusAddress: addr})})

	res, err := r.Invoke(context.Background(), Call{Capability: CapSystemNotify, Params: json.RawMessage(`{"title":"Hi","body":"from the phone"}`), Caller: grantCaller(pairing.PolicyAllow)})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, CapSystemNotify, res)
	if string(res.Data) != `{"delivered":true,"id":1}` {
		t.Errorf("result %s", res.Data)
	}
	res, err = r.Invoke(context.Background(), Call{Capability: CapSystemNotify, Params: json.RawMessage(`{"title":"Local"}`)})
	if err != nil {
		t.Fatal(err)
	}
	got := srv.received()
	if len(got) != 2 {
		t.Fatalf("received %+v", got)
	}
	if got[0].Summary != "Hi" || got[0].Body != "from the phone\n(sent by phone via meshtray)" {
		t.Errorf("remote notification %+v: want the sender named", got[0])
	}
	if got[1].Summary != "Local" || got[1].Body != "" {
		t.Errorf("local notification %+v", got[1])
	}
	if res.Summary != `notification "Local" shown` {
		t.Errorf("summary %q", res.Summary)
	}
}

// muteBus listens on a unix socket, accepts connections and never answers:
// a hung session bus.
func muteBus(t testing.TB) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "mute")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "unix:path=" + sock
}

func TestNotifyHeadless(t *testing.T) {
	t.Parallel()
	emptyBus := startSessionBus(t) // a bus, but no notification service on it
	blockedBus := startSessionBus(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	serveNotifications(t, blockedBus, &notifyServer{caps: []string{"body"}, block: release})
	runtimeDir := t.TempDir() // XDG_RUNTIME_DIR without a bus socket
	mute := muteBus(t)

	tests := []struct {
		name   string
		opts   NotifierOptions
		reason string
	}{
		{"no session bus", NotifierOptions{Getenv: func(k string) string {
			if k == "XDG_RUNTIME_DIR" {
				return runtimeDir
			}
			return ""
		}}, "no desktop session: no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is unset)"},
		{"bus socket gone", NotifierOptions{BusAddress: "unix:path=" + filepath.Join(runtimeDir, "nothing-here")}, "cannot reach the D-Bus session bus: "},
		{"no notification service", NotifierOptions{BusAddress: emptyBus}, "no notification service on the session bus (org.freedesktop.Notifications)"},
		{"bus does not answer", NotifierOptions{BusAddress: mute, Timeout: 300 * time.Millisecond}, "the notification service did not answer within 300ms"},
		{"service does not answer", NotifierOptions{BusAddress: blockedBus, Timeout: 300 * time.Millisecond}, "the notification service did not answer within 300ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := NewNotifier(tt.opts)
			d, err := n.Notify(context.Background(), "t", "b")
			if err != nil {
				t.Fatalf("headless Notify returned an error: %v", err)
			}
			if d.Delivered || !strings.HasPrefix(d.Reason, tt.reason) {
				t.Fatalf("delivery %+v, want not delivered with reason %q", d, tt.reason)
			}
			// Through the registry too: a result, not an error.
			r := newTestRegistry(t, Options{Notifier: n})
			res, err := r.Invoke(context.Background(), Call{Capability: CapSystemNotify, Params: json.RawMessage(`{"title":"t"}`)})
			if err != nil {
				t.Fatal(err)
			}
			checkResult(t, r, CapSystemNotify, res)
			var got Delivery
			if err := json.Unmarshal(res.Data, &got); err != nil || got.Delivered || got.Reason == "" {
				t.Fatalf("result %s", res.Data)
			}
			if !strings.HasPrefix(res.Summary, "notification not delivered: ") {
				t.Errorf("summary %q", res.Summary)
			}
		})
	}
	// The caller's own cancellation is an error, not a headless answer.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := NewNotifier(NotifierOptions{BusAddress: blockedBus}).Notify(ctx, "t", "b"); err != context.Canceled {
		t.Errorf("Notify with a cancelled context = %v", err)
	}
}
