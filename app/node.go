package app

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shirou/gopsutil/v3/host"

	agent "meshtray/a2a"
	"meshtray/a2a/cardsig"
	"meshtray/a2a/delegate"
	"meshtray/assets"
	"meshtray/files"
	"meshtray/keychain"
	"meshtray/mesh"
	"meshtray/nodes"
	"meshtray/pairing"
	"meshtray/store"
)

// Node is the whole meshtray daemon: keychain, identity, grants, the
// capability registry, the A2A engine, pairing, discovery, the approvals
// queue and the HTTP surfaces. `meshtray serve` and the tray app run exactly
// this; the tray only adds a menu.
//
// Use: NewNode, Start, then Close (or Run, which does all three).
type Node struct {
	cfg Config
	log *slog.Logger

	events    hub
	approvals *Approvals
	offers    offerTable // files offered to browser-only devices (offers.go)

	// Set by Start; read-only afterwards.
	lock     *StateLock
	db       *store.Store // tasks, approvals, outbound, manual peers, the audit trail
	ownerAct ownerChange  // the owner's grant action under way, for its audit entry (audit.go)
	// unqueuedPairings: pairing request ID -> why the node refused it
	// before the approvals queue took it (onPairingRequest), for the
	// audit entry of that denial (onTrustChange).
	unqueuedPairings sync.Map
	settings         *settingsStore
	ks               keychain.Store
	identity         *pairing.Identity
	grants           *pairing.Grants
	auth             *pairing.Auth
	pairer           *pairing.Pairer
	registry         *nodes.Registry
	deleg            *delegation // agents, outbound view, forward executor (agents.go)
	recv             *receiving  // the receive folder and recent transfers (receive.go)
	agent            *agent.Server
	disc             *mesh.Discovery
	listeners        *listenerSet
	osEnv            string
	controlToken     string
	controlSocket    string // the control socket's path (listenControl), "" without one
	loopback         string // base URL of the loopback listener for the local owner (http)
	loopbackTLS      string // the same listener for peers on this machine (https, pinned)

	// work tracks requests in flight per grant, so pausing or revoking a
	// grant ends them (endGrantWork).
	work grantWork

	ctx    context.Context // canceled by Close: ends long-lived handlers and loops
	cancel context.CancelFunc
	wg     sync.WaitGroup // background loops

	closeOnce sync.Once
	closeErr  error

	// keptPeers is what the database has of each peer added by hand
	// (keepManualPeers), by device ID.
	keptMu    sync.Mutex
	keptPeers map[string]keptPeer
}

// NewNode checks cfg and returns a node ready to Start.
func NewNode(cfg Config, logger *slog.Logger) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	n := &Node{cfg: cfg, log: logger}
	n.approvals = newApprovals(cfg.ApprovalTimeout.Duration, func() { n.events.Publish(EventApprovals) })
	return n, nil
}

// LogValue implements slog.LogValuer: the node's name and state dir, never
// its control token or keys.
func (n *Node) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", n.cfg.Name), slog.String("state_dir", n.cfg.StateDir))
}

// Config returns the node's configuration.
func (n *Node) Config() Config { return n.cfg }

// Run starts the node, serves until ctx ends, then shuts down cleanly.
func (n *Node) Run(ctx context.Context) error {
	if err := n.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	n.log.Info("shutting down")
	return n.Close()
}

// keychainService names this node's items in the OS keychain: "meshtray" for
// the default state dir, "meshtray:<8 hex of sha256(abs dir)>" for others,
// so two nodes on one machine never share items.
func keychainService(stateDir string) string {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		abs = stateDir
	}
	if def, err := filepath.Abs(DefaultStateDir()); err == nil && def == abs {
		return "meshtray"
	}
	h := sha256.Sum256([]byte(abs))
	return "meshtray:" + hex.EncodeToString(h[:4])
}

// openKeychain opens the configured backend; recorded is the backend the
// state dir's identity already lives in ("" for a new state dir).
func (n *Node) openKeychain(recorded string) (keychain.Store, error) {
	dir := n.cfg.StateDir
	if n.cfg.Keychain == KeychainFile {
		return keychain.OpenFile(filepath.Join(dir, keychainFile))
	}
	ks, err := keychain.OpenOS(keychainService(dir), filepath.Join(dir, keychainLock))
	if err != nil && recorded == KeychainOS {
		return nil, fmt.Errorf("%w\nthis state dir keeps its identity and grants in the OS keychain, which is not reachable now.\n"+
			"Start the keychain (a Secret Service such as gnome-keyring, unlocked) and try again;\n"+
			"--keychain file would start a new device without them (use another --state-dir for that)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w\nmeshtray keeps its identity and grants in the OS keychain and none is reachable here.\n"+
			"Start it with --keychain file to keep them in a 0600 file in %s instead,\n"+
			"or set keychain = \"file\" in %s", err, dir, filepath.Join(dir, "config.toml"))
	}
	return ks, nil
}

