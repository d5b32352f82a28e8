// Package nodes is this device as a node of the mesh: who it is (the OS
// environment string, Device), what it can do (the capability Manifest),
// and doing it (Registry.Invoke) under the owner's approval policy.
//
// Built-in capabilities:
//
//   - device.info: host name, OS, uptime, CPU, memory, batteries (gopsutil
//     v3; static facts gathered once, memory and batteries sampled at most
//     once a second).
//   - system.notify: a desktop notification (Notifier: freedesktop
//     Notifications over D-Bus on Linux and the BSDs, gen2brain/beeep on
//     macOS and Windows); without a desktop the result says delivered false.
//   - clipboard.read, clipboard.write: text, at most MaxClipboardBytes, only
//     where a graphical session and a clipboard tool exist.
//   - system.run: an allowlisted program (RunRule), no shell, bounded
//     output, a time limit, a minimal environment (RunBaseEnv and the
//     rule's Env), its process group killed on cancel, and the program
//     killed with the node (Linux).
//
// Parameters are validated against each capability's JSON Schema (draft
// 2020-12, github.com/santhosh-tekuri/jsonschema/v6). The policy for a call
// is the stricter of the caller grant's and the capability's
// (EffectivePolicy); ask goes to the Approver unless Call.Approved. HTTP:
// ManifestHandler (GET /nodes/manifest) and InvokeHandler
// (POST /nodes/invoke), mounted by app behind the scope-node middleware.
package nodes
