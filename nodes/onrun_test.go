package nodes

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

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
