package pairing

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Scope is what a grant lets its holder reach (DESIGN.md, "Surfaces").
type Scope string

const (
	// ScopeAgent reaches the A2A JSON-RPC surface (POST /a2a/v1) only.
	ScopeAgent Scope = "agent"
	// ScopeNode reaches the node manifest and capability calls only.
	ScopeNode Scope = "node"
	// ScopeFull reaches every surface, the local admin surface included,
	// but not ScopeApprove.
	ScopeFull Scope = "full"
	// ScopeApprove lets the holder approve or deny the requests made to
	// this device (the remote approval routes: GET /remote/approvals,
	// GET /remote/approvals/events, POST /remote/approvals/{id}), except a
	// request its own grant made. No other scope implies it, ScopeFull
	// included, and no default grants it: the owner gives it by name.
	ScopeApprove Scope = "approve"
)

// Scopes is a set of scopes, kept sorted and without duplicates.
type Scopes []Scope

// Has reports whether s grants scope want; ScopeFull grants every scope
// but ScopeApprove, which only ScopeApprove itself grants.
func (s Scopes) Has(want Scope) bool {
	return slices.Contains(s, want) || (want != ScopeApprove && slices.Contains(s, ScopeFull))
}

// String joins the scopes with commas, the form ParseScopes reads.
func (s Scopes) String() string {
	parts := make([]string, len(s))
	for i, sc := range s {
		parts[i] = string(sc)
	}
	return strings.Join(parts, ",")
}

// Policy decides what happens to a request that needs the owner's consent:
// a delegation from a grant, or a capability call.
type Policy string

const (
	PolicyAsk   Policy = "ask"   // queue an approval and wait for the owner
	PolicyAllow Policy = "allow" // run without asking
	PolicyDeny  Policy = "deny"  // refuse without asking
)

// Stricter returns the stricter of p and q (allow < ask < deny). An empty
// policy counts as ask.
func Stricter(p, q Policy) Policy {
	rank := func(x Policy) int {
		switch x {
		case PolicyAllow:
			return 0
		case PolicyDeny:
			return 2
		}
		return 1
	}
	if rank(p) >= rank(q) {
		if p == "" {
			return PolicyAsk
		}
		return p
	}
	return q
}

// Status is the state of an issued grant.
type Status string

const (
	StatusActive Status = "active"
	StatusPaused Status = "paused" // the token is kept but refused (401)
)

// Grant is one bearer grant this device issued to a peer. The token itself is
// never part of a Grant: the store keeps only its hash.
type Grant struct {
	ID     string `json:"id"`
	PeerID string `json:"peer_id,omitempty"` // device ID of the holder; empty for CLI-minted grants
	Name   string `json:"name"`
	OS     string `json:"os,omitempty"`
	Scopes Scopes `json:"scopes"`
	Policy Policy `json:"approval"` // approval policy for delegations from this grant
	// FilesPolicy is the approval policy for file transfers from this
	// grant, apart from Policy: "" and ask ask the owner, allow saves
	// without asking ("Always allow files from this device"), deny refuses.
	FilesPolicy Policy    `json:"files_approval,omitempty"`
	Status      Status    `json:"status"`
	Created     time.Time `json:"created"`
	LastUsed    time.Time `json:"last_used,omitzero"`
	// Uncollected: approved in a pairing whose device has not collected
	// the token yet; the token is refused until it does, and the grant is
	// revoked if the node stops first (IssueRequest.Uncollected).
	Uncollected bool `json:"uncollected,omitempty"`
}

// Listener names the listener a request arrived on. Only ListenerLoopback can
// carry the local owner.
type Listener string

const (
	ListenerLoopback Listener = "loopback" // 127.0.0.1: plain HTTP for the local owner, TLS for peers on this machine
	ListenerTailnet  Listener = "tailnet"  // HTTPS on a tailnet address
	ListenerLAN      Listener = "lan"      // HTTPS on a LAN address
)

// TailnetIdentity is who a tailnet connection comes from, per the LocalAPI
// WhoIs answer.
type TailnetIdentity struct {
	User string `json:"user"` // login name, e.g. alice@example.com
	Node string `json:"node"` // the tailnet node's host name
}

// Principal is the authenticated caller of one request. Exactly one of Local
// and Grant is meaningful.
type Principal struct {
	Local      bool             // the local owner on the loopback control surface
	Grant      Grant            // the grant the bearer token belongs to (when !Local)
	Listener   Listener         // where the request arrived
	RemoteAddr netip.AddrPort   // the TCP peer
	Tailnet    *TailnetIdentity // set for tailnet connections when WhoIs answered
}

// Owner is the key tasks and contexts are owned by: the grant ID, or "local"
// for the local owner.
func (p *Principal) Owner() string {
	if p.Local {
		return "local"
	}
	return p.Grant.ID
}

// DisplayName is the peer's name as the owner knows it.
func (p *Principal) DisplayName() string {
	if p.Local {
		return "this device"
	}
	return p.Grant.Name
}

type principalKey struct{}
type listenerKey struct{}

// WithPrincipal returns ctx carrying p; the auth middleware calls it.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the caller set by the auth middleware.
func PrincipalFrom(ctx context.Context) (*Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(*Principal)
	return p, ok
}

// WithListener tags a connection's context with the listener it arrived on;
// app sets it from http.Server.ConnContext.
func WithListener(ctx context.Context, l Listener) context.Context {
	return context.WithValue(ctx, listenerKey{}, l)
}

// ListenerFrom returns the listener tag, or "" when none was set.
func ListenerFrom(ctx context.Context) Listener {
	l, _ := ctx.Value(listenerKey{}).(Listener)
	return l
}
