//go:build linux

package app_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/keychain/keychaintest"
	"meshtray/pairing"
)

// phStoredGrant is the page's localStorage record of a grant.
type phStoredGrant struct {
	Token   string   `json:"token"`
	GrantID string   `json:"grant_id"`
	Scopes  []string `json:"scopes"`
	Issuer  struct {
		ID, Name, FP string
	} `json:"issuer"`
}

// TestPhonePairsOverLAN is the phone page end to end, on the real path: the
// node serves HTTPS on its LAN address inside a "laptop" network
// namespace; a headless Chromium emulating a phone runs in a "phone"
// namespace joined to it by a veth pair, opens the QR URL, shows the SAS,
// is approved through the node's API, pairs, sends a notification that a
// test-side notification service on the node's session bus receives, and
// completes an A2A round trip approved through the API; a revoked token is
// then forgotten. Every step is screenshotted under the test's artifact
// directory (go test -artifacts -outputdir DIR).
func TestPhonePairsOverLAN(t *testing.T) {
	lab := newPhLab(t)
	// The node's own session bus: a private Secret Service (its keychain)
	// and the test’s notification service.
	bus, err := keychaintest.StartPrivate()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Stop() })
	notes := servePhNotifier(t, bus.Addr())
	// A desktop for clipboard.write: a private X server and xclip.
	display := phXvfb(t)
	phNeedProgram(t, "xclip", "xclip")

	const laptopName = "Ada’s laptop"
	node := startPhNode(t, lab.laptop, phNodeOptions{
		Name:   laptopName,
		Config: "tailscale = false\n",
		Env:    []string{"DBUS_SESSION_BUS_ADDRESS=" + bus.Addr(), "DISPLAY=" + display},
	})
	var st app.Status
	node.MustAPI("POST", "/config", map[string]any{"lan": true}, nil)
	lanURL := "https://" + lab.laptopIP + ":" + strconv.Itoa(node.Port)
	apptest.WaitFor(t, 30*time.Second, "the LAN HTTPS listener", func() bool {
		node.MustAPI("GET", "/status", nil, &st)
		return slices.ContainsFunc(st.Listeners, func(l app.ListenerStatus) bool { return l.Kind == pairing.ListenerLAN && l.URL == lanURL })
	})
	node.MustAPI("POST", "/a2a/status", map[string]any{"enabled": true}, nil)

	var ps app.PairingSession
	node.MustAPI("POST", "/pair/sessions", nil, &ps)
	if !strings.HasPrefix(ps.URL, lanURL+"/pair#") {
		t.Fatalf("pairing URL %q, want the LAN listener %s", ps.URL, lanURL)
	}
	frag, _ := url.ParseQuery(ps.URL[strings.IndexByte(ps.URL, '#')+1:])
	if frag.Get("c") != ps.Code || frag.Get("fp") != st.Fingerprint {
		t.Fatalf("QR URL fragment %q does not carry code and fingerprint", ps.URL)
	}

	b := startPhone(t, lab.phone)

	// 1. The QR URL: who the laptop is and its certificate.
	b.Do("open the QR URL", chromedp.Navigate(ps.URL))
	b.Visible("view-pair", 20*time.Second)
	if got := phoneEval[string](b, `document.getElementById("pair-title").textContent`); got != laptopName {
		t.Errorf("page names the laptop %q, want %q", got, laptopName)
	}
	if got := phoneEval[string](b, `[...document.querySelectorAll("#fp span")].map(s => s.textContent).join("")`); got != strings.ToUpper(st.Fingerprint) {
		t.Errorf("page shows fingerprint %s, want %s", got, strings.ToUpper(st.Fingerprint))
	}
	// Over HTTPS, Pair waits until the person confirms they compared the
	// fingerprint in the browser's certificate details: the page cannot
	// see its own connection's certificate (a relay would pass it on
	// unchanged), so it claims no check of its own.
	if !phoneEval[bool](b, `document.getElementById("claim-btn").disabled`) {
		t.Error("Pair is enabled before the fingerprint comparison is confirmed")
	}
	b.Do("confirm the fingerprint comparison", chromedp.Click(chromedp.ID("fp-confirm")))
	if phoneEval[bool](b, `document.getElementById("claim-btn").disabled`) {
		t.Error("Pair stays disabled after the fingerprint comparison is confirmed")
	}
	// The fingerprint the page asks to compare is the one the browser got
	// in the TLS handshake.
	cert, err := chromedp.Call(b.ctx, network.GetCertificate, network.GetCertificateParams{Origin: lanURL})
	if err != nil || len(cert.TableNames) == 0 {
		t.Fatalf("DevTools Network.getCertificate(%s): %v %v", lanURL, cert, err)
	}
	der, _ := base64.StdEncoding.DecodeString(cert.TableNames[0])
	if sum := sha256.Sum256(der); hex.EncodeToString(sum[:]) != st.Fingerprint {
		t.Errorf("the browser's certificate has fingerprint %x, the page shows %s", sum, st.Fingerprint)
	}
	if got := phoneEval[string](b, `document.getElementById("code").value`); got != ps.Code {
		t.Errorf("code field %q, want the fragment's code", got)
	}
	b.Screenshot("pair")

	// 2. Claim: the SAS on the phone is the one the owner sees.
	b.Do("name the phone and claim",
		chromedp.Evaluate[chromedp.Void](`document.getElementById("phone-name").value = ""`),
		chromedp.SendKeys(chromedp.ID("phone-name"), "Test phone"),
		chromedp.Click(chromedp.ID("claim-btn")))
	b.Visible("view-sas", 20*time.Second)
	sas := strings.ReplaceAll(phoneEval[string](b, `document.getElementById("sas").textContent`), " ", "")
	if !regexp.MustCompile(`^\d{6}$`).MatchString(sas) {
		t.Fatalf("SAS on the page: %q", sas)
	}
	if h := phoneEval[string](b, `location.hash`); h != "" {
		t.Errorf("the used code stays in the address bar: %q", h)
	}
	pa := phWaitApproval(t, node.approvals, app.KindPairing, nil)
	if pa.SAS != sas || pa.Peer != "Test phone" || pa.Via != string(pairing.ListenerLAN) || pa.Addr != lab.phoneIP {
		t.Fatalf("pairing approval %+v: want SAS %s from Test phone via lan at %s", pa, sas, lab.phoneIP)
	}
	if !strings.Contains(pa.OS, "Android 14") {
		t.Errorf("claimed OS %q, want the phone's (Android 14)", pa.OS)
	}
	b.Screenshot("sas")

	// 3. Approve through the node's API: the page is paired.
	node.MustAPI("POST", "/approvals/"+pa.ID, app.ApprovalDecision{Decision: app.DecisionApprove, Scopes: pairing.Scopes{pairing.ScopeAgent, pairing.ScopeNode}}, nil)
	b.Visible("view-remote", 40*time.Second)
	b.WaitJS("the manifest", `document.querySelectorAll("#caps li").length > 0`, 20*time.Second)
	var g phStoredGrant
	raw := phoneEval[string](b, `localStorage.getItem("meshtray.grant." + `+phJS(st.DeviceID)+`) || ""`)
	if err := json.Unmarshal([]byte(raw), &g); err != nil || !strings.HasPrefix(g.Token, "mt1_") {
		t.Fatalf("localStorage grant for %s: %q (%v)", st.DeviceID, raw, err)
	}
	if !slices.Equal(g.Scopes, []string{"agent", "node"}) || g.Issuer.FP != st.Fingerprint {
		t.Errorf("stored grant %+v", g)
	}
	var devs app.Devices
	node.MustAPI("GET", "/nodes/devices", nil, &devs)
	if len(devs.Issued) != 1 || devs.Issued[0].Name != "Test phone" || devs.Issued[0].ID != g.GrantID || devs.Issued[0].PeerID != "" {
		t.Fatalf("issued grants %+v, want one for Test phone (%s)", devs.Issued, g.GrantID)
	}
	// Without the approve scope the page shows no approvals and never
	// asks for them (approvals.js reads whoami, then stops).
	b.WaitJS("approvals.js's look at the grant", `performance.getEntriesByType("resource").filter(e => e.name.endsWith("/pair/whoami")).length >= 2`, 20*time.Second)
	if !phoneEval[bool](b, `document.getElementById("approvals-card").hidden && !performance.getEntriesByType("resource").some(e => e.name.includes("/remote/approvals"))`) {
		t.Error("a phone without the approve scope shows or fetches the approvals")
	}
	b.Screenshot("paired")

	// 4. "Send text to the laptop": system.notify through POST /nodes/invoke.
	b.Do("send a notification",
		chromedp.SendKeys(chromedp.ID("send-text"), "Dinner at 8\nBring the good bread"),
		chromedp.Click(chromedp.ID("notify-btn")))
	// A new grant's policy is ask: the owner approves the call first.
	b.WaitJS("the call waiting for the owner", `document.getElementById("send-result").textContent.startsWith("Waiting for the owner")`, 20*time.Second)
	ca := phWaitApproval(t, node.approvals, app.KindCapability, nil)
	if ca.Peer != "Test phone" || !strings.HasPrefix(ca.Summary, "system.notify") {
		t.Fatalf("capability approval %+v, want system.notify from Test phone", ca)
	}
	if n := notes.Received(); len(n) != 0 {
		t.Fatalf("notification shown before the owner approved: %+v", n)
	}
	b.Screenshot("notify-waiting")
	node.MustAPI("POST", "/approvals/"+ca.ID, app.ApprovalDecision{Decision: app.DecisionApprove}, nil)
	b.WaitJS("the notification sent", `document.getElementById("send-result").classList.contains("ok")`, 20*time.Second)
	got := notes.Received()
	want := phNotification{AppName: "meshtray", Summary: "Dinner at 8", Body: "Bring the good bread\n(sent by Test phone via meshtray)"}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("notifications received %+v, want [%+v]", got, want)
	}
	b.Screenshot("notified")

	// "Copy to its clipboard": clipboard.write, asked too.
	b.Do("copy to the clipboard", chromedp.Click(chromedp.ID("clip-btn")))
	ca = phWaitApproval(t, node.approvals, app.KindCapability, nil)
	if !strings.HasPrefix(ca.Summary, "clipboard.write") {
		t.Fatalf("capability approval %+v, want clipboard.write", ca)
	}
	node.MustAPI("POST", "/approvals/"+ca.ID, app.ApprovalDecision{Decision: app.DecisionApprove}, nil)
	b.WaitJS("the text copied", `document.getElementById("send-result").textContent.startsWith("✓ Copied")`, 20*time.Second)
	out, err := exec.Command("xclip", "-display", display, "-out", "-selection", "clipboard").Output()
	if err != nil || string(out) != "Dinner at 8\nBring the good bread" {
		t.Errorf("the laptop's clipboard holds %q (%v)", out, err)
	}
	b.Screenshot("copied")

	// 5. An A2A message: waits for the owner, then runs and completes.
	b.Do("send an A2A message",
		chromedp.SendKeys(chromedp.ID("a2a-text"), "device.info"),
		chromedp.Click(chromedp.ID("a2a-btn")))
	b.WaitJS("the task waiting for approval", `document.getElementById("task-state").textContent.startsWith("Waiting for approval on")`, 20*time.Second)
	da := phWaitApproval(t, node.approvals, app.KindDelegation, nil)
	if da.Peer != "Test phone" || da.Summary != "device.info" || da.TaskID == "" {
		t.Fatalf("delegation approval %+v", da)
	}
	b.Screenshot("a2a-waiting")
	node.MustAPI("POST", "/approvals/"+da.ID, app.ApprovalDecision{Decision: app.DecisionApprove}, nil)
	b.WaitJS("the task completed", `document.getElementById("task-state").dataset.state === "completed"`, 30*time.Second)
	steps := phoneEval[[]string](b, `[...document.querySelectorAll("#task-steps li")].map(li => li.dataset.state)`)
	if !slices.Equal(steps, []string{"submitted", "working", "completed"}) {
		t.Errorf("task steps %v, want submitted → working → completed", steps)
	}
	art := phoneEval[string](b, `document.getElementById("task-artifacts").innerText`)
	if !strings.Contains(art, "device.info") || !strings.Contains(art, `"hostname"`) {
		t.Errorf("artifacts shown: %q, want the device.info result", art)
	}
	b.Screenshot("a2a-completed")

	// 6. Revoked: the phone forgets the token and offers to pair again.
	node.MustAPI("POST", "/nodes/devices/"+g.GrantID, app.GrantUpdate{Action: app.ActionRevoke}, nil)
	b.Do("reopen the page", chromedp.Navigate(lanURL+"/pair"))
	b.Visible("view-problem", 20*time.Second)
	if title := phoneEval[string](b, `document.getElementById("problem-title").textContent`); title != "No longer paired" {
		t.Errorf("after revocation the page says %q", title)
	}
	if gone := phoneEval[bool](b, `localStorage.getItem("meshtray.grant." + `+phJS(st.DeviceID)+`) === null`); !gone {
		t.Errorf("the revoked token is still stored")
	}
	b.Screenshot("revoked")

	// No secret of the flow reached the node's log.
	node.Stop()
	logs := node.Logs()
	for name, secret := range map[string]string{"pairing code": ps.Code, "grant token": g.Token, "control token": node.token} {
		if strings.Contains(logs, secret) {
			t.Errorf("the %s appears in the node's log", name)
		}
	}
	if regexp.MustCompile(`(^|\D)` + sas + `(\D|$)`).MatchString(logs) {
		t.Errorf("the SAS %s appears in the node's log", sas)
	}
}

// approvals lists the node's pending approvals.
func (n *phNode) approvals() ([]app.Approval, error) {
	var as []app.Approval
	err := n.API(http.MethodGet, "/approvals", nil, &as)
	return as, err
}

func phJS(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
