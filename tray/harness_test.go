//go:build linux

package tray

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"meshtray/app"
	"meshtray/keychain/keychaintest"
)

// need fails the test with the install command when a tool is missing.
func need(t testing.TB, tool, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		t.Fatalf("%s is missing: apt-get install -y %s", tool, pkg)
	}
	return p
}

// desktop is a private desktop session for one test: an Xvfb display, a
// private D-Bus session bus, and a test-side StatusNotifierWatcher on it.
type desktop struct {
	Display string
	Bus     string // DBUS_SESSION_BUS_ADDRESS
	Home    string // XDG_CONFIG_HOME of the processes started here
	Watcher *watcher
}

// startDesktop starts Xvfb (on a display number it picks itself with
// -displayfd), a private bus and the watcher; all stop at cleanup.
func startDesktop(t *testing.T, withWatcher bool) *desktop {
	t.Helper()
	xvfb := need(t, "Xvfb", "xvfb")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// -noreset: without it the server resets each time its last client
	// leaves, and a client connecting during that reset (the UI process
	// while the test polls windows with xdotool) fails to open the display.
	cmd := exec.Command(xvfb, "-displayfd", "3", "-screen", "0", "1280x900x24", "-nolisten", "tcp", "-noreset")
	cmd.ExtraFiles = []*os.File{w}
	var xlog bytes.Buffer
	cmd.Stderr = &xlog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("Xvfb log:\n%s", xlog.String())
		}
	})
	num := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		r.Close()
		num <- strings.TrimSpace(line)
	}()
	var display string
	select {
	case n := <-num:
		if n == "" {
			t.Fatalf("Xvfb did not start: %s", xlog.String())
		}
		display = ":" + n
	case <-time.After(15 * time.Second):
		t.Fatalf("Xvfb gave no display number in 15 s: %s", xlog.String())
	}
	bus, err := keychaintest.StartBus()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Stop() })
	d := &desktop{Display: display, Bus: bus.Addr(), Home: t.TempDir()}
	if withWatcher {
		d.Watcher = startWatcher(t, d.Bus)
	}
	return d
}

// env is the environment of a process in this desktop session.
func (d *desktop) env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR", "XDG_CACHE_HOME",
			"MESHTRAY_KEYCHAINTEST_BUS", "MESHTRAY_APPTEST_MAIN", envTrayMain:
			continue
		}
		env = append(env, kv)
	}
	if d != nil {
		env = append(env, "DISPLAY="+d.Display, "DBUS_SESSION_BUS_ADDRESS="+d.Bus, "XDG_CONFIG_HOME="+d.Home)
	}
	return append(append(env, envTrayMain+"=1", "LANG=C.UTF-8", "LANGUAGE=en"), extra...)
}

// --- the StatusNotifierWatcher ---

// sni is one registered StatusNotifierItem.
type sni struct {
	Sender string // the unique bus name of the registering connection
	Path   string // the object path it registered (fyne.io/systray: /StatusNotifierItem)
}

// watcher is a test-side org.kde.StatusNotifierWatcher: it owns the name
// and records registrations. fyne.io/systray registers with its object
// path, so the item's bus name is the message sender.
type watcher struct {
	conn  *dbus.Conn
	mu    sync.Mutex
	items []sni
	reg   chan struct{}
}

func startWatcher(t *testing.T, addr string) *watcher {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatalf("connect to the test bus: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	w := &watcher{conn: conn, reg: make(chan struct{}, 16)}
	methods := map[string]any{
		"RegisterStatusNotifierItem": func(sender dbus.Sender, service string) *dbus.Error {
			path := service
			if !strings.HasPrefix(path, "/") {
				path = "/StatusNotifierItem"
			}
			w.mu.Lock()
			w.items = append(w.items, sni{Sender: string(sender), Path: path})
			w.mu.Unlock()
			select {
			case w.reg <- struct{}{}:
			default:
			}
			return nil
		},
		"RegisterStatusNotifierHost": func(service string) *dbus.Error { return nil },
	}
	if err := conn.ExportMethodTable(methods, "/StatusNotifierWatcher", "org.kde.StatusNotifierWatcher"); err != nil {
		t.Fatal(err)
	}
	rep, err := conn.RequestName("org.kde.StatusNotifierWatcher", dbus.NameFlagDoNotQueue)
	if err != nil || rep != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own org.kde.StatusNotifierWatcher: %v %v", rep, err)
	}
	return w
}