// Start brings the node up: it takes the state-dir lock (a second node on
// the same state dir gets *ErrAlreadyRunning), opens the keychain, loads or
// creates the identity, and starts serving on 127.0.0.1:Port. It returns
// once the loopback listener accepts connections.
func (n *Node) Start(ctx context.Context) (err error) {
	cfg := n.cfg
	n.ctx, n.cancel = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	// A shared directory is refused before anything is written to it.
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if err := secureStateDir(cfg.StateDir, n.log); err != nil {
		return err
	}
	if n.lock, err = AcquireLock(cfg.StateDir); err != nil {
		return err
	}
	recorded, err := checkKeychainBackend(cfg.StateDir, cfg.Keychain)
	if err != nil {
		return err
	}
	// A writer of the file keychain killed mid-write leaves a temp copy of
	// the whole store (identity key included) beside it.
	if removed, rerr := keychain.RemoveStaleTemps(filepath.Join(cfg.StateDir, keychainFile)); len(removed) > 0 || rerr != nil {
		n.log.Warn("removed temp copies of the file keychain left by a writer that died", "files", removed, "err", rerr)
	}
	if n.db, err = openDatabase(cfg, n.log); err != nil {
		return err
	}
	n.pruneAudit(n.ctx)
	// The approvals an earlier run left, before the engine asks again.
	pairRows, err := n.approvals.restore(n.ctx, n.db, n.log.With("pkg", "approvals"), n.taskWaiting)
	if err != nil {
		return err
	}
	// Bind the loopback port first: a port in use is the likeliest failure
	// and should not leave a half-started node behind.
	lbLn, err := listenLoopback(cfg.Port)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			lbLn.Close()
		}
	}()
	cfg.Port = lbLn.Addr().(*net.TCPAddr).Port
	n.cfg.Port = cfg.Port
	n.loopback = "http://" + lbLn.Addr().String()
	n.loopbackTLS = "https://" + lbLn.Addr().String()
	if n.settings, err = openSettings(cfg.StateDir); err != nil {
		return err
	}
	if n.ks, err = n.openKeychain(recorded); err != nil {
		return err
	}
	if n.identity, err = pairing.LoadOrCreateIdentity(n.ks, cfg.Name); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	if recorded == "" {
		if err := recordKeychainBackend(cfg.StateDir, cfg.Keychain); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
	}
	// The observer from the start: the grants the load revokes (pairing
	// grants whose token was never collected) are in the audit trail.
	if n.grants, err = pairing.OpenGrants(n.ks, pairing.GrantsOptions{Logger: n.log.With("pkg", "pairing"), Observer: n.onTrustChange}); err != nil {
		return fmt.Errorf("grants: %w", err)
	}
	settings := n.settings.Get()

	info, herr := host.Info()
	if herr != nil || info == nil {
		n.log.Warn("host info incomplete", "err", herr)
		info = &host.InfoStat{}
	}
	n.osEnv = nodes.OSEnvironment(*info)
	n.registry = nodes.New(nodes.Options{
		Device:   nodes.Device{ID: n.identity.ID.String(), Name: cfg.Name, OS: n.osEnv, Version: Version},
		Host:     info,
		RunAllow: runRules(cfg.Nodes.Run),
		Policies: settings.CapabilityPolicies,
		Approver: capabilityApprover{n},
		OnRun:    n.onCapabilityRun,
		Logger:   n.log.With("pkg", "nodes"),
	})
	exec, err := n.startDelegation()
	if err != nil {
		return err
	}
	n.startFiles()
	exec = transferExecutor{n: n, next: exec} // messages with FileParts are file transfers (receive.go)
	n.agent = agent.NewServer(agent.Options{
		DeviceName:           cfg.Name,
		OSEnvironment:        n.osEnv,
		Version:              Version,
		Executor:             exec,
		Approver:             taskApprover{n},
		Manifest:             n.registry,
		SignCard:             cardsig.Signer(n.identity),
		MaxTasks:             cfg.A2A.MaxTasks,
		MaxLiveTasksPerOwner: cfg.A2A.MaxLivePerGrant,
		Store:                n.db,
		ApprovalTimeout:      cfg.ApprovalTimeout.Duration,
		// A2A off means off: the JSON-RPC endpoint is absent (404) like the
		// card, and switching it off ends the live tasks.
		RequirePublished: true,
		Logger:           n.log.With("pkg", "a2a"),
	})
	n.agent.SetPublished(settings.A2AEnabled)
	n.attachDelegation()
	// Before anything is served: the tasks of the last run, approvals
	// asked again, running ones reattached or failed.
	if _, err = n.agent.Restore(n.ctx); err != nil {
		return fmt.Errorf("database: %w", err)
	}

	n.disc = mesh.New(mesh.Options{
		Self:   n.hello,
		Port:   cfg.Port,
		Logger: n.log.With("pkg", "mesh"),
		Paired: n.paired,
		// Unknown peers: nil lets mesh accept any certificate and check the
		// hello's fp against the one presented.
		TLSConfig: func(fp string) *tls.Config {
			if fp == "" {
				return nil
			}
			return pairing.PinnedTLSConfig(fp)
		},
		DeviceID: func(fp string) (string, error) {
			id, err := pairing.DeviceIDFromFingerprint(fp)
			return id.String(), err
		},
		NoTailscale: !cfg.TailscaleEnabled(),
		LAN:         settings.LAN,
	})

	n.controlToken = newControlToken()
	n.auth = &pairing.Auth{
		Grants:       n.grants,
		ControlToken: func() string { return n.controlToken },
		WhoIs:        n.disc.WhoIs,
		Logger:       n.log.With("pkg", "auth"),
	}
	if n.pairer, err = pairing.NewPairer(pairing.PairerOptions{
		Grants:    n.grants,
		Identity:  n.identity,
		Name:      cfg.Name,
		OS:        n.osEnv,
		SelfURL:   n.selfURL,
		OnRequest: n.onPairingRequest,
		WhoIs:     n.disc.WhoIs,
		Logger:    n.log.With("pkg", "pairing"),
	}); err != nil {
		return err
	}
	n.restorePairing(pairRows)

	if err := n.restoreDelegation(); err != nil {
		return err
	}
	// Sends a kill cut short: canceled at their receivers, which would
	// hold their partial files and free space otherwise.
	if err := importSendingFile(n.ctx, n.db, cfg.StateDir); err != nil {
		n.log.Warn("cannot move the record of sends under way of an older meshtray into the database; trying again at the next start", "file", sendingFile, "err", err)
	}
	stale, err := n.db.Sendings(n.ctx)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	n.cancelStaleSends(stale)

	// Grant changes from here on are seen by watchGrants, against the
	// grants active before anything is served.
	grantChanges, stopGrantChanges := n.grants.Subscribe()
	defer func() {
		if err != nil {
			stopGrantChanges()
		}
	}()
	activeGrants := n.activeGrants()

	mux := http.NewServeMux()
	n.routes(mux)
	srv := &http.Server{
		Handler:     n.trackGrantWork(mux),
		ConnContext: connContext,
		ConnState:   connState,
		BaseContext: func(net.Listener) context.Context { return n.ctx },
		// ReadHeaderTimeout bounds the TLS handshake too (net/http takes
		// the shortest of its read and write timeouts for it).
		ReadHeaderTimeout: 5 * time.Second,
		// ReadTimeout bounds reading a whole request, body included (a
		// claim posted a byte a minute). net/http clears the read deadline
		// once the body is read, so long answers (SSE, long polls) are not
		// cut; WriteTimeout stays 0 for them.
		ReadTimeout: 30 * time.Second,
		// Idle keep-alive connections: 30 s, and the oldest are evicted
		// when a new connection needs the slot (connguard.go).
		IdleTimeout:    30 * time.Second,
		MaxHeaderBytes: 32 << 10,
		ErrorLog:       slog.NewLogLogger(n.log.With("pkg", "http").Handler(), slog.LevelDebug),
	}
	n.listeners = &listenerSet{srv: srv, port: cfg.Port, tls: n.identity.ServerTLSConfig(), log: n.log.With("pkg", "http")}
	n.listeners.serveLoopback(lbLn)
	ctlLn, ctlPath, err := listenControl(cfg.StateDir, n.log.With("pkg", "http"))
	if err != nil {
		return err
	}
	if ctlLn != nil {
		n.listeners.serveControl(ctlLn)
	}
	n.controlSocket = ctlPath
	if err := writeDaemonInfo(cfg.StateDir, DaemonInfo{PID: os.Getpid(), Port: cfg.Port, Token: n.controlToken, Socket: ctlPath}); err != nil {
		return fmt.Errorf("write %s: %w", daemonFile, err)
	}

	if err := n.disc.Start(n.ctx); err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	n.restoreManualPeers()
	n.goLoop(n.watchDiscovery)
	n.goLoop(func(ctx context.Context) { n.watchGrants(ctx, grantChanges, activeGrants) })
	n.goLoop(n.watchPairing)
	n.goLoop(n.pruneAuditLoop)
	n.log.Info("meshtray node started",
		"name", cfg.Name, "os", n.osEnv, "device", n.identity.ID.Short(),
		"url", n.loopback, "a2a", settings.A2AEnabled, "lan", settings.LAN,
		"keychain", cfg.Keychain, "state_dir", cfg.StateDir, "version", Version)
	return nil
}

