package tray

import (
	"fmt"
	"slices"
	"strings"

	"meshtray/app"
	"meshtray/mesh"
	"meshtray/pairing"
)

// action is what a menu click asks for.
type action struct {
	kind actionKind
	arg  string // peer device ID for actOpenPeer
}

type actionKind int

const (
	actCopyID actionKind = iota + 1
	actToggleA2A
	actToggleLAN
	actOpenPeer
	actOpenPeers
	actPair
	actDevices
	actApprovals
	actManifest
	actQuestions
	actActivity
	actAutostart
	actOpenLogs
	actQuit
)

// iconState is one of the three tray icons (assets.IconNormal,
// IconPublished, IconApproval).
type iconState int

const (
	iconNormal    iconState = iota
	iconPublished           // the A2A Agent Card is published
	iconApproval            // an approval or an agent's question is waiting (wins over published)
)

// maxMenuPeers bounds the Peers submenu; the rest are in the peers window.
const maxMenuPeers = 12

// menuModel is everything the tray menu shows, computed from one snapshot
// of the node. Two equal models render the same menu, so a change notice
// that changes nothing visible costs no rebuild.
type menuModel struct {
	Header     string // "<device name> — <OS environment>"
	DeviceID   string
	StatusLine string
	Tooltip    string
	A2A        bool
	LAN        bool
	Peers      []peerEntry
	MorePeers  int // online peers not listed
	Approvals  int
	// Questions counts delegated tasks waiting for the owner's answer.
	Questions int
	Autostart bool
	// AutostartOK is false where start-at-login is unsupported.
	AutostartOK bool
	Icon        iconState
	// UIMissing is the path of the window process's executable when it is
	// missing (no window can open), else "".
	UIMissing string
}

type peerEntry struct {
	ID    string
	Label string
}

// snapshot is what the tray reads from the node for one render.
type snapshot struct {
	Status      app.Status
	Peers       []mesh.Peer
	Autostart   bool
	AutostartOK bool
	UIMissing   string // uiLauncher.missing
}

// buildMenu renders a snapshot into the menu model.
func buildMenu(s snapshot) menuModel {
	st := s.Status
	m := menuModel{
		Header:      st.Name + " — " + st.OS,
		DeviceID:    st.DeviceID,
		A2A:         st.A2A.Enabled,
		LAN:         st.LAN,
		Approvals:   st.PendingApprovals,
		Questions:   st.OutboundWaiting,
		Autostart:   s.Autostart,
		AutostartOK: s.AutostartOK,
		UIMissing:   s.UIMissing,
	}
	var parts []string
	if st.A2A.Enabled {
		parts = append(parts, "A2A on")
	} else {
		parts = append(parts, "A2A off")
	}
	var via []string
	if st.Tailscale == "running" {
		via = append(via, "tailnet")
	}
	if st.LAN {
		via = append(via, "LAN")
	}
	if len(via) > 0 {
		parts = append(parts, "reachable via "+strings.Join(via, " and "))
	} else {
		parts = append(parts, "not reachable from other devices")
	}
	switch st.PendingApprovals {
	case 0:
	case 1:
		parts = append(parts, "1 approval waiting")
	default:
		parts = append(parts, fmt.Sprintf("%d approvals waiting", st.PendingApprovals))
	}
	switch st.OutboundWaiting {
	case 0:
	case 1:
		parts = append(parts, "1 question from an agent")
	default:
		parts = append(parts, fmt.Sprintf("%d questions from agents", st.OutboundWaiting))
	}
	m.StatusLine = strings.Join(parts, " · ")
	m.Tooltip = "meshtray — " + st.Name + "\n" + m.StatusLine

	online := slices.DeleteFunc(slices.Clone(s.Peers), func(p mesh.Peer) bool { return !p.Online })
	slices.SortStableFunc(online, func(a, b mesh.Peer) int {
		return strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name))
	})
	for i, p := range online {
		if i == maxMenuPeers {
			m.MorePeers = len(online) - maxMenuPeers
			break
		}
		m.Peers = append(m.Peers, peerEntry{ID: p.ID, Label: peerLabel(p)})
	}

	switch {
	case st.PendingApprovals > 0, st.OutboundWaiting > 0:
		m.Icon = iconApproval
	case st.A2A.Enabled:
		m.Icon = iconPublished
	default:
		m.Icon = iconNormal
	}
	return m
}

