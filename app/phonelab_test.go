//go:build linux

package app_test

// The phone lab: real parts for the phone page's end-to-end tests.
//
//   - phLab: two network namespaces joined by one veth pair, "laptop"
//     (10.77.0.1, where the node runs) and "phone" (10.77.0.2, where
//     Chromium runs). Both ends are created inside the namespaces, so no
//     packet of these tests ever reaches the machine's own interfaces.
//   - phNode: `meshtray serve` (this test binary, via apptest.Command) run
//     under `ip netns exec`; the test reaches its loopback control API with
//     a dialer that creates its sockets inside the namespace (setns(2) on a
//     locked thread).
//   - phNotifier: a test-side org.freedesktop.Notifications service on a
//     private session bus, to see system.notify arrive.
//   - phoneBrowser: Debian's chromium, headless, driven with chromedp over
//     its DevTools pipe (fds 3 and 4, which `ip netns exec` passes on), so
//     the browser needs no debugging port in any namespace.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/device"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"meshtray/app"
	"meshtray/app/apptest"
)

// phoneNSPrefix names this file's namespaces: mtphone-<pid>-<seq>-{l,p}.
const phoneNSPrefix = "mtphone-"

// phNeedProgram returns the path of a program the test needs, or fails with
// the command that installs it (a missing tool must not skip a test).
func phNeedProgram(t testing.TB, name, debPackage string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is needed by this test and is not installed: run `apt-get install -y %s`", name, debPackage)
	}
	return p
}

// phRequireNetns skips when not root (network namespaces need it; CI runs as
// root) and fails when iproute2 is missing.
func phRequireNetns(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root (CI runs as root)")
	}
	phNeedProgram(t, "ip", "iproute2")
}

func phRunIP(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

var phLeftovers sync.Once

// phRemoveLeftovers deletes namespaces that a crashed earlier run of
// these tests left (their pid is gone).
func phRemoveLeftovers() {
	phLeftovers.Do(func() {
		out, _ := exec.Command("ip", "netns", "list").Output()
		for _, line := range strings.Split(string(out), "\n") {
			name, _, _ := strings.Cut(line, " ")
			rest, ok := strings.CutPrefix(name, phoneNSPrefix)
			if !ok {
				continue
			}
			pid, _, _ := strings.Cut(rest, "-")
			if p, err := strconv.Atoi(pid); err == nil && p != os.Getpid() {
				if _, err := os.Stat("/proc/" + pid); err == nil {
					continue // another run is alive
				}
				exec.Command("ip", "netns", "del", name).Run()
			}
		}
	})
}

var phLabSeq atomic.Int32

// phLab is the laptop and phone namespaces of one test.
type phLab struct {
	laptop, phone     string // namespace names
	laptopIP, phoneIP string
}

func newPhLab(t testing.TB) *phLab {
	t.Helper()
	phRequireNetns(t)
	phRemoveLeftovers()
	tag := fmt.Sprintf("%s%d-%d-", phoneNSPrefix, os.Getpid(), phLabSeq.Add(1))
	l := &phLab{laptop: tag + "l", phone: tag + "p", laptopIP: "10.77.0.1", phoneIP: "10.77.0.2"}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", l.laptop).Run()
		exec.Command("ip", "netns", "del", l.phone).Run()
	})
	phRunIP(t, "netns", "add", l.laptop)
	phRunIP(t, "netns", "add", l.phone)
	phRunIP(t, "-n", l.laptop, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", l.phone)
	for _, side := range []struct{ ns, ip string }{{l.laptop, l.laptopIP}, {l.phone, l.phoneIP}} {
		phRunIP(t, "-n", side.ns, "addr", "add", side.ip+"/24", "dev", "eth0")
		phRunIP(t, "-n", side.ns, "link", "set", "eth0", "up")
		phRunIP(t, "-n", side.ns, "link", "set", "lo", "up")
	}
	return l
}

// phInNS runs f on a goroutine locked to its thread, which enters network
// namespace ns (setns(2)) and returns to its own namespace before
// unlocking; sockets f creates stay in ns. The thread must survive: a
// child process started with Pdeathsig (the private Secret Service,
// Chromium) is signalled when the thread that forked it exits, and the Go
// runtime ends a thread whose goroutine exits locked. If the way back
// fails, the thread stays locked and ends, since it must never run other
// code inside ns.
func phInNS(ns string, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer home.Close()
		target, err := os.Open("/run/netns/" + ns)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		err = f()
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}

