package delegate

import (
	"context"
	"log/slog"
	"net/url"

	"github.com/a2aproject/a2a-go/a2a"
)

// Session is an open client to one agent, for a caller that drives its own
// exchange rather than the outbound view (app's file transfers): the same
// resolution, card check, pinned transport and token, version and
// tolerant decoding as Delegate, and the same classified errors
// (*AgentError).
type Session struct {
	// Agent is the agent as resolved.
	Agent Agent
	r     *remote
	a     *Agents
	log   *slog.Logger
}

// Open resolves ref as Delegate's DelegateRequest.Agent does and returns a
// session to it; Close releases it.
func (a *Agents) Open(ctx context.Context, ref string) (*Session, error) {
	r, ag, err := a.open(ctx, ref, false)
	if err != nil {
		return nil, err
	}
	return &Session{Agent: ag, r: r, a: a, log: a.log}, nil
}

// Exchange sends msg (message/stream when the card offers streaming, else
// message/send and tasks/get polling) and calls on with every event, in
// order, until the task is terminal or waits for input, ctx ends, or the
// contact is lost (then an *AgentError; the task may go on at the agent:
// Task reads it again).
func (s *Session) Exchange(ctx context.Context, msg *a2a.Message, on func(a2a.Event)) error {
	err := s.r.exchange(ctx, &a2a.MessageSendParams{Message: msg}, s.r.card.Streaming, s.log, on)
	if ctx.Err() == nil {
		s.a.report(s.Agent, err)
	}
	return err
}

// Task is tasks/get of the agent's task id.
func (s *Session) Task(ctx context.Context, id a2a.TaskID) (*a2a.Task, error) {
	t, err := s.r.client.GetTask(ctx, &a2a.TaskQueryParams{ID: id})
	if err != nil {
		return nil, s.r.classify(err)
	}
	return t, nil
}

// Cancel is tasks/cancel of the agent's task id.
func (s *Session) Cancel(ctx context.Context, id a2a.TaskID) (*a2a.Task, error) {
	return s.r.cancel(ctx, id)
}

// Origin is the scheme and host of the agent's JSON-RPC endpoint
// ("https://host:port"), where a meshtray peer also serves files.Prefix.
func (s *Session) Origin() string {
	u, err := url.Parse(s.r.card.Endpoint)
	if err != nil {
		return ""
	}
	return origin(u)
}

// Close releases the session's connections.
func (s *Session) Close() { s.r.Close() }
