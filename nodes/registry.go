package nodes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/shirou/gopsutil/v3/host"

	"meshtray/jsonout"
	"meshtray/pairing"
	"meshtray/textsafe"
)

// Built-in capability names.
const (
	CapDeviceInfo     = "device.info"
	CapSystemNotify   = "system.notify"
	CapClipboardRead  = "clipboard.read"
	CapClipboardWrite = "clipboard.write"
	CapSystemRun      = "system.run"
)

// DefaultPolicies are the approval policies of the built-ins before the
// owner changes them (Options.Policies, SetPolicy). Reading the device's
// facts and showing a notification run without asking; the clipboard and
// running programs ask, following OpenClaw's node command policy (dangerous
// commands need an explicit yes; no one to ask means no).
var DefaultPolicies = map[string]pairing.Policy{
	CapDeviceInfo:     pairing.PolicyAllow,
	CapSystemNotify:   pairing.PolicyAllow,
	CapClipboardRead:  pairing.PolicyAsk,
	CapClipboardWrite: pairing.PolicyAsk,
	CapSystemRun:      pairing.PolicyAsk,
}

// Options configure a Registry. The zero value gives a registry of the
// built-ins with their default policies, no system.run allowlist, and no
// approver (so every call under policy ask is denied).
type Options struct {
	// Device is this device as the manifest shows it. An empty OS or Arch is
	// filled in from Host.
	Device Device
	// Host is what gopsutil host.Info() returned; nil means New calls it.
	Host *host.InfoStat
	// RunAllow is the system.run allowlist; empty means system.run is
	// unavailable.
	RunAllow []RunRule
	// Policies overrides DefaultPolicies per capability name (the owner's
	// persisted choices). Unknown names and invalid policies are logged and
	// ignored.
	Policies map[string]pairing.Policy
	// Approver asks the owner about calls under policy ask. nil means there
	// is no one to ask, and such calls are denied.
	Approver Approver
	// Notifier delivers system.notify; nil means NewNotifier with defaults.
	Notifier *Notifier
	// Getenv reads the graphical-session variables (DISPLAY,
	// WAYLAND_DISPLAY, XAUTHORITY, XDG_RUNTIME_DIR) the clipboard needs; nil
	// means os.Getenv. Tests point it at their own Xvfb.
	Getenv func(string) string
	// Logger receives debug records of calls (name, caller, outcome, never
	// parameters or results); nil discards.
	Logger *slog.Logger
	// OnRun, when set, is called once per Invoke, after it ended, with what
	// ran (the audit trail's record of a capability run). It runs on
	// Invoke's goroutine before Invoke returns: it must not call back into
	// the Registry's Invoke.
	OnRun func(RunRecord)

	// sysfsPowerSupply overrides /sys/class/power_supply (tests).
	sysfsPowerSupply string
}

// Registry is the node's capability registry: the manifest, parameter
// validation, approval policy, and the built-in capabilities. It is safe for
// concurrent use. It starts no goroutines, so it needs no Close.
type Registry struct {
	device   Device
	approver Approver
	onRun    func(RunRecord)
	log      *slog.Logger
	caps     []*capability // manifest order; immutable after New
	byName   map[string]*capability

	mu       sync.RWMutex
	policies map[string]pairing.Policy // guarded by mu; every capability has one
}

// capability is one registered capability: its manifest entry and the code
// behind it.
type capability struct {
	Capability // static parts; Approval, Available, Reason are filled per Manifest
	schema     *jsonschema.Schema
	// available reports whether the capability can run now, and why not.
	available func() (bool, string)
	// run does the work; params were validated against schema.
	run func(ctx context.Context, call Call, params json.RawMessage) (Result, error)
	// auditParams, when set, is the RunRecord.Params of a call (for
	// parameters whose content is not for a record, e.g. clipboard text);
	// nil means the compact JSON of the params (AuditParams).
	auditParams func(params json.RawMessage) string
}

// New builds the registry of built-in capabilities. It gathers what never
// changes about the host (host.Info, CPU model and count, boot time) once,
// resolves the system.run allowlist with exec.LookPath, and compiles every
// parameter schema. It does not fail: problems (an allowlisted command not
// found, a host fact gopsutil cannot read) are logged and show up as
// unavailable capabilities or missing fields.
func New(o Options) *Registry {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	info := o.Host
	if info == nil {
		var err error
		if info, err = host.Info(); err != nil || info == nil {
			log.Warn("host.Info failed; device facts will be partial", "err", err)
			if info == nil {
				info = &host.InfoStat{}
			}
		}
	}
	dev := o.Device
	if dev.OS == "" {
		dev.OS = OSEnvironment(*info)
	}
	if dev.Arch == "" {
		dev.Arch = GoArch(info.KernelArch)
	}
	r := &Registry{
		device:   dev,
		approver: o.Approver,
		onRun:    o.OnRun,
		log:      log,
		byName:   make(map[string]*capability),
		policies: make(map[string]pairing.Policy),
	}
	for _, c := range builtins(o, *info, dev.OS, getenv, log) {
		r.add(c)
	}
	for name, p := range o.Policies {
		if err := r.SetPolicy(name, p); err != nil {
			log.Warn("ignoring configured capability policy", "capability", name, "err", err)
		}
	}
	return r
}

