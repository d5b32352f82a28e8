package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"meshtray/pairing"
)

// Effect says what a capability does to the device, so the owner and the
// calling agent can judge it before running it.
type Effect string

const (
	EffectRead  Effect = "read"  // observes only (device.info, clipboard.read)
	EffectWrite Effect = "write" // changes user-visible state (system.notify, clipboard.write)
	EffectExec  Effect = "exec"  // runs a program (system.run)
)

// Capability is one entry of the node manifest (GET /nodes/manifest).
// Params and Result are JSON Schema (draft 2020-12) documents.
type Capability struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Params      json.RawMessage `json:"params"`
	Result      json.RawMessage `json:"result"`
	Effects     Effect          `json:"effects"`
	Approval    pairing.Policy  `json:"approval"`
	Available   bool            `json:"available"`
	Reason      string          `json:"reason,omitempty"` // why it is unavailable
}

// Device describes this device in the manifest.
type Device struct {
	ID      string `json:"id"`      // pairing.DeviceID string form
	Name    string `json:"name"`    // device name
	OS      string `json:"os"`      // OS environment, e.g. "Debian GNU/Linux 12 (x86_64)"
	Arch    string `json:"arch"`    // runtime.GOARCH-style architecture as reported by the OS
	Version string `json:"version"` // meshtray version
}

// Manifest is the node capability manifest.
type Manifest struct {
	Device       Device       `json:"device"`
	Capabilities []Capability `json:"capabilities"`
}

// Call is one capability invocation.
type Call struct {
	Capability string          `json:"capability"`
	Params     json.RawMessage `json:"params,omitempty"`
	// Caller is who asked; nil means the local owner.
	Caller *pairing.Principal `json:"-"`
	// Approved is set when the owner has already consented to exactly this
	// call (the approval of an A2A delegation that showed it), so a
	// capability under policy ask is not asked twice.
	Approved bool `json:"-"`
	// OnAsk, when set, is called when the call must wait for the owner
	// (policy ask, not Approved), just before the Approver is asked, so the
	// caller can say so (an A2A task shows "waiting for the owner's
	// approval of <call>"). OnApproved, when set, is called once the owner
	// approved, before the capability runs. Both run on Invoke's goroutine.
	OnAsk      func() `json:"-"`
	OnApproved func() `json:"-"`
	// TaskID is the A2A task the call runs for ("" for a direct call),
	// for the record of the run (RunRecord.TaskID).
	TaskID string `json:"-"`
}

// Result is what a capability returned: a JSON value matching the
// capability's Result schema, and a one-line human summary.
type Result struct {
	Data    json.RawMessage `json:"data"`
	Summary string          `json:"summary"`
}

var (
	// ErrUnknownCapability: the manifest has no capability of that name.
	ErrUnknownCapability = errors.New("nodes: unknown capability")
	// ErrUnavailable: the capability exists but cannot run here (no GUI, no
	// allowlist, ...); the wrapped error says why.
	ErrUnavailable = errors.New("nodes: capability unavailable")
	// ErrDenied: policy deny, or the owner denied the call.
	ErrDenied = errors.New("nodes: call denied")
	// ErrTimeout: the capability ran past its own time limit (system.run's
	// timeout); the wrapped error names the limit. A caller's own deadline
	// shows as context.DeadlineExceeded instead.
	ErrTimeout = errors.New("nodes: call timed out")
)

// ParamError says which parameters are missing or invalid, checked against
// the capability's Params schema.
type ParamError struct {
	Capability string
	Missing    []string // required parameters that were absent
	Invalid    []string // "name: reason" for parameters that failed the schema
}

func (e *ParamError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: ", e.Capability)
	if len(e.Missing) > 0 {
		fmt.Fprintf(&b, "missing parameter(s) %s", strings.Join(e.Missing, ", "))
	}
	if len(e.Invalid) > 0 {
		if len(e.Missing) > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "invalid parameter(s) %s", strings.Join(e.Invalid, "; "))
	}
	return b.String()
}

// CallApproval is what the owner is asked about a capability call under
// policy ask.
type CallApproval struct {
	Call    Call
	Summary string // e.g. `system.run {"argv":["uname","-a"]}`
}

// Approver asks the owner about one capability call. It blocks until the
// owner decides, ctx ends, or the approval times out; reason explains a
// refusal.
type Approver interface {
	ApproveCall(ctx context.Context, a CallApproval) (approved bool, reason string)
}
