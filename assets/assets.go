// Package assets holds what meshtray embeds: the tray icons and the phone
// pairing page (served at GET /pair). Everything is compiled in with
// go:embed, so the binary needs no files at run time.
package assets

import _ "embed"

// Tray icons, 256x256 PNG: the three states of the tray (issue 6 §1).
var (
	//go:embed icons/normal.png
	IconNormal []byte
	//go:embed icons/published.png
	IconPublished []byte // the A2A Agent Card is published
	//go:embed icons/approval.png
	IconApproval []byte // an approval is waiting
)
