// Package autostart turns "start at login" on and off for the current user:
// an XDG autostart entry on Linux and the BSDs (freedesktop Desktop
// Application Autostart Specification 0.5), a LaunchAgent on macOS
// (launchd.plist(5), ~/Library/LaunchAgents), a value under the Run key on
// Windows (HKCU\Software\Microsoft\Windows\CurrentVersion\Run).
//
// It imports no cgo and no GUI toolkit, so `make cross` vets it for every
// platform with CGO_ENABLED=0. The file formats are built by plain functions
// (DesktopEntry, LaunchAgent, CommandLine) that every platform's tests can
// check.
package autostart

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnsupported is returned on a platform without a login-start mechanism
// this package knows.
var ErrUnsupported = errors.New("autostart: not supported on this platform")

// Entry is the program to start at login.
type Entry struct {
	// ID names the entry: the file name (ID.desktop, ID.plist) and the
	// launchd Label; on Windows, Name is the value name. Reverse-DNS,
	// e.g. "io.meshtray.app"; letters, digits, '.', '-', '_' only.
	ID string
	// Name is what the desktop shows ("meshtray").
	Name string
	// Comment is a one-line description (XDG only).
	Comment string
	// Exec is the command: an absolute program path and its arguments.
	Exec []string
	// Dir overrides where the entry is written (tests): the autostart
	// folder, the LaunchAgents folder. Unused on Windows.
	Dir string
}

func (e Entry) check() error {
	if e.ID == "" || strings.Trim(e.ID, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") != "" {
		return fmt.Errorf("autostart: bad id %q", e.ID)
	}
	if len(e.Exec) == 0 || e.Exec[0] == "" {
		return errors.New("autostart: no command")
	}
	for _, a := range e.Exec {
		if strings.ContainsAny(a, "\x00\n\r") {
			return fmt.Errorf("autostart: argument %q has a control character", a)
		}
	}
	return nil
}

// DesktopEntry is the XDG autostart file for e (Desktop Entry Specification
// 1.5: "Exec key" quoting, "Possible value types" escapes).
func DesktopEntry(e Entry) string {
	var b strings.Builder
	b.WriteString("[Desktop Entry]\nType=Application\n")
	fmt.Fprintf(&b, "Name=%s\n", escapeValue(e.Name))
	if e.Comment != "" {
		fmt.Fprintf(&b, "Comment=%s\n", escapeValue(e.Comment))
	}
	args := make([]string, len(e.Exec))
	for i, a := range e.Exec {
		args[i] = quoteExecArg(a)
	}
	fmt.Fprintf(&b, "Exec=%s\n", escapeValue(strings.Join(args, " ")))
	b.WriteString("Terminal=false\nX-GNOME-Autostart-enabled=true\n")
	return b.String()
}

// quoteExecArg quotes one argument of an Exec key: inside double quotes,
// '"', '`', '$' and '\' are backslash-escaped; '%' is doubled (field codes).
func quoteExecArg(a string) string {
	a = strings.ReplaceAll(a, "%", "%%")
	if a != "" && !strings.ContainsAny(a, " \t\"'\\><~|&;$*?#()`=") {
		return a
	}
	r := strings.NewReplacer(`"`, `\"`, "`", "\\`", `$`, `\$`, `\`, `\\`)
	return `"` + r.Replace(a) + `"`
}

// escapeValue applies the string-value escapes (backslash first), which
// come on top of the Exec quoting.
func escapeValue(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\t", `\t`).Replace(s)
}

// LaunchAgent is the launchd property list for e: run at load, as an
// interactive process (launchd.plist(5)).
func LaunchAgent(e Entry) string {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>`)
	b.WriteString(xmlEscape(e.ID))
	b.WriteString("</string>\n\t<key>ProgramArguments</key>\n\t<array>\n")
	for _, a := range e.Exec {
		fmt.Fprintf(&b, "\t\t<string>%s</string>\n", xmlEscape(a))
	}
	b.WriteString("\t</array>\n\t<key>RunAtLoad</key>\n\t<true/>\n\t<key>ProcessType</key>\n\t<string>Interactive</string>\n</dict>\n</plist>\n")
	return b.String()
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;").Replace(s)
}

// CommandLine joins argv for a Windows Run value, quoting as
// CommandLineToArgvW reads it (the rules of syscall.EscapeArg).
func CommandLine(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = escapeWindowsArg(a)
	}
	return strings.Join(out, " ")
}

func escapeWindowsArg(s string) string {
	if s == "" {
		return `""`
	}
	if !strings.ContainsAny(s, " \t\"") {
		return s
	}
	var b strings.Builder
	b.WriteByte('"')
	slashes := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\\':
			slashes++
		case '"':
			b.WriteString(strings.Repeat(`\`, slashes+1))
			slashes = 0
		default:
			slashes = 0
		}
		b.WriteByte(c)
	}
	b.WriteString(strings.Repeat(`\`, slashes))
	b.WriteByte('"')
	return b.String()
}
