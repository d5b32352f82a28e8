package mesh

import "time"

// ProtocolVersion is meshtray's mesh protocol version, the `v` of
// GET /mesh/hello and of the mDNS TXT record.
const ProtocolVersion = 1

// ServiceType is the DNS-SD service meshtray advertises and browses (RFC 6763).
const ServiceType = "_meshtray._tcp"

// Hello is the public self-description at GET /mesh/hello.
type Hello struct {
	ID   string `json:"id"`   // device ID (pairing.DeviceID string form)
	Name string `json:"name"` // device name
	OS   string `json:"os"`   // OS environment string
	FP   string `json:"fp"`   // lowercase hex SHA-256 of the identity certificate (DER)
	V    int    `json:"v"`    // ProtocolVersion
	A2A  bool   `json:"a2a"`  // the Agent Card is published
}

// Source is how a peer was found.
type Source string

const (
	SourceMDNS      Source = "mdns"
	SourceTailscale Source = "tailscale"
	SourceManual    Source = "manual"
)

// Label is the source as the tray's menu and windows name it to a person:
// "LAN" (mDNS), "tailnet", "added by hand"; an unknown source as it is.
func (s Source) Label() string {
	switch s {
	case SourceMDNS:
		return "LAN"
	case SourceTailscale:
		return "tailnet"
	case SourceManual:
		return "added by hand"
	}
	return string(s)
}

// Peer is one row of the merged peer table, keyed by device ID.
type Peer struct {
	ID       string              `json:"id"`
	Name     string              `json:"name"`
	OS       string              `json:"os"`
	FP       string              `json:"fp"`
	Sources  []Source            `json:"sources"`
	Addrs    map[Source][]string `json:"addrs"` // "host:port" per source
	LastSeen time.Time           `json:"last_seen"`
	Online   bool                `json:"online"`
	Paired   bool                `json:"paired"` // a grant either way
	A2A      bool                `json:"a2a"`
	// Tailnet node name and login when the peer was seen on the tailnet.
	TailnetNode string `json:"tailnet_node,omitempty"`
}