func runRules(rs []RunRule) []nodes.RunRule {
	out := make([]nodes.RunRule, len(rs))
	for i, r := range rs {
		out[i] = nodes.RunRule{Name: r.Name, Path: r.Path, Timeout: r.Timeout.Duration, Env: r.Env}
	}
	return out
}

func (n *Node) goLoop(f func(ctx context.Context)) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f(n.ctx)
	}()
}

// routes mounts every surface on mux (DESIGN.md, "Surfaces").
func (n *Node) routes(mux *http.ServeMux) {
	a := n.auth
	mux.Handle("GET "+agent.CardPath, a.Public(n.agent.CardHandler()))
	mux.Handle("POST "+agent.RPCPath, n.agent.Gate(a.Require(pairing.ScopeAgent, n.agent)))
	mux.Handle("GET /nodes/manifest", a.LocalOr(pairing.ScopeNode, n.registry.ManifestHandler()))
	mux.Handle("POST /nodes/invoke", a.LocalOr(pairing.ScopeNode, n.registry.InvokeHandler()))
	mux.Handle(files.Prefix, a.Require(pairing.ScopeAgent, n.filesHandler()))
	n.sendRoutes(mux)
	mux.Handle("GET "+mesh.HelloPath, a.Public(n.disc.HelloHandler()))
	n.pairer.Mount(mux, a)
	mux.Handle("GET "+assets.PairPath, a.Public(assets.PairPage()))
	mux.Handle("GET "+assets.PairAppPrefix, a.Public(assets.PairPage()))
	n.pairRoutes(mux)
	n.offerRoutes(mux)
	n.controlRoutes(mux)
	n.remoteRoutes(mux)
}

// hello is this device's public self-description (GET /mesh/hello, mDNS TXT).
func (n *Node) hello() mesh.Hello {
	return mesh.Hello{
		ID:   n.identity.ID.String(),
		Name: n.cfg.Name,
		OS:   n.osEnv,
		FP:   n.identity.Fingerprint,
		V:    mesh.ProtocolVersion,
		A2A:  n.agent.Status().Published,
	}
}

