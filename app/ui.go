package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/jsonout"
	"meshtray/nodes"
	"meshtray/pairing"
)

// EventUI tells the UI process (meshtray-ui) that the tray queued a window
// to open (GET /events).
const EventUI EventType = "ui"

// UIWindow names a window of the UI process.
type UIWindow string

// The windows the tray can ask the UI process to open.
const (
	UIApprovals UIWindow = "approvals" // the approval popup (every pending approval, queued)
	UIPair      UIWindow = "pair"      // "Pair a device…": QR code, code, SAS, approve
	UIDevices   UIWindow = "devices"   // grants issued and held
	UIPeers     UIWindow = "peers"     // the peer table
	UIPeer      UIWindow = "peer"      // one peer (Arg = its device ID): its manifest
	UIManifest  UIWindow = "manifest"  // this node's capabilities and their policies
	UIQuestions UIWindow = "questions" // delegated tasks waiting for the owner's answer
	UIActivity  UIWindow = "activity"  // the audit trail: latest entries, by device
	UISend      UIWindow = "send"      // "Send files…" to one device (Arg = its device ID, or a phone's grant name)
)

// Valid reports whether w is a known window.
func (w UIWindow) Valid() bool {
	switch w {
	case UIApprovals, UIPair, UIDevices, UIPeers, UIPeer, UIManifest, UIQuestions, UIActivity, UISend:
		return true
	}
	return false
}

// UIRequest asks the UI process to open (or raise) one window
// (POST /ui/open).
type UIRequest struct {
	Window UIWindow `json:"window"`
	Arg    string   `json:"arg,omitempty"` // the peer's device ID for UIPeer; the device for UISend
}

// Bounds of the UI request queue and of a peer's manifest.
const (
	maxUIRequests     = 16
	maxUIArg          = 128
	maxPeerManifest   = 1 << 20
	peerManifestLimit = 10 * time.Second
)

// uiQueue holds the windows the tray asked for until the UI process takes
// them. Only the local owner reaches it.
type uiQueue struct {
	mu  sync.Mutex
	req []UIRequest // guarded by mu; no duplicates, oldest first
}

// push queues r (a duplicate is dropped; when full, the oldest goes).
func (q *uiQueue) push(r UIRequest) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if slices.Contains(q.req, r) {
		return
	}
	if len(q.req) >= maxUIRequests {
		q.req = q.req[1:]
	}
	q.req = append(q.req, r)
}

func (q *uiQueue) list(take bool) []UIRequest {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := append([]UIRequest{}, q.req...)
	if take {
		q.req = nil
	}
	return out
}

// uiRoutes mounts the small surface between the tray and the UI process,
// behind auth.Local like the rest of the control API:
//
//	POST /ui/open                 UIRequest -> 202; queued, EventUI published
//	GET  /ui/open                 -> [UIRequest] pending (not taken)
//	POST /ui/take                 -> [UIRequest] pending, and the queue emptied
//	GET  /ui/peers/{id}/manifest  -> nodes.Manifest of a paired peer, fetched
//	                                 with the grant it gave us (pinned HTTPS)
func (n *Node) uiRoutes(mux *http.ServeMux) {
	q := &uiQueue{}
	local := n.localRoutes(mux)
	local("POST /ui/open", func(w http.ResponseWriter, r *http.Request) {
		var req UIRequest
		if !readJSON(w, r, &req) {
			return
		}
		if !req.Window.Valid() {
			writeError(w, http.StatusBadRequest, fmt.Errorf("window %q: want approvals, pair, devices, peers, peer, manifest, questions, activity or send", req.Window))
			return
		}
		if len(req.Arg) > maxUIArg || (req.Window == UIPeer || req.Window == UISend) != (req.Arg != "") {
			writeError(w, http.StatusBadRequest, errors.New(`arg: the device for windows "peer" and "send", nothing otherwise`))
			return
		}
		q.push(req)
		n.events.Publish(EventUI)
		w.WriteHeader(http.StatusAccepted)
	})
	local("GET /ui/open", func(w http.ResponseWriter, r *http.Request) {
		jsonout.Write(w, http.StatusOK, q.list(false))
	})
	local("POST /ui/take", func(w http.ResponseWriter, r *http.Request) {
		jsonout.Write(w, http.StatusOK, q.list(true))
	})
	local("GET /ui/peers/{id}/manifest", func(w http.ResponseWriter, r *http.Request) {
		m, err := n.PeerManifest(r.Context(), r.PathValue("id"))
		if err != nil {
			status := http.StatusBadGateway
			if errors.Is(err, pairing.ErrNoHeld) {
				status = http.StatusNotFound
			}
			writeError(w, status, err)
			return
		}
		jsonout.Write(w, http.StatusOK, m)
	})
}

// PeerManifest fetches the node manifest of a paired peer (GET
// /nodes/manifest on the peer) with the grant it gave this device: pinned
// HTTPS through pairing's PeerTransport, trying the peer table's current
// addresses first, then the URL the peer gave at pairing. It fails with
// pairing.ErrNoHeld when the peer gave us no grant.
func (n *Node) PeerManifest(ctx context.Context, peerID string) (nodes.Manifest, error) {
	var m nodes.Manifest
	h, err := n.grants.Held(peerID)
	if err != nil {
		return m, fmt.Errorf("%w: %s gave this device no grant (pair with it first)", pairing.ErrNoHeld, pairing.ShortID(peerID))
	}
	rt, err := n.grants.PeerTransport(h.PeerID)
	if err != nil {
		return m, err
	}
	hc := &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer hc.CloseIdleConnections()
	bases := n.peerURLs(h)
	if len(bases) == 0 {
		return m, fmt.Errorf("no address known for %s", h.Name)
	}
	var errs []error
	for _, base := range bases {
		m, err = fetchManifest(ctx, hc, strings.TrimRight(base, "/"))
		if err == nil {
			return m, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return m, fmt.Errorf("manifest of %s: %w", h.Name, errors.Join(errs...))
}

func fetchManifest(ctx context.Context, hc *http.Client, base string) (nodes.Manifest, error) {
	var m nodes.Manifest
	ctx, cancel := context.WithTimeout(ctx, peerManifestLimit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/nodes/manifest", nil)
	if err != nil {
		return m, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerManifest+1))
	if err != nil {
		return m, err
	}
	if len(b) > maxPeerManifest {
		return m, fmt.Errorf("%s: manifest over %d bytes", base, maxPeerManifest)
	}
	if resp.StatusCode != http.StatusOK {
		return m, fmt.Errorf("%s: %s", base, resp.Status)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", base, err)
	}
	return m, nil
}

// WaitsForOwner reports whether a delegated task in state (an A2A 0.3.0
// TaskState, §6.3, as GET /a2a/outbound shows it) waits for this device's
// owner: the agent asked for input (input-required) or for credentials
// (auth-required); both are answered with POST /a2a/outbound/{id}/answer.
func WaitsForOwner(state string) bool {
	s := a2a.TaskState(state)
	return s == a2a.TaskStateInputRequired || s == a2a.TaskStateAuthRequired
}

// outboundWaiting counts the delegated tasks that wait for the owner
// (Status.OutboundWaiting); 0 before Start.
func (n *Node) outboundWaiting() int {
	if n.deleg == nil || n.deleg.out == nil {
		return 0
	}
	k := 0
	for _, t := range n.deleg.out.List() {
		if WaitsForOwner(string(t.State)) {
			k++
		}
	}
	return k
}

// Logger is the node's logger; the tray logs through children of it.
func (n *Node) Logger() *slog.Logger { return n.log }