// waitItem waits for a registration and returns the latest.
func (w *watcher) waitItem(t *testing.T, d time.Duration) sni {
	t.Helper()
	deadline := time.After(d)
	for {
		w.mu.Lock()
		if n := len(w.items); n > 0 {
			it := w.items[n-1]
			w.mu.Unlock()
			return it
		}
		w.mu.Unlock()
		select {
		case <-w.reg:
		case <-deadline:
			t.Fatalf("no StatusNotifierItem registered within %v", d)
		}
	}
}

// menuNode is one com.canonical.dbusmenu item.
type menuNode struct {
	ID          int32
	Label       string
	Enabled     bool
	ToggleType  string
	ToggleState int32
	Separator   bool
	Children    []menuNode
}

// find returns the first item (depth first) whose label satisfies match.
func (m menuNode) find(match func(string) bool) (menuNode, bool) {
	for _, c := range m.Children {
		if match(c.Label) {
			return c, true
		}
		if f, ok := c.find(match); ok {
			return f, true
		}
	}
	return menuNode{}, false
}

func (m menuNode) item(label string) (menuNode, bool) {
	return m.find(func(l string) bool { return l == label })
}

func (m menuNode) labels() []string {
	var out []string
	for _, c := range m.Children {
		if !c.Separator {
			out = append(out, c.Label)
		}
	}
	return out
}