// paired reports whether a grant exists either way with deviceID.
func (n *Node) paired(deviceID string) bool {
	if _, err := n.grants.Held(deviceID); err == nil {
		return true
	}
	return len(n.grants.ByPeer(deviceID)) > 0
}

// selfURL is the base URL peers should use for this device: the first
// tailnet listener, else the first LAN one, else "".
func (n *Node) selfURL() string {
	for _, kind := range []pairing.Listener{pairing.ListenerTailnet, pairing.ListenerLAN} {
		for _, l := range n.listeners.Remote() {
			if l.Kind == kind {
				return l.URL
			}
		}
	}
	return ""
}

// watchDiscovery follows address, tailnet and peer-table changes: it keeps
// the remote HTTPS listeners on the wanted addresses and tells subscribers.
func (n *Node) watchDiscovery(ctx context.Context) {
	addrs, stopAddrs := n.disc.Subscribe()
	defer stopAddrs()
	peers, stopPeers := n.disc.Table().Subscribe()
	defer stopPeers()
	n.reconcileListeners()
	for {
		select {
		case <-ctx.Done():
			return
		case <-addrs:
			n.reconcileListeners()
			n.events.Publish(EventStatus)
		case <-peers:
			n.keepManualPeers()
			n.events.Publish(EventPeers)
			n.events.Publish(EventStatus) // the online count
		}
	}
}

// reconcileListeners serves HTTPS on the tailnet addresses (Tailscale on)
// and on the LAN addresses (LAN reachability on).
func (n *Node) reconcileListeners() {
	want := make(map[netip.Addr]pairing.Listener)
	addrs := n.disc.Addrs()
	if n.cfg.TailscaleEnabled() {
		for _, a := range addrs.Tailnet {
			want[a] = pairing.ListenerTailnet
		}
	}
	if n.disc.LAN() {
		for _, a := range addrs.LAN {
			want[a] = pairing.ListenerLAN
		}
	}
	n.listeners.Reconcile(want)
}

// watchGrants tells subscribers about grant changes and ends the live work
// of every grant that stopped being active (paused, revoked, replaced by a
// re-pairing, never collected): ch and active are taken before the node
// serves, so no change is missed.
func (n *Node) watchGrants(ctx context.Context, ch <-chan struct{}, active map[string]bool) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			n.events.Publish(EventGrants)
			n.events.Publish(EventPeers) // the paired mark
			now := n.activeGrants()
			for id := range active {
				if !now[id] {
					n.endGrantWork(id)
				}
			}
			active = now
		}
	}
}

// activeGrants is the set of active issued grant IDs.
func (n *Node) activeGrants() map[string]bool {
	out := make(map[string]bool)
	for _, g := range n.grants.List() {
		if g.Status == pairing.StatusActive {
			out[g.ID] = true
		}
	}
	return out
}

// endGrantWork ends everything grant id has under way, once it is no
// longer active (README, "Security model": a paused or revoked grant is refused on every
// surface immediately, work already running included): its pending
// approvals are withdrawn, its A2A tasks end canceled with a final event
// on their streams (a2a Server.CancelOwner, which waits for the executors
// to stop), and its other requests in flight (capability calls, event
// streams of a full grant) have their context canceled. Idempotent.
func (n *Node) endGrantWork(id string) {
	reason := n.grantGone(id)
	if reason == "" {
		return // active again (resumed meanwhile)
	}
	approvals := n.approvals.WithdrawGrant(id, "withdrawn: "+reason)
	tasks := 0
	if n.agent != nil {
		tasks = n.agent.CancelOwner(id, reason+" by the owner of this device")
	}
	calls := n.work.cancel(id, errors.New(reason))
	n.offers.endGrant(id, errors.New(reason+" by the owner of this device"))
	if approvals+tasks+calls > 0 {
		n.log.Info("live work of a grant ended", "grant_id", id, "reason", reason,
			"approvals", approvals, "tasks", tasks, "requests", calls)
	}
}

// grantWork tracks the requests in flight that carry a grant token, by
// grant ID, each with a cancel func. Bounded by the connections the
// server accepts.
type grantWork struct {
	mu   sync.Mutex
	live map[string]map[*context.CancelCauseFunc]struct{} // guarded by mu
}

// track registers a request of grant id; done unregisters it.
func (w *grantWork) track(ctx context.Context, id string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	key := &cancel
	w.mu.Lock()
	if w.live == nil {
		w.live = make(map[string]map[*context.CancelCauseFunc]struct{})
	}
	if w.live[id] == nil {
		w.live[id] = make(map[*context.CancelCauseFunc]struct{})
	}
	w.live[id][key] = struct{}{}
	w.mu.Unlock()
	return ctx, func() {
		w.mu.Lock()
		delete(w.live[id], key)
		if len(w.live[id]) == 0 {
			delete(w.live, id)
		}
		w.mu.Unlock()
		cancel(nil)
	}
}

// cancel ends every tracked request of grant id with cause; it returns how
// many.
func (w *grantWork) cancel(id string, cause error) int {
	w.mu.Lock()
	fs := w.live[id]
	delete(w.live, id)
	w.mu.Unlock()
	for f := range fs {
		(*f)(cause)
	}
	return len(fs)
}

