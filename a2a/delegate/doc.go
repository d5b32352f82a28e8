// Package delegate is meshtray's delegating half of A2A: the agents this
// device may call (external agents added by URL, and paired peers that
// publish A2A), the bounded view of tasks delegated to them, the client
// that talks to them, and the forward executor that relays approved
// incoming tasks to another agent. The serving half (the Agent Card, the
// JSON-RPC server, the task engine) is meshtray/a2a, imported as agent;
// a2a-go v0.3.15's wire package is imported as a2a.
//
//   - Agents (NewAgents): external agents (card fetched and checked before
//     storing; token in the keychain as agent/<id>; records in agents.json)
//     and paired peers (PeerSource, pinned TLS). Resolve by id, name, URL or
//     device ID prefix (MinDevicePrefix).
//   - Outbound (NewOutbound): Delegate, Answer, Cancel, Get, List, Watch over
//     a bounded view (DefaultMaxOutbound tasks: 128, DefaultMaxOutboundBytes
//     of parts each: 1 MiB, followed for at most DefaultMaxFollow: 1 h).
//   - The client speaks the version the card offers (VerifyCard: A2A 1.0
//     over a2a-go v2.3.1's client, else 0.3 over v0.3.15's), both reading
//     answers through a tolerant decoding layer (tolerant.go); signed cards
//     are checked (meshtray/a2a/cardsig).
//   - ForwardExecutor (NewForwardExecutor): an agent.Executor relaying each
//     approved task upstream, one upstream context per caller context.
//   - Errors wrap ErrAgentUnreachable, ErrAgentUnauthorized,
//     ErrAgentMalformed, ErrAgentRefused, ErrCardInvalid, ... and carry the
//     agent's words in an *AgentError (bounded, one line, no token or URL).
package delegate
