//go:build linux

package app_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/pairing"
	"meshtray/store"
)

// phoneEnv is one node and one phone browser sharing a network namespace:
// the page is served over plain HTTP on the namespace's loopback (a secure
// context for WebCrypto), so every packet stays inside that namespace.
type phoneEnv struct {
	t    *testing.T
	lab  *phLab
	node *phNode
	b    *phoneBrowser
	ps   app.PairingSession
	url  string // the loopback pairing URL (code and fingerprint in the fragment)
}

const phStatesDevice = "Bo’s desktop"

func newPhoneEnv(t *testing.T) *phoneEnv {
	t.Helper()
	lab := newPhLab(t)
	e := &phoneEnv{t: t, lab: lab}
	e.node = startPhNode(t, lab.laptop, phNodeOptions{Name: phStatesDevice, Config: "tailscale = false\n"})
	e.b = startPhone(t, lab.laptop)
	e.newSession()
	return e
}

// newSession starts a pairing code and returns its loopback URL.
func (e *phoneEnv) newSession() string {
	e.t.Helper()
	e.node.MustAPI("POST", "/pair/sessions", nil, &e.ps)
	// The loopback pairing URL is https (peers pin it); a browser on this
	// machine gets the same page over plain HTTP on that port.
	e.url = "http://" + strings.TrimPrefix(e.ps.URLs[len(e.ps.URLs)-1], "https://")
	if !strings.HasPrefix(e.url, e.node.base+"/pair#") {
		e.t.Fatalf("loopback pairing URL %q", e.url)
	}
	return e.url
}

// open loads url and waits for the pairing view.
func (e *phoneEnv) open(url string) {
	e.t.Helper()
	e.b.Do("open "+url, chromedp.Navigate(url))
	e.b.Visible("view-pair", 20*time.Second)
}