// trackGrantWork wraps the whole server: a request carrying a grant token
// gets a context that endGrantWork cancels. The grant ID is the token's
// public part; the token is checked by the auth middleware further in (a
// forged one is refused there, and tracking it costs nothing). Registered
// before authentication, so a pause that lands after the check still
// reaches the request. The A2A endpoint is left out: CancelOwner ends its
// tasks with a final event, which a canceled request could not deliver.
func (n *Node) trackGrantWork(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == agent.RPCPath {
			h.ServeHTTP(w, r)
			return
		}
		tok, _ := pairing.BearerToken(r)
		if id := pairing.TokenGrantID(tok); id != "" {
			ctx, done := n.work.track(r.Context(), id)
			defer done()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}

func (n *Node) watchPairing(ctx context.Context) {
	ch, stop := n.pairer.Subscribe()
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			n.events.Publish(EventPairing)
		}
	}
}

// Close stops the node: live tasks end canceled with a final status for
// their streams (none of it written: the database keeps them as they were,
// for the next start to restore), pending approvals stop waiting (their
// rows stay: the next start lists them again),
// listeners close after requests in flight, grants' last-used times are
// flushed, the lock is released. Safe to call twice.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		var errs []error
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// First: the waits the engine's shutdown ends are not decisions.
		n.approvals.beginClose()
		if n.agent != nil {
			if err := n.agent.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("a2a: %w", err))
			}
		}
		n.closeDelegation()
		n.closeFiles()
		n.approvals.Close()
		if n.pairer != nil {
			n.pairer.Close()
		}
		if n.cancel != nil {
			n.cancel() // ends /events streams, long polls and the loops
		}
		if n.listeners != nil {
			if err := n.listeners.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("http: %w", err))
			}
		}
		if n.disc != nil {
			if err := n.disc.Close(); err != nil {
				errs = append(errs, fmt.Errorf("discovery: %w", err))
			}
		}
		n.wg.Wait()
		if n.db != nil {
			if err := n.db.Close(); err != nil {
				errs = append(errs, fmt.Errorf("database: %w", err))
			}
		}
		if n.grants != nil {
			if err := n.grants.Close(); err != nil {
				errs = append(errs, fmt.Errorf("grants: %w", err))
			}
		}
		if n.lock != nil {
			removeDaemonInfo(n.cfg.StateDir)
			n.lock.Release()
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// LocalClient returns a control-API client for this node (the tray's view
// of it is exactly what the CLI and the UI process see).
func (n *Node) LocalClient() *Client {
	c, _ := Dial(n.cfg.StateDir, n.cfg.Port)
	return c
}

// Status is the node at a glance.
func (n *Node) Status() Status {
	pend := len(n.approvals.List())
	online := 0
	for _, p := range n.Peers() { // the table `meshtray peers` shows, paired devices reached by their card included
		if p.Online {
			online++
		}
	}
	ls := append([]ListenerStatus{{Kind: pairing.ListenerLoopback, Addr: n.loopback[len("http://"):], URL: n.loopback}},
		n.listeners.Remote()...)
	return Status{
		Name:             n.cfg.Name,
		OS:               n.osEnv,
		DeviceID:         n.identity.ID.String(),
		Fingerprint:      n.identity.Fingerprint,
		Version:          Version,
		PID:              os.Getpid(),
		StateDir:         n.cfg.StateDir,
		LogDir:           logDirOf(n.cfg.LogFile),
		ControlSocket:    n.controlSocket,
		A2A:              n.A2AStatus(),
		LAN:              n.disc.LAN(),
		Tailscale:        n.disc.TailscaleState().String(),
		Listeners:        ls,
		PendingApprovals: pend,
		OnlinePeers:      online,
		OutboundWaiting:  n.outboundWaiting(),
		Incoming:         n.IncomingFiles(),
	}
}

// logDirOf is the dir of the node's log file, "" when it writes none.
func logDirOf(file string) string {
	if file == "" {
		return ""
	}
	return filepath.Dir(file)
}

// A2AStatus reports the A2A surface.
func (n *Node) A2AStatus() A2AStatus {
	st := n.agent.Status()
	return A2AStatus{Enabled: st.Published, CardURL: n.loopback + agent.CardPath, LiveTasks: st.LiveTasks}
}

// SetA2A publishes or withdraws the Agent Card; the choice survives restarts.
func (n *Node) SetA2A(on bool) (A2AStatus, error) { return n.setA2A(on, actor{by: "owner"}) }

// setA2A is SetA2A by a (recorded in the audit trail when it changes).
func (n *Node) setA2A(on bool, a actor) (A2AStatus, error) {
	was := n.settings.Get().A2AEnabled
	if _, err := n.settings.Update(func(s *Settings) { s.A2AEnabled = on }); err != nil {
		return n.A2AStatus(), err
	}
	if was != on {
		n.auditSwitch(store.KindA2A, on, a)
	}
	n.agent.SetPublished(on)
	n.disc.SelfChanged() // the a2a TXT flag
	n.log.Info("A2A agent card", "published", on)
	n.events.Publish(EventStatus)
	return n.A2AStatus(), nil
}

// Settings returns the runtime settings.
func (n *Node) Settings() Settings { return n.settings.Get() }

// UpdateSettings applies a POST /config: LAN reachability and capability
// policies.
func (n *Node) UpdateSettings(u ConfigUpdate) (Settings, error) {
	where, err := checkWhere(u.Where)
	if err != nil {
		return n.settings.Get(), err
	}
	wasLAN := n.settings.Get().LAN
	for name, p := range u.CapabilityPolicies {
		if !p.Valid() {
			return n.settings.Get(), badRequest("capability %q: approval %q: want ask, allow or deny", name, p)
		}
		was := n.registry.Policy(name)
		if err := n.registry.SetPolicy(name, p); err != nil {
			return n.settings.Get(), badRequest("%v", err)
		}
		if was != p {
			n.auditCapabilityPolicy(name, was, p, actor{by: "owner", where: where})
		}
	}
	st, err := n.settings.Update(func(s *Settings) {
		if u.LAN != nil {
			s.LAN = *u.LAN
		}
		for name, p := range u.CapabilityPolicies {
			if s.CapabilityPolicies == nil {
				s.CapabilityPolicies = make(map[string]pairing.Policy)
			}
			s.CapabilityPolicies[name] = p
		}
	})
	if err != nil {
		return st, err
	}
	if u.LAN != nil && *u.LAN != wasLAN {
		n.auditSwitch(store.KindLAN, *u.LAN, actor{by: "owner", where: where})
	}
	if u.LAN != nil {
		n.disc.SetLAN(*u.LAN)
		n.reconcileListeners()
		n.log.Info("reachable on local network", "on", *u.LAN)
	}
	n.events.Publish(EventStatus)
	return st, nil
}

// Devices lists the grants issued and held.
func (n *Node) Devices() Devices {
	d := Devices{Issued: n.grants.List(), Held: []HeldView{}}
	for _, h := range n.grants.ListHeld() {
		d.Held = append(d.Held, HeldView{PeerID: h.PeerID, Name: h.Name, OS: h.OS, URL: h.URL,
			Fingerprint: h.Fingerprint, Scopes: h.Scopes, Created: h.Created})
	}
	return d
}

// CreateGrant mints a grant from the CLI; the token is returned once.
func (n *Node) CreateGrant(req GrantRequest) (GrantToken, error) {
	sc, err := pairing.NormalizeScopes(req.Scopes)
	if err != nil {
		return GrantToken{}, badRequest("%v", err)
	}
	if req.Approval != "" {
		if _, err := pairing.ParsePolicy(string(req.Approval)); err != nil {
			return GrantToken{}, badRequest("%v", err)
		}
	}
	where, err := checkWhere(req.Where)
	if err != nil {
		return GrantToken{}, err
	}
	var g pairing.Grant
	var tok string
	err = n.asOwner(changeKey(pairing.ChangeIssued, ""), where, func() (err error) {
		g, tok, err = n.grants.Issue(pairing.IssueRequest{Name: req.Name, Scopes: sc, Policy: req.Approval})
		return err
	})
	if err != nil {
		return GrantToken{}, err
	}
	return GrantToken{ID: g.ID, Token: tok}, nil
}

// noGrantError is pairing.ErrNoGrant said for the CLI: which ID, and
// where the IDs are.
type noGrantError struct{ id string }

func (e *noGrantError) Error() string {
	return "no grant " + e.id + " (meshtray grant list shows the grants this device issued)"
}
func (e *noGrantError) Unwrap() error { return pairing.ErrNoGrant }

// LogValue implements slog.LogValuer without the token.
func (t GrantToken) LogValue() slog.Value { return slog.GroupValue(slog.String("id", t.ID)) }

// UpdateGrant pauses, resumes, revokes or rotates a grant, or sets its
// approval policy. Only rotate returns a token.
func (n *Node) UpdateGrant(id string, u GrantUpdate) (_ GrantToken, err error) {
	defer func() {
		if errors.Is(err, pairing.ErrNoGrant) {
			err = &noGrantError{id: clipID(id)}
		}
	}()
	where, err := checkWhere(u.Where)
	if err != nil {
		return GrantToken{}, err
	}
	if u.Files != "" && u.Action == "" && u.Approval == "" {
		if _, err := pairing.ParsePolicy(string(u.Files)); err != nil {
			return GrantToken{}, badRequest("files_approval: %v", err)
		}
		return GrantToken{}, n.asOwner(changeKey(pairing.ChangeFilesPolicy, id), where, func() error {
			return n.grants.SetFilesPolicy(id, u.Files)
		})
	}
	if (u.Action == "") == (u.Approval == "") || u.Files != "" {
		return GrantToken{}, badRequest(`give one of "action" (pause, resume, revoke, rotate), "approval" or "files_approval" (ask, allow, deny)`)
	}
	if u.Approval != "" {
		if _, err := pairing.ParsePolicy(string(u.Approval)); err != nil {
			return GrantToken{}, badRequest("%v", err)
		}
		return GrantToken{}, n.asOwner(changeKey(pairing.ChangePolicy, id), where, func() error {
			return n.grants.SetPolicy(id, u.Approval)
		})
	}
	if op, ok := grantActionOps[u.Action]; ok {
		var tok GrantToken
		err = n.asOwner(changeKey(op, id), where, func() (err error) {
			tok, err = n.updateGrant(id, u)
			return err
		})
		return tok, err
	}
	return n.updateGrant(id, u)
}

// grantActionOps are the changes of trust the grant actions make.
var grantActionOps = map[string]pairing.ChangeOp{
	ActionPause: pairing.ChangePaused, ActionResume: pairing.ChangeResumed,
	ActionRevoke: pairing.ChangeRevoked, ActionRotate: pairing.ChangeRotated,
}

// updateGrant runs the action of u on grant id.
func (n *Node) updateGrant(id string, u GrantUpdate) (_ GrantToken, err error) {
	switch u.Action {
	case ActionPause:
		if err = n.grants.Pause(id); err == nil || !errors.Is(err, pairing.ErrNoGrant) {
			n.endGrantWork(id) // before answering: the caller sees it done
		}
	case ActionResume:
		err = n.grants.Resume(id)
	case ActionRevoke:
		if err = n.pairer.Revoke(id); err == nil || !errors.Is(err, pairing.ErrNoGrant) {
			n.endGrantWork(id)
		}
	case ActionRotate:
		var tok string
		// Bounded: the node's context lives as long as the node, and the
		// peer the new token is offered to may never answer.
		ctx, cancel := context.WithTimeout(n.ctx, pairing.DefaultCallTimeout)
		tok, _, err = n.pairer.Rotate(ctx, id)
		cancel()
		if err == nil {
			return GrantToken{ID: id, Token: tok}, nil
		}
	default:
		return GrantToken{}, badRequest("action %q: want pause, resume, revoke or rotate", u.Action)
	}
	if err == nil {
		n.log.Info("grant updated", "grant_id", id, "action", u.Action)
	}
	return GrantToken{}, err
}

// ErrNoPeer: no peer matches (404).
var ErrNoPeer = errors.New("no peer")

// peerStoreTimeout bounds one write or read of the peers added by hand.
const peerStoreTimeout = 10 * time.Second

// AddManualPeer adds a peer by hand (`meshtray peers add URL`, POST
// /mesh/peers): its hello is probed (mesh.Table.AddManual: https only,
// the presented certificate's fingerprint checked) and what it verified is
// kept in the database, so the peer is there again after a restart
// (restoreManualPeers). A peer added again at another address is kept at
// the new one. The row is added even if it cannot be kept (the error is
// logged: the peer is then gone after a restart).
func (n *Node) AddManualPeer(ctx context.Context, rawURL string) (mesh.Peer, error) {
	p, err := n.disc.Table().AddManual(ctx, rawURL)
	if err != nil {
		return p, err
	}
	addrs := p.Addrs[mesh.SourceManual]
	if n.db == nil || len(addrs) == 0 {
		return p, nil
	}
	url := "https://" + addrs[0]
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), peerStoreTimeout)
	defer cancel()
	n.forgetManualPeer(sctx, p.ID, url)
	if err := n.db.PutPeer(sctx, store.ManualPeer{URL: url, DeviceID: p.ID, Fingerprint: p.FP, Name: p.Name, OS: p.OS, LastSeen: p.LastSeen}); err != nil {
		n.log.Error("a peer added by hand was not written to the database; it is gone after a restart", "peer", pairing.ShortID(p.ID), "err", err)
	} else {
		n.setKept(p.ID, keptPeer{name: p.Name, os: p.OS, online: p.Online})
	}
	return p, nil
}