// layout reads the whole menu (GetLayout from the root, all depths).
func (w *watcher) layout(it sni) (menuNode, error) {
	var rev uint32
	var raw struct {
		V0 int32
		V1 map[string]dbus.Variant
		V2 []dbus.Variant
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	call := w.conn.Object(it.Sender, dbus.ObjectPath(it.Path+"/menu")).CallWithContext(ctx,
		"com.canonical.dbusmenu.GetLayout", 0, int32(0), int32(-1), []string{})
	if call.Err != nil {
		return menuNode{}, call.Err
	}
	if err := call.Store(&rev, &raw); err != nil {
		return menuNode{}, err
	}
	return toNode(raw.V0, raw.V1, raw.V2)
}

func toNode(id int32, props map[string]dbus.Variant, kids []dbus.Variant) (menuNode, error) {
	n := menuNode{ID: id, Enabled: true}
	if v, ok := props["label"]; ok {
		n.Label, _ = v.Value().(string)
	}
	if v, ok := props["enabled"]; ok {
		n.Enabled, _ = v.Value().(bool)
	}
	if v, ok := props["toggle-type"]; ok {
		n.ToggleType, _ = v.Value().(string)
	}
	if v, ok := props["toggle-state"]; ok {
		n.ToggleState, _ = v.Value().(int32)
	}
	if v, ok := props["type"]; ok {
		s, _ := v.Value().(string)
		n.Separator = s == "separator"
	}
	for _, k := range kids {
		f, ok := k.Value().([]any)
		if !ok || len(f) != 3 {
			return n, fmt.Errorf("menu item %d: child is %T", id, k.Value())
		}
		cid, _ := f[0].(int32)
		cprops, _ := f[1].(map[string]dbus.Variant)
		ckids, _ := f[2].([]dbus.Variant)
		c, err := toNode(cid, cprops, ckids)
		if err != nil {
			return n, err
		}
		n.Children = append(n.Children, c)
	}
	return n, nil
}

// waitMenu re-reads the menu until ok accepts it (the first GetLayout after
// a reset is shallow, and every rebuild renumbers the items).
func (w *watcher) waitMenu(t *testing.T, it sni, d time.Duration, what string, ok func(menuNode) bool) menuNode {
	t.Helper()
	deadline := time.Now().Add(d)
	var last menuNode
	var lastErr error
	for time.Now().Before(deadline) {
		m, err := w.layout(it)
		if err == nil && ok(m) {
			return m
		}
		last, lastErr = m, err
		time.Sleep(30 * time.Millisecond)
	}
	t.Fatalf("menu: %s not seen within %v (last: %v %v)", what, d, last.labels(), lastErr)
	return menuNode{}
}

// click sends the dbusmenu "clicked" event to an item.
func (w *watcher) click(t *testing.T, it sni, id int32) {
	t.Helper()
	call := w.conn.Object(it.Sender, dbus.ObjectPath(it.Path+"/menu")).Call(
		"com.canonical.dbusmenu.Event", 0, id, "clicked", dbus.MakeVariant(int32(0)), uint32(time.Now().Unix()))
	if call.Err != nil {
		t.Fatalf("click item %d: %v", id, call.Err)
	}
}

// clickLabel reads the menu, finds the item by label and clicks it.
func (w *watcher) clickLabel(t *testing.T, it sni, label string) {
	t.Helper()
	m := w.waitMenu(t, it, 10*time.Second, label, func(m menuNode) bool { _, ok := m.item(label); return ok })
	n, _ := m.item(label)
	w.click(t, it, n.ID)
}

// clickQuit clicks Quit. The tray may exit before it answers the click
// (the bus then says NoReply): that is no failure, the caller checks that
// the process exited.
func (w *watcher) clickQuit(t *testing.T, it sni) {
	t.Helper()
	m := w.waitMenu(t, it, 10*time.Second, labelQuit, func(m menuNode) bool { _, ok := m.item(labelQuit); return ok })
	n, _ := m.item(labelQuit)
	call := w.conn.Object(it.Sender, dbus.ObjectPath(it.Path+"/menu")).Call(
		"com.canonical.dbusmenu.Event", 0, n.ID, "clicked", dbus.MakeVariant(int32(0)), uint32(time.Now().Unix()))
	var de dbus.Error
	if call.Err != nil && !(errors.As(call.Err, &de) && de.Name == "org.freedesktop.DBus.Error.NoReply") {
		t.Fatalf("click Quit: %v", call.Err)
	}
}

// iconPixmap reads the item's IconPixmap property (the icon shown).
func (w *watcher) iconPixmap(t *testing.T, it sni) []byte {
	t.Helper()
	v, err := w.conn.Object(it.Sender, dbus.ObjectPath(it.Path)).GetProperty("org.kde.StatusNotifierItem.IconPixmap")
	if err != nil {
		t.Fatalf("IconPixmap: %v", err)
	}
	var px []struct {
		W, H int32
		Pix  []byte
	}
	if err := dbus.Store([]any{v.Value()}, &px); err != nil || len(px) == 0 {
		t.Fatalf("IconPixmap: %v (%T)", err, v.Value())
	}
	return px[0].Pix
}

// --- the tray process ---

// trayProc is `meshtray` (the tray) as a child process.
type trayProc struct {
	StateDir string
	cmd      *exec.Cmd
	mu       sync.Mutex
	logs     bytes.Buffer
	done     chan struct{}
	err      error
}

func (p *trayProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.Write(b)
}

func (p *trayProc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// startTrayCmd starts the tray child, trayExe: its windows are the real
// meshtray-ui next to it (wrap lets a test run it in a network namespace:
// the argv prefix before the program).
func startTrayCmd(t *testing.T, env []string, stateDir string, wrap []string, args ...string) *trayProc {
	t.Helper()
	argv := append(append(append([]string{}, wrap...), trayExe(t),
		"--state-dir", stateDir, "--port", "0", "--keychain", "file", "--name", "test-laptop", "--log-level", "debug"), args...)
	return startProc(t, "tray", env, stateDir, argv)
}

// userEnv is the environment of a user of its own: HOME, XDG_RUNTIME_DIR
// and XDG_CACHE_HOME in fresh dirs (0700). The tray's one-per-user lock
// lives there, so trays started with different userEnvs run side by side
// (tests in parallel) and trays sharing one meet the lock.
func userEnv(t *testing.T) []string {
	t.Helper()
	home := t.TempDir()
	rt := filepath.Join(home, "run")
	if err := os.Mkdir(rt, 0o700); err != nil {
		t.Fatal(err)
	}
	return []string{"HOME=" + home, "XDG_RUNTIME_DIR=" + rt, "XDG_CACHE_HOME=" + filepath.Join(home, ".cache")}
}

// hasUser reports whether env already names a user's runtime dir.
func hasUser(env []string) bool {
	return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") })
}

// startProc starts a meshtray child process (argv[0] may be a wrapper).
// Unless env has its user's dirs (userEnv), the child is a user of its
// own. When this test binary is built with -race, the child's race reports
// (and those of the UI process it starts) go to files checked at cleanup
// by checkRaces, so a race in a child fails the test.
func startProc(t *testing.T, name string, env []string, stateDir string, argv []string) *trayProc {
	t.Helper()
	p := &trayProc{StateDir: stateDir, done: make(chan struct{})}
	raceDir := t.TempDir()
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = append([]string{}, env...)
	if !hasUser(env) {
		p.cmd.Env = append(p.cmd.Env, userEnv(t)...)
	}
	p.cmd.Env = append(p.cmd.Env, "GORACE=halt_on_error=0 exitcode=0 log_path="+filepath.Join(raceDir, "race"))
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		checkRaces(t, raceDir)
		if t.Failed() {
			t.Logf("%s logs:\n%s", name, p.Logs())
		}
	})
	return p
}