// claim names the phone and presses Pair.
func (e *phoneEnv) claim() {
	e.t.Helper()
	e.b.Do("claim",
		chromedp.Evaluate[chromedp.Void](`(() => { const c = document.getElementById("fp-confirm"); if (location.protocol === "https:" && !c.checked) c.click(); })()`),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("phone-name").value = ""`),
		chromedp.SendKeys(chromedp.ID("phone-name"), "Test phone"),
		chromedp.Click(chromedp.ID("claim-btn")))
}

func (e *phoneEnv) pairingApproval() app.Approval {
	e.t.Helper()
	return phWaitApproval(e.t, e.node.approvals, app.KindPairing, nil)
}

func (e *phoneEnv) decide(id, decision string, scopes ...pairing.Scope) {
	e.t.Helper()
	e.node.MustAPI("POST", "/approvals/"+id, app.ApprovalDecision{Decision: decision, Scopes: scopes}, nil)
}

func (e *phoneEnv) text(id string) string {
	e.t.Helper()
	return phoneEval[string](e.b, `document.getElementById(`+phJS(id)+`).textContent`)
}

func (e *phoneEnv) problem(title string) {
	e.t.Helper()
	e.b.Visible("view-problem", 40*time.Second)
	if got := e.text("problem-title"); got != title {
		e.t.Fatalf("problem %q, want %q\n%s", got, title, e.b.Text())
	}
}

// pairPhone pairs the phone (approved with agent,node) and waits for the remote.
func (e *phoneEnv) pairPhone() string {
	e.t.Helper()
	return e.pairPhoneWith(pairing.ScopeAgent, pairing.ScopeNode)
}

// pairPhoneWith is pairPhone approving scopes (node among them).
func (e *phoneEnv) pairPhoneWith(scopes ...pairing.Scope) string {
	e.t.Helper()
	e.open(e.url)
	e.claim()
	e.b.Visible("view-sas", 20*time.Second)
	a := e.pairingApproval()
	e.decide(a.ID, app.DecisionApprove, scopes...)
	e.b.Visible("view-remote", 40*time.Second)
	e.b.WaitJS("the manifest", `document.querySelectorAll("#caps li").length > 0`, 20*time.Second)
	var d app.Devices
	e.node.MustAPI("GET", "/nodes/devices", nil, &d)
	if len(d.Issued) != 1 {
		e.t.Fatalf("issued grants %+v", d.Issued)
	}
	return d.Issued[0].ID
}

// intercept answers, through the DevTools Fetch domain, every request
// matching pattern itself (the page cannot tell): with answer(body of the
// real response) when real is true, else with answer(nil) and no request
// to the node at all. It stands in for a network attacker, or for a state
// the test cannot reach in real time. It returns how many it answered.
func (e *phoneEnv) intercept(pattern string, real bool, answer func(body []byte) (status int, out []byte)) *atomic.Int32 {
	e.t.Helper()
	ctx := e.b.ctx
	var n atomic.Int32
	stage := fetch.RequestStageRequest
	if real {
		stage = fetch.RequestStageResponse
	}
	paused := chromedp.Events(ctx, fetch.RequestPaused)
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: pattern, RequestStage: stage}}}); err != nil {
		e.t.Fatalf("Fetch.enable: %v", err)
	}
	// The goroutine ends when the browser's context does (startPhone's
	// cleanup); TestMain's leak check would see it otherwise.
	go func() {
		for ev, err := range paused {
			if err != nil {
				return // the browser closed
			}
			var body []byte
			if real {
				b, err := chromedp.Call(ctx, fetch.GetResponseBody, fetch.GetResponseBodyParams{RequestID: ev.RequestID})
				if err != nil {
					continue
				}
				body = b.Body
			}
			status, out := answer(body)
			n.Add(1)
			chromedp.Call(ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{
				RequestID: ev.RequestID, ResponseCode: int64(status), Body: out,
				ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "application/json"}, {Name: "Cache-Control", Value: "no-store"}},
			})
		}
	}()
	return &n
}

// TestPhonePageStates drives the phone page in Chromium through every
// state other than the happy path: each subtest has its own namespace,
// node and browser, and screenshots the state.
func TestPhonePageStates(t *testing.T) {
	zeros := strings.Repeat("0", 64)
	tests := []struct {
		name string
		run  func(t *testing.T, e *phoneEnv)
	}{
		{"wrong fingerprint in the QR", func(t *testing.T, e *phoneEnv) {
			e.open(e.node.base + "/pair#c=" + e.ps.Code + "&fp=" + zeros)
			e.b.Visible("fp-mismatch", time.Second)
			if !phoneEval[bool](e.b, `document.getElementById("claim-btn").disabled`) {
				t.Error("the Pair button is enabled for a device whose certificate is not the QR's")
			}
			e.b.Screenshot("fp-mismatch")
		}},
		{"malformed code is not sent", func(t *testing.T, e *phoneEnv) {
			e.open(e.node.base + "/pair#c=AB1O&fp=" + e.ps.Fingerprint)
			e.claim()
			e.b.WaitJS("the code explained", `document.getElementById("banner").textContent.includes("8 characters")`, 10*time.Second)
			if v := phoneEval[string](e.b, `document.getElementById("code").getAttribute("aria-invalid")`); v != "true" {
				t.Errorf("code field aria-invalid = %q", v)
			}
			if as, _ := e.node.approvals(); len(as) != 0 {
				t.Errorf("a malformed code reached the node: %+v", as)
			}
			e.b.Screenshot("malformed-code")
		}},
		{"wrong code", func(t *testing.T, e *phoneEnv) {
			wrong := "22222222"
			if e.ps.Code == wrong {
				wrong = "33333333"
			}
			e.open(e.node.base + "/pair#c=" + wrong + "&fp=" + e.ps.Fingerprint)
			e.claim()
			e.problem("That code does not work")
			e.b.Screenshot("wrong-code")
			// "Enter another code" goes back to an empty code field.
			e.b.Do("enter another code", chromedp.Click(chromedp.ID("problem-action")))
			e.b.Visible("view-pair", 5*time.Second)
			if v := phoneEval[string](e.b, `document.getElementById("code").value`); v != "" {
				t.Errorf("code field kept %q", v)
			}
		}},
		{"denied", func(t *testing.T, e *phoneEnv) {
			e.open(e.url)
			e.claim()
			e.b.Visible("view-sas", 20*time.Second)
			e.decide(e.pairingApproval().ID, app.DecisionDeny)
			e.problem("Pairing declined")
			e.b.Screenshot("denied")
		}},
		{"verification codes differ", func(t *testing.T, e *phoneEnv) {
			var sent, shown string
			rewrites := e.intercept("*/pair/claim", true, func(body []byte) (int, []byte) {
				var m map[string]any
				json.Unmarshal(body, &m)
				sent, _ = m["sas"].(string)
				d := (int(sent[5]-'0') + 1) % 10
				shown = sent[:5] + strconv.Itoa(d)
				m["sas"] = shown
				out, _ := json.Marshal(m)
				return http.StatusOK, out
			})
			e.open(e.url)
			e.claim()
			e.problem("Verification codes differ")
			if rewrites.Load() != 1 {
				t.Fatalf("%d claim answers rewritten", rewrites.Load())
			}
			// The page names both codes: its own (the issuer's real SAS,
			// since only the answer was altered) and the one it was sent.
			txt := e.text("problem-text")
			if !strings.Contains(txt, sent[:3]+" "+sent[3:]) || !strings.Contains(txt, shown[:3]+" "+shown[3:]) {
				t.Errorf("problem text %q does not show %s and %s", txt, sent, shown)
			}
			// It never waits for (or collects) a token: the owner's request
			// stays pending until denied.
			a := e.pairingApproval()
			if a.SAS != sent {
				t.Errorf("owner sees SAS %s, the node sent %s", a.SAS, sent)
			}
			e.b.Screenshot("sas-mismatch")
			e.decide(a.ID, app.DecisionDeny)
		}},
		{"expired (answer simulated)", func(t *testing.T, e *phoneEnv) {
			// A request expires after 5 minutes; the page's handling of
			// that answer is checked with a simulated status answer.
			e.intercept("*/pair/status/*", false, func([]byte) (int, []byte) {
				return http.StatusOK, []byte(`{"status":"expired","expires":"2026-01-01T00:00:00Z","issuer":{"id":"x","name":"x","fp":"x"}}`)
			})
			e.open(e.url)
			e.claim()
			e.problem("Request expired")
			e.b.Screenshot("expired")
			e.decide(e.pairingApproval().ID, app.DecisionDeny)
		}},
		{"rate limited", func(t *testing.T, e *phoneEnv) {
			// Use up the per-source allowance of 127.0.0.1 (the phone's
			// address here too) with malformed claims, which never count
			// as wrong codes.
			limited := false
			for i := 0; i < 30 && !limited; i++ {
				resp, err := e.node.hc.Post(e.node.base+"/pair/claim", "application/json", strings.NewReader("{}"))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				limited = resp.StatusCode == http.StatusTooManyRequests
			}
			if !limited {
				t.Fatal("30 claims in a row were never rate-limited")
			}
			e.open(e.url)
			e.claim()
			e.b.WaitJS("the rate-limit notice", `document.getElementById("banner").textContent.startsWith("Too many tries")`, 10*time.Second)
			if !phoneEval[bool](e.b, `document.getElementById("claim-btn").disabled`) {
				t.Error("Pair stays enabled while rate-limited")
			}
			e.b.Screenshot("rate-limited")
			// After Retry-After the button comes back and the claim works.
			e.b.WaitJS("Pair enabled again", `!document.getElementById("claim-btn").disabled`, 15*time.Second)
			e.claim()
			e.b.Visible("view-sas", 20*time.Second)
			e.decide(e.pairingApproval().ID, app.DecisionDeny)
			e.problem("Pairing declined")
		}},
		{"lost contact, then an unknown request", func(t *testing.T, e *phoneEnv) {
			e.open(e.url)
			e.claim()
			e.b.Visible("view-sas", 20*time.Second)
			e.pairingApproval()
			// The node dies.
			port := e.node.Port
			e.node.Kill()
			e.b.WaitJS("the lost-contact notice", `document.getElementById("banner").textContent.startsWith("Lost contact")`, 20*time.Second)
			e.b.Screenshot("lost-contact")
			// The node comes back (same state dir and port) without the
			// request (its database gone: a node that never kept it): the
			// page says so instead of waiting forever.
			for _, f := range []string{store.DefaultFile, store.DefaultFile + "-wal", store.DefaultFile + "-shm"} {
				os.Remove(filepath.Join(e.node.StateDir, f))
			}
			e.node = startPhNode(t, e.lab.laptop, phNodeOptions{Name: phStatesDevice, StateDir: e.node.StateDir, Port: port})
			e.problem("Request no longer known")
			e.b.Screenshot("unknown-request")
		}},
		{"lost contact, then approved after the restart", func(t *testing.T, e *phoneEnv) {
			e.open(e.url)
			e.claim()
			e.b.Visible("view-sas", 20*time.Second)
			a := e.pairingApproval()
			port := e.node.Port
			e.node.Kill()
			e.b.WaitJS("the lost-contact notice", `document.getElementById("banner").textContent.startsWith("Lost contact")`, 20*time.Second)
			// The node comes back with the request (same id); the page,
			// still waiting, polls again and the owner approves.
			e.node = startPhNode(t, e.lab.laptop, phNodeOptions{Name: phStatesDevice, StateDir: e.node.StateDir, Port: port})
			if b := e.pairingApproval(); b.ID != a.ID || !b.Restored || b.SAS != "" {
				t.Fatalf("after the restart the request is %+v; before it was %+v", b, a)
			}
			apptest.WaitFor(t, 30*time.Second, "the approval once the page polls again", func() bool {
				return e.node.API("POST", "/approvals/"+a.ID, app.ApprovalDecision{Decision: app.DecisionApprove,
					Scopes: pairing.Scopes{pairing.ScopeAgent, pairing.ScopeNode}}, nil) == nil
			})
			e.b.Visible("view-remote", 40*time.Second)
			e.b.WaitJS("the manifest", `document.querySelectorAll("#caps li").length > 0`, 20*time.Second)
			e.b.Screenshot("approved-after-restart")
		}},
		{"paused, then resumed", func(t *testing.T, e *phoneEnv) {
			id := e.pairPhone()
			e.node.MustAPI("POST", "/nodes/devices/"+id, app.GrantUpdate{Action: app.ActionPause}, nil)
			e.b.Do("send while paused",
				chromedp.SendKeys(chromedp.ID("send-text"), "hello"),
				chromedp.Click(chromedp.ID("notify-btn")))
			e.b.Visible("paused", 20*time.Second)
			if phoneEval[bool](e.b, `localStorage.getItem("meshtray.grant." + `+phJS(e.ps.DeviceID)+`) === null`) {
				t.Error("a paused grant was forgotten")
			}
			e.b.Screenshot("paused")
			e.node.MustAPI("POST", "/nodes/devices/"+id, app.GrantUpdate{Action: app.ActionResume}, nil)
			e.b.Do("check again", chromedp.Click(chromedp.ID("paused-retry")))
			e.b.WaitJS("the paused notice gone", `document.getElementById("paused").hidden`, 20*time.Second)
			e.b.Visible("view-remote", time.Second)
		}},
		{"already paired, new code", func(t *testing.T, e *phoneEnv) {
			e.pairPhone()
			e.open(e.newSession())
			e.b.Visible("already", time.Second)
			e.b.Screenshot("already-paired")
			e.b.Do("open the remote", chromedp.Click(chromedp.ID("already-open")))
			e.b.Visible("view-remote", 10*time.Second)
			if h := phoneEval[string](e.b, `location.hash`); h != "" {
				t.Errorf("the unused code stays in the address bar: %q", h)
			}
		}},
		{"loopback page", func(t *testing.T, e *phoneEnv) {
			// Over plain HTTP there is no certificate warning to explain.
			e.open(e.url)
			e.b.Visible("cert-http", time.Second)
			if phoneEval[bool](e.b, `!document.getElementById("cert-https").hidden`) {
				t.Error("the certificate warning is explained on a loopback page")
			}
			if !phoneEval[bool](e.b, `window.isSecureContext && !!crypto.subtle`) {
				t.Error("the loopback page is not a secure context: WebCrypto is missing")
			}
			e.b.Screenshot("loopback")
			// Every field has a label (screen readers name it).
			if unlabeled := phoneEval[[]string](e.b, `[...document.querySelectorAll("input, textarea")].filter(x => x.labels.length === 0).map(x => x.id)`); len(unlabeled) > 0 {
				t.Errorf("fields without a label: %v", unlabeled)
			}
			// The dark scheme, paired.
			if _, err := chromedp.Call(e.b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}}); err != nil {
				t.Fatal(err)
			}
			e.claim()
			e.b.Visible("view-sas", 20*time.Second)
			e.b.Screenshot("dark-sas")
			e.decide(e.pairingApproval().ID, app.DecisionApprove, pairing.ScopeAgent, pairing.ScopeNode)
			e.b.Visible("view-remote", 40*time.Second)
			e.b.WaitJS("the manifest", `document.querySelectorAll("#caps li").length > 0`, 20*time.Second)
			e.b.Screenshot("dark-remote")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newPhoneEnv(t)
			tc.run(t, e)
		})
	}
}
