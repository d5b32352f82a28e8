package mesh

import (
	"context"
	"crypto/tls"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/derp/derpserver"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/ipn/store/mem"
	"tailscale.com/net/netns"
	"tailscale.com/net/stun/stuntest"
	"tailscale.com/tailcfg"
	"tailscale.com/tsnet"
	"tailscale.com/tstest/integration/testcontrol"
	"tailscale.com/types/key"
	"tailscale.com/types/logger"
)

// A real tailnet on loopback: tailscale's testcontrol with its own DERP map
// (a DERP server and a STUN server bound to 127.0.0.1; a nil map would mean
// Tailscale's production DERP servers), AllOnline, and tsnet nodes with an
// in-memory state store. TestMain sets TS_DISABLE_PORTMAPPER and
// TS_DEBUG_OMIT_LOCAL_ADDRS, so no node probes the gateway or advertises
// the host's addresses.

var tailnetTiming = Timing{
	Recheck:      300 * time.Millisecond,
	ProbeTimeout: time.Second,
	NegativeTTL:  time.Minute,
	RetryMin:     50 * time.Millisecond,
	RetryMax:     500 * time.Millisecond,
}

// hostPackets makes stuntest bind one address instead of every address.
type hostPackets string

func (h hostPackets) ListenPacket(ctx context.Context, network, _ string) (net.PacketConn, error) {
	var lc net.ListenConfig
	return lc.ListenPacket(ctx, "udp4", net.JoinHostPort(string(h), "0"))
}

var netnsOnce sync.Once

// startTestControl starts DERP, STUN and testcontrol bound to host (a
// loopback address, or the bridge address inside a test namespace) and
// returns the control URL.
func startTestControl(t testing.TB, host string) (string, *testcontrol.Server) {
	t.Helper()
	// As tsnet's own tests do: no SO_MARK/bind-to-interface for test sockets.
	netnsOnce.Do(func() { netns.SetEnabled(false) })

	d := derpserver.New(key.NewNode(), logger.Discard)
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	derpSrv := httptest.NewUnstartedServer(derpserver.Handler(d))
	derpSrv.Listener.Close()
	derpSrv.Listener = ln
	derpSrv.Config.ErrorLog = log.New(discardWriter{}, "", 0)
	derpSrv.Config.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	derpSrv.StartTLS()
	stunAddr, stunStop := stuntest.ServeWithPacketListener(t, hostPackets(host))
	t.Cleanup(func() {
		derpSrv.CloseClientConnections()
		derpSrv.Close()
		d.Close()
		stunStop()
	})
	derpMap := &tailcfg.DERPMap{Regions: map[int]*tailcfg.DERPRegion{
		1: {RegionID: 1, RegionCode: "test", Nodes: []*tailcfg.DERPNode{{
			Name: "t1", RegionID: 1,
			HostName: host, IPv4: host, IPv6: "none",
			STUNPort: stunAddr.Port, DERPPort: ln.Addr().(*net.TCPAddr).Port,
			InsecureForTests: true, STUNTestIP: host,
		}}},
	}}
	ctl := &testcontrol.Server{
		DERPMap:        derpMap,
		AllOnline:      true,
		MagicDNSDomain: "tail-scale.ts.net",
		DNSConfig:      &tailcfg.DNSConfig{Proxied: true},
		Logf:           logger.Discard,
	}
	ctlLn, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	ctl.HTTPTestServer = httptest.NewUnstartedServer(ctl)
	ctl.HTTPTestServer.Listener.Close()
	ctl.HTTPTestServer.Listener = ctlLn
	ctl.HTTPTestServer.Config.ErrorLog = log.New(discardWriter{}, "", 0)
	ctl.HTTPTestServer.Start()
	t.Cleanup(ctl.HTTPTestServer.Close)
	return ctl.HTTPTestServer.URL, ctl
}

type discardWriter struct{}

func (discardWriter) Write(b []byte) (int, error) { return len(b), nil }