// builtins are the built-in capabilities in manifest order.
func builtins(o Options, info host.InfoStat, osEnv string, getenv func(string) string, log *slog.Logger) []*capability {
	notifier := o.Notifier
	if notifier == nil {
		notifier = NewNotifier(NotifierOptions{Logger: log})
	}
	facts := gatherFacts(info, osEnv, o.sysfsPowerSupply, log)
	clip := newClipboard(getenv)
	runner := newRunner(o.RunAllow, log)
	return []*capability{
		deviceInfoCapability(facts),
		notifyCapability(notifier),
		clipboardReadCapability(clip),
		clipboardWriteCapability(clip),
		runCapability(runner),
	}
}

// add registers c; its Params schema must compile (built-ins are tested).
func (r *Registry) add(c *capability) {
	c.schema = mustCompileSchema(c.Name, c.Params)
	r.caps = append(r.caps, c)
	r.byName[c.Name] = c
	p, ok := DefaultPolicies[c.Name]
	if !ok {
		p = pairing.PolicyAsk
	}
	r.policies[c.Name] = p
}

func mustCompileSchema(name string, doc json.RawMessage) *jsonschema.Schema {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		panic(fmt.Sprintf("nodes: params schema of %s: %v", name, err))
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	url := "urn:meshtray:nodes:" + name + ":params"
	if err := c.AddResource(url, v); err != nil {
		panic(fmt.Sprintf("nodes: params schema of %s: %v", name, err))
	}
	s, err := c.Compile(url)
	if err != nil {
		panic(fmt.Sprintf("nodes: params schema of %s: %v", name, err))
	}
	return s
}

// Device returns this device as the manifest shows it.
func (r *Registry) Device() Device { return r.device }

// Manifest returns the node capability manifest: the device and every
// capability with its current approval policy and availability. The result
// is a copy the caller may keep.
func (r *Registry) Manifest() Manifest {
	m := Manifest{Device: r.device, Capabilities: make([]Capability, 0, len(r.caps))}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, c := range r.caps {
		e := c.Capability
		e.Approval = r.policies[c.Name]
		e.Available, e.Reason = c.available()
		if e.Available {
			e.Reason = ""
		}
		m.Capabilities = append(m.Capabilities, e)
	}
	return m
}

// SetPolicy sets the approval policy of one capability (the owner's choice
// at runtime; the caller persists it). It returns an error wrapping
// ErrUnknownCapability for an unknown name, and an error for a policy other
// than ask, allow or deny.
func (r *Registry) SetPolicy(name string, p pairing.Policy) error {
	if _, ok := r.byName[name]; !ok {
		return fmt.Errorf("%w: %q", ErrUnknownCapability, name)
	}
	switch p {
	case pairing.PolicyAsk, pairing.PolicyAllow, pairing.PolicyDeny:
	default:
		return fmt.Errorf("nodes: invalid policy %q (want ask, allow or deny)", p)
	}
	r.mu.Lock()
	r.policies[name] = p
	r.mu.Unlock()
	return nil
}

// Policy returns the current approval policy of a capability, or "" for an
// unknown name.
func (r *Registry) Policy(name string) pairing.Policy {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.policies[name]
}

// Check validates params against the Params schema of the named capability
// (JSON Schema draft 2020-12). Empty or null params count as {}. It returns
// nil, an error wrapping ErrUnknownCapability, or a *ParamError naming the
// missing and invalid parameters. It does not look at availability or
// policy.
func (r *Registry) Check(name string, params json.RawMessage) error {
	c, ok := r.byName[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownCapability, name)
	}
	_, err := c.validate(params)
	return err
}

// validate returns params normalised (empty/null -> {}) or a *ParamError.
func (c *capability) validate(params json.RawMessage) (json.RawMessage, error) {
	params = bytes.TrimSpace(params)
	if len(params) == 0 || bytes.Equal(params, []byte("null")) {
		params = json.RawMessage(`{}`)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(params))
	if err != nil {
		return nil, &ParamError{Capability: c.Name, Invalid: []string{"params: not valid JSON"}}
	}
	if err := c.schema.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return nil, paramError(c.Name, ve)
		}
		return nil, &ParamError{Capability: c.Name, Invalid: []string{"params: " + err.Error()}}
	}
	return params, nil
}

