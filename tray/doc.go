// Package tray is meshtray's desktop face without a window: the tray menu
// (fyne.io/systray), its controller, desktop notifications, and the
// launcher of the window process. It imports no Fyne; the windows are
// package tray/windows, built into their own executable, meshtray-ui.
//
// It talks to the node only through the local control API (app.Client),
// exactly as the CLI does, so every view shows what `meshtray status`
// shows.
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
//   - meshtray-ui (UIProgram, package tray/windows): every window in one
//     Fyne process, started on demand by the tray from the directory of its
//     own executable (with the same --state-dir and --port), exiting when
//     its last window closes. The tray queues "open window X" at POST
//     /ui/open; the UI process takes the queue on the UI goroutine (POST
//     /ui/take), so a request is either shown or still queued when the
//     process exits, and the tray then starts it again. When meshtray-ui is
//     missing, the tray says so in its log and, as disabled items, in the
//     menu.
package tray