// startTSNode brings up an ephemeral tsnet node on the test control.
func startTSNode(t testing.TB, ctx context.Context, controlURL, hostname string) *tsnet.Server {
	t.Helper()
	s := &tsnet.Server{
		Dir:        filepath.Join(t.TempDir(), hostname),
		ControlURL: controlURL,
		Hostname:   hostname,
		Store:      new(mem.Store),
		Ephemeral:  true,
		Logf:       logger.Discard,
		UserLogf:   logger.Discard,
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Up(ctx); err != nil {
		t.Fatalf("tsnet %s: %v", hostname, err)
	}
	return s
}

// serveMeshtrayOnTailnet serves meshtray's hello over HTTPS on s's tsnet
// listener at the default port.
func serveMeshtrayOnTailnet(t testing.TB, s *tsnet.Server, id testIdentity, name string) *http.Server {
	t.Helper()
	ln, err := s.Listen("tcp", ":"+strconv.Itoa(DefaultPort))
	if err != nil {
		t.Fatal(err)
	}
	return serveHello(t, ln, id, func() Hello { return helloOf(id, name) })
}

func localClient(t testing.TB, s *tsnet.Server) *local.Client {
	t.Helper()
	lc, err := s.LocalClient()
	if err != nil {
		t.Fatal(err)
	}
	return lc
}

func tsIPv4(s *tsnet.Server) netip.Addr { ip4, _ := s.TailscaleIPs(); return ip4 }

func TestTailnetDiscovery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	controlURL, ctl := startTestControl(t, "127.0.0.1")
	a := startTSNode(t, ctx, controlURL, "alpha")
	b := startTSNode(t, ctx, controlURL, "bravo")
	c := startTSNode(t, ctx, controlURL, "charlie") // on the tailnet, no meshtray

	selfID, bID := newTestIdentity(t), newTestIdentity(t)
	bSrv := serveMeshtrayOnTailnet(t, b, bID, "bravo-meshtray")

	alc := &whoIsCounting{LocalAPI: localClient(t, a)}
	d := New(Options{
		Self:      func() Hello { return helloOf(selfID, "alpha-meshtray") },
		Tailscale: alc,
		Dial:      a.Dial,
		DeviceID:  testDeviceID,
		Timing:    tailnetTiming,
		Logger:    testLogger(t),
	})
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	aln, err := a.Listen("tcp", ":"+strconv.Itoa(DefaultPort))
	if err != nil {
		t.Fatal(err)
	}
	serveTLS(t, aln, selfID, d.HelloHandler())

	waitFor(t, 30*time.Second, "bravo in alpha's table over the tailnet", func() bool {
		p, ok := d.Table().Get(bID.id)
		return ok && p.Online && slices.Equal(p.Sources, []Source{SourceTailscale})
	})
	p, _ := d.Table().Get(bID.id)
	wantAddr := netip.AddrPortFrom(tsIPv4(b), DefaultPort).String()
	if p.Name != "bravo-meshtray" || p.Addrs[SourceTailscale][0] != wantAddr || !strings.HasPrefix(p.TailnetNode, "bravo") {
		t.Fatalf("bravo row %+v, want addr %s", p, wantAddr)
	}
	if st := d.TailscaleState(); st != TailscaleRunning {
		t.Fatalf("state %v", st)
	}
	if got := d.Addrs().Tailnet; !slices.Contains(got, tsIPv4(a)) {
		t.Fatalf("tailnet addrs %v, want alpha's %v", got, tsIPv4(a))
	}
	// charlie runs no meshtray: probed once, remembered, never listed.
	waitFor(t, 10*time.Second, "charlie in the negative cache", func() bool { return d.neg.len() == 1 })
	// Every peer's address is a tailnet peer's, meshtray or not; another
	// address in 100.64.0.0/10 (carrier-grade NAT too) is not.
	for _, n := range []*tsnet.Server{b, c} {
		if !d.IsTailnetPeer(tsIPv4(n)) {
			t.Errorf("IsTailnetPeer(%v) = false for a peer", tsIPv4(n))
		}
	}
	if d.IsTailnetPeer(netip.MustParseAddr("100.64.99.99")) || d.IsTailnetPeer(netip.MustParseAddr("127.0.0.1")) {
		t.Error("IsTailnetPeer true for an address no peer has")
	}
	if n := len(d.Table().Snapshot()); n != 1 {
		t.Fatalf("%d rows, want only bravo", n)
	}

	t.Run("meshtray started late", func(t *testing.T) {
		// charlie is remembered as not running meshtray. It starts
		// meshtray now: its discovery probes alpha, and alpha, called by a
		// tailnet peer it had written off, probes back at once instead of
		// waiting out its negative cache (NegativeTTL/8 = 7.5 s here).
		cID := newTestIdentity(t)
		cd := New(Options{
			Self:      func() Hello { return helloOf(cID, "charlie-meshtray") },
			Tailscale: localClient(t, c),
			Dial:      c.Dial,
			DeviceID:  testDeviceID,
			Timing:    tailnetTiming,
		})
		cln, err := c.Listen("tcp", ":"+strconv.Itoa(DefaultPort))
		if err != nil {
			t.Fatal(err)
		}
		serveTLS(t, cln, cID, cd.HelloHandler())
		started := time.Now()
		if err := cd.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer cd.Close()
		waitFor(t, 5*time.Second, "charlie in alpha's table", func() bool {
			p, ok := d.Table().Get(cID.id)
			return ok && p.Online
		})
		t.Logf("late meshtray found after %v", time.Since(started).Round(time.Millisecond))
		waitFor(t, 5*time.Second, "alpha and bravo in charlie's table", func() bool { return len(cd.Table().Snapshot()) == 2 })
	})

	t.Run("WhoIs", func(t *testing.T) {
		ln, err := a.Listen("tcp", ":7000")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			conn, err := ln.Accept()
			if err == nil {
				accepted <- conn
			}
			close(accepted)
		}()
		out, err := b.Dial(ctx, "tcp", netip.AddrPortFrom(tsIPv4(a), 7000).String())
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		in := <-accepted
		if in == nil {
			t.Fatal("accept failed")
		}
		defer in.Close()
		remote, err := netip.ParseAddrPort(in.RemoteAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		before := alc.n.Load()
		who := d.WhoIs(ctx, remote)
		if who == nil || !strings.HasPrefix(who.Node, "bravo") || who.User == "" {
			t.Fatalf("WhoIs(%v) = %+v", remote, who)
		}
		// The next request of bravo (another connection, another port) is
		// answered from the cache, identically.
		again := d.WhoIs(ctx, netip.AddrPortFrom(remote.Addr(), remote.Port()+1))
		if again == nil || *again != *who {
			t.Fatalf("cached WhoIs = %+v, want %+v", again, who)
		}
		if n := alc.n.Load() - before; n != 1 {
			t.Fatalf("%d LocalAPI WhoIs calls for two requests of one node, want 1", n)
		}
		if who := d.WhoIs(ctx, netip.MustParseAddrPort("127.0.0.1:5000")); who != nil {
			t.Fatalf("WhoIs(loopback) = %+v, want nil", who)
		}
		if who := d.WhoIs(ctx, netip.AddrPortFrom(netip.MustParseAddr("100.64.99.99"), 1)); who != nil {
			t.Fatalf("WhoIs(unknown tailnet addr) = %+v, want nil", who)
		}
	})

	t.Run("control says offline", func(t *testing.T) {
		// As production control does when a node disconnects: a patch to
		// alpha's netmap. The IPN bus brings it, Status follows.
		bst, err := localClient(t, b).StatusWithoutPeers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ast, err := localClient(t, a).StatusWithoutPeers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		patch := func(online bool) {
			if !ctl.AddRawMapResponse(ast.Self.PublicKey, &tailcfg.MapResponse{
				PeersChangedPatch: []*tailcfg.PeerChange{{NodeID: bst.Self.NodeID, Online: &online}},
			}) {
				t.Fatal("control did not queue the patch")
			}
		}
		patch(false)
		waitFor(t, 10*time.Second, "bravo offline after control's patch", func() bool {
			p, ok := d.Table().Get(bID.id)
			return ok && !p.Online && slices.Equal(p.Sources, []Source{SourceTailscale})
		})
		patch(true)
		waitFor(t, 10*time.Second, "bravo back online (hello re-confirmed)", func() bool {
			p, ok := d.Table().Get(bID.id)
			return ok && p.Online
		})
	})

	t.Run("identity re-created", func(t *testing.T) {
		// bravo's meshtray is reinstalled: same tailnet node, new
		// certificate. The old row loses its tailnet source (it must be
		// paired again); the new identity is found as a new row.
		bSrv.Close()
		old := bID
		bID = newTestIdentity(t)
		bSrv = serveMeshtrayOnTailnet(t, b, bID, "bravo-reinstalled")
		waitFor(t, 10*time.Second, "the new identity listed, the old one gone", func() bool {
			p, ok := d.Table().Get(bID.id)
			_, oldOK := d.Table().Get(old.id)
			return ok && p.Online && !oldOK && p.Name == "bravo-reinstalled"
		})
	})

	t.Run("offline", func(t *testing.T) {
		b.Close()
		waitFor(t, 10*time.Second, "bravo offline in alpha's table", func() bool {
			p, ok := d.Table().Get(bID.id)
			return ok && !p.Online
		})
	})
}