// Invoke runs one capability call:
//
//  1. an unknown capability -> error wrapping ErrUnknownCapability;
//  2. params that fail the schema -> *ParamError;
//  3. a capability that cannot run here -> error wrapping ErrUnavailable
//     with the reason;
//  4. the approval policy (see EffectivePolicy): deny -> error wrapping
//     ErrDenied; ask -> satisfied by call.Approved, else the Approver is
//     asked (no Approver -> ErrDenied, "no one to ask"; a refusal ->
//     ErrDenied with the owner's reason), with call.OnAsk called just
//     before and call.OnApproved once the owner approved;
//  5. the capability runs under ctx: cancelling ctx stops it (system.run
//     kills its process group) and Invoke returns ctx's error promptly; a
//     capability's own time limit -> error wrapping ErrTimeout.
func (r *Registry) Invoke(ctx context.Context, call Call) (Result, error) {
	start := time.Now()
	var waited time.Duration // for the owner's answer: not part of the run
	res, err := r.invoke(ctx, call, &waited)
	dur := time.Since(start) - waited
	r.log.Debug("capability call", "capability", call.Capability, "caller", callerName(call.Caller),
		"approved", call.Approved, "dur", dur, "err", err)
	if r.onRun != nil {
		r.onRun(RunRecord{
			Capability: BoundSummary(call.Capability),
			Params:     r.auditParams(call),
			Caller:     call.Caller,
			TaskID:     call.TaskID,
			State:      RunStateOf(err),
			Err:        err,
			Duration:   dur,
		})
	}
	return res, err
}

// RunRecord is one capability call as the audit trail records it
// (Options.OnRun). It carries no result data.
type RunRecord struct {
	Capability string // the capability name asked for (escaped, bounded)
	// Params is a one-line parameter summary (AuditParams): compact JSON
	// bounded to MaxSummaryRunes, with content not fit for a record (the
	// text written to the clipboard) replaced by its size.
	Params   string
	Caller   *pairing.Principal // nil: the local owner
	TaskID   string             // Call.TaskID
	State    RunState
	Err      error // nil when State is RunCompleted
	// Duration is how long the call took without the wait for the
	// owner's answer (policy ask): the run itself, and the checks.
	Duration time.Duration
}

// RunState is how a capability call ended.
type RunState string

// Run states (RunStateOf).
const (
	RunCompleted   RunState = "completed"
	RunFailed      RunState = "failed"
	RunDenied      RunState = "denied"      // ErrDenied: policy deny or the owner refused
	RunInvalid     RunState = "invalid"     // *ParamError or ErrUnknownCapability
	RunUnavailable RunState = "unavailable" // ErrUnavailable
	RunTimedOut    RunState = "timed-out"   // ErrTimeout
	RunCanceled    RunState = "canceled"    // the caller's context ended
)

// RunStateOf maps Invoke's error to its RunState.
func RunStateOf(err error) RunState {
	var pe *ParamError
	switch {
	case err == nil:
		return RunCompleted
	case errors.Is(err, ErrDenied):
		return RunDenied
	case errors.As(err, &pe), errors.Is(err, ErrUnknownCapability):
		return RunInvalid
	case errors.Is(err, ErrUnavailable):
		return RunUnavailable
	case errors.Is(err, ErrTimeout):
		return RunTimedOut
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return RunCanceled
	}
	return RunFailed
}

// auditParams is RunRecord.Params of call.
func (r *Registry) auditParams(call Call) string {
	if c, ok := r.byName[call.Capability]; ok && c.auditParams != nil {
		return BoundSummary(c.auditParams(call.Params))
	}
	return AuditParams(call.Params)
}

// AuditParams is the default parameter summary of a run: the params'
// compact JSON through BoundSummary, "" for none ({} or null), and
// "(not JSON, N bytes)" for params that do not parse.
func AuditParams(params json.RawMessage) string {
	if len(params) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Compact(&b, params); err != nil {
		return fmt.Sprintf("(not JSON, %d bytes)", len(params))
	}
	if s := b.String(); s == "{}" || s == "null" {
		return ""
	}
	return BoundSummary(b.String())
}

func (r *Registry) invoke(ctx context.Context, call Call, waited *time.Duration) (Result, error) {
	c, ok := r.byName[call.Capability]
	if !ok {
		return Result{}, fmt.Errorf("%w: %q", ErrUnknownCapability, call.Capability)
	}
	params, err := c.validate(call.Params)
	if err != nil {
		return Result{}, err
	}
	if ok, reason := c.available(); !ok {
		return Result{}, fmt.Errorf("%s: %w: %s", c.Name, ErrUnavailable, reason)
	}
	if err := r.authorize(ctx, c, call, params, waited); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	return c.run(ctx, call, params)
}

