package delegate

import (
	"context"
	"fmt"
	"iter"
	"net/http"

	"github.com/a2aproject/a2a-go/a2a"
	v1 "github.com/a2aproject/a2a-go/v2/a2a"
	v1client "github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
)

// client10 calls an A2A 1.0 agent with a2a-go v2.3.1's own client (its
// JSON-RPC transport: PascalCase methods, A2A-Version: 1.0, 1.0 shapes),
// converting at its edge to and from the 0.3 types the rest of the
// package holds with a2a-go's a2acompat/a2av0 conversions.
type client10 struct {
	c *v1client.Client
}

var _ rpcClient = client10{}

func newClient10(ctx context.Context, card CardInfo, hc *http.Client) (client10, error) {
	c, err := v1client.NewFromEndpoints(ctx,
		[]*v1.AgentInterface{{URL: card.Endpoint, ProtocolBinding: v1.TransportProtocolJSONRPC, ProtocolVersion: v1.Version, Tenant: card.Tenant}},
		v1client.WithJSONRPCTransport(hc),
		v1client.WithConfig(v1client.Config{PreferredTransports: []v1.TransportProtocol{v1.TransportProtocolJSONRPC}}))
	if err != nil {
		return client10{}, err
	}
	return client10{c: c}, nil
}

// request is params in 1.0 form; poll asks returnImmediately (the 0.3
// client's Polling: blocking false).
func request(params *a2a.MessageSendParams, poll bool) (*v1.SendMessageRequest, error) {
	req, err := a2av0.ToV1SendMessageRequest(params)
	if err != nil {
		return nil, fmt.Errorf("the message has no 1.0 form: %w", err)
	}
	if poll {
		if req.Config == nil {
			req.Config = &v1.SendMessageConfig{}
		}
		req.Config.ReturnImmediately = true
	}
	return req, nil
}

func (c client10) SendMessage(ctx context.Context, params *a2a.MessageSendParams) (a2a.SendMessageResult, error) {
	req, err := request(params, true)
	if err != nil {
		return nil, err
	}
	res, err := c.c.SendMessage(ctx, req)
	if err != nil {
		return nil, err
	}
	switch v := res.(type) {
	case *v1.Task:
		return a2av0.FromV1Task(v), nil
	case *v1.Message:
		return a2av0.FromV1Message(v), nil
	}
	return nil, fmt.Errorf("unexpected answer %T", res)
}

func (c client10) SendStreamingMessage(ctx context.Context, params *a2a.MessageSendParams) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		req, err := request(params, false)
		if err != nil {
			yield(nil, err)
			return
		}
		for ev, err := range c.c.SendStreamingMessage(ctx, req) {
			if err != nil {
				yield(nil, err)
				return
			}
			old, err := a2av0.FromV1Event(ev)
			if err != nil {
				yield(nil, fmt.Errorf("an event with no 0.3 form: %w", err))
				return
			}
			if !yield(old, nil) {
				return
			}
		}
	}
}

func (c client10) GetTask(ctx context.Context, q *a2a.TaskQueryParams) (*a2a.Task, error) {
	t, err := c.c.GetTask(ctx, a2av0.ToV1GetTaskRequest(q))
	if err != nil {
		return nil, err
	}
	return a2av0.FromV1Task(t), nil
}

func (c client10) CancelTask(ctx context.Context, q *a2a.TaskIDParams) (*a2a.Task, error) {
	t, err := c.c.CancelTask(ctx, a2av0.ToV1CancelTaskRequest(q))
	if err != nil {
		return nil, err
	}
	return a2av0.FromV1Task(t), nil
}

func (c client10) Destroy() error { return c.c.Destroy() }