// countingHandler counts log records at every level.
type countingHandler struct {
	n    atomic.Int32
	mu   sync.Mutex
	msgs []string
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.n.Add(1)
	h.mu.Lock()
	h.msgs = append(h.msgs, r.Level.String()+" "+r.Message)
	h.mu.Unlock()
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// countingLocalAPI counts Status calls and can switch between a LocalAPI
// that is not there and one that is (tailscaled starting late).
type countingLocalAPI struct {
	status atomic.Int32
	dead   LocalAPI
	live   atomic.Pointer[local.Client]
}

func (c *countingLocalAPI) cur() LocalAPI {
	if l := c.live.Load(); l != nil {
		return l
	}
	return c.dead
}
func (c *countingLocalAPI) Status(ctx context.Context) (*ipnstate.Status, error) {
	c.status.Add(1)
	return c.cur().Status(ctx)
}
func (c *countingLocalAPI) WatchIPNBus(ctx context.Context, m ipn.NotifyWatchOpt) (*local.IPNBusWatcher, error) {
	return c.cur().WatchIPNBus(ctx, m)
}
func (c *countingLocalAPI) WhoIs(ctx context.Context, a string) (*apitype.WhoIsResponse, error) {
	return c.cur().WhoIs(ctx, a)
}

// TestTailscaledAbsent: no tailscaled at all (a LocalAPI socket path that
// does not exist) is the state "not running", logged once however many
// times the watcher retries; when tailscaled appears, the watcher connects.
func TestTailscaledAbsent(t *testing.T) {
	dead := &local.Client{Socket: filepath.Join(t.TempDir(), "no-tailscaled.sock"), UseSocketOnly: true}
	if _, err := dead.Status(context.Background()); err == nil {
		t.Fatal("a missing socket answered")
	}
	api := &countingLocalAPI{dead: dead}
	logs := &countingHandler{}
	self := newTestIdentity(t)
	d := New(Options{
		Self:      func() Hello { return helloOf(self, "lonely") },
		Tailscale: api,
		Logger:    slog.New(logs),
		Timing:    Timing{RetryMin: 10 * time.Millisecond, RetryMax: 40 * time.Millisecond},
	})
	ch, cancelSub := d.Subscribe()
	defer cancelSub()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	waitFor(t, 5*time.Second, "state not running", func() bool { return d.TailscaleState() == TailscaleNotRunning })
	if !drained(ch) {
		t.Fatal("no change notification for the state")
	}
	waitFor(t, 10*time.Second, "20 reconnect attempts", func() bool { return api.status.Load() >= 20 })
	if n := logs.n.Load(); n != 1 {
		t.Fatalf("%d log records over %d attempts, want exactly 1: %q", n, api.status.Load(), logs.msgs)
	}
	if got := d.TailscaleState().String(); got != "not running" {
		t.Fatalf("state %q", got)
	}
	if d.WhoIs(ctx, netip.MustParseAddrPort("100.64.0.1:1")) != nil {
		t.Fatal("WhoIs answered without tailscaled")
	}

	// tailscaled comes up: the watcher reconnects and follows it.
	controlURL, _ := startTestControl(t, "127.0.0.1")
	node := startTSNode(t, ctx, controlURL, "late")
	api.live.Store(localClient(t, node))
	waitFor(t, 10*time.Second, "state running", func() bool { return d.TailscaleState() == TailscaleRunning })
	if !slices.Contains(d.Addrs().Tailnet, tsIPv4(node)) {
		t.Fatalf("tailnet addrs %v", d.Addrs().Tailnet)
	}
}