// checkRaces fails t for every race report in dir, except the known one
// inside fyne.io/systray v1.12.2 (its GetLayout reads the menu revision
// under menuLock while refresh writes it under lock: both accesses are in
// systray's own code, reached from D-Bus calls), which is logged.
func checkRaces(t *testing.T, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "race*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, rep := range strings.Split(string(b), "==================") {
			if !strings.Contains(rep, "WARNING: DATA RACE") {
				continue
			}
			if raceInSystray(rep) {
				t.Logf("known data race inside fyne.io/systray v1.12.2 (not ours), in %s", filepath.Base(f))
				continue
			}
			t.Errorf("data race in a child process:\n%s", rep)
		}
	}
}

// raceInSystray reports whether both accesses of a race report are in
// fyne.io/systray frames.
func raceInSystray(rep string) bool {
	lines := strings.Split(rep, "\n")
	accesses := 0
	for i, l := range lines {
		if !strings.Contains(l, " at 0x") || !strings.Contains(l, "by goroutine") {
			continue
		}
		accesses++
		if i+1 >= len(lines) || !strings.HasPrefix(strings.TrimSpace(lines[i+1]), "fyne.io/systray.") {
			return false
		}
	}
	return accesses >= 2
}

func (p *trayProc) exited(d time.Duration) (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	case <-time.After(d):
		return false, nil
	}
}

func (p *trayProc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if ok, _ := p.exited(15 * time.Second); !ok {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// client waits for the node's control API (loopback, this network
// namespace).
func (p *trayProc) client(t *testing.T) *app.Client {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("tray exited: %v\n%s", p.err, p.Logs())
		default:
		}
		if c, err := app.Dial(p.StateDir, 0); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err = c.WaitReady(ctx)
			cancel()
			if err == nil {
				return c
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("tray's node not ready in 30 s\n%s", p.Logs())
	return nil
}

// --- windows ---

// xcmd runs an X client on the test display.
func xcmd(d *desktop, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "DISPLAY="+d.Display)
	return cmd
}

// waitWindow waits for a mapped window with title (a regexp for xdotool)
// and returns its id and when it was first seen.
func waitWindow(t *testing.T, d *desktop, title string, timeout time.Duration) (string, time.Time) {
	t.Helper()
	need(t, "xdotool", "xdotool")
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		out, err := xcmd(d, "xdotool", "search", "--onlyvisible", "--name", title).Output()
		if err == nil {
			if ids := strings.Fields(string(out)); len(ids) > 0 {
				return ids[0], time.Now()
			}
		}
		time.Sleep(15 * time.Millisecond)
	}
	t.Fatalf("no visible window %q within %v", title, timeout)
	return "", time.Time{}
}