// peerLabel is "Name — LAN, tailnet · paired".
func peerLabel(p mesh.Peer) string {
	name := p.Name
	if name == "" {
		name = pairing.ShortID(p.ID)
	}
	var src []string
	for _, s := range p.Sources {
		src = append(src, s.Label())
	}
	l := name
	if len(src) > 0 {
		l += " — " + strings.Join(src, ", ")
	}
	if p.Paired {
		l += " · paired"
	}
	if p.A2A {
		l += " · A2A"
	}
	return l
}

// Menu labels. Tests find items by these (the menu is renumbered on every
// rebuild).
const (
	labelPublish   = "Publish A2A agent card"
	labelLAN       = "Reachable on local network"
	labelPeers     = "Peers"
	labelAllPeers  = "All peers…"
	labelNoPeers   = "No peers online"
	labelPair      = "Pair a device…"
	labelDevices   = "Devices…"
	labelManifest  = "Node manifest…"
	labelActivity  = "Activity…"
	labelAutostart = "Start at login"
	labelLogs      = "Open log folder"
	labelQuit      = "Quit"
)

// uiMissingLabel and uiMissingHintLabel are the two disabled items shown
// when the window process's executable is missing.
func uiMissingLabel(path string) string { return "No windows: " + path + " is missing" }

const uiMissingHintLabel = "Get it: " + UIMissingHint

func approvalsLabel(n int) string { return fmt.Sprintf("Approvals (%d)…", n) }

func questionsLabel(n int) string { return fmt.Sprintf("Questions from agents (%d)…", n) }

// menuItem is one rendered entry: the renderer turns the list into systray
// items. Kept apart from systray so the layout is unit-tested.
type menuItem struct {
	Label     string
	Tooltip   string
	Check     bool // a checkbox item
	Checked   bool
	Disabled  bool
	Separator bool
	Act       action
	Sub       []menuItem
}

// items lays the model out in menu order.
func (m menuModel) items() []menuItem {
	peers := []menuItem{}
	for _, p := range m.Peers {
		peers = append(peers, menuItem{Label: p.Label, Tooltip: "Open " + p.Label, Act: action{kind: actOpenPeer, arg: p.ID}})
	}
	if len(m.Peers) == 0 {
		peers = append(peers, menuItem{Label: labelNoPeers, Disabled: true})
	}
	if m.MorePeers > 0 {
		peers = append(peers, menuItem{Label: fmt.Sprintf("and %d more", m.MorePeers), Disabled: true})
	}
	peers = append(peers, menuItem{Separator: true}, menuItem{Label: labelAllPeers, Act: action{kind: actOpenPeers}})
	items := []menuItem{
		{Label: m.Header, Tooltip: "Copy this device's ID (" + m.DeviceID + ")", Act: action{kind: actCopyID}},
		{Label: m.StatusLine, Disabled: true},
	}
	if m.UIMissing != "" {
		items = append(items, menuItem{Label: uiMissingLabel(m.UIMissing), Disabled: true}, menuItem{Label: uiMissingHintLabel, Disabled: true})
	}
	items = append(items, []menuItem{
		{Separator: true},
		{Label: labelPublish, Tooltip: "Serve the Agent Card so other agents can find this device; each delegation still needs your approval", Check: true, Checked: m.A2A, Act: action{kind: actToggleA2A}},
		{Label: labelLAN, Tooltip: "Serve HTTPS and announce this device with mDNS on the local network", Check: true, Checked: m.LAN, Act: action{kind: actToggleLAN}},
		{Label: labelPeers, Sub: peers},
		{Separator: true},
		{Label: labelPair, Act: action{kind: actPair}},
		{Label: labelDevices, Act: action{kind: actDevices}},
		{Label: approvalsLabel(m.Approvals), Disabled: m.Approvals == 0, Act: action{kind: actApprovals}},
	}...)
	if m.Questions > 0 {
		items = append(items, menuItem{Label: questionsLabel(m.Questions), Tooltip: "Agents this device delegated to wait for your answer", Act: action{kind: actQuestions}})
	}
	return append(items,
		menuItem{Label: labelManifest, Act: action{kind: actManifest}},
		menuItem{Label: labelActivity, Tooltip: "What happened on this device: decisions, capability runs, grant and pairing changes", Act: action{kind: actActivity}},
		menuItem{Separator: true},
		menuItem{Label: labelAutostart, Check: true, Checked: m.Autostart, Disabled: !m.AutostartOK, Act: action{kind: actAutostart}},
		menuItem{Label: labelLogs, Act: action{kind: actOpenLogs}},
		menuItem{Label: labelQuit, Tooltip: "Stop meshtray (the node stops too)", Act: action{kind: actQuit}},
	)
}