// EffectivePolicy is the policy a call from caller to a capability under
// capPolicy runs under. For a grant it is the stricter of the grant's policy
// and the capability's (pairing.Stricter: allow < ask < deny, empty counts
// as ask). The local owner (caller nil or caller.Local) has no grant, so the
// capability's policy alone applies: ask still asks, so a local program that
// holds the control token cannot read the clipboard or run commands without
// the owner seeing it; an owner-initiated call from the UI sets
// Call.Approved.
func EffectivePolicy(caller *pairing.Principal, capPolicy pairing.Policy) pairing.Policy {
	if caller == nil || caller.Local {
		return pairing.Stricter(capPolicy, capPolicy)
	}
	return pairing.Stricter(caller.Grant.Policy, capPolicy)
}

// authorize applies the approval policy; waited gets the time spent
// waiting for the owner's answer.
func (r *Registry) authorize(ctx context.Context, c *capability, call Call, params json.RawMessage, waited *time.Duration) error {
	r.mu.RLock()
	capPolicy := r.policies[c.Name]
	r.mu.RUnlock()
	switch EffectivePolicy(call.Caller, capPolicy) {
	case pairing.PolicyAllow:
		return nil
	case pairing.PolicyDeny:
		if capPolicy == pairing.PolicyDeny {
			return fmt.Errorf("%w: %s is set to deny on this device", ErrDenied, c.Name)
		}
		return fmt.Errorf("%w: calls from %s are set to deny", ErrDenied, callerName(call.Caller))
	}
	if call.Approved {
		return nil
	}
	if r.approver == nil {
		return fmt.Errorf("%w: %s needs the owner's approval and there is no one to ask", ErrDenied, c.Name)
	}
	if call.OnAsk != nil {
		call.OnAsk()
	}
	asked := time.Now()
	ok, reason := r.approver.ApproveCall(ctx, CallApproval{Call: call, Summary: Summarize(c.Name, params)})
	*waited = time.Since(asked)
	if err := ctx.Err(); err != nil {
		return err
	}
	if !ok {
		if reason == "" {
			reason = "denied by the owner"
		}
		return fmt.Errorf("%w: %s", ErrDenied, reason)
	}
	if call.OnApproved != nil {
		call.OnApproved()
	}
	return nil
}

// MaxSummaryRunes bounds the one-line call summary shown to the owner: a
// longer one is cut to MaxSummaryRunes-1 runes and "…".
const MaxSummaryRunes = 200

// Summarize is the one line shown to the owner for a call:
// `system.run {"argv":["uname","-a"]}`, or just the name when there are no
// params. Params are compacted (their JSON escapes kept as sent) and the
// whole line, name included, goes through BoundSummary: the owner sees
// what will run, not what it was made to look like. The same call always gives the same line, so an
// executor may compare it with the line the owner approved.
func Summarize(name string, params json.RawMessage) string {
	s := name
	var b bytes.Buffer
	if err := json.Compact(&b, params); err == nil && b.Len() > 0 && b.String() != "{}" && b.String() != "null" {
		s += " " + b.String()
	}
	return BoundSummary(s)
}

// BoundSummary is the form of a summary the owner is shown: one line
// (textsafe.EscapeInvisible) of at most MaxSummaryRunes runes, cut with
// "…". It is idempotent, so a summary already bounded (Summarize's) is
// unchanged and an executor can compare it with the one approved.
func BoundSummary(s string) string {
	s = textsafe.EscapeInvisible(s)
	if utf8.RuneCountInString(s) > MaxSummaryRunes {
		rs := []rune(s)
		s = string(rs[:MaxSummaryRunes-1]) + "…"
	}
	return s
}

func callerName(p *pairing.Principal) string {
	if p == nil || p.Local {
		return "this device"
	}
	return fmt.Sprintf("%q (grant %s)", p.Grant.Name, p.Grant.ID)
}

// Names returns the capability names in manifest order.
func (r *Registry) Names() []string {
	names := make([]string, len(r.caps))
	for i, c := range r.caps {
		names[i] = c.Name
	}
	return slices.Clip(names)
}

// marshalResult encodes v as a Result's data, without HTML escapes (a
// clipboard's "<b>" stays "<b>", not "\u003cb\u003e").
func marshalResult(v any, summary string) (Result, error) {
	data, err := jsonout.Marshal(v)
	if err != nil {
		return Result{}, err
	}
	return Result{Data: data, Summary: summary}, nil
}
