package app

import (
	"time"

	"meshtray/pairing"
)

// Version is meshtray's version, set at link time (-X meshtray/app.Version=...).
var Version = "dev"

// AppID is meshtray's application ID (FyneApp.toml): the autostart entry's
// name and the window process's Fyne app ID.
const AppID = "io.meshtray.app"

// Status is the node at a glance (GET /status): what the tray menu renders.
type Status struct {
	Name        string `json:"name"`
	OS          string `json:"os"`
	DeviceID    string `json:"device_id"`
	Fingerprint string `json:"fingerprint"`
	Version     string `json:"version"`
	PID         int    `json:"pid"`
	StateDir    string `json:"state_dir"`
	LogDir      string `json:"log_dir"`
	// ControlSocket is the Unix-domain socket of the control surface
	// (daemon.json names it too); "" where there is none (Windows: the
	// loopback port with the control token).
	ControlSocket string    `json:"control_socket"`
	A2A           A2AStatus `json:"a2a"`
	LAN           bool      `json:"lan"`
	Tailscale     string    `json:"tailscale"` // tailnet state: running, not running, logged out, ...
	// Listeners are the addresses serving right now ("loopback 127.0.0.1:47654").
	Listeners        []ListenerStatus `json:"listeners"`
	PendingApprovals int              `json:"pending_approvals"`
	OnlinePeers      int              `json:"online_peers"`
	// OutboundWaiting counts the tasks this device delegated whose agent
	// waits for the owner (A2A input-required or auth-required, A2A 0.3.0
	// §6.3): GET /a2a/outbound has their questions.
	OutboundWaiting int `json:"outbound_waiting"`
	// Incoming are the file transfers being received now (GET
	// /files/incoming); `meshtray cancel TASK` ends one.
	Incoming []IncomingTransfer `json:"incoming"`
}

// ListenerStatus is one serving address.
type ListenerStatus struct {
	Kind pairing.Listener `json:"kind"`
	Addr string           `json:"addr"`
	URL  string           `json:"url"`
}

// A2AStatus is GET/POST /a2a/status.
type A2AStatus struct {
	Enabled   bool   `json:"enabled"`
	CardURL   string `json:"card_url"`
	LiveTasks int    `json:"live_tasks"`
}

// GrantRequest is POST /nodes/devices: mint a grant from the CLI.
type GrantRequest struct {
	Name     string         `json:"name"`
	Scopes   pairing.Scopes `json:"scopes"`
	Approval pairing.Policy `json:"approval,omitempty"`
	// Where the owner asks from (store.WhereCLI, WhereTray, WherePhone),
	// for the audit trail; "" is the CLI. Client fills it in.
	Where string `json:"where,omitempty"`
}

// GrantToken is the answer to a grant creation or rotation: the token is
// shown this once and never again.
type GrantToken struct {
	ID    string `json:"id"`
	Token string `json:"token"`
}

// GrantUpdate is POST /nodes/devices/{id}: one action, or a new policy.
type GrantUpdate struct {
	Action   string         `json:"action,omitempty"` // pause | resume | revoke | rotate
	Approval pairing.Policy `json:"approval,omitempty"`
	Where    string         `json:"where,omitempty"` // as GrantRequest.Where
	// Files is the grant's policy for files it sends
	// (pairing.Grant.FilesPolicy), given alone.
	Files pairing.Policy `json:"files_approval,omitempty"`
}

// Grant actions.
const (
	ActionPause  = "pause"
	ActionResume = "resume"
	ActionRevoke = "revoke"
	ActionRotate = "rotate"
)

// HeldView is a grant a peer gave us, without its token.
type HeldView struct {
	PeerID      string         `json:"peer_id"`
	Name        string         `json:"name"`
	OS          string         `json:"os,omitempty"`
	URL         string         `json:"url,omitempty"`
	Fingerprint string         `json:"fingerprint,omitempty"`
	Scopes      pairing.Scopes `json:"scopes,omitempty"`
	Created     time.Time      `json:"created"`
}

// Devices is GET /nodes/devices: grants we issued and grants we hold.
type Devices struct {
	Issued []pairing.Grant `json:"issued"`
	Held   []HeldView      `json:"held"`
}

// A2AUpdate is the body of POST /a2a/status.
type A2AUpdate struct {
	Enabled *bool  `json:"enabled"`
	Where   string `json:"where,omitempty"` // as GrantRequest.Where
}

// ConfigUpdate is the body of POST /config.
type ConfigUpdate struct {
	LAN                *bool                     `json:"lan,omitempty"`
	CapabilityPolicies map[string]pairing.Policy `json:"capability_policies,omitempty"`
	Where              string                    `json:"where,omitempty"` // as GrantRequest.Where
}
