package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/jsonout"
	"meshtray/nodes"
	"meshtray/pairing"
)

// NodeRegistry is what the node executor needs of the capability registry;
// *nodes.Registry implements it.
type NodeRegistry interface {
	Manifest() nodes.Manifest
	// Check validates params against the capability's Params schema:
	// nodes.ErrUnknownCapability, *nodes.ParamError, or nil.
	Check(name string, params json.RawMessage) error
	Invoke(ctx context.Context, c nodes.Call) (nodes.Result, error)
}

// NodeExecutor is the built-in Executor: it maps an approved A2A message to
// one capability call on this device's node registry.
//
// A message names the call either as a DataPart
//
//	{"capability": "system.notify", "params": {"title": "hi"}}
//
// or as text naming a capability ("device.info", "please run device.info").
// With no capability, an unknown one, or two named at once, the task goes
// to input-required with a message listing the available capabilities (and
// a DataPart {"capabilities": [...]}) . Missing or invalid parameters
// (nodes.ParamError, from the capability's JSON Schema) go to
// input-required naming them (DataPart {"capability", "missing",
// "invalid"}). The caller answers with message/send on the same taskId: a
// DataPart of params ({"title": "hi"} or {"params": {...}}), a DataPart
// with a capability, or text: a capability name, or the value of the single
// missing parameter when that parameter is a string. Params merge across
// turns; naming another capability starts its params afresh.
//
// The result is an artifact named after the capability with one DataPart
// (the result JSON; a non-object result is wrapped as {"result": v}), and
// the task completes with the result's one-line summary as its status
// message: each said once.
//
// Errors: an unavailable capability (nodes.ErrUnavailable) fails the task
// with the reason. A call refused by the capability's policy or by the
// owner (nodes.ErrDenied) ends the task rejected, "rejected: <capability>:
// <reason>": the work was refused, not attempted. Any other invoke error
// fails the task with its text; a canceled ctx ends it canceled.
//
// Approval: the engine shows the owner Summarize's text (nodes.Summarize
// of the call, and the files the message carries: escaped, bounded). When
// the call finally made has exactly that line, the line was not cut, and
// a person approved it
// (Execution.ApprovedSummary), the call is marked nodes.Call.Approved so a
// capability under policy ask is not asked twice. A call whose params
// changed since (input-required answers) is asked again; while it waits
// for the owner the task shows working "waiting for the owner's approval
// of <call>", then "running <capability>".
type NodeExecutor struct {
	reg NodeRegistry
	log *slog.Logger
}

var (
	_ Executor   = (*NodeExecutor)(nil)
	_ Summarizer = (*NodeExecutor)(nil)
)

// NewNodeExecutor returns the node executor over reg; logger nil discards.
func NewNodeExecutor(reg NodeRegistry, logger *slog.Logger) *NodeExecutor {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &NodeExecutor{reg: reg, log: logger}
}

// nodeCall is the executor-private state kept on the task across turns.
type nodeCall struct {
	Capability string
	Params     map[string]any
	Missing    []string // what the last input-required asked for
}

// Summarize implements Summarizer: the call a message names, as
// nodes.Summarize writes it (the same line the capability's own approval
// shows), followed by the files the message carries (callLine); or,
// naming none, textSummary's line of the message.
func (x *NodeExecutor) Summarize(_ *pairing.Principal, msg *a2a.Message) string {
	var c nodeCall
	_, ambiguous := x.parse(&c, msg, x.reg.Manifest())
	if c.Capability != "" && !ambiguous {
		params, _ := jsonout.Marshal(c.paramsOrEmpty()) // a map from JSON always encodes
		return callLine(nodes.Summarize(c.Capability, params), msg)
	}
	return textSummary(msg, "(no capability named)")
}

// callLine is a call's summary followed by the names of the files msg
// carries ("[file a.pdf]"; the executor does not use them, but the owner
// sees everything the message brings), bounded like every summary.
func callLine(call string, msg *a2a.Message) string {
	var b strings.Builder
	b.WriteString(call)
	for _, p := range msg.Parts {
		if fp, ok := p.(a2a.FilePart); ok {
			b.WriteString(" [file " + FileName(fp) + "]")
		}
	}
	return nodes.BoundSummary(b.String())
}

