// Package mesh finds this person's other devices and keeps them in one
// table (DESIGN.md "Discovery").
//
// Sources:
//
//   - mDNS on the LAN (grandcat/zeroconf v1.0.0): while "reachable on local
//     network" is on, the device advertises _meshtray._tcp with TXT id, name,
//     os, fp, v, a2a and browses for others. mdns.go lists the library's
//     traps and how each is handled (explicit interfaces and addresses,
//     re-registration, a fresh Resolver per refresh with an initial burst).
//   - The tailnet, through the Tailscale LocalAPI (Status, then the IPN bus,
//     reconnecting with backoff): every online peer is probed on the default
//     port; peers not running meshtray are remembered for a while (negative
//     cache with backoff); a tailnet peer calling our hello is probed back.
//   - Peers added by hand (Table.AddManual), by https:// URL only.
//
// Every sighting enters the Table only after GET /mesh/hello over HTTPS
// answered with a valid Hello whose fp is the fingerprint of the
// certificate the peer presented and whose id is that fingerprint's device
// ID. Liveness is ours: mDNS reports no departures, so mDNS sightings expire
// unless refreshed, and known peers' hellos are re-probed every Recheck.
//
// Bounds on what strangers can make us hold: rows (256), of which unpaired
// rows seen over mDNS alone at most 128 (paired, tailnet and manual rows
// evict those when the table is full), manual rows (64), addresses per
// peer and source (8), WhoIs answers cached (256, for 5 s), TXT strings and bytes (16, 1300),
// hello body (2 KiB), probes in flight (64) and concurrent (8), tailnet
// peers tracked (4096), negative cache (4096), remembered callers (64).
package mesh
