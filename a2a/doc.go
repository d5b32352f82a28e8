// Package a2a is meshtray's A2A surface (protocols 1.0 and 0.3, JSON-RPC
// binding): the Agent Card, the JSON-RPC server, the task engine and the
// built-in node executor. The engine's wire types are a2a-go v0.3.15's
// (imported as a2a); a 1.0 request (A2A-Version: 1.0) is converted at the
// edge with a2a-go v2.3.1's (a2av1) a2acompat/a2av0. This package is
// imported as agent "meshtray/a2a" where both are needed.
//
//   - Server (NewServer): ServeHTTP serves POST /a2a/v1 behind the auth
//     middleware (the caller is pairing.PrincipalFrom); CardHandler serves
//     /.well-known/agent-card.json (404 while unpublished; with
//     Options.RequirePublished the JSON-RPC endpoint too, and switching off
//     cancels every live task); Status, Tasks, SetPublished, CancelOwner
//     (a grant revoked or paused) and Shutdown are for app.
//   - Tasks: created in submitted, the Approver decides (refused:
//     rejected; "waiting for approval on <device>" once a person is asked,
//     see QueueingApprover), the Executor runs turns (working, then
//     completed | failed | rejected | input-required; canceled by
//     tasks/cancel, CancelOwner, switching A2A off, or Shutdown). Terminal
//     states are final. What the owner approves is one escaped line
//     (textsafe.EscapeInvisible), naming the files a message carries.
//   - Bounds: request body (1 MiB), store (512 tasks, oldest terminal
//     evicted, never a live one), running tasks per owner (16) and, apart,
//     tasks waiting for their caller (16, the oldest canceled to make
//     room), JSON-RPC ids (256 bytes, UTF-8), stored message
//     and artifact bytes (64 MiB), turns per task (32), streams per task
//     (8), artifacts per task (64) and their bytes (8 MiB), time a task
//     waits for its caller (10 min, then canceled). Delegating out (the
//     agents this device calls, their bounds) is meshtray/a2a/delegate.
//   - Durability (Options.Store, persist.go): every task change is written
//     through to the database (a terminal or interrupted state, and an
//     owner's approval, before anyone reads it; progress behind, 50 ms);
//     Restore, at start, brings the tasks back: waiting for their callers
//     again, approvals asked again with their deadlines, running ones
//     reattached (Reattacher) or failed with RestartedText. Shutdown
//     writes none of what it does, so a clean stop restores like a kill.
//   - JSON-RPC notifications (no id) get HTTP 204 and nothing is done
//     (JSON-RPC 2.0 §4.1).
//   - Errors: JSON-RPC 2.0 codes, A2A's -32001..-32007 and -32009 (version
//     not supported), and meshtray's -32010 (running-task cap), -32011
//     (store full), -32012 (unavailable), always with HTTP 200: Content-Type
//     application/json, or for a streaming method an SSE stream of one
//     event. Over 1.0 error.data is an array with a google.rpc.ErrorInfo.
//   - NodeExecutor maps a message to one nodes capability call.
package a2a
