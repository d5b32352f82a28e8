package nodes

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"meshtray/pairing"
)

// TestOnRun: every Invoke reports one RunRecord, after the call ended, with
// the capability, a parameter summary, the caller and the end state; the
// text written to the clipboard is never in it.
func TestOnRun(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []RunRecord
	r := newTestRegistry(t, Options{
		OnRun: func(rr RunRecord) { mu.Lock(); got = append(got, rr); mu.Unlock() },
	})
	caller := grantCaller(pairing.PolicyAllow)
	ctx := context.Background()
	secret := "hunter2-correct-horse"
	calls := []struct {
		call   Call
		state  RunState
		params string
	}{
		{Call{Capability: CapDeviceInfo, Caller: caller}, RunCompleted, ""},
		{Call{Capability: "no.such\u202e", Caller: caller}, RunInvalid, ""},
		{Call{Capability: CapSystemNotify, Params: json.RawMessage(`{"title": 5}`), Caller: caller}, RunInvalid, `{"title":5}`},
		// no display in this test
		{Call{Capability: CapClipboardWrite, Params: json.RawMessage(`{"text":"` + secret + `"}`), Caller: caller}, RunUnavailable, `{"text":"(21 bytes)"}`},
		{Call{Capability: CapSystemNotify, Params: json.RawMessage(`{"title":"hi"}`), Caller: caller}, RunDenied, `{"title":"hi"}`},
	}
	if err := r.SetPolicy(CapSystemNotify, pairing.PolicyDeny); err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		r.Invoke(ctx, c.call)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	r.Invoke(canceled, Call{Capability: CapDeviceInfo})
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(calls)+1 {
		t.Fatalf("%d records for %d calls", len(got), len(calls)+1)
	}
	for i, c := range calls {
		rr := got[i]
		if rr.State != c.state || rr.Params != c.params || rr.Caller != caller {
			t.Errorf("call %d: record %+v, want state %s params %q caller %v", i, rr, c.state, c.params, caller)
		}
		if rr.Duration <= 0 {
			t.Errorf("call %d: duration %v", i, rr.Duration)
		}
		if (rr.State == RunCompleted) != (rr.Err == nil) {
			t.Errorf("call %d: state %s with err %v", i, rr.State, rr.Err)
		}
		if strings.Contains(rr.Params, secret) {
			t.Errorf("call %d: clipboard text in the record: %q", i, rr.Params)
		}
	}
	if got[1].Capability != `no.such\u202E` {
		t.Errorf("unknown capability recorded as %q, want its bidi override escaped", got[1].Capability)
	}
	if last := got[len(got)-1]; last.State != RunCanceled || last.Caller != nil {
		t.Errorf("canceled call: %+v", last)
	}
}

// slowApprover approves after d, as an owner who takes a moment.
type slowApprover struct{ d time.Duration }

func (s slowApprover) ApproveCall(ctx context.Context, _ CallApproval) (bool, string) {
	time.Sleep(s.d)
	return true, ""
}

// TestOnRunDurationWithoutTheApproval: a call under policy ask records how
// long it ran, not the time the owner took to approve it.
func TestOnRunDurationWithoutTheApproval(t *testing.T) {
	t.Parallel()
	const wait = 400 * time.Millisecond
	var rr RunRecord
	r := newTestRegistry(t, Options{Approver: slowApprover{wait}, OnRun: func(x RunRecord) { rr = x }})
	start := time.Now()
	if _, err := r.Invoke(context.Background(), Call{Capability: CapDeviceInfo, Caller: grantCaller(pairing.PolicyAsk)}); err != nil {
		t.Fatal(err)
	}
	total := time.Since(start)
	if rr.State != RunCompleted || rr.Duration <= 0 || rr.Duration > total-wait {
		t.Errorf("record %s %v after %v in all with %v of approval, want the run alone", rr.State, rr.Duration, total, wait)
	}
}
