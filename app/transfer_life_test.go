package app_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/app/cli"
	"meshtray/files"
	"meshtray/store"
)

// The lifecycle of a transfer around its bytes: the free space held from
// admission, the owner canceling a transfer that stalled, a sending node
// killed and restarted, and the words both ends read.

// smallTmpfs mounts a 32 MiB tmpfs for a receive folder (root only).
func smallTmpfs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root (CI runs as root)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=32m,mode=0700", "meshtray-test", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// incoming is the receiver's list of transfers under way.
func incoming(t *testing.T, n *apptest.Node) []app.IncomingTransfer {
	t.Helper()
	ts, err := n.Client.IncomingFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// TestSendFilesSpaceHeldFromAdmission: two transfers that each fit the
// free space but not both, announced while the owner has decided neither:
// the second is rejected at once with the free-space sentence (it counts
// the first's reservation); once the first is denied, its space is free
// again.
func TestSendFilesSpaceHeldFromAdmission(t *testing.T) {
	dir := smallTmpfs(t)
	b := apptest.StartNode(t, apptest.Options{Name: "bee", Keychain: "file", FilesDir: dir,
		Config: fmt.Sprintf("[files]\ndir = %q\nkeep_free = \"1MiB\"\n", dir)})
	mustCLI(t, b, "a2a", "on")
	s := newRawSender(t, b, "filler")
	sum := hexSum(make([]byte, 20<<20))

	first := s.announce(announced("a.bin", 20<<20, sum))
	ap := approvalOf(t, b, app.KindFiles) // the owner is asked: the space is held meanwhile
	second := s.ended(s.announce(announced("b.bin", 20<<20, sum)).ID)
	if second.Status.State != a2a.TaskStateRejected || !strings.Contains(statusOf(second), "not enough free space") ||
		!strings.Contains(statusOf(second), "other transfers under way hold 20 MiB") {
		t.Fatalf("second transfer: %s %q; want rejected for the space the first holds", second.Status.State, statusOf(second))
	}
	decide(t, b, ap.ID, false)
	if end := s.ended(first.ID); end.Status.State != a2a.TaskStateRejected {
		t.Fatalf("first transfer: %s %q", end.Status.State, statusOf(end))
	}
	third := s.announce(announced("c.bin", 20<<20, sum))
	approvalOf(t, b, app.KindFiles) // admitted: the denied one holds nothing
	if _, err := s.client.CancelTask(context.Background(), &a2a.TaskIDParams{ID: third.ID}); err != nil {
		t.Fatal(err)
	}
}

// TestOwnerCancelsStalledIncomingTransfer: a sender that stopped in the
// middle of a file. The receiver's owner sees the transfer in `meshtray
// status` and ends it with `meshtray cancel TASK`: the task ends canceled,
// the partial file is removed, and its space is free for the next one.
func TestOwnerCancelsStalledIncomingTransfer(t *testing.T) {
	dir := smallTmpfs(t)
	b := apptest.StartNode(t, apptest.Options{Name: "bee", Keychain: "file", FilesDir: dir,
		Config: fmt.Sprintf("[files]\ndir = %q\nkeep_free = \"1MiB\"\n", dir)})
	mustCLI(t, b, "a2a", "on")
	s := newRawSender(t, b, "stalled")
	mustCLI(t, b, "grant", "set", s.grant, "--files", "allow")
	data := make([]byte, 20<<20)
	sum := hexSum(data)

	task := s.working(s.announce(announced("half.bin", 20<<20, sum)).ID)
	if code, body := s.put(task.ID, 0, data[:8<<20], fmt.Sprintf("bytes 0-%d/%d", 8<<20-1, 20<<20)); code != 204 {
		t.Fatalf("first half: %d %s", code, body)
	}
	if len(partials(t, dir)) != 1 {
		t.Fatalf("partials %v", partials(t, dir))
	}
	r := mustCLI(t, b, "status")
	if !strings.Contains(r.Stdout, "receiving") || !strings.Contains(r.Stdout, string(task.ID)) || !strings.Contains(r.Stdout, "from stalled: 8.0 MiB of 20 MiB") {
		t.Fatalf("status does not list the transfer:\n%s", r.Stdout)
	}
	if r := mustCLI(t, b, "cancel", string(task.ID)); !strings.Contains(r.Stdout, "canceled") {
		t.Fatalf("cancel: %s", r.Stdout)
	}
	end := s.ended(task.ID)
	if end.Status.State != a2a.TaskStateCanceled || !strings.Contains(statusOf(end), "owner of the receiving device") {
		t.Fatalf("task %s %q", end.Status.State, statusOf(end))
	}
	apptest.WaitFor(t, 10*time.Second, "the partial to go", func() bool { return len(partials(t, dir)) == 0 })
	if ts := incoming(t, b); len(ts) != 0 {
		t.Fatalf("still listed: %+v", ts)
	}
	// Its 20 MiB are free again: another 20 MiB transfer is admitted.
	next := s.working(s.announce(announced("again.bin", 20<<20, sum)).ID)
	if code, body := s.put(next.ID, 0, data, ""); code != 201 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	if end := s.ended(next.ID); end.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("task %s %q", end.Status.State, statusOf(end))
	}
}

