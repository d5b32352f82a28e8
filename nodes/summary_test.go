package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"meshtray/pairing"
)

func TestSummarizeEscapesTheName(t *testing.T) {
	t.Parallel()
	// A capability name comes from the caller (a data part) before it is
	// checked against the manifest: it is escaped like the params.
	got := Summarize("device.info\u202e\nsystem.run", json.RawMessage(`{"a":"x\ny"}`))
	if want := `device.info\u202E\u000Asystem.run {"a":"x\ny"}`; got != want {
		t.Fatalf("Summarize = %q, want %q", got, want)
	}
	if got := Summarize("clipboard.read", nil); got != "clipboard.read" {
		t.Fatalf("no params: %q", got)
	}
}

// recordingApprover records the order of hooks and approvals.
type recordingApprover struct {
	mu     sync.Mutex
	events []string
	ok     bool
}

func (r *recordingApprover) add(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recordingApprover) ApproveCall(ctx context.Context, a CallApproval) (bool, string) {
	r.add("asked " + a.Summary)
	if r.ok {
		return true, ""
	}
	return false, "not now"
}

func TestOnAskAndOnApproved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		policy   pairing.Policy // device.info's
		approved bool           // Call.Approved
		ok       bool           // the owner's answer
		want     []string
		denied   bool
	}{
		{"ask, approved", pairing.PolicyAsk, false, true, []string{"on-ask", "asked device.info", "on-approved", "ran"}, false},
		{"ask, denied", pairing.PolicyAsk, false, false, []string{"on-ask", "asked device.info"}, true},
		{"ask, already approved", pairing.PolicyAsk, true, true, []string{"ran"}, false},
		{"allow", pairing.PolicyAllow, false, true, []string{"ran"}, false},
		{"deny", pairing.PolicyDeny, false, true, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ra := &recordingApprover{ok: tt.ok}
			r := newTestRegistry(t, Options{Approver: ra, Policies: map[string]pairing.Policy{CapDeviceInfo: tt.policy}})
			_, err := r.Invoke(context.Background(), Call{
				Capability: CapDeviceInfo, Caller: grantCaller(pairing.PolicyAllow), Approved: tt.approved,
				OnAsk: func() { ra.add("on-ask") }, OnApproved: func() { ra.add("on-approved") },
			})
			if err == nil {
				ra.add("ran")
			}
			if tt.denied != errors.Is(err, ErrDenied) {
				t.Fatalf("Invoke: %v, denied want %v", err, tt.denied)
			}
			ra.mu.Lock()
			defer ra.mu.Unlock()
			if strings.Join(ra.events, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("events %q, want %q", ra.events, tt.want)
			}
		})
	}
}