// phNSDialer returns a DialContext that creates its sockets inside network
// namespace ns (phInNS).
func phNSDialer(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		var d net.Dialer
		if ierr := phInNS(ns, func() error { c, err = d.DialContext(ctx, network, addr); return nil }); ierr != nil {
			return nil, ierr
		}
		return c, err
	}
}

// phNSListen listens on addr inside ns (phInNS).
func phNSListen(t testing.TB, ns, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := phInNS(ns, func() (err error) { ln, err = net.Listen("tcp", addr); return }); err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// phNSClient is an HTTP client whose connections start inside ns. No
// keep-alive: no idle connection outlives a request (goleak).
func phNSClient(ns string) *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: phNSDialer(ns), DisableKeepAlives: true}}
}

// phNode is `meshtray serve` running inside a network namespace.
type phNode struct {
	t        testing.TB
	ns       string
	StateDir string
	Port     int
	hc       *http.Client
	base     string // http://127.0.0.1:PORT, inside ns
	token    string // control token

	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer // guarded by mu
	done chan struct{}
}

type phNodeOptions struct {
	Name     string
	StateDir string   // default t.TempDir()
	Config   string   // config.toml
	Env      []string // extra environment
	Port     int      // default 0: any free port
}

func (n *phNode) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.logs.Write(p)
}

// Logs returns the node's output so far.
func (n *phNode) Logs() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.logs.String()
}

