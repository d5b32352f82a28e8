// Package tray is meshtray's desktop face: the tray menu and the windows.
//
// It is the only package importing fyne.io/systray or Fyne, and it talks to
// the node only through the local control API (app.Client), exactly as the
// CLI does, so every view shows what `meshtray status` shows.
//
// Two processes (DESIGN.md, "Why the tray and the windows are two
// processes"):
//
//   - Run is `meshtray` without a subcommand: the node and a
//     fyne.io/systray menu in one process. It idles at ~0 % CPU: it wakes
//     only on the node's change notices (GET /events), renders the menu from
//     a snapshot when the snapshot changed, and sends a desktop notification
//     for each new approval. Without a display or a session bus it says so
//     once and keeps running as the node.
//   - UI is `meshtray ui [WINDOW [ARG]]`: every window (approval popup,
//     pairing, devices, peers, a peer, the node manifest) in one Fyne
//     process, started on demand by the tray (it re-executes itself with
//     the same --state-dir and --port), exiting when its last window
//     closes. The tray queues "open window X" at POST /ui/open; the UI
//     process takes the queue on the UI goroutine (POST /ui/take), so a
//     request is either shown or still queued when the process exits, and
//     the tray then starts it again.
//
// Views take values and callbacks (approvalView, pairView, devicesView,
// peersView, peerView, manifestView) and are tested with Fyne's test
// driver; only the UI goroutine touches widgets (fyne.Do from the
// goroutines that watch the node).
package tray