// keptPeer is what the database last got of a peer added by hand.
type keptPeer struct {
	name, os string
	online   bool
}

func (n *Node) setKept(id string, k keptPeer) {
	n.keptMu.Lock()
	defer n.keptMu.Unlock()
	if n.keptPeers == nil {
		n.keptPeers = make(map[string]keptPeer)
	}
	n.keptPeers[id] = k
}

// keepManualPeers writes to the database what changed of the peers added
// by hand since it last did: a new name or OS from a verified hello, and
// when one went offline (or came back), the time it was last seen; so
// after a restart each is listed with its last known name, OS and
// sighting until it is probed again. The table notifies on those changes
// only (not on each re-probe), so this writes seldom.
func (n *Node) keepManualPeers() {
	if n.db == nil {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, peerStoreTimeout)
	defer cancel()
	for _, p := range n.disc.Table().Snapshot() {
		addrs := p.Addrs[mesh.SourceManual]
		if len(addrs) == 0 {
			continue
		}
		now := keptPeer{name: p.Name, os: p.OS, online: p.Online}
		n.keptMu.Lock()
		was, ok := n.keptPeers[p.ID]
		n.keptMu.Unlock()
		if !ok || was == now {
			continue // not kept (see AddManualPeer), or nothing new
		}
		if err := n.db.PutPeer(ctx, store.ManualPeer{URL: "https://" + addrs[0], DeviceID: p.ID, Fingerprint: p.FP, Name: p.Name, OS: p.OS, LastSeen: p.LastSeen}); err != nil {
			n.log.Warn("what a peer added by hand said was not written to the database", "peer", pairing.ShortID(p.ID), "err", err)
			continue
		}
		n.setKept(p.ID, now)
	}
}