// waitNoWindow waits until no mapped window has title.
func waitNoWindow(t *testing.T, d *desktop, title string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		out, _ := xcmd(d, "xdotool", "search", "--onlyvisible", "--name", title).Output()
		if len(strings.Fields(string(out))) == 0 {
			return
		}
		time.Sleep(30 * time.Millisecond)
	}
	t.Fatalf("window %q still visible after %v", title, timeout)
}

// screenshot saves the window as PNG under the test's artifact dir and
// returns the path and the decoded image.
func screenshot(t *testing.T, d *desktop, win, name string) (string, image.Image) {
	t.Helper()
	need(t, "import", "imagemagick")
	p := filepath.Join(t.ArtifactDir(), name+".png")
	if out, err := xcmd(d, "import", "-window", win, p).CombinedOutput(); err != nil {
		t.Fatalf("import -window %s: %v %s", win, err, out)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	t.Logf("screenshot %s", p)
	return p, img
}

// checkNotBlank fails when the picture is (nearly) one colour: a window
// that mapped but drew nothing.
func checkNotBlank(t *testing.T, img image.Image, what string) {
	t.Helper()
	if why := blankness(img); why != "" {
		t.Fatalf("%s %s", what, why)
	}
}

// blankness says why img is not a drawn window ("" when it is one).
func blankness(img image.Image) string {
	b := img.Bounds()
	if b.Dx() < 200 || b.Dy() < 150 {
		return fmt.Sprintf("is %dx%d, too small to be the window", b.Dx(), b.Dy())
	}
	counts := map[color.RGBA]int{}
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			counts[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), 255}]++
		}
	}
	total, top := 0, 0
	for _, n := range counts {
		total += n
		top = max(top, n)
	}
	if len(counts) < 20 || float64(top)/float64(total) > 0.99 {
		return fmt.Sprintf("looks blank: %d colours, the commonest covers %.1f%%", len(counts), 100*float64(top)/float64(total))
	}
	return ""
}

// sameImage reports whether two pictures are pixel for pixel the same.
func sameImage(a, b image.Image) bool {
	if a == nil || b == nil || a.Bounds() != b.Bounds() {
		return false
	}
	r := a.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if a.At(x, y) != b.At(x, y) {
				return false
			}
		}
	}
	return true
}

// settledShot screenshots the window until it is drawn (not blank) and two
// pictures in a row are the same (the first frames and the layout have
// settled), and returns the last one; it fails after 15 s. This is what a
// person sees once the window stopped changing.
func settledShot(t *testing.T, d *desktop, win, name, what string) (string, image.Image) {
	t.Helper()
	var prev image.Image
	return pollShot(t, d, win, name, what+" drawn and settled", 15*time.Second, func(_ string, img image.Image) bool {
		ok := blankness(img) == "" && sameImage(prev, img)
		prev = img
		return ok
	})
}

// pollShot screenshots the window until ok accepts the picture, or fails
// after timeout saying what it waited for.
func pollShot(t *testing.T, d *desktop, win, name, what string, timeout time.Duration, ok func(path string, img image.Image) bool) (string, image.Image) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p, img := screenshot(t, d, win, name)
		if ok(p, img) {
			return p, img
		}
		if time.Now().After(deadline) {
			t.Fatalf("screenshots of %s: no %s within %v (last saved as %s)", win, what, timeout, p)
		}
		time.Sleep(50 * time.Millisecond) // pacing between X round trips, not synchronisation
	}
}

// windowWatch counts the visible windows matching a title, all the time,
// until stopped: a test asserts the most ever seen at once.
type windowWatch struct {
	stop chan struct{}
	done chan int
}

