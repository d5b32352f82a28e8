package a2a

import (
	"encoding/json"
	"fmt"

	"github.com/a2aproject/a2a-go/a2a"
	a2av1 "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"

	"meshtray/jsonout"
)

// The engine keeps tasks in A2A 0.3's types (a2a-go v0.3); a 1.0 request
// is converted at the edge with a2a-go v2's a2acompat/a2av0, both ways, so
// one store, one approval and one executor serve both versions, and a task
// made over one version reads over the other.

// decodeSendParamsV1 decodes SendMessage / SendStreamingMessage params
// (A2A 1.0 SendMessageRequest) into the engine's form and checks them as
// decodeSendParams does. configuration.returnImmediately becomes 0.3's
// blocking (its negation); historyLength keeps its meaning.
func decodeSendParamsV1(raw json.RawMessage) (*a2a.MessageSendParams, int, error) {
	var req a2av1.SendMessageRequest
	if err := decodeParams(raw, &req); err != nil {
		return nil, 0, err
	}
	if req.Message == nil {
		return nil, 0, newRPCError(CodeInvalidParams, "invalid params: message is required")
	}
	for _, p := range req.Message.Parts {
		if p == nil || p.Content == nil {
			return nil, 0, newRPCError(CodeInvalidParams, "invalid params: a message part has none of text, raw, url, data")
		}
	}
	if req.Message.Role != a2av1.MessageRoleUser {
		return nil, 0, newRPCError(CodeInvalidParams, `invalid params: message.role must be "ROLE_USER"`)
	}
	return checkSendParams(a2av0.FromV1SendMessageRequest(&req))
}

// decodeTaskQueryV1 decodes GetTask params.
func decodeTaskQueryV1(raw json.RawMessage) (*a2a.TaskQueryParams, error) {
	var req a2av1.GetTaskRequest
	if err := decodeParams(raw, &req); err != nil {
		return nil, err
	}
	return a2av0.FromV1GetTaskRequest(&req), nil
}

// decodeTaskIDV1 decodes CancelTask and SubscribeToTask params (both an
// id; CancelTask may carry metadata, which the engine does not use).
func decodeTaskIDV1(raw json.RawMessage) (*a2a.TaskIDParams, error) {
	var req a2av1.CancelTaskRequest
	if err := decodeParams(raw, &req); err != nil {
		return nil, err
	}
	return a2av0.FromV1CancelTaskRequest(&req), nil
}

// v1Task converts a snapshot to 1.0's Task.
func v1Task(t *a2a.Task) (*a2av1.Task, error) {
	v, err := a2av0.ToV1Task(t)
	if err != nil {
		return nil, fmt.Errorf("a2a: task %s in 1.0 form: %w", t.ID, err)
	}
	return v, nil
}

// marshalResult marshals a method's result in ver's form: a 0.3 result
// as it is; over 1.0 a Task (GetTask, CancelTask) as 1.0's Task, and, when
// wrap is set (SendMessage, stream events), inside a StreamResponse
// ({"task": ...}, {"statusUpdate": ...}, ...).
func marshalResult(ver protoVersion, ev a2a.Event, wrap bool) ([]byte, error) {
	if ver == v03 {
		return jsonout.Marshal(ev)
	}
	v, err := a2av0.ToV1Event(ev)
	if err != nil {
		return nil, err
	}
	if !wrap {
		return jsonout.Marshal(v)
	}
	return jsonout.Marshal(a2av1.StreamResponse{Event: v})
}
