// Package pairing is who may talk to this device and how they got there:
// the device identity (an ECDSA P-256 key and self-signed certificate whose
// SHA-256 is the DeviceID and the pinned fingerprint), the grants this
// device issued (token hashes) and holds (raw tokens, pinned), the HTTP auth
// middleware every surface sits behind, and the pairing flow that mints
// grants (DESIGN.md, "Pairing and grants").
//
// # Wire protocol of the pairing flow
//
// JSON bodies, snake_case, times RFC 3339. Secrets (code, nonce, poll
// token, grant token) travel only in bodies and the Authorization header,
// never in a URL; the QR's code and fingerprint ride in the fragment
// (https://host:port/pair#c=CODE&fp=FP), which browsers do not send.
//
//  1. GET /pair/issuer (public) → {id, name, os, fp}: who the device is.
//     A claimant with a pinned fp does not need it.
//  2. POST /pair/claim (public, ≤ 4 KiB, rate-limited per source) with
//     {code, name, os, nonce, requested_scopes, device_id?, fp?, cert?, sig?}
//     → {request_id, poll_token, sas, server_nonce, expires, issuer}.
//     nonce: ≥ 16 random bytes in base64url or hex. A meshtray claimant adds
//     device_id and cert (its identity certificate, base64 DER) and sig, an
//     ECDSA signature proving it holds that key (ClaimProof). Wrong code →
//     403; a wrong code counts against every live code, which dies after
//     5, and against its source, barred from a code after 2 (so one host
//     cannot kill the owner's codes); 429 with Retry-After when too fast.
//  3. Both screens show sas; the claimant computes it too (SAS documents
//     the formula, with a WebCrypto version for the phone page).
//  4. GET /pair/status/{request_id} with `Authorization: Bearer
//     <poll_token>` → {status, expires, issuer, token?, grant_id?, scopes?}
//     after waiting up to 30 s while status is "pending". "approved" carries
//     the grant token exactly once; later polls get 404. "denied" and
//     "expired" are final.
//  5. Mutual pairing (meshtray to meshtray, always over HTTPS pinned to the
//     peer's certificate, loopback included): the claimant issues a grant of
//     its own and POSTs {token, url, fp, name, os, scopes} to
//     /pair/reciprocate, authenticated with the token it just received; the
//     issuer keeps it as a held grant, if fp is the device the grant was
//     issued to (else 409: the identity changed, pair again).
//  6. Revocation: the issuer revokes at once and POSTs {issuer_id,
//     grant_id} to the holder's /pair/revoked. The holder does not believe
//     it: it re-checks with GET /pair/whoami (pinned, with the held token)
//     and drops the grant only on a 401 that is not "grant paused".
//
// # Auth
//
// Auth.Require(scope, h), Auth.AnyGrant(h), Auth.Local(h) and
// Auth.Public(h) wrap handlers: 401 with `WWW-Authenticate: Bearer
// realm="meshtray"` for a missing, unknown, revoked or paused token (RFC
// 6750 §3.1; a paused one says error_description="grant paused"), 403 for a
// grant outside its scope, 403 for a foreign Host on the loopback listener
// (DNS rebinding) and for a cross-origin state-changing request (CSRF). The
// caller is in the request context (PrincipalFrom).
package pairing
