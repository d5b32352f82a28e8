package pairing

// ChangeOp names one change of trust (Change).
type ChangeOp string

// Changes of grants, held grants and pairing requests (Grants.Observe).
const (
	ChangeIssued  ChangeOp = "issued"  // a grant was minted
	ChangePaired  ChangeOp = "paired"  // a device collected the token of its pairing grant
	ChangePaused  ChangeOp = "paused"  // a grant's token is refused until resumed
	ChangeResumed ChangeOp = "resumed" // a paused grant is valid again
	ChangePolicy  ChangeOp = "policy"  // a grant's approval policy changed (Change.Policy)
	// ChangeFilesPolicy: a grant's approval policy for file transfers
	// changed (Change.FilesPolicy).
	ChangeFilesPolicy ChangeOp = "files-policy"
	ChangeRevoked     ChangeOp = "revoked" // a grant was deleted
	ChangeRotated     ChangeOp = "rotated" // a grant got a new token
	// ChangeHeld: a device gave this one a grant (a pairing this device
	// joined, or a token the device offered: a reciprocation or a rotation).
	ChangeHeld ChangeOp = "held"
	// ChangeHeldDropped: a grant this device held was dropped; Cause says
	// why (the device refused its token: it revoked the grant).
	ChangeHeldDropped ChangeOp = "held-dropped"
	// ChangeDenied and ChangeExpired: a pairing request was denied, or
	// expired undecided (a Pairer over these grants).
	ChangeDenied  ChangeOp = "denied"
	ChangeExpired ChangeOp = "expired"
)

// Change is one change of trust, as the audit trail records it. It never
// carries a token, code or SAS.
type Change struct {
	Op ChangeOp
	// GrantID is the grant's ID: one this device issued, or for
	// ChangeHeld/ChangeHeldDropped the grant the other device issued to
	// this one; "" for a pairing request's outcome.
	GrantID string
	// PeerID is the other device's ID ("" for a phone or a grant minted
	// for an agent), Name its name.
	PeerID      string
	Name        string
	Scopes      Scopes
	Status      Status
	Policy      Policy
	FilesPolicy Policy // "" is ask (Grant.FilesPolicy)
	// RequestID is the pairing request's ID (ChangeDenied, ChangeExpired).
	RequestID string
	// Listener is the listener a pairing request came on (ChangeDenied,
	// ChangeExpired).
	Listener Listener
	// Cause says why, when the change was not the direct effect of the
	// owner's action: "replaced by a new pairing of the device", "its
	// token was never collected", "the device refused its token".
	Cause string
}

// Observe sets the function told of every change of trust made through g
// (grants issued, paused, resumed, re-policied, revoked, rotated,
// collected; held grants stored and dropped) and of the pairing requests a
// Pairer over g denied or let expire; nil stops it (OpenGrants sets it
// before the start's own changes). fn is called once per change, in the
// order the changes took effect, one call at a time, after the change took
// effect and outside g's and the Pairer's locks, before the method that
// made the change returns (on its goroutine or on that of a change made at
// the same time, whose call then waits for it). fn must not call Grants'
// or the Pairer's methods that change anything; a slow fn (an append to a
// stalled disk) delays those calls' return but not other changes.
func (g *Grants) Observe(fn func(Change)) {
	if fn == nil {
		g.observer.Store(nil)
		return
	}
	g.observer.Store(&fn)
}

// emit tells the observer of c, after the changes queued before it. The
// caller holds neither wmu nor a Pairer's lock.
func (g *Grants) emit(c Change) {
	g.queue(c)
	g.emitQueued()
}

// queue adds c to the changes for the observer; the caller may hold wmu
// or a Pairer's lock, and calls emitQueued once it released them.
func (g *Grants) queue(c Change) {
	if g.observer.Load() == nil {
		return
	}
	g.qmu.Lock()
	g.queued = append(g.queued, c)
	g.qmu.Unlock()
}

// emitQueued tells the observer of every queued change, oldest first.
// emitMu makes the calls one at a time and in queue order: a change queued
// while another goroutine tells the observer is told by that goroutine or
// by this one once it has the lock, never before an older one.
func (g *Grants) emitQueued() {
	g.emitMu.Lock()
	defer g.emitMu.Unlock()
	for {
		g.qmu.Lock()
		cs := g.queued
		g.queued = nil
		g.qmu.Unlock()
		if len(cs) == 0 {
			return
		}
		fn := g.observer.Load()
		for _, c := range cs {
			if fn != nil {
				(*fn)(c)
			}
		}
	}
}

func grantChange(op ChangeOp, gr Grant, cause string) Change {
	return Change{Op: op, GrantID: gr.ID, PeerID: gr.PeerID, Name: gr.Name, Scopes: gr.Scopes,
		Status: gr.Status, Policy: gr.Policy, FilesPolicy: gr.FilesPolicy, Cause: cause}
}

func heldChange(op ChangeOp, h Held, cause string) Change {
	return Change{Op: op, GrantID: h.GrantID, PeerID: h.PeerID, Name: h.Name, Scopes: h.Scopes, Cause: cause}
}

func joinCause(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func requestChange(op ChangeOp, r Request, cause string) Change {
	return Change{Op: op, RequestID: r.ID, PeerID: r.DeviceID, Name: r.Name, Scopes: r.RequestedScopes, Listener: r.Listener, Cause: cause}
}
