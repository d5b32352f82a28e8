package mesh

import (
	"errors"
	"fmt"
	"net/http"
	"unicode"
	"unicode/utf8"

	"meshtray/jsonout"
	"meshtray/pairing"
)

// DefaultPort is meshtray's default HTTP(S) port (DESIGN.md, "Surfaces"):
// tailnet peers are probed on it.
const DefaultPort = 47654

// HelloPath is where every meshtray serves its public Hello.
const HelloPath = "/mesh/hello"

// Bounds on what a stranger's hello or TXT record can make us keep.
const (
	// MaxHelloBytes bounds a GET /mesh/hello response body we read.
	MaxHelloBytes = 2048
	maxIDLen      = 64  // pairing.DeviceID string form is 63 chars
	maxNameLen    = 64  // bytes, UTF-8
	maxOSLen      = 128 // bytes, UTF-8
)

// Sentinel errors. Callers map them with errors.Is; app maps them to HTTP
// statuses at its edge.
var (
	// ErrNotMeshtray: the address answered, but not with a valid Hello.
	ErrNotMeshtray = errors.New("mesh: not a meshtray hello")
	// ErrFingerprint: the hello's fp is not the fingerprint of the
	// certificate the peer presented, or not the one expected.
	ErrFingerprint = errors.New("mesh: fingerprint mismatch")
	// ErrDeviceID: the hello's id is not the device ID of its fp.
	ErrDeviceID = errors.New("mesh: device ID does not match fingerprint")
	// ErrSelf: the address is this device.
	ErrSelf = errors.New("mesh: that is this device")
	// ErrBadURL: AddManual got a URL it cannot probe.
	ErrBadURL = errors.New("mesh: bad peer URL")
	// ErrTableFull: the peer table is at its bound and nothing can be evicted.
	ErrTableFull = errors.New("mesh: peer table full")
	// ErrConflict: a sighting names a known device ID with another fingerprint.
	ErrConflict = errors.New("mesh: device ID already known with another fingerprint")
	// ErrNoTailscale: no LocalAPI answered.
	ErrNoTailscale = errors.New("mesh: tailscale not running")
)

// HelloHandler serves GET /mesh/hello: the JSON Hello returned by self (V
// defaulted to ProtocolVersion). It is public: the hello carries nothing
// secret, only what the mDNS TXT record also says. Other methods get 405.
func HelloHandler(self func() Hello) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := self()
		if h.V == 0 {
			h.V = ProtocolVersion
		}
		jsonout.Write(w, http.StatusOK, h)
	})
}

// Validate checks the shape of a hello received from the network: id and fp
// present and bounded, fp 64 lowercase hex digits, name and OS valid UTF-8
// without control characters and bounded, v >= 1. It wraps ErrNotMeshtray.
func (h Hello) Validate() error {
	switch {
	case h.ID == "" || len(h.ID) > maxIDLen || !isIDChars(h.ID):
		return fmt.Errorf("%w: bad id", ErrNotMeshtray)
	case !canonicalFP(h.FP):
		return fmt.Errorf("%w: bad fp", ErrNotMeshtray)
	case h.Name == "" || len(h.Name) > maxNameLen || !isText(h.Name):
		return fmt.Errorf("%w: bad name", ErrNotMeshtray)
	case len(h.OS) > maxOSLen || !isText(h.OS):
		return fmt.Errorf("%w: bad os", ErrNotMeshtray)
	case h.V < 1:
		return fmt.Errorf("%w: bad v", ErrNotMeshtray)
	}
	return nil
}

// canonicalFP reports whether s is a certificate fingerprint in the form
// the hello and the TXT record carry: exactly what pairing.ParseFingerprint
// returns (64 lowercase hex digits of a SHA-256, no separators).
func canonicalFP(s string) bool {
	fp, err := pairing.ParseFingerprint(s)
	return err == nil && fp == s
}

func isIDChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '-') {
			return false
		}
	}
	return true
}

func isText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// truncUTF8 cuts s to at most n bytes without splitting a rune.
func truncUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