// forgetManualPeer deletes the kept records of device id, but the one at
// keep.
func (n *Node) forgetManualPeer(ctx context.Context, id, keep string) {
	ps, err := n.db.Peers(ctx)
	if err != nil {
		n.log.Error("cannot read the peers added by hand", "err", err)
		return
	}
	for _, k := range ps {
		if k.DeviceID == id && k.URL != keep {
			if err := n.db.DeletePeer(ctx, k.URL); err != nil && !errors.Is(err, store.ErrNotFound) {
				n.log.Error("a removed peer added by hand was not deleted from the database", "peer", pairing.ShortID(id), "err", err)
			}
		}
	}
}

// restoreManualPeers gives the mesh table back the peers added by hand
// before the restart (offline until their pinned re-probe answers, see
// mesh.Discovery.RestoreManual); a kept record that no longer restores is
// logged and left.
func (n *Node) restoreManualPeers() {
	if n.db == nil {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, peerStoreTimeout)
	defer cancel()
	ps, err := n.db.Peers(ctx)
	if err != nil {
		n.log.Error("cannot read the peers added by hand", "err", err)
		return
	}
	k := 0
	for _, p := range ps {
		if err := n.disc.RestoreManual(p.URL, p.DeviceID, p.Fingerprint, p.Name, p.OS, p.LastSeen); err != nil {
			n.log.Warn("a peer added by hand was not restored", "peer", pairing.ShortID(p.DeviceID), "url", p.URL, "err", err)
			continue
		}
		n.setKept(p.DeviceID, keptPeer{name: p.Name, os: p.OS})
		k++
	}
	if k > 0 {
		n.log.Info("peers added by hand restored", "peers", k)
	}
}

