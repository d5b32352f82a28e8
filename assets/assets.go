// Package assets holds what meshtray embeds: the tray icons and the phone
// pairing page (served at GET /pair). Everything is compiled in with
// go:embed, so the binary needs no files at run time.
package assets

import (
	"bytes"
	"embed"
	"net/http"
	"time"
)

// Tray icons, 256x256 PNG: the three states of the tray (idle, A2A
// published, an approval waiting).
var (
	//go:embed icons/normal.png
	IconNormal []byte
	//go:embed icons/published.png
	IconPublished []byte // the A2A Agent Card is published
	//go:embed icons/approval.png
	IconApproval []byte // an approval is waiting
)

//go:embed pair/index.html pair/pair.css pair/pair.js pair/approvals.js pair/approvals.css pair/files.js pair/vendor/sha256.min.js
var pairFS embed.FS

// Paths of the phone pairing page. The page is PairPath; its script,
// style sheet and icon are under PairAppPrefix, so app mounts two patterns:
//
//	mux.Handle("GET "+assets.PairPath, auth.Public(assets.PairPage()))
//	mux.Handle("GET "+assets.PairAppPrefix, auth.Public(assets.PairPage()))
const (
	PairPath      = "/pair"
	PairAppPrefix = "/pair/app/"
)

// PairCSP is the Content-Security-Policy of every phone-page response
// (CSP Level 3): scripts, styles, images and fetches only from the page's
// own origin, nothing inline, no plugins, no frames, no form posts, no
// <base> rewriting. Because the origin is the meshtray device itself, the
// page can talk to nothing else.
const PairCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; manifest-src 'none'; object-src 'none'; base-uri 'none'; " +
	"form-action 'none'; frame-ancestors 'none'"

// pairFile is one file of the phone page.
type pairFile struct {
	body        []byte
	contentType string
}

// pairFiles maps request paths to the page's files.
var pairFiles = func() map[string]pairFile {
	read := func(name string) []byte {
		b, err := pairFS.ReadFile(name)
		if err != nil {
			panic("assets: " + err.Error()) // the embed directive guarantees it
		}
		return b
	}
	return map[string]pairFile{
		PairPath:                   {read("pair/index.html"), "text/html; charset=utf-8"},
		PairAppPrefix + "pair.js":  {read("pair/pair.js"), "text/javascript; charset=utf-8"},
		PairAppPrefix + "pair.css": {read("pair/pair.css"), "text/css; charset=utf-8"},
		// The approvals of a phone holding the approve scope.
		PairAppPrefix + "approvals.js":  {read("pair/approvals.js"), "text/javascript; charset=utf-8"},
		PairAppPrefix + "approvals.css": {read("pair/approvals.css"), "text/css; charset=utf-8"},
		// Sending and downloading files (files.js), with the vendored
		// js-sha256 it hashes large files with (pair/vendor: MIT licence).
		PairAppPrefix + "files.js":      {read("pair/files.js"), "text/javascript; charset=utf-8"},
		PairAppPrefix + "sha256.min.js": {read("pair/vendor/sha256.min.js"), "text/javascript; charset=utf-8"},
		PairAppPrefix + "icon.png":      {IconNormal, "image/png"},
	}
}()

// modTime is the Last-Modified of every embedded file: the embed FS has
// none, and the page is never cached anyway.
var modTime = time.Time{}

// PairPage serves the phone pairing page: GET (and HEAD) PairPath is the
// HTML; PairAppPrefix+{pair.js, pair.css, approvals.js, approvals.css,
// files.js, sha256.min.js, icon.png} are its scripts, style sheets and
// icon; anything else under PairAppPrefix is 404. The page reads the
// pairing code and fingerprint from the URL fragment (which browsers never
// send), so no secret ever reaches this handler.
//
// Every answer carries the security headers of a page that holds a bearer
// token: Content-Security-Policy PairCSP, X-Frame-Options DENY (RFC 7034),
// Referrer-Policy no-referrer, Cache-Control no-store (RFC 9111 §5.2.2.5),
// X-Content-Type-Options nosniff, Cross-Origin-Opener-Policy and
// Cross-Origin-Resource-Policy same-origin, and a Permissions-Policy that
// turns off camera, microphone, geolocation and the rest.
//
// Mount it behind pairing's Auth.Public (the loopback Host check still
// applies); it needs no token.
func PairPage() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", PairCSP)
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=(), usb=(), interest-cohort=()")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		f, ok := pairFiles[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h.Set("Content-Type", f.contentType)
		http.ServeContent(w, r, "", modTime, bytes.NewReader(f.body))
	})
}
