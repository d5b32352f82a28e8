package app_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	a2av1 "github.com/a2aproject/a2a-go/v2/a2a"
	a2aclientv1 "github.com/a2aproject/a2a-go/v2/a2aclient"
	agentcardv1 "github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	"meshtray/app/apptest"
)

// bearerV1 adds the grant token to a2a-go v2's requests.
type bearerV1 struct {
	a2aclientv1.PassthroughInterceptor
	token string
}

func (b bearerV1) Before(ctx context.Context, req *a2aclientv1.Request) (context.Context, any, error) {
	req.ServiceParams.Append("Authorization", "Bearer "+b.token)
	return ctx, nil, nil
}

// TestA2AVersionsEndToEnd: on a running node, behind the real auth
// middleware and the publish gate, a2a-go v2's client resolves the union
// card, delegates device.info over A2A 1.0 to an allow-policy grant, and the
// task it made reads over 0.3 with a2a-go v0.3's client: one engine, two
// versions.
func TestA2AVersionsEndToEnd(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Name: "laptop", Config: "tailscale = false\n"})
	_, token := grantToken(t, n, "--name", "agent-v1", "--scope", "agent", "--approval", "allow")
	if r := n.CLI("a2a", "on"); r.Code != 0 {
		t.Fatalf("a2a on: exit %d: %s", r.Code, r.Stderr)
	}
	ctx := context.Background()
	hc := &http.Client{}
	card, err := agentcardv1.NewResolver(hc).Resolve(ctx, n.BaseURL)
	if err != nil {
		t.Fatalf("resolve the card with a2a-go v2: %v", err)
	}
	c, err := a2aclientv1.NewFromCard(ctx, card, a2aclientv1.WithJSONRPCTransport(hc), a2aclientv1.WithCallInterceptors(bearerV1{token: token}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	msg := a2av1.NewMessage(a2av1.MessageRoleUser, a2av1.NewDataPart(map[string]any{"capability": "device.info"}))
	res, err := c.SendMessage(ctx, &a2av1.SendMessageRequest{Message: msg})
	if err != nil {
		t.Fatalf("SendMessage over 1.0: %v", err)
	}
	task, ok := res.(*a2av1.Task)
	if !ok || task.Status.State != a2av1.TaskStateCompleted || len(task.Artifacts) != 1 {
		t.Fatalf("SendMessage over 1.0: %+v", res)
	}
	list, err := c.ListTasks(ctx, &a2av1.ListTasksRequest{})
	if err != nil || len(list.Tasks) != 1 || list.Tasks[0].ID != task.ID {
		t.Fatalf("ListTasks: %v %+v", err, list)
	}

	old := apptest.A2AClient(t, n.BaseURL, token)
	got, err := old.GetTask(ctx, &a2a.TaskQueryParams{ID: a2a.TaskID(task.ID)})
	if err != nil || got.Status.State != a2a.TaskStateCompleted || len(got.Artifacts) != 1 {
		t.Fatalf("the 1.0 task over 0.3: %v %+v", err, got)
	}
}