// Execute implements Executor.
func (x *NodeExecutor) Execute(ctx context.Context, ex *Execution) error {
	m := x.reg.Manifest()
	c, _ := ex.Value().(*nodeCall)
	if c == nil {
		c = &nodeCall{}
		ex.DecodeValue(c) // a task restored from the database
	}
	defer ex.SetValue(c)

	text, ambiguous := x.parse(c, ex.Message(), m)
	if ambiguous {
		c.Capability = ""
		ex.InputRequired("The message names more than one capability; name exactly one. Available: "+availableNames(m)+".", capabilityList(m))
		return nil
	}
	if c.Capability == "" {
		ex.InputRequired(noCapabilityText(text)+" Available: "+availableNames(m)+`. Send a data part {"capability": NAME, "params": {...}} or text naming one.`, capabilityList(m))
		return nil
	}
	capb, ok := findCapability(m, c.Capability)
	if !ok {
		name := c.Capability
		c.Capability, c.Params, c.Missing = "", nil, nil
		ex.InputRequired(fmt.Sprintf("This device has no capability %q. Available: %s.", truncate(name, 64), availableNames(m)), capabilityList(m))
		return nil
	}
	if !capb.Available {
		ex.Fail(fmt.Sprintf("%s is unavailable on this device: %s", capb.Name, capb.Reason))
		return nil
	}
	params, err := jsonout.Marshal(c.paramsOrEmpty())
	if err != nil {
		ex.Fail("the params cannot be encoded: " + err.Error())
		return nil
	}
	if err := x.reg.Check(capb.Name, params); err != nil {
		return x.settleError(ex, c, capb, err)
	}
	c.Missing = nil

	sum := nodes.Summarize(capb.Name, params)
	// The line the owner approved was made of the task's first message.
	line := ""
	if h := ex.History(); len(h) > 0 {
		line = callLine(sum, h[0])
	}
	approved := ex.ApprovedSummary()
	call := nodes.Call{
		Capability: capb.Name,
		Params:     params,
		Caller:     ex.Caller(),
		// A cut summary hides the rest of the call: never take it as
		// consent to what it hid.
		Approved:   approved != "" && approved == line && utf8.RuneCountInString(line) < nodes.MaxSummaryRunes,
		OnAsk:      func() { ex.Working("waiting for the owner's approval of " + sum) },
		OnApproved: func() { ex.Working("running " + capb.Name) },
		TaskID:     string(ex.TaskID()),
	}
	ex.Working("running " + capb.Name)
	res, err := x.reg.Invoke(ctx, call)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return x.settleError(ex, c, capb, err)
	}
	data := map[string]any{}
	if len(res.Data) > 0 && json.Unmarshal(res.Data, &data) != nil {
		var v any
		if err := json.Unmarshal(res.Data, &v); err != nil {
			ex.Fail(capb.Name + " returned a result that is not JSON")
			return nil
		}
		data = map[string]any{"result": v}
	}
	summary := res.Summary
	if summary == "" {
		summary = capb.Name + " done"
	}
	ex.Artifact(capb.Name, a2a.DataPart{Data: data})
	ex.Complete(summary)
	return nil
}

// settleError turns a Check or Invoke error into the turn's outcome.
func (x *NodeExecutor) settleError(ex *Execution, c *nodeCall, capb nodes.Capability, err error) error {
	var pe *nodes.ParamError
	switch {
	case errors.As(err, &pe):
		c.Missing = pe.Missing
		d := map[string]any{"capability": capb.Name, "missing": nonNil(pe.Missing), "invalid": nonNil(pe.Invalid)}
		if len(capb.Params) > 0 {
			var schema any
			if json.Unmarshal(capb.Params, &schema) == nil {
				d["params_schema"] = schema
			}
		}
		ex.InputRequired(pe.Error()+`. Answer with a data part of params, e.g. {"params": {...}}`+singleStringHint(capb, pe)+".", a2a.DataPart{Data: d})
	case errors.Is(err, nodes.ErrUnknownCapability):
		c.Capability, c.Params, c.Missing = "", nil, nil
		ex.InputRequired("This device has no such capability. Available: "+availableNames(x.reg.Manifest())+".", capabilityList(x.reg.Manifest()))
	case errors.Is(err, nodes.ErrDenied):
		ex.Reject(fmt.Sprintf("rejected: %s: %s", capb.Name, deniedReason(err)))
	case errors.Is(err, nodes.ErrUnavailable):
		ex.Fail(err.Error())
	default:
		x.log.Info("capability call failed", "capability", capb.Name, "err", err)
		ex.Fail(capb.Name + " failed: " + err.Error())
	}
	return nil
}

// deniedReason is the reason of a nodes.ErrDenied error, without the
// sentinel's own text ("denied by the owner", "system.run is set to deny
// on this device").
func deniedReason(err error) string {
	msg := err.Error()
	prefix := nodes.ErrDenied.Error() + ": "
	if i := strings.Index(msg, prefix); i >= 0 {
		return msg[i+len(prefix):]
	}
	return msg
}

