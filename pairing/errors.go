package pairing

import "errors"

// Sentinel errors. Callers test them with errors.Is; only the HTTP edge maps
// them to statuses (see HTTPStatus).
var (
	// ErrUnknownToken: the bearer token is malformed, was never issued here,
	// was revoked, or was rotated away. HTTP 401.
	ErrUnknownToken = errors.New("pairing: unknown or revoked token")
	// ErrPaused: the token is valid but its grant is paused. HTTP 401.
	ErrPaused = errors.New("pairing: grant paused")
	// ErrScope: the grant is valid but lacks the scope the surface needs. HTTP 403.
	ErrScope = errors.New("pairing: grant lacks the required scope")
	// ErrNoGrant: no issued grant has that ID.
	ErrNoGrant = errors.New("pairing: no such grant")
	// ErrNoHeld: this device holds no grant from that peer.
	ErrNoHeld = errors.New("pairing: no grant held for that peer")
	// ErrInvalid wraps a description of a malformed argument or request body.
	ErrInvalid = errors.New("pairing: invalid")
	// ErrClosed is returned by writes after Close.
	ErrClosed = errors.New("pairing: closed")

	// ErrBadDeviceID: a device ID string that does not parse (length,
	// alphabet or check characters).
	ErrBadDeviceID = errors.New("pairing: invalid device ID")
	// ErrPinMismatch: the peer presented a certificate other than the pinned
	// one. The error carrying it is a *PinError naming both.
	ErrPinMismatch = errors.New("pairing: certificate does not match the pinned fingerprint")
	// ErrIdentityChanged: a peer presents a device ID or fingerprint other
	// than the one it paired with: it re-created its identity (new keychain,
	// reinstall) or is someone else. It must pair again.
	ErrIdentityChanged = errors.New("pairing: the peer's identity changed since it paired; pair again")
	// ErrIdentityCorrupt: the identity items in the keychain exist but cannot
	// be used (bad PEM, key and certificate disagree). meshtray refuses to
	// replace them silently, since that would unpair every peer.
	ErrIdentityCorrupt = errors.New("pairing: stored identity is unreadable")

	// ErrBadCode: the pairing code is wrong, used, expired or dead after too
	// many wrong attempts. One error for all, so a guesser learns nothing.
	ErrBadCode = errors.New("pairing: invalid or expired pairing code")
	// ErrRateLimited: too many pairing calls from one source. HTTP 429.
	ErrRateLimited = errors.New("pairing: too many requests, slow down")
	// ErrBusy: too many pairing requests pending. HTTP 503.
	ErrBusy = errors.New("pairing: too many pairing requests pending")
	// ErrNoRequest: no live pairing request has that ID (never existed,
	// expired and swept, or its token was already collected).
	ErrNoRequest = errors.New("pairing: no such pairing request")
	// ErrDecided: the pairing request was already approved or denied.
	ErrDecided = errors.New("pairing: pairing request already decided")
	// ErrExpired: the pairing request expired before a decision.
	ErrExpired = errors.New("pairing: pairing request expired")
	// ErrDenied: the owner denied the pairing request (claimant side).
	ErrDenied = errors.New("pairing: pairing denied by the other device's owner")
	// ErrClaimantAway: a pairing request restored after a restart
	// (Pairer.Restore) is approved before its claimant polled again: its
	// grant token could reach nobody (the claimant stopped waiting, or has
	// not reconnected yet), so nothing is granted. HTTP 409.
	ErrClaimantAway = errors.New("pairing: the device that asked has not polled since this node restarted, so a grant could not reach it")
	// ErrSASMismatch: the SAS the issuer returned is not the one the
	// claimant computes: the two sides do not see the same claim.
	ErrSASMismatch = errors.New("pairing: verification code mismatch")
)