// startPhNode starts a node in ns and waits until its control API answers.
func startPhNode(t testing.TB, ns string, o phNodeOptions) *phNode {
	t.Helper()
	if o.StateDir == "" {
		o.StateDir = t.TempDir()
	}
	if o.Config != "" {
		if err := os.WriteFile(filepath.Join(o.StateDir, "config.toml"), []byte(o.Config), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ip := phNeedProgram(t, "ip", "iproute2")
	n := &phNode{t: t, ns: ns, StateDir: o.StateDir, hc: phNSClient(ns), done: make(chan struct{})}
	args := []string{"serve", "--state-dir", o.StateDir, "--port", strconv.Itoa(o.Port), "--name", o.Name,
		"--keychain", "os", "--log-level", "debug"}
	n.cmd = apptest.Command(context.Background(), o.Env, args...)
	n.cmd.Path = ip
	n.cmd.Args = append([]string{"ip", "netns", "exec", ns, exe}, args...)
	n.cmd.Stdout, n.cmd.Stderr = n, n
	// Die with the test binary, even when a timeout panic skips cleanups
	// (`ip netns exec` execs the node, which keeps the signal).
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("start node in %s: %v", ns, err)
	}
	go func() {
		n.cmd.Wait()
		close(n.done)
	}()
	t.Cleanup(func() {
		n.Stop()
		if t.Failed() {
			t.Logf("logs of node %s:\n%s", o.Name, n.Logs())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-n.done:
			t.Fatalf("node in %s exited:\n%s", ns, n.Logs())
		default:
		}
		if d, err := app.ReadDaemonInfo(o.StateDir); err == nil && d.PID == n.cmd.Process.Pid {
			n.Port, n.token = d.Port, d.Token
			n.base = "http://127.0.0.1:" + strconv.Itoa(d.Port)
			var st app.Status
			if err := n.API(http.MethodGet, "/status", nil, &st); err == nil {
				return n
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node in %s not ready after 30s\n%s", ns, n.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// API calls the node's local control API as its owner (loopback inside the
// namespace, control token). Non-2xx answers are *app.APIError.
func (n *phNode) API(method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, n.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+n.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := n.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode/100 != 2 {
		return &app.APIError{Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
	}
	if out == nil || len(b) == 0 {
		return nil
	}
	return json.Unmarshal(b, out)
}

// Command returns `meshtray args... --state-dir <node's>` run inside the
// node's namespace (so it reaches the node's loopback control API).
func (n *phNode) Command(ctx context.Context, args ...string) *exec.Cmd {
	exe, _ := os.Executable()
	args = append(args, "--state-dir", n.StateDir)
	cmd := apptest.Command(ctx, nil, args...)
	cmd.Path = phNeedProgram(n.t, "ip", "iproute2")
	cmd.Args = append([]string{"ip", "netns", "exec", n.ns, exe}, args...)
	return cmd
}

// CLI runs `meshtray args...` against the node and returns its result.
func (n *phNode) CLI(args ...string) apptest.Result {
	n.t.Helper()
	return n.CLIWithin(time.Minute, args...)
}

// CLIWithin is CLI with the time limit d (then the command is killed and
// the test fails).
func (n *phNode) CLIWithin(d time.Duration, args ...string) apptest.Result {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := n.Command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ctx.Err() != nil {
		n.t.Fatalf("meshtray %v: still running after %v, killed\nstdout:\n%s\nstderr:\n%s", args, d, out.String(), errb.String())
	}
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatalf("meshtray %v: %v", args, err)
	}
	return apptest.Result{Stdout: out.String(), Stderr: errb.String(), Code: code}
}

// MustAPI is API failing the test on error.
func (n *phNode) MustAPI(method, path string, in, out any) {
	n.t.Helper()
	if err := n.API(method, path, in, out); err != nil {
		n.t.Fatalf("%s %s: %v", method, path, err)
	}
}

// Kill ends the node at once (SIGKILL): a crash, or a laptop that drops off
// the network, with no chance to answer anyone.
func (n *phNode) Kill() {
	n.cmd.Process.Kill()
	<-n.done
}

// Stop sends SIGTERM and waits (15 s, then kills).
func (n *phNode) Stop() {
	select {
	case <-n.done:
		return
	default:
	}
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(15 * time.Second):
		n.cmd.Process.Kill()
		<-n.done
		n.t.Errorf("node in %s did not stop within 15s of SIGTERM; killed", n.ns)
	}
}

// phWaitApproval polls the node's approvals until one of kind matches.
func phWaitApproval(t testing.TB, list func() ([]app.Approval, error), kind app.ApprovalKind, match func(app.Approval) bool) app.Approval {
	t.Helper()
	var found app.Approval
	apptest.WaitFor(t, 30*time.Second, "a pending "+string(kind)+" approval", func() bool {
		as, err := list()
		if err != nil {
			t.Fatalf("list approvals: %v", err)
		}
		for _, a := range as {
			if a.Kind == kind && (match == nil || match(a)) {
				found = a
				return true
			}
		}
		return false
	})
	return found
}

// phNotification is one Notify call the test service received.
type phNotification struct {
	AppName, Summary, Body string
}

// phNotifier is a test-side org.freedesktop.Notifications service
// (Desktop Notifications Specification 1.2).
type phNotifier struct {
	mu  sync.Mutex
	got []phNotification
}

func (s *phNotifier) GetCapabilities() ([]string, *dbus.Error) { return []string{"body"}, nil }

func (s *phNotifier) GetServerInformation() (string, string, string, string, *dbus.Error) {
	return "meshtray-phone-test", "meshtray", "1", "1.2", nil
}

func (s *phNotifier) Notify(appName string, replacesID uint32, icon, summary, body string, actions []string, hints map[string]dbus.Variant, expire int32) (uint32, *dbus.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, phNotification{appName, summary, body})
	return uint32(len(s.got)), nil
}

func (s *phNotifier) Received() []phNotification {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]phNotification(nil), s.got...)
}

// servePhNotifier exports a phNotifier on the bus at addr.
func servePhNotifier(t testing.TB, addr string) *phNotifier {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatalf("connect to the test session bus: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	s := &phNotifier{}
	const path, iface = dbus.ObjectPath("/org/freedesktop/Notifications"), "org.freedesktop.Notifications"
	if err := conn.Export(s, path, iface); err != nil {
		t.Fatal(err)
	}
	reply, err := conn.RequestName(iface, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own %s: %v %v", iface, reply, err)
	}
	return s
}

// phXvfb starts a private X server (display number chosen by Xvfb itself,
// -displayfd; no TCP) and returns its DISPLAY. Clients in a network
// namespace reach it through its socket file in /tmp/.X11-unix. It is
// stopped at cleanup, which also ends the xclip that serves a selection.
func phXvfb(t testing.TB) string {
	t.Helper()
	bin := phNeedProgram(t, "Xvfb", "xvfb")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(bin, "-displayfd", "3", "-nolisten", "tcp", "-screen", "0", "320x240x24", "-noreset")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.ExtraFiles = []*os.File{w}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	r.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("Xvfb did not report its display: %v", err)
	}
	return ":" + strings.TrimSpace(line)
}

// phDevice is the emulated phone: a Pixel-7-sized Android Chrome.
type phDevice struct{}

func (phDevice) Device() device.Info {
	return device.Info{
		Name:      "Android phone",
		UserAgent: "Mozilla/5.0 (Linux; Android 14; Pixel 7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0.0.0 Mobile Safari/537.36",
		Width:     412,
		Height:    915,
		Scale:     2,
		Mobile:    true,
		Touch:     true,
	}
}

// phoneBrowser is a headless Chromium tab emulating a phone.
type phoneBrowser struct {
	t     testing.TB
	ctx   context.Context
	shots string // directory of the screenshots
	shot  int
}

// startPhone starts Debian's chromium, inside network namespace ns when ns
// is not "", with a fresh profile, and opens one tab emulating a phone. The
// browser is stopped at cleanup.
func startPhone(t testing.TB, ns string) *phoneBrowser {
	t.Helper()
	chromium := phNeedProgram(t, "chromium", "chromium")
	home := t.TempDir()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-features", "Translate,MediaRouter,OptimizationHints"),
		chromedp.Flag("no-proxy-server", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("force-color-profile", "srgb"),
		// The browser gets no secret of the test process, and no session
		// bus (D-Bus is not needed headless).
		chromedp.NoInheritEnv,
		chromedp.Env("HOME="+home, "PATH="+os.Getenv("PATH"), "LANG=C.UTF-8", "TZ=UTC", "DBUS_SESSION_BUS_ADDRESS=disabled:"),
	}
	if ns != "" {
		ip := phNeedProgram(t, "ip", "iproute2")
		opts = append(opts,
			// The node's certificate is self-signed; the test compares its
			// fingerprint through DevTools instead.
			chromedp.IgnoreCertErrors,
			chromedp.ModifyCmdFunc(func(cmd *exec.Cmd) {
				cmd.Args = append([]string{"ip", "netns", "exec", ns, cmd.Path}, cmd.Args[1:]...)
				cmd.Path = ip
				if cmd.SysProcAttr == nil {
					cmd.SysProcAttr = &syscall.SysProcAttr{}
				}
				cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
			}))
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx, chromedp.Emulate(phDevice{})); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	// Record, in every page, what the Content-Security-Policy blocked and
	// any uncaught error: CheckClean fails the test on either. DevTools
	// injects this script, so the CSP does not apply to it.
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `
window.__meshtrayTest = {csp: [], errors: []};
document.addEventListener("securitypolicyviolation", (e) => window.__meshtrayTest.csp.push(e.violatedDirective + " " + e.blockedURI));
window.addEventListener("error", (e) => window.__meshtrayTest.errors.push(String(e.message)));
window.addEventListener("unhandledrejection", (e) => window.__meshtrayTest.errors.push(String(e.reason)));
`}); err != nil {
		t.Fatalf("DevTools Page.addScriptToEvaluateOnNewDocument: %v", err)
	}
	return &phoneBrowser{t: t, ctx: ctx, shots: t.ArtifactDir()}
}

