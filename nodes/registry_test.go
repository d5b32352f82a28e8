package nodes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"meshtray/pairing"
)

// fakeApprover answers every ApproveCall with ok/reason and records what it
// was asked.
type fakeApprover struct {
	ok     bool
	reason string
	mu     sync.Mutex
	asked  []CallApproval
}

func (f *fakeApprover) ApproveCall(ctx context.Context, a CallApproval) (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, a)
	return f.ok, f.reason
}

func (f *fakeApprover) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.asked)
}

// blockingApprover never answers; it returns when ctx ends.
type blockingApprover struct{ called chan struct{} }

func (b *blockingApprover) ApproveCall(ctx context.Context, a CallApproval) (bool, string) {
	close(b.called)
	<-ctx.Done()
	return false, "gone"
}

func grantCaller(policy pairing.Policy) *pairing.Principal {
	return &pairing.Principal{Grant: pairing.Grant{ID: "g1", Name: "phone", Policy: policy, Scopes: pairing.Scopes{pairing.ScopeNode}}, Listener: pairing.ListenerLAN}
}

func newTestRegistry(t testing.TB, o Options) *Registry {
	t.Helper()
	if o.Device.ID == "" {
		o.Device = Device{ID: "TESTID", Name: "test-device", Version: "0.0.0-test"}
	}
	if o.Notifier == nil {
		// No session bus: tests that want one start their own.
		o.Notifier = NewNotifier(NotifierOptions{Getenv: func(string) string { return "" }})
	}
	if o.Getenv == nil {
		o.Getenv = func(string) string { return "" }
	}
	return New(o)
}

func TestPolicyTable(t *testing.T) {
	t.Parallel()
	const (
		ran      = "ran"
		denied   = "denied"
		askedYes = "asked, approved, ran"
		askedNo  = "asked, denied"
	)
	local := &pairing.Principal{Local: true, Listener: pairing.ListenerLoopback}
	tests := []struct {
		name      string
		caller    *pairing.Principal
		capPolicy pairing.Policy
		approved  bool
		approver  string // "", "yes", "no"
		want      string
	}{
		{"allow x allow", grantCaller(pairing.PolicyAllow), pairing.PolicyAllow, false, "no", ran},
		{"allow x ask, approver yes", grantCaller(pairing.PolicyAllow), pairing.PolicyAsk, false, "yes", askedYes},
		{"allow x ask, approver no", grantCaller(pairing.PolicyAllow), pairing.PolicyAsk, false, "no", askedNo},
		{"allow x ask, no approver", grantCaller(pairing.PolicyAllow), pairing.PolicyAsk, false, "", denied},
		{"allow x ask, approved", grantCaller(pairing.PolicyAllow), pairing.PolicyAsk, true, "", ran},
		{"allow x deny", grantCaller(pairing.PolicyAllow), pairing.PolicyDeny, false, "yes", denied},
		{"allow x deny, approved", grantCaller(pairing.PolicyAllow), pairing.PolicyDeny, true, "yes", denied},
		{"ask x allow, approver yes", grantCaller(pairing.PolicyAsk), pairing.PolicyAllow, false, "yes", askedYes},
		{"ask x allow, approver no", grantCaller(pairing.PolicyAsk), pairing.PolicyAllow, false, "no", askedNo},
		{"ask x allow, approved", grantCaller(pairing.PolicyAsk), pairing.PolicyAllow, true, "no", ran},
		{"ask x ask, approved", grantCaller(pairing.PolicyAsk), pairing.PolicyAsk, true, "no", ran},
		{"ask x ask, no approver", grantCaller(pairing.PolicyAsk), pairing.PolicyAsk, false, "", denied},
		{"ask x deny, approved", grantCaller(pairing.PolicyAsk), pairing.PolicyDeny, true, "yes", denied},
		{"deny x allow", grantCaller(pairing.PolicyDeny), pairing.PolicyAllow, false, "yes", denied},
		{"deny x allow, approved", grantCaller(pairing.PolicyDeny), pairing.PolicyAllow, true, "yes", denied},
		{"deny x ask", grantCaller(pairing.PolicyDeny), pairing.PolicyAsk, true, "yes", denied},
		{"empty grant policy counts as ask", grantCaller(""), pairing.PolicyAllow, false, "yes", askedYes},
		{"empty grant policy, approved", grantCaller(""), pairing.PolicyAllow, true, "", ran},
		{"nil caller x allow", nil, pairing.PolicyAllow, false, "no", ran},
		{"nil caller x ask, approver yes", nil, pairing.PolicyAsk, false, "yes", askedYes},
		{"nil caller x ask, no approver", nil, pairing.PolicyAsk, false, "", denied},
		{"nil caller x ask, approved", nil, pairing.PolicyAsk, true, "", ran},
		{"nil caller x deny, approved", nil, pairing.PolicyDeny, true, "yes", denied},
		{"local principal x allow", local, pairing.PolicyAllow, false, "", ran},
		{"local principal x ask, approver no", local, pairing.PolicyAsk, false, "no", askedNo},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var fa *fakeApprover
			o := Options{}
			switch tt.approver {
			case "yes":
				fa = &fakeApprover{ok: true}
			case "no":
				fa = &fakeApprover{ok: false, reason: "not now"}
			}
			if fa != nil {
				o.Approver = fa
			}
			r := newTestRegistry(t, o)
			if err := r.SetPolicy(CapDeviceInfo, tt.capPolicy); err != nil {
				t.Fatal(err)
			}
			res, err := r.Invoke(context.Background(), Call{Capability: CapDeviceInfo, Caller: tt.caller, Approved: tt.approved})
			asked := fa != nil && fa.count() > 0
			var got string
			switch {
			case err == nil && !asked:
				got = ran
			case err == nil && asked:
				got = askedYes
			case errors.Is(err, ErrDenied) && asked:
				got = askedNo
			case errors.Is(err, ErrDenied):
				got = denied
			default:
				t.Fatalf("Invoke: unexpected error %v", err)
			}
			if got != tt.want {
				t.Fatalf("outcome %q, want %q (err %v)", got, tt.want, err)
			}
			if err == nil && len(res.Data) == 0 {
				t.Error("ran but returned no data")
			}
			if got == askedNo && !strings.Contains(err.Error(), "not now") {
				t.Errorf("refusal %q does not carry the owner's reason", err)
			}
			if got == denied && tt.approver == "" && tt.capPolicy == pairing.PolicyAsk && !strings.Contains(err.Error(), "no one to ask") {
				t.Errorf("denial without approver = %q, want it to say there is no one to ask", err)
			}
			if asked && fa.asked[0].Summary != CapDeviceInfo {
				t.Errorf("approval summary %q, want %q", fa.asked[0].Summary, CapDeviceInfo)
			}
		})
	}
}