// RemoveManualPeer forgets a peer added by hand (`meshtray peers rm`):
// its manual source goes, sightings from mDNS or the tailnet stay. ref is
// the peer's name or its device ID (or the first 7 characters the table
// shows), as `send` and `--on` take a device (matchDevices); a reference
// that names two peers added by hand is refused.
func (n *Node) RemoveManualPeer(ref string) error {
	var manual []mesh.Peer
	for _, p := range n.disc.Table().Snapshot() {
		if slices.Contains(p.Sources, mesh.SourceManual) {
			manual = append(manual, p)
		}
	}
	match := matchDevices(ref, manual, func(p mesh.Peer) string { return p.Name }, func(p mesh.Peer) string { return p.ID })
	switch len(match) {
	case 0:
		return fmt.Errorf("%w added by hand is named %q (meshtray peers lists them, by name and device ID; only peers added with peers add can be removed)", ErrNoPeer, clipID(ref))
	case 1:
		n.disc.Table().Remove(match[0].ID)
		n.events.Publish(EventPeers)
		if n.db != nil {
			ctx, cancel := context.WithTimeout(context.Background(), peerStoreTimeout)
			defer cancel()
			n.forgetManualPeer(ctx, match[0].ID, "")
		}
		return nil
	}
	return badRequest("%q names %d peers added by hand: give more of the device ID (meshtray peers)", clipID(ref), len(match))
}

// Peers is the merged peer table, online peers first, then by name.
//
// A paired device (a grant either way) is always listed: when no source
// sees it now, as an offline row with what the grants know of it (name,
// OS, fingerprint) and no sources, so the person's own devices do not
// vanish from the list when they sleep.
func (n *Node) Peers() []mesh.Peer {
	ps := n.disc.Table().Snapshot()
	seen := make(map[string]bool, len(ps))
	for _, p := range ps {
		seen[p.ID] = true
	}
	absent := func(id, name, os, fp string) {
		if id == "" || seen[id] {
			return
		}
		seen[id] = true
		ps = append(ps, mesh.Peer{ID: id, Name: name, OS: os, FP: fp, Sources: []mesh.Source{}, Addrs: map[mesh.Source][]string{}, Paired: true})
	}
	for _, h := range n.grants.ListHeld() {
		absent(h.PeerID, h.Name, h.OS, h.Fingerprint)
	}
	for _, g := range n.grants.List() {
		absent(g.PeerID, g.Name, g.OS, "")
	}
	for i := range ps {
		if ps[i].Paired && !ps[i].Online {
			n.pairedReach(&ps[i])
		}
	}
	slices.SortStableFunc(ps, func(a, b mesh.Peer) int {
		if a.Online != b.Online {
			if a.Online {
				return -1
			}
			return 1
		}
		return strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name))
	})
	if ps == nil {
		ps = []mesh.Peer{}
	}
	return ps
}

// SourcePairing marks a paired device in Peers that no discovery source
// sees but that answered at the address it gave at pairing: the card
// check of the agents (delegate.Agents, over the pinned connection, at
// most PeerCardTTL old). Never a source of the mesh table itself.
const SourcePairing mesh.Source = "pairing"

// pairedReach marks p, a paired device discovery sees offline or not at
// all, online when the last check of its card through the grant it gave
// this device got an answer (its card, a 404 of A2A off, a refusal), with
// A2A as that answer says and the address it answered at.
func (n *Node) pairedReach(p *mesh.Peer) {
	if n.deleg == nil || n.deleg.agents == nil {
		return
	}
	a, err := n.deleg.agents.Get(p.ID)
	if err != nil || a.Kind != delegate.AgentPeer || a.Checked.IsZero() {
		return
	}
	switch a.Status {
	case delegate.AgentReady, delegate.AgentUnpublished, delegate.AgentUnauthorized:
	default:
		return // not answered (unreachable), not checked, or switched off here
	}
	p.Online, p.A2A = true, a.Status == delegate.AgentReady
	if a.Checked.After(p.LastSeen) {
		p.LastSeen = a.Checked
	}
	p.Sources = append(p.Sources, SourcePairing)
	if u, err := url.Parse(a.URL); err == nil && u.Host != "" {
		p.Addrs[SourcePairing] = []string{u.Host}
	}
}

// CheckPairedPeers fetches again the cards of the paired devices checked
// longer ago than delegate.PeerCardTTL (bounded to a few seconds), so that
// Peers says which of them answer (GET /mesh/peers calls it first).
func (n *Node) CheckPairedPeers(ctx context.Context) {
	if n.deleg != nil && n.deleg.agents != nil {
		n.deleg.agents.List(ctx)
	}
}

// Subscribe returns change notices (the tray and GET /events use it).
func (n *Node) Subscribe() *Subscription { return n.events.Subscribe() }
