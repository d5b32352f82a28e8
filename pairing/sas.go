package pairing

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// sasTag is the domain-separation tag of SAS version 1.
const sasTag = "meshtray-sas-v1"

// SAS computes the 6-digit short authentication string both screens show
// during pairing. Both sides compute it from values each knows, so a
// mismatch means the owner is looking at someone else's claim.
//
// Formula (version 1), over UTF-8 strings, "‖" being concatenation and 00 a
// zero byte:
//
//	d   = SHA-256("meshtray-sas-v1" ‖ 00 ‖ issuerFP ‖ 00 ‖ claimantID ‖ 00 ‖
//	              claimantNonce ‖ 00 ‖ serverNonce ‖ 00 ‖ requestID)
//	sas = decimal(uint32 big-endian of d[0..3] mod 1000000), zero-padded to 6 digits
//
// where issuerFP is the issuer's certificate fingerprint (64 lowercase hex
// digits), claimantID the claimant's device ID in canonical form
// (DeviceID.String, with dashes) or "" for a phone, claimantNonce the nonce
// the claimant sent in POST /pair/claim, serverNonce and requestID the values
// of its answer. (2^32 mod 10^6 makes low values likelier by 1 in 4295:
// negligible for a code a person compares once.)
//
// In a browser (WebCrypto):
//
//	const enc = new TextEncoder(), z = "\u0000";
//	const d = await crypto.subtle.digest("SHA-256", enc.encode(
//	  ["meshtray-sas-v1", fp, deviceID, nonce, serverNonce, requestID].join(z)));
//	const sas = String(new DataView(d).getUint32(0) % 1000000).padStart(6, "0");
func SAS(issuerFP, claimantID, claimantNonce, serverNonce, requestID string) string {
	h := sha256.New()
	for i, part := range []string{sasTag, issuerFP, claimantID, claimantNonce, serverNonce, requestID} {
		if i > 0 {
			h.Write([]byte{0})
		}
		h.Write([]byte(part))
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return fmt.Sprintf("%06d", binary.BigEndian.Uint32(d[:4])%1000000)
}