func TestApprovalWaitsForContext(t *testing.T) {
	t.Parallel()
	ba := &blockingApprover{called: make(chan struct{})}
	r := newTestRegistry(t, Options{Approver: ba})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := r.Invoke(ctx, Call{Capability: CapClipboardRead, Caller: grantCaller(pairing.PolicyAllow)})
		done <- err
	}()
	// clipboard.read is unavailable without a display: the approver must
	// not even be asked.
	if err := <-done; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("clipboard.read without display: %v, want ErrUnavailable", err)
	}
	if err := r.SetPolicy(CapDeviceInfo, pairing.PolicyAsk); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := r.Invoke(ctx, Call{Capability: CapDeviceInfo, Caller: grantCaller(pairing.PolicyAllow)})
		done <- err
	}()
	<-ba.called
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Invoke after cancel during approval = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Invoke did not return after its context was cancelled")
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		params string
		want   string
	}{
		{``, "system.run"},
		{`{}`, "system.run"},
		{`null`, "system.run"},
		{`{ "argv" : ["uname", "-a"] }`, `system.run {"argv":["uname","-a"]}`},
		{`{"argv":["ls","` + "\u202e" + `gpj.exe"]}`, `system.run {"argv":["ls","\u202Egpj.exe"]}`},
		{`{"argv":["ls","a\u200bb","` + "\U000E0041" + `"]}`, `system.run {"argv":["ls","a\u200bb","\U000E0041"]}`},
		{`{"argv":["` + strings.Repeat("é", 300) + `"]}`, `system.run {"argv":["` + strings.Repeat("é", 200-len(`system.run {"argv":["`)-1) + "…"},
	}
	for _, tt := range tests {
		if got := Summarize("system.run", json.RawMessage(tt.params)); got != tt.want {
			t.Errorf("Summarize(%s) = %q, want %q", tt.params, got, tt.want)
		}
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, Options{RunAllow: []RunRule{{Name: "sleep"}, {Name: "sh"}}})
	long := strings.Repeat("x", maxClipboardChars+1)
	tests := []struct {
		capability, params string
		missing, invalid   []string // nil and nil: valid
	}{
		{CapDeviceInfo, ``, nil, nil},
		{CapDeviceInfo, `null`, nil, nil},
		{CapDeviceInfo, `{}`, nil, nil},
		{CapDeviceInfo, `{"verbose":true}`, nil, []string{"verbose: unknown parameter"}},
		{CapDeviceInfo, `[1]`, nil, []string{"params: got array, want object"}},
		{CapDeviceInfo, `{"a":`, nil, []string{"params: not valid JSON"}},
		{CapSystemNotify, `{}`, []string{"title"}, nil},
		{CapSystemNotify, `{"body":"x"}`, []string{"title"}, nil},
		{CapSystemNotify, `{"title":5}`, nil, []string{"title: got number, want string"}},
		{CapSystemNotify, `{"title":""}`, nil, []string{"title: minLength: got 0, want 1"}},
		{CapSystemNotify, `{"title":"hi","body":"there"}`, nil, nil},
		{CapSystemNotify, `{"title":"hi","body":"there","urgent":true,"icon":"x"}`, nil, []string{"icon: unknown parameter", "urgent: unknown parameter"}},
		{CapClipboardWrite, `{}`, []string{"text"}, nil},
		{CapClipboardWrite, `{"text":"` + long + `"}`, nil, []string{"text: maxLength: got 65,537, want 65,536"}},
		{CapClipboardRead, `{}`, nil, nil},
		{CapSystemRun, `{}`, []string{"argv"}, nil},
		{CapSystemRun, `{"argv":[]}`, nil, []string{"argv: minItems: got 0, want 1"}},
		{CapSystemRun, `{"argv":["rm","-rf","/"]}`, nil, []string{"argv[0]: value must be one of 'sh', 'sleep'"}},
		{CapSystemRun, `{"argv":["/bin/sleep","1"]}`, nil, []string{"argv[0]: value must be one of 'sh', 'sleep'"}},
		{CapSystemRun, `{"argv":["sleep",1]}`, nil, []string{"argv[1]: got number, want string"}},
		{CapSystemRun, `{"argv":["sleep","1"],"timeout_s":0}`, nil, []string{"timeout_s: exclusiveMinimum: got 0, want 0"}},
		{CapSystemRun, `{"argv":["sleep","1"],"timeout_s":0.5}`, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.capability+" "+tt.params[:min(len(tt.params), 40)], func(t *testing.T) {
			t.Parallel()
			err := r.Check(tt.capability, json.RawMessage(tt.params))
			if tt.missing == nil && tt.invalid == nil {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			var pe *ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("Check = %v, want *ParamError", err)
			}
			if pe.Capability != tt.capability || !slices.Equal(pe.Missing, tt.missing) || !slices.Equal(pe.Invalid, tt.invalid) {
				t.Fatalf("ParamError{%q, missing %q, invalid %q}, want missing %q invalid %q", pe.Capability, pe.Missing, pe.Invalid, tt.missing, tt.invalid)
			}
			if !strings.HasPrefix(pe.Error(), tt.capability+": ") {
				t.Errorf("Error() = %q", pe.Error())
			}
		})
	}
	if err := r.Check("camera.snap", nil); !errors.Is(err, ErrUnknownCapability) {
		t.Errorf("Check(unknown) = %v, want ErrUnknownCapability", err)
	}
}

