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
	ChangeRevoked ChangeOp = "revoked" // a grant was deleted
	ChangeRotated ChangeOp = "rotated" // a grant got a new token
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
	PeerID string
	Name   string
	Scopes Scopes
	Status Status
	Policy Policy
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
// Pairer over g denied or let expire; nil stops it. fn runs synchronously
// on the goroutine that made the change, after the change took effect,
// possibly under g's writer lock or the Pairer's lock: it must not call
// Grants' or the Pairer's methods that change anything, and should be
// quick (an append to a database is fine).
func (g *Grants) Observe(fn func(Change)) {
	if fn == nil {
		g.observer.Store(nil)
		return
	}
	g.observer.Store(&fn)
}

// emit tells the observer of c.
func (g *Grants) emit(c Change) {
	if fn := g.observer.Load(); fn != nil {
		(*fn)(c)
	}
}

func grantChange(op ChangeOp, gr Grant, cause string) Change {
	return Change{Op: op, GrantID: gr.ID, PeerID: gr.PeerID, Name: gr.Name, Scopes: gr.Scopes,
		Status: gr.Status, Policy: gr.Policy, Cause: cause}
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
	return Change{Op: op, PeerID: r.DeviceID, Name: r.Name, Scopes: r.RequestedScopes, Listener: r.Listener, Cause: cause}
}