// TestSendingNodeKilledMidTransfer: the sending node is killed while the
// bytes flow. `meshtray send` exits 10 with a sentence (not "unexpected
// EOF"); the receiver still holds the transfer until the sending node
// starts again, which cancels it there: the partial file goes and nothing
// is listed under way.
func TestSendingNodeKilledMidTransfer(t *testing.T) {
	a, b := sendPair(t)
	allowFiles(t, b, "ant")
	src := sparseFile(t, 4<<30)
	run := startCLI(t, a, "send", "bee", src)
	apptest.WaitFor(t, 60*time.Second, "a partial file on the receiver", func() bool { return len(partials(t, b.FilesDir)) > 0 })
	if err := a.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	a.Wait(10 * time.Second)
	r := run.wait(t, 30*time.Second)
	if r.Code != cli.ExitTaskFailed || !strings.Contains(r.Stderr, "the local meshtray node stopped during the transfer") ||
		strings.Contains(r.Stderr, "EOF") {
		t.Fatalf("send exited %d when its node died, want %d with the sentence:\n%s\n%s", r.Code, cli.ExitTaskFailed, r.Stdout, r.Stderr)
	}
	// Until the sender comes back the receiver holds the transfer (and
	// the space of its partial file); its owner sees it under way.
	if ts := incoming(t, b); len(ts) != 1 || ts[0].Peer != "ant" || ts[0].Size != 4<<30 {
		t.Fatalf("the receiver's transfers under way: %+v", ts)
	}
	// The killed sender's database names the send (as another SQLite
	// reader, beside the node once it runs again).
	db, err := sql.Open("sqlite", "file:"+filepath.Join(a.StateDir, store.DefaultFile)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sendings := func() (n int) {
		if err := db.QueryRow("SELECT count(*) FROM sendings WHERE name = 'bee'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := sendings(); n != 1 {
		t.Fatalf("%d sends under way in the killed node's database, want 1", n)
	}
	apptest.StartNode(t, apptest.Options{Name: "ant", Keychain: "file", StateDir: a.StateDir})
	apptest.WaitFor(t, 60*time.Second, "the restarted sender to cancel its transfer at the receiver", func() bool {
		return len(incoming(t, b)) == 0 && len(partials(t, b.FilesDir)) == 0
	})
	// The receiver ends the task before the sender reads the answer: the
	// record goes right after.
	apptest.WaitFor(t, 30*time.Second, "the record of sends under way to go", func() bool { return sendings() == 0 })
	if _, err := os.Stat(filepath.Join(a.StateDir, "sending.json")); !os.IsNotExist(err) {
		t.Fatalf("a sending.json beside the database: %v", err)
	}
}

// TestSendFolderWithOneRefusedName: a folder holding a name the receiver
// would refuse (a backslash) sends its other files and names the refused
// one on stderr and in --json; a failure before anything is sent prints
// a JSON error object with --json.
func TestSendFolderWithOneRefusedName(t *testing.T) {
	a, b := sendPair(t)
	allowFiles(t, b, "ant")
	src := filepath.Join(t.TempDir(), "Box")
	writeFile(t, filepath.Join(src, "ok.txt"), "fine\n")
	writeFile(t, filepath.Join(src, `back\slash.txt`), "odd\n")
	r := a.CLIWithin(time.Minute, "send", "bee", src, "--json")
	if r.Code != 0 {
		t.Fatalf("send: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	var res app.SendResult
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
		t.Fatalf("%v: %s", err, r.Stdout)
	}
	if res.State != "completed" || len(res.Files) != 1 || res.Files[0].Path != "Box/ok.txt" ||
		res.Refused == nil || res.Refused.Count != 1 || res.Refused.Entries[0].Path != `Box/back\slash.txt` || res.Refused.Entries[0].Why == "" {
		t.Fatalf("result %+v (refused %+v)", res, res.Refused)
	}
	if !strings.Contains(r.Stderr, `Box/back\slash.txt`) {
		t.Fatalf("stderr does not name the refused file:\n%s", r.Stderr)
	}

	r = a.CLI("send", "nosuchdevice", src, "--json")
	var je struct {
		Error    string `json:"error"`
		ExitCode int    `json:"exit_code"`
	}
	if r.Code != 1 || json.Unmarshal([]byte(r.Stdout), &je) != nil || je.ExitCode != 1 || !strings.Contains(je.Error, "nosuchdevice") {
		t.Fatalf("send to no device --json: exit %d, stdout %q", r.Code, r.Stdout)
	}

	// Every name refused, and a link: nothing is sent, and the error says
	// what was left out in both outputs, each path escaped once.
	only := filepath.Join(t.TempDir(), "dir2")
	writeFile(t, filepath.Join(only, `x\y.txt`), "odd\n")
	if err := os.Symlink("x", filepath.Join(only, "link")); err != nil {
		t.Fatal(err)
	}
	r = a.CLI("send", "bee", only, "--json")
	var none struct {
		Error    string         `json:"error"`
		ExitCode int            `json:"exit_code"`
		Skipped  *files.NotSent `json:"skipped"`
		Refused  *files.NotSent `json:"refused"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &none); err != nil || r.Code != 1 || none.ExitCode != 1 {
		t.Fatalf("all refused --json: exit %d, %v, stdout %q", r.Code, err, r.Stdout)
	}
	if none.Refused == nil || none.Refused.Count != 1 || none.Refused.Entries[0].Path != `dir2/x\y.txt` ||
		none.Skipped == nil || none.Skipped.Count != 1 || none.Skipped.Entries[0].Path != "dir2/link" {
		t.Fatalf("all refused --json: refused %+v, skipped %+v", none.Refused, none.Skipped)
	}
	if !strings.Contains(none.Error, `dir2/x\y.txt ("\" is not a separator here)`) || !strings.Contains(none.Error, "1 entry of the folders skipped") {
		t.Fatalf("all refused --json: error %q", none.Error)
	}
	r = a.CLI("send", "bee", only)
	for _, want := range []string{"skipped 1 entry of the folders", "  dir2/link (symbolic link)",
		"not sending 1 file whose name the device would refuse:\n  dir2/x\\y.txt (", `meshtray: nothing to send: the device would refuse every name: dir2/x\y.txt ("\" is not a separator here); 1 entry`} {
		if r.Code != 1 || !strings.Contains(r.Stderr, want) {
			t.Errorf("all refused: exit %d, stderr does not say %q:\n%s", r.Code, want, r.Stderr)
		}
	}
}

// TestTransferTextsForTheSender: what a sender reads names the file, says
// sizes in IEC units, carries no package prefix and no absolute folder of
// the receiver; a file whose bytes differ from the announced SHA-256 is
// said to have changed on the sending computer.
func TestTransferTextsForTheSender(t *testing.T) {
	dir := t.TempDir()
	b := apptest.StartNode(t, apptest.Options{Name: "bee", Keychain: "file", FilesDir: dir,
		Config: fmt.Sprintf("[files]\ndir = %q\nmax_file_size = \"1MiB\"\n", dir)})
	mustCLI(t, b, "a2a", "on")
	s := newRawSender(t, b, "agent")
	mustCLI(t, b, "grant", "set", s.grant, "--files", "allow")
	check := func(t *testing.T, task *a2a.Task, state a2a.TaskState, want ...string) {
		t.Helper()
		text := statusOf(task)
		if task.Status.State != state || strings.Contains(text, "files: ") || strings.Contains(text, b.FilesDir) ||
			strings.Contains(text, "manifest") {
			t.Fatalf("task %s %q", task.Status.State, text)
		}
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Fatalf("%q does not say %q", text, w)
			}
		}
	}
	t.Run("too large", func(t *testing.T) {
		task := s.ended(s.announce(announced("Trip/big.mov", 3<<20, hexSum(nil))).ID)
		check(t, task, a2a.TaskStateRejected, `"Trip/big.mov"`, "3.0 MiB", "at most 1.0 MiB")
	})
	t.Run("changed while sent", func(t *testing.T) {
		data := []byte("the announced bytes")
		task := s.working(s.announce(announced("notes/today.txt", int64(len(data)), hexSum(data))).ID)
		check(t, task, a2a.TaskStateWorking, "receiving 1 file")
		if code, body := s.put(task.ID, 0, []byte("other bytes, same size"[:len(data)]), ""); code != 422 {
			t.Fatalf("PUT: %d %s", code, body)
		}
		check(t, s.ended(task.ID), a2a.TaskStateFailed, `"notes/today.txt" changed on the sending computer`, "send it again")
	})
	t.Run("result without the folder", func(t *testing.T) {
		data := []byte("kept")
		task := s.working(s.announce(announced("kept.txt", int64(len(data)), hexSum(data))).ID)
		if code, body := s.put(task.ID, 0, data, ""); code != 201 {
			t.Fatalf("PUT: %d %s", code, body)
		}
		end := s.ended(task.ID)
		check(t, end, a2a.TaskStateCompleted, "saved 1 file")
		raw, _ := json.Marshal(end.Artifacts)
		if strings.Contains(string(raw), b.FilesDir) || !strings.Contains(string(raw), `"path":"kept.txt"`) {
			t.Fatalf("artifact %s", raw)
		}
	})
}

// TestIncomingProgress: status shows an incoming transfer's bytes as they
// arrive (not only once a PUT ends) and says "none yet" for the last byte
// until one came; before, it said "last byte just now" for a transfer that
// had received nothing.
func TestIncomingProgress(t *testing.T) {
	dir := t.TempDir()
	b := apptest.StartNode(t, apptest.Options{Name: "bee", Keychain: "file", FilesDir: dir,
		Config: fmt.Sprintf("[files]\ndir = %q\n", dir)})
	mustCLI(t, b, "a2a", "on")
	s := newRawSender(t, b, "ant")
	mustCLI(t, b, "grant", "set", s.grant, "--files", "allow")
	data := bytes.Repeat([]byte{5}, 2<<20)
	task := s.working(s.announce(announced("big.bin", int64(len(data)), hexSum(data))).ID)
	if ts := incoming(t, b); len(ts) != 1 || ts[0].Received != 0 || !ts[0].LastByte.IsZero() {
		t.Fatalf("before any byte: %+v", ts)
	}
	if out := mustCLI(t, b, "status").Stdout; !strings.Contains(out, "0 B of 2.0 MiB, last byte none yet") {
		t.Errorf("status before any byte:\n%s", out)
	}
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() {
		req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("%s%s%s/0", s.https, files.Prefix, task.ID), pr)
		req.Header.Set("Authorization", "Bearer "+s.token)
		req.ContentLength = int64(len(data))
		if resp, err := s.hc.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	if _, err := pw.Write(data[:1<<20]); err != nil {
		t.Fatal(err)
	}
	apptest.WaitFor(t, 10*time.Second, "the first MiB to show", func() bool {
		ts := incoming(t, b)
		return len(ts) == 1 && ts[0].Received >= 512<<10 && !ts[0].LastByte.IsZero()
	})
	if out := mustCLI(t, b, "status").Stdout; !regexp.MustCompile(`[1-9][0-9.]* (KiB|MiB) of 2\.0 MiB, last byte just now`).MatchString(out) {
		t.Errorf("status mid-upload:\n%s", out)
	}
}

// TestSendNamesShownWhole: the human output of send names each file
// whole, a newline escaped (\u000A) rather than the rest of the name
// dropped, and a progress line names what the device saves when
// files.CleanPath changes the name ("CON" -> "_CON").
func TestSendNamesShownWhole(t *testing.T) {
	a, b := sendPair(t)
	allowFiles(t, b, "ant")
	src := filepath.Join(t.TempDir(), "dir3")
	writeFile(t, filepath.Join(src, "CON"), "dev\n")
	writeFile(t, filepath.Join(src, "trail. "), "dots\n")
	writeFile(t, filepath.Join(src, "nl\nx.txt"), "line\n")
	r := a.CLIWithin(time.Minute, "send", "bee", src)
	if r.Code != 0 {
		t.Fatalf("send: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	for _, want := range []string{`  dir3/nl\u000Ax.txt (`, "sent dir3/CON as dir3/_CON (4 B)", "sent dir3/trail.  as dir3/trail (5 B)"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, r.Stderr)
		}
	}
}