func singleStringHint(capb nodes.Capability, pe *nodes.ParamError) string {
	if len(pe.Missing) == 1 && len(pe.Invalid) == 0 && paramType(capb.Params, pe.Missing[0]) == "string" {
		return ", or with text: the value of " + pe.Missing[0]
	}
	return ""
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (c *nodeCall) paramsOrEmpty() map[string]any {
	if c.Params == nil {
		return map[string]any{}
	}
	return c.Params
}

// setCapability names the call's capability; another capability than the
// current one starts its params afresh.
func (c *nodeCall) setCapability(name string) {
	if name != c.Capability {
		c.Capability, c.Params, c.Missing = name, nil, nil
	}
}

func (c *nodeCall) mergeParams(p map[string]any) {
	if c.Params == nil {
		c.Params = make(map[string]any, len(p))
	}
	maps.Copy(c.Params, p)
}

// parse folds msg into c (see NodeExecutor) and returns the message's text
// and whether it named more than one capability.
func (x *NodeExecutor) parse(c *nodeCall, msg *a2a.Message, m nodes.Manifest) (text string, ambiguous bool) {
	var texts []string
	fromData := false
	for _, part := range msg.Parts {
		switch p := part.(type) {
		case a2a.DataPart:
			name, hasName := p.Data["capability"].(string)
			params, hasParams := p.Data["params"].(map[string]any)
			if hasName {
				fromData = true
				c.setCapability(name)
			}
			switch {
			case hasParams:
				c.mergeParams(params)
			case !hasName && p.Data["params"] == nil && len(p.Data) > 0:
				// An answer: the data part is the params themselves.
				c.mergeParams(p.Data)
			}
		case a2a.TextPart:
			texts = append(texts, p.Text)
		}
	}
	text = strings.Join(texts, "\n")
	if fromData || strings.TrimSpace(text) == "" {
		return text, false
	}
	named := namedCapabilities(text, m)
	switch {
	case len(named) > 1:
		return text, true
	case len(named) == 1:
		c.setCapability(named[0])
	case c.Capability != "" && len(c.Missing) == 1:
		if capb, ok := findCapability(m, c.Capability); ok && paramType(capb.Params, c.Missing[0]) == "string" {
			c.mergeParams(map[string]any{c.Missing[0]: strings.TrimSpace(text)})
		}
	}
	return text, false
}

// namedCapabilities returns the distinct capability names text mentions as
// whole words, in manifest order.
func namedCapabilities(text string, m nodes.Manifest) []string {
	var out []string
	for _, c := range m.Capabilities {
		if mentions(text, c.Name) {
			out = append(out, c.Name)
		}
	}
	return out
}

func isNameByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-'
}

// mentions reports whether name occurs in text as a whole word: not inside
// a longer name ("device.info" is not in "device.infos" or "my.device.info"),
// a sentence's final period allowed.
func mentions(text, name string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], name)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(name)
		before := start == 0 || !(isNameByte(text[start-1]) || text[start-1] == '.')
		after := end == len(text) || !isNameByte(text[end]) && (text[end] != '.' || end+1 == len(text) || !isNameByte(text[end+1]))
		if before && after {
			return true
		}
		i = start + 1
	}
}

func findCapability(m nodes.Manifest, name string) (nodes.Capability, bool) {
	for _, c := range m.Capabilities {
		if c.Name == name {
			return c, true
		}
	}
	return nodes.Capability{}, false
}

func availableNames(m nodes.Manifest) string {
	var names []string
	for _, c := range m.Capabilities {
		if c.Available {
			names = append(names, c.Name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// capabilityList is the DataPart listing the available capabilities with
// their params schemas, for an agent to pick from.
func capabilityList(m nodes.Manifest) a2a.DataPart {
	list := []any{}
	for _, c := range m.Capabilities {
		if !c.Available {
			continue
		}
		e := map[string]any{"name": c.Name, "description": c.Description, "effects": string(c.Effects)}
		var schema any
		if len(c.Params) > 0 && json.Unmarshal(c.Params, &schema) == nil {
			e["params"] = schema
		}
		list = append(list, e)
	}
	return a2a.DataPart{Data: map[string]any{"capabilities": list}}
}

func noCapabilityText(text string) string {
	if strings.TrimSpace(text) == "" {
		return "Which capability should run?"
	}
	return "The message names no capability of this device."
}

// paramType is the JSON Schema "type" of property name in schema, or "".
func paramType(schema json.RawMessage, name string) string {
	var sc struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	if json.Unmarshal(schema, &sc) != nil {
		return ""
	}
	t, _ := sc.Properties[name].Type.(string)
	return t
}