func TestManifest(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, Options{
		Policies: map[string]pairing.Policy{CapSystemNotify: pairing.PolicyAsk, "camera.snap": pairing.PolicyAllow, CapDeviceInfo: "sometimes"},
	})
	m := r.Manifest()
	if m.Device.ID != "TESTID" || m.Device.Name != "test-device" || m.Device.Version != "0.0.0-test" {
		t.Errorf("device = %+v", m.Device)
	}
	if m.Device.OS == "" || m.Device.Arch == "" {
		t.Errorf("device OS/arch not filled in: %+v", m.Device)
	}
	if m.Device.Arch != runtime.GOARCH {
		t.Errorf("device arch %q, want %q", m.Device.Arch, runtime.GOARCH)
	}
	want := []struct {
		name      string
		effects   Effect
		approval  pairing.Policy
		available bool
		reason    string
	}{
		{CapDeviceInfo, EffectRead, pairing.PolicyAllow, true, ""}, // the invalid "sometimes" was ignored
		{CapSystemNotify, EffectWrite, pairing.PolicyAsk, true, ""},
		{CapClipboardRead, EffectRead, pairing.PolicyAsk, false, "no graphical session (DISPLAY and WAYLAND_DISPLAY are unset)"},
		{CapClipboardWrite, EffectWrite, pairing.PolicyAsk, false, "no graphical session (DISPLAY and WAYLAND_DISPLAY are unset)"},
		{CapSystemRun, EffectExec, pairing.PolicyAsk, false, "no command allowlist is configured"},
	}
	if len(m.Capabilities) != len(want) {
		t.Fatalf("%d capabilities, want %d", len(m.Capabilities), len(want))
	}
	for i, w := range want {
		c := m.Capabilities[i]
		if c.Name != w.name || c.Effects != w.effects || c.Approval != w.approval || c.Available != w.available || c.Reason != w.reason {
			t.Errorf("capability %d = {%s %s %s %v %q}, want %+v", i, c.Name, c.Effects, c.Approval, c.Available, c.Reason, w)
		}
		if c.Description == "" {
			t.Errorf("%s has no description", c.Name)
		}
		for _, doc := range []json.RawMessage{c.Params, c.Result} {
			compileSchema(t, doc)
		}
	}
	// Manifest returns a copy.
	m.Capabilities[0].Approval = pairing.PolicyDeny
	if r.Manifest().Capabilities[0].Approval != pairing.PolicyAllow {
		t.Error("Manifest shares state with the registry")
	}
	// The wire form uses the documented field names.
	b, err := json.Marshal(r.Manifest())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"device":{"id":"TESTID","name":"test-device","os":`, `"capabilities":[{"name":"device.info"`, `"effects":"read"`, `"approval":"allow"`, `"available":false`, `"reason":"no command allowlist is configured"`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("manifest JSON lacks %s: %s", key, b)
		}
	}
}

func TestSetPolicy(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, Options{})
	if err := r.SetPolicy("camera.snap", pairing.PolicyAllow); !errors.Is(err, ErrUnknownCapability) {
		t.Errorf("SetPolicy(unknown) = %v", err)
	}
	if err := r.SetPolicy(CapDeviceInfo, "maybe"); err == nil {
		t.Error("SetPolicy accepted an invalid policy")
	}
	if err := r.SetPolicy(CapDeviceInfo, pairing.PolicyDeny); err != nil {
		t.Fatal(err)
	}
	if p := r.Policy(CapDeviceInfo); p != pairing.PolicyDeny {
		t.Errorf("Policy = %q", p)
	}
	if _, err := r.Invoke(context.Background(), Call{Capability: CapDeviceInfo}); !errors.Is(err, ErrDenied) {
		t.Errorf("Invoke under deny = %v", err)
	}
}

// compileSchema compiles a manifest schema document, failing the test when
// it is not valid JSON Schema.
func compileSchema(t testing.TB, doc json.RawMessage) *jsonschema.Schema {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatalf("schema is not JSON: %v\n%s", err, doc)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("urn:test", v); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("urn:test")
	if err != nil {
		t.Fatalf("schema does not compile: %v\n%s", err, doc)
	}
	return s
}

// checkResult validates a result against the Result schema the manifest
// publishes for its capability.
func checkResult(t testing.TB, r *Registry, name string, res Result) {
	t.Helper()
	for _, c := range r.Manifest().Capabilities {
		if c.Name != name {
			continue
		}
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(res.Data))
		if err != nil {
			t.Fatalf("%s result is not JSON: %v", name, err)
		}
		if err := compileSchema(t, c.Result).Validate(v); err != nil {
			t.Fatalf("%s result does not match its manifest schema: %v\n%s", name, err, res.Data)
		}
		if res.Summary == "" {
			t.Errorf("%s result has no summary", name)
		}
		return
	}
	t.Fatalf("no capability %s", name)
}

func TestDeviceInfo(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, Options{})
	res, err := r.Invoke(context.Background(), Call{Capability: CapDeviceInfo, Caller: grantCaller(pairing.PolicyAllow)})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, CapDeviceInfo, res)
	var d DeviceInfo
	if err := json.Unmarshal(res.Data, &d); err != nil {
		t.Fatal(err)
	}
	hn, _ := os.Hostname()
	if d.Hostname != hn {
		t.Errorf("hostname %q, want %q", d.Hostname, hn)
	}
	if d.OS != r.Device().OS {
		t.Errorf("os %q, want the manifest's %q", d.OS, r.Device().OS)
	}
	if d.CPUCount < runtime.NumCPU() || d.CPUModel == "" {
		t.Errorf("cpu_count %d (runtime sees %d), model %q", d.CPUCount, runtime.NumCPU(), d.CPUModel)
	}
	if runtime.GOOS == "linux" {
		// Compare with the kernel's own figures.
		raw, err := os.ReadFile("/proc/meminfo")
		if err != nil {
			t.Fatal(err)
		}
		var totalKB uint64
		for _, line := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				totalKB, _ = strconv.ParseUint(f[1], 10, 64)
			}
		}
		if d.MemoryTotalBytes != totalKB*1024 {
			t.Errorf("memory_total_bytes %d, /proc/meminfo says %d", d.MemoryTotalBytes, totalKB*1024)
		}
		if d.MemoryUsedBytes == 0 || d.MemoryUsedBytes >= d.MemoryTotalBytes {
			t.Errorf("memory_used_bytes %d of %d", d.MemoryUsedBytes, d.MemoryTotalBytes)
		}
		up, err := os.ReadFile("/proc/uptime")
		if err != nil {
			t.Fatal(err)
		}
		secs, _ := strconv.ParseFloat(strings.Fields(string(up))[0], 64)
		if diff := float64(d.UptimeS) - secs; diff < -3 || diff > 3 {
			t.Errorf("uptime_s %d, /proc/uptime says %.0f", d.UptimeS, secs)
		}
	}
	if !strings.Contains(res.Summary, d.Hostname) {
		t.Errorf("summary %q does not name the host", res.Summary)
	}
}

func TestDeviceInfoBattery(t *testing.T) {
	t.Parallel()
	// A sysfs power_supply tree as the kernel lays it out
	// (Documentation/ABI/testing/sysfs-class-power): a mains adapter, the
	// laptop battery, and a wireless mouse's battery (scope Device).
	dir := t.TempDir()
	write := func(dev, attr, val string) {
		p := filepath.Join(dir, dev)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, attr), []byte(val+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("AC", "type", "Mains")
	write("AC", "online", "1")
	write("BAT0", "type", "Battery")
	write("BAT0", "capacity", "87")
	write("BAT0", "status", "Charging")
	write("hidpp_battery_0", "type", "Battery")
	write("hidpp_battery_0", "scope", "Device")
	write("hidpp_battery_0", "capacity", "10")
	r := newTestRegistry(t, Options{sysfsPowerSupply: dir})
	res, err := r.Invoke(context.Background(), Call{Capability: CapDeviceInfo})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, CapDeviceInfo, res)
	var d DeviceInfo
	if err := json.Unmarshal(res.Data, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Batteries) != 1 || d.Batteries[0].Name != "BAT0" || d.Batteries[0].Percent == nil || *d.Batteries[0].Percent != 87 || d.Batteries[0].Status != "Charging" {
		t.Fatalf("batteries = %s", res.Data)
	}
	// The battery is sampled again once the sample is older than sampleTTL.
	write("BAT0", "capacity", "86")
	write("BAT0", "status", "Discharging")
	waitFor(t, "the new battery state", 5*sampleTTL, func() bool {
		res, err = r.Invoke(context.Background(), Call{Capability: CapDeviceInfo})
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Contains(res.Data, []byte(`"batteries":[{"name":"BAT0","percent":86,"status":"Discharging"}]`))
	})
	if !strings.Contains(res.Summary, "BAT0 86%") {
		t.Errorf("summary %q", res.Summary)
	}
}