func watchWindows(d *desktop, title string) *windowWatch {
	w := &windowWatch{stop: make(chan struct{}), done: make(chan int, 1)}
	go func() {
		most := 0
		for {
			most = max(most, len(visibleWindowsNamed(d, title)))
			select {
			case <-w.stop:
				w.done <- most
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return w
}

// most stops the watch and returns the most windows seen at once.
func (w *windowWatch) most() int {
	close(w.stop)
	return <-w.done
}

// buttonShot screenshots the window until it has settled (as settledShot)
// with its primary-coloured button on it, and returns the picture and the
// button's centre. Windows fill in from the node's API after they appear,
// so a settled picture alone may be of the window before its content.
func buttonShot(t *testing.T, d *desktop, win, name, what string) (image.Image, int, int) {
	t.Helper()
	var prev image.Image
	var x, y int
	_, img := pollShot(t, d, win, name, what+" drawn and settled, with its primary button", 15*time.Second, func(_ string, img image.Image) bool {
		ok := blankness(img) == "" && sameImage(prev, img)
		prev = img
		if !ok {
			return false
		}
		var n int
		x, y, n = findPrimary(img)
		return n >= minButtonPx
	})
	return img, x, y
}

// minButtonPx is the fewest pixels of primary colour that make a button.
const minButtonPx = 600

// findPrimary finds the largest patch of the theme's primary colour in the
// picture (the one high-importance button of the window: Approve) and
// returns its centre and its size in pixels.
func findPrimary(img image.Image) (x, y, px int) {
	// The default theme's primary colour, the same in both variants (the
	// UI process runs with no user theme settings here): Fyne v2.7.1's
	// theme.PrimaryColorNamed(theme.ColorBlue), internal/theme
	// colorLightPrimaryBlue. The tray's tests link no Fyne.
	want := []color.NRGBA{{R: 0x29, G: 0x6f, B: 0xf6, A: 0xff}}
	b := img.Bounds()
	match := func(x, y int) bool {
		r, g, bl, _ := img.At(x, y).RGBA()
		for _, c := range want {
			if absd(int(r>>8), int(c.R)) < 12 && absd(int(g>>8), int(c.G)) < 12 && absd(int(bl>>8), int(c.B)) < 12 {
				return true
			}
		}
		return false
	}
	seen := make([]bool, b.Dx()*b.Dy())
	bestN, bx0, by0, bx1, by1 := 0, 0, 0, 0, 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			i := (y-b.Min.Y)*b.Dx() + (x - b.Min.X)
			if seen[i] || !match(x, y) {
				continue
			}
			// flood fill one patch
			n, x0, y0, x1, y1 := 0, x, y, x, y
			stack := [][2]int{{x, y}}
			seen[i] = true
			for len(stack) > 0 {
				p := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				n++
				x0, y0, x1, y1 = min(x0, p[0]), min(y0, p[1]), max(x1, p[0]), max(y1, p[1])
				for _, dxy := range [][2]int{{1, 0}, {-1, 0}, {0, 1}, {0, -1}} {
					qx, qy := p[0]+dxy[0], p[1]+dxy[1]
					if qx < b.Min.X || qy < b.Min.Y || qx >= b.Max.X || qy >= b.Max.Y {
						continue
					}
					j := (qy-b.Min.Y)*b.Dx() + (qx - b.Min.X)
					if !seen[j] && match(qx, qy) {
						seen[j] = true
						stack = append(stack, [2]int{qx, qy})
					}
				}
			}
			if n > bestN {
				bestN, bx0, by0, bx1, by1 = n, x0, y0, x1, y1
			}
		}
	}
	return (bx0 + bx1) / 2, (by0 + by1) / 2, bestN
}

func absd(a, b int) int {
	if a > b {
		return a - b
	}
	return b - a
}

// clickAt clicks inside a window at window coordinates.
func clickAt(t *testing.T, d *desktop, win string, x, y int) {
	t.Helper()
	if out, err := xcmd(d, "xdotool", "mousemove", "--window", win, strconv.Itoa(x), strconv.Itoa(y), "click", "1").CombinedOutput(); err != nil {
		t.Fatalf("xdotool click: %v %s", err, out)
	}
}

// windowSize is the window's width and height in pixels (xdotool
// getwindowgeometry --shell).
func windowSize(t *testing.T, d *desktop, win string) (w, h int) {
	t.Helper()
	out, err := xcmd(d, "xdotool", "getwindowgeometry", "--shell", win).Output()
	if err != nil {
		t.Fatalf("xdotool getwindowgeometry %s: %v", win, err)
	}
	for _, line := range strings.Fields(string(out)) {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "WIDTH":
			w, _ = strconv.Atoi(v)
		case "HEIGHT":
			h, _ = strconv.Atoi(v)
		}
	}
	if w == 0 || h == 0 {
		t.Fatalf("xdotool getwindowgeometry %s: %s", win, out)
	}
	return w, h
}