// CheckClean fails the test if the page broke its CSP or threw.
func (b *phoneBrowser) CheckClean() {
	b.t.Helper()
	var got struct{ CSP, Errors []string }
	raw := phoneEval[string](b, `JSON.stringify(window.__meshtrayTest ? {CSP: window.__meshtrayTest.csp, Errors: window.__meshtrayTest.errors} : {CSP: ["no recorder"], Errors: []})`)
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		b.t.Fatal(err)
	}
	if len(got.CSP) > 0 {
		b.t.Errorf("the page broke its Content-Security-Policy: %v", got.CSP)
	}
	if len(got.Errors) > 0 {
		b.t.Errorf("the page threw: %v", got.Errors)
	}
}

// Do runs actions, failing the test on error.
func (b *phoneBrowser) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// Eval evaluates a JavaScript expression (promises awaited) into T.
func phoneEval[T any](b *phoneBrowser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// WaitJS waits until the expression is truthy in the page.
func (b *phoneBrowser) WaitJS(what, expr string, d time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		b.Screenshot("timeout-" + strings.ReplaceAll(what, " ", "-"))
		b.t.Fatalf("waiting for %s (%s): %v\npage text:\n%s", what, expr, err, b.Text())
	}
}

// Visible waits until the element with that id is shown.
func (b *phoneBrowser) Visible(id string, d time.Duration) {
	b.t.Helper()
	b.WaitJS("#"+id+" shown", fmt.Sprintf(`(() => { const e = document.getElementById(%q); return !!e && !e.closest("[hidden]") && e.getClientRects().length > 0; })()`, id), d)
}

// Text returns the page's visible text.
func (b *phoneBrowser) Text() string {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return s
}

// Screenshot saves a full-page PNG as NN-name.png in the test's artifact
// directory (go test -artifacts keeps them under -outputdir).
func (b *phoneBrowser) Screenshot(name string) string {
	b.t.Helper()
	if !strings.HasPrefix(name, "timeout-") {
		b.CheckClean()
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return ""
	}
	b.shot++
	p := filepath.Join(b.shots, fmt.Sprintf("%02d-%s.png", b.shot, name))
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Errorf("save screenshot: %v", err)
	}
	b.t.Logf("screenshot %s", p)
	return p
}
