package windows

import (
	"fmt"
	"image/color"
	"slices"
	"strings"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"meshtray/pairing"
)

// Small view helpers shared by the windows. Everything here runs on the UI
// goroutine.

func wrapLabel(text string) *widget.Label {
	l := widget.NewLabel(text)
	l.Wrapping = fyne.TextWrapWord
	return l
}

func boldLabel(text string) *widget.Label {
	l := widget.NewLabel(text)
	l.TextStyle = fyne.TextStyle{Bold: true}
	return l
}

func heading(text string) *widget.Label {
	l := widget.NewLabel(text)
	l.TextStyle = fyne.TextStyle{Bold: true}
	l.SizeName = theme.SizeNameSubHeadingText
	l.Wrapping = fyne.TextWrapWord
	return l
}

// mutedLabel is explanatory text. It keeps the normal text colour: the
// theme's low-importance colour is the disabled one, unreadable on the dark
// theme at 100 %.
func mutedLabel(text string) *widget.Label {
	l := widget.NewLabel(text)
	l.Wrapping = fyne.TextWrapWord
	return l
}

// plainLabel is a one-line label that never wraps (inside an HBox a
// wrapping label gets no width and breaks at every character).
func plainLabel(text string) *widget.Label {
	return widget.NewLabel(text)
}

// bigText is a large monospace text (codes, the SAS).
func bigText(text string, size float32) *canvas.Text {
	t := canvas.NewText(text, theme.Color(theme.ColorNameForeground))
	t.TextStyle = fyne.TextStyle{Monospace: true, Bold: true}
	t.TextSize = size
	t.Alignment = fyne.TextAlignCenter
	return t
}

// formRows lays out "label  value" rows with the labels in a column.
func formRows(rows ...fyne.CanvasObject) *fyne.Container {
	return container.New(layout.NewFormLayout(), rows...)
}

func fieldName(s string) *widget.Label {
	l := widget.NewLabel(s)
	l.TextStyle = fyne.TextStyle{Italic: true}
	return l
}

// fixedWidth gives its content at least w of width (so wrapped labels have
// room in a window that would otherwise start narrow).
type fixedWidth struct {
	widget.BaseWidget
	w       float32
	content fyne.CanvasObject
}

func newFixedWidth(w float32, c fyne.CanvasObject) *fixedWidth {
	f := &fixedWidth{w: w, content: c}
	f.ExtendBaseWidget(f)
	return f
}

func (f *fixedWidth) CreateRenderer() fyne.WidgetRenderer {
	return &fixedWidthRenderer{f: f}
}

type fixedWidthRenderer struct{ f *fixedWidth }

func (r *fixedWidthRenderer) Layout(s fyne.Size) {
	r.f.content.Resize(s)
	r.f.content.Move(fyne.NewPos(0, 0))
}
func (r *fixedWidthRenderer) MinSize() fyne.Size {
	m := r.f.content.MinSize()
	return fyne.NewSize(max(m.Width, r.f.w), m.Height)
}
func (r *fixedWidthRenderer) Refresh()                     { r.f.content.Refresh() }
func (r *fixedWidthRenderer) Objects() []fyne.CanvasObject { return []fyne.CanvasObject{r.f.content} }
func (r *fixedWidthRenderer) Destroy()                     {}

// countdown is "4:05 left" until t, "expired" after.
func countdown(now, t time.Time) string {
	d := t.Sub(now)
	if d <= 0 {
		return "expired"
	}
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d left", int(d.Minutes()), int(d.Seconds())%60)
}

// ago is a short past time: "just now", "5 min ago", "3 h ago", a date.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d.Hours()))
	}
	return t.Local().Format("2 Jan 2006")
}

// scopeChoices are the scopes a pairing can grant, in the words the owner
// reads.
var scopeChoices = []struct {
	Scope pairing.Scope
	Label string
}{
	{pairing.ScopeAgent, "agent — send tasks to this device (A2A)"},
	{pairing.ScopeNode, "node — use this device's capabilities"},
	{pairing.ScopeFull, "full — manage this device (A2A, agents); approvals and grants stay with you"},
	{pairing.ScopeApprove, "approve — approve or deny requests made to this computer"},
}

// approveWarning is shown under the scope choices while approve is
// checked: what giving it means, in plain words.
const approveWarning = "⚠ This device may approve or deny requests made to this computer: delegations, capability calls, and denying new pairings (never its own requests, never approving a pairing). Give it only to a device you keep with you."

// newApproveWarning returns the warning label for a scope choice group; call
// its sync with the selection whenever it changes.
func newApproveWarning() (*widget.Label, func(selected []string)) {
	l := wrapLabel(approveWarning)
	l.Importance = widget.WarningImportance
	l.Hide()
	return l, func(selected []string) {
		if slices.Contains(scopesFromLabels(selected), pairing.ScopeApprove) {
			l.Show()
		} else {
			l.Hide()
		}
	}
}

func scopeLabels(s pairing.Scopes) []string {
	var out []string
	for _, c := range scopeChoices {
		for _, x := range s {
			if x == c.Scope {
				out = append(out, c.Label)
			}
		}
	}
	return out
}

func scopesFromLabels(ls []string) pairing.Scopes {
	var out pairing.Scopes
	for _, c := range scopeChoices {
		for _, l := range ls {
			if l == c.Label {
				out = append(out, c.Scope)
			}
		}
	}
	return out
}

func allScopeLabels() []string {
	out := make([]string, len(scopeChoices))
	for i, c := range scopeChoices {
		out[i] = c.Label
	}
	return out
}

// groupCode splits a pairing code for reading: "ABCD EFGH".
func groupCode(code string) string {
	if len(code) == 8 {
		return code[:4] + " " + code[4:]
	}
	return code
}

// groupSAS splits a 6-digit SAS: "123 456".
func groupSAS(s string) string {
	if len(s) == 6 {
		return s[:3] + " " + s[3:]
	}
	return s
}

// viaText says where a request came from, in words.
func viaText(via, addr, user, node string) string {
	var parts []string
	switch via {
	case string(pairing.ListenerTailnet):
		parts = append(parts, "over the tailnet")
	case string(pairing.ListenerLAN):
		parts = append(parts, "over the local network")
	case string(pairing.ListenerLoopback):
		parts = append(parts, "from this computer")
	case "":
	default:
		parts = append(parts, "via "+via)
	}
	if user != "" || node != "" {
		who := strings.TrimSpace(user)
		if node != "" {
			if who != "" {
				who += " on "
			}
			who += node
		}
		parts = append(parts, who)
	}
	if addr != "" {
		parts = append(parts, addr)
	}
	return strings.Join(parts, " · ")
}

// badge is a small coloured pill of text.
func badge(text string, c color.Color) fyne.CanvasObject {
	bg := canvas.NewRectangle(c)
	bg.CornerRadius = 4
	t := canvas.NewText(text, color.White)
	t.TextSize = theme.CaptionTextSize()
	t.TextStyle = fyne.TextStyle{Bold: true}
	return container.NewStack(bg, container.New(layout.NewCustomPaddedLayout(2, 2, 6, 6), t))
}