// getStatus reads a URL's status code (loopback only).
func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// notice is one desktop notification received: ID is the id the
// service gave it, Actions its action keys and labels, flat.
type notice struct {
	App, Icon, Summary, Body string
	ID                       uint32
	Actions                  string // "key=label,key=label"
}

// notifications is a test-side org.freedesktop.Notifications service
// (Desktop Notifications Specification 1.2) on the desktop's bus.
type notifications struct {
	conn *dbus.Conn
	mu   sync.Mutex
	got  []notice
}

func (d *desktop) startNotifications(t *testing.T) *notifications {
	t.Helper()
	conn, err := dbus.Connect(d.Bus)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	n := &notifications{conn: conn}
	methods := map[string]any{
		"GetCapabilities": func() ([]string, *dbus.Error) { return []string{"body", "actions"}, nil },
		"GetServerInformation": func() (string, string, string, string, *dbus.Error) {
			return "test", "meshtray", "1", "1.2", nil
		},
		"Notify": func(app string, replaces uint32, icon, summary, body string, actions []string, hints map[string]dbus.Variant, timeout int32) (uint32, *dbus.Error) {
			n.mu.Lock()
			defer n.mu.Unlock()
			var acts []string
			for i := 0; i+1 < len(actions); i += 2 {
				acts = append(acts, actions[i]+"="+actions[i+1])
			}
			n.got = append(n.got, notice{App: app, Icon: icon, Summary: summary, Body: body, ID: uint32(len(n.got) + 1), Actions: strings.Join(acts, ",")})
			return uint32(len(n.got)), nil
		},
	}
	if err := conn.ExportMethodTable(methods, "/org/freedesktop/Notifications", "org.freedesktop.Notifications"); err != nil {
		t.Fatal(err)
	}
	if rep, err := conn.RequestName("org.freedesktop.Notifications", dbus.NameFlagDoNotQueue); err != nil || rep != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own org.freedesktop.Notifications: %v %v", rep, err)
	}
	return n
}

// invoke emits ActionInvoked(id, key), as a notification server does when
// the person picks that action (Desktop Notifications Specification,
// "Signals").
func (n *notifications) invoke(t *testing.T, id uint32, key string) {
	t.Helper()
	if err := n.conn.Emit("/org/freedesktop/Notifications", "org.freedesktop.Notifications.ActionInvoked", id, key); err != nil {
		t.Fatalf("emit ActionInvoked: %v", err)
	}
}

// wait returns the notifications once there are at least n.
func (n *notifications) wait(t *testing.T, count int, d time.Duration) []notice {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		n.mu.Lock()
		got := append([]notice{}, n.got...)
		n.mu.Unlock()
		if len(got) >= count {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d notifications within %v, want %d: %+v", len(got), d, count, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDesktopDoesNotReset: the test X server keeps its state when its last
// client leaves (-noreset). A server that resets then refuses a client
// connecting during the reset, which made a UI process fail to open the
// display while a test polled windows with xdotool. A root-window property
// set by one client is gone after a reset, so it shows one.
func TestDesktopDoesNotReset(t *testing.T) {
	d := startDesktop(t, false)
	need(t, "xprop", "x11-utils")
	if out, err := xcmd(d, "xprop", "-root", "-f", "_MESHTRAY_PROBE", "8s", "-set", "_MESHTRAY_PROBE", "kept").CombinedOutput(); err != nil {
		t.Fatalf("xprop -set: %v %s", err, out)
	}
	out, err := xcmd(d, "xprop", "-root", "_MESHTRAY_PROBE").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"kept"`) {
		t.Fatalf("root property after its client left: %v %q; the X server reset", err, out)
	}
}
