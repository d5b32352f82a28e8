// Package windows is meshtray's windows, the meshtray-ui executable (Main;
// main.go built with -tags meshtray_ui): the approval popup, pairing,
// devices, peers, one peer, the node manifest and the questions from
// agents, in one Fyne process the tray starts on demand. It is the only
// package importing Fyne; it talks to the node only through the local
// control API (app.Client), like the tray and the CLI.
//
// Views take values and callbacks (approvalView, pairView, devicesView,
// peersView, peerView, manifestView, questionsView) and are tested with
// Fyne's test driver; only the UI goroutine touches widgets (fyne.Do from
// the goroutines that watch the node).
package windows
