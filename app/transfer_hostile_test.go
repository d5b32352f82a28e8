package app_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/files"
	"meshtray/pairing"
)

// A sender that is not a meshtray node: a grant minted on the receiver,
// the official a2a-go client for the announcement, plain HTTP requests for
// the bytes. It can say anything; the receiver must hold.

type rawSender struct {
	t      *testing.T
	n      *apptest.Node
	token  string
	grant  string
	client *a2aclient.Client
	https  string       // the loopback port's TLS side
	hc     *http.Client // pinned to the receiver's certificate
}

func newRawSender(t *testing.T, n *apptest.Node, name string) *rawSender {
	t.Helper()
	var tok app.GrantToken
	if err := json.Unmarshal([]byte(mustCLI(t, n, "grant", "create", "--name", name, "--scope", "agent", "--json").Stdout), &tok); err != nil {
		t.Fatal(err)
	}
	st, err := n.Client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: pairing.PinnedTLSConfig(st.Fingerprint)}
	t.Cleanup(tr.CloseIdleConnections)
	return &rawSender{t: t, n: n, token: tok.Token, grant: tok.ID, client: apptest.A2AClient(t, n.BaseURL, tok.Token),
		https: strings.Replace(n.BaseURL, "http://", "https://", 1), hc: &http.Client{Transport: tr}}
}

// announce sends parts (message/send, not blocking) and returns the task.
func (s *rawSender) announce(parts ...a2a.Part) *a2a.Task {
	s.t.Helper()
	no := false
	res, err := s.client.SendMessage(context.Background(), &a2a.MessageSendParams{
		Message: a2a.NewMessage(a2a.MessageRoleUser, parts...), Config: &a2a.MessageSendConfig{Blocking: &no}})
	if err != nil {
		s.t.Fatalf("message/send: %v", err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		s.t.Fatalf("answer %T, want a task", res)
	}
	return task
}

// waitTask polls the task until it satisfies done.
func (s *rawSender) waitTask(id a2a.TaskID, what string, done func(*a2a.Task) bool) *a2a.Task {
	s.t.Helper()
	var got *a2a.Task
	apptest.WaitFor(s.t, 30*time.Second, what, func() bool {
		t, err := s.client.GetTask(context.Background(), &a2a.TaskQueryParams{ID: id})
		if err != nil {
			s.t.Fatalf("tasks/get: %v", err)
		}
		got = t
		return done(t)
	})
	return got
}

func (s *rawSender) ended(id a2a.TaskID) *a2a.Task {
	s.t.Helper()
	return s.waitTask(id, "task "+string(id)+" to end", func(t *a2a.Task) bool { return t.Status.State.Terminal() })
}

func (s *rawSender) working(id a2a.TaskID) *a2a.Task {
	s.t.Helper()
	return s.waitTask(id, "task "+string(id)+" to take bytes", func(t *a2a.Task) bool {
		if t.Status.State.Terminal() {
			s.t.Fatalf("task ended %s: %s", t.Status.State, statusOf(t))
		}
		return t.Status.State == a2a.TaskStateWorking && t.Status.Message != nil
	})
}

// put sends body as file i of transfer id (a whole-file PUT unless
// contentRange is set).
func (s *rawSender) put(id a2a.TaskID, i int, body []byte, contentRange string) (int, string) {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("%s%s%s/%d", s.https, files.Prefix, id, i), bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.token)
	if contentRange != "" {
		req.Header.Set("Content-Range", contentRange)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}

func statusOf(t *a2a.Task) string {
	if t.Status.Message == nil {
		return ""
	}
	var s []string
	for _, p := range t.Status.Message.Parts {
		if tp, ok := p.(a2a.TextPart); ok {
			s = append(s, tp.Text)
		}
	}
	return strings.Join(s, " ")
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// announced is the FilePart announcing a file (files/doc.go).
func announced(p string, size int64, sum string) a2a.Part {
	return a2a.FilePart{
		File:     a2a.FileURI{FileMeta: a2a.FileMeta{Name: filepath.Base(p), MimeType: "text/plain"}, URI: files.NamedInfoURI(sum)},
		Metadata: map[string]any{files.PartMetadataKey: map[string]any{"path": p, "size": size, "sha256": sum}},
	}
}

func inline(name string, b []byte) a2a.Part {
	return a2a.FilePart{File: a2a.FileBytes{FileMeta: a2a.FileMeta{Name: name}, Bytes: base64.StdEncoding.EncodeToString(b)}}
}

// partials lists the partial files left in dir.
func partials(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".meshtray-partial") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func TestReceiveFromHostileSender(t *testing.T) {
	b := apptest.StartNode(t, apptest.Options{Name: "bee", Keychain: "file"})
	mustCLI(t, b, "a2a", "on")
	s := newRawSender(t, b, "stranger")
	// Nothing of this sender needs the owner: every refusal below is the
	// receiver's own, before any popup.
	mustCLI(t, b, "grant", "set", s.grant, "--files", "allow")
	home, _ := os.UserHomeDir()
	bashrc, _ := os.ReadFile(filepath.Join(home, ".bashrc"))
	passwd, _ := os.ReadFile("/etc/passwd")
	evil := []byte("evil\n")

	refused := func(t *testing.T, want string, parts ...a2a.Part) {
		t.Helper()
		task := s.ended(s.announce(parts...).ID)
		if task.Status.State != a2a.TaskStateRejected || !strings.Contains(statusOf(task), want) {
			t.Fatalf("task %s %q, want rejected with %q", task.Status.State, statusOf(task), want)
		}
		if len(approvalsOf(t, b)) != 0 {
			t.Fatal("a refused transfer reached the owner")
		}
	}

	t.Run("names that leave the folder", func(t *testing.T) {
		for _, p := range []string{"../../.bashrc", "/etc/passwd", "a/../../x", `..\..\x`, "C:/Windows/x", "a\x00b"} {
			refused(t, "a file name is refused", announced(p, 5, hexSum(evil)))
		}
		if got, _ := os.ReadFile(filepath.Join(home, ".bashrc")); !bytes.Equal(got, bashrc) {
			t.Fatal(".bashrc changed")
		}
		if got, _ := os.ReadFile("/etc/passwd"); !bytes.Equal(got, passwd) {
			t.Fatal("/etc/passwd changed")
		}
	})

	t.Run("a URI to fetch is refused", func(t *testing.T) {
		refused(t, "does not fetch files from a URI (https URI given)",
			a2a.FilePart{File: a2a.FileURI{FileMeta: a2a.FileMeta{Name: "x.pdf"}, URI: "https://169.254.169.254/latest/meta-data"}})
		refused(t, "does not fetch", a2a.FilePart{File: a2a.FileURI{FileMeta: a2a.FileMeta{Name: "x"}, URI: "file:///etc/passwd"}})
	})

	t.Run("device names are cleaned, inline bytes saved", func(t *testing.T) {
		task := s.ended(s.announce(inline("CON", evil), inline("aux.txt", evil), a2a.TextPart{Text: "two files"}).ID)
		if task.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("task %s %q", task.Status.State, statusOf(task))
		}
		for _, n := range []string{"_CON", "_aux.txt"} {
			if got, err := os.ReadFile(filepath.Join(b.FilesDir, n)); err != nil || !bytes.Equal(got, evil) {
				t.Errorf("%s: %q %v", n, got, err)
			}
		}
		if len(task.Artifacts) != 1 || task.Artifacts[0].Name != "files" {
			t.Fatalf("artifacts %+v", task.Artifacts)
		}
		raw, _ := json.Marshal(task.Artifacts[0].Parts[0].(a2a.DataPart).Data)
		var res files.Result
		if err := json.Unmarshal(raw, &res); err != nil || filepath.IsAbs(res.Dir) || len(res.Files) != 2 || res.Files[0].Path != "_CON" || res.Files[0].SHA256 != hexSum(evil) {
			t.Fatalf("result %s (%v)", raw, err)
		}
	})

	t.Run("inline bytes up to the request body limit", func(t *testing.T) {
		big := bytes.Repeat([]byte("0123456789abcdef"), 700<<10/16) // 700 KiB: ~934 KiB in base64
		task := s.ended(s.announce(inline("big.bin", big)).ID)
		if task.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("task %s %q", task.Status.State, statusOf(task))
		}
		if got, err := os.ReadFile(filepath.Join(b.FilesDir, "big.bin")); err != nil || !bytes.Equal(got, big) {
			t.Fatalf("big.bin: %d bytes, %v", len(got), err)
		}
		// Over it: refused by the A2A endpoint, nothing saved.
		no := false
		_, err := s.client.SendMessage(context.Background(), &a2a.MessageSendParams{
			Message: a2a.NewMessage(a2a.MessageRoleUser, inline("huge.bin", append(big, big...))), Config: &a2a.MessageSendConfig{Blocking: &no}})
		if err == nil {
			t.Fatal("1.4 MiB inline accepted")
		}
		if _, err := os.Stat(filepath.Join(b.FilesDir, "huge.bin")); err == nil {
			t.Fatal("huge.bin saved")
		}
	})

	t.Run("inline metadata that lies about the bytes", func(t *testing.T) {
		p := inline("a.txt", evil).(a2a.FilePart)
		p.Metadata = map[string]any{files.PartMetadataKey: map[string]any{"path": "a.txt", "size": 1, "sha256": hexSum(evil)}}
		refused(t, "metadata does not match its bytes", p)
	})

	t.Run("10,000 tiny files", func(t *testing.T) {
		parts := make([]a2a.Part, 10000)
		for i := range parts {
			parts[i] = announced(fmt.Sprintf("f%05d.txt", i), 1, hexSum([]byte{'x'}))
		}
		// Over the A2A body limit: refused before anything is parsed.
		no := false
		_, err := s.client.SendMessage(context.Background(), &a2a.MessageSendParams{
			Message: a2a.NewMessage(a2a.MessageRoleUser, parts...), Config: &a2a.MessageSendConfig{Blocking: &no}})
		if err == nil {
			t.Fatal("10,000 announced files accepted")
		}
		// Within it, more files than the cap: refused up front.
		refused(t, "over this device's limits", parts[:files.DefaultMaxFiles+1]...)
	})

	t.Run("sizes over the caps", func(t *testing.T) {
		refused(t, "over this device's limits", announced("big.iso", files.DefaultMaxFileSize+1, hexSum(evil)))
		refused(t, "over this device's limits", announced("a.iso", files.DefaultMaxFileSize, hexSum(evil)),
			announced("b.iso", files.DefaultMaxFileSize, hexSum(evil)), announced("c.iso", files.DefaultMaxFileSize, hexSum(evil)),
			announced("d.iso", files.DefaultMaxFileSize, hexSum(evil)), announced("e.iso", 1, hexSum(evil)))
		refused(t, "negative size", announced("neg.iso", -1, hexSum(evil)))
	})

	t.Run("lying about a size while sending", func(t *testing.T) {
		task := s.working(s.announce(announced("liar.txt", 5, hexSum(evil))).ID)
		code, body := s.put(task.ID, 0, []byte("evil\nand much more"), "")
		if code != http.StatusUnprocessableEntity && code != http.StatusRequestEntityTooLarge {
			t.Fatalf("PUT of more bytes than announced: %d %s", code, body)
		}
		end := s.ended(task.ID)
		if end.Status.State != a2a.TaskStateFailed || !strings.Contains(statusOf(end), "size") {
			t.Fatalf("task %s %q", end.Status.State, statusOf(end))
		}
		if ps := partials(t, b.FilesDir); len(ps) != 0 {
			t.Fatalf("partials left: %v", ps)
		}
		if _, err := os.Stat(filepath.Join(b.FilesDir, "liar.txt")); err == nil {
			t.Fatal("the lie was saved")
		}
	})

	t.Run("wrong content for the announced hash", func(t *testing.T) {
		task := s.working(s.announce(announced("hash.txt", 5, hexSum(evil))).ID)
		if code, body := s.put(task.ID, 0, []byte("good\n"), ""); code != http.StatusUnprocessableEntity {
			t.Fatalf("PUT of other bytes: %d %s", code, body)
		}
		if end := s.ended(task.ID); end.Status.State != a2a.TaskStateFailed {
			t.Fatalf("task %s %q", end.Status.State, statusOf(end))
		}
	})

	t.Run("another grant cannot upload into the transfer", func(t *testing.T) {
		other := newRawSender(t, b, "other")
		task := s.working(s.announce(announced("mine.txt", 5, hexSum(evil))).ID)
		if code, _ := other.put(task.ID, 0, evil, ""); code != http.StatusNotFound {
			t.Fatalf("PUT by another grant: %d", code)
		}
		plain, _ := http.NewRequest(http.MethodPut, b.BaseURL+files.Prefix+string(task.ID)+"/0", bytes.NewReader(evil))
		plain.Header.Set("Authorization", "Bearer "+s.token)
		if resp, err := http.DefaultClient.Do(plain); err != nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("PUT over plain http: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		if code, body := s.put(task.ID, 0, evil, ""); code != http.StatusCreated {
			t.Fatalf("PUT by the sender: %d %s", code, body)
		}
		if end := s.ended(task.ID); end.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("task %s %q", end.Status.State, statusOf(end))
		}
	})

	t.Run("A2A 1.0: url, filename, mediaType and raw", func(t *testing.T) {
		rpc := func(method string, params any) map[string]any {
			t.Helper()
			body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
			req, _ := http.NewRequest(http.MethodPost, s.https+"/a2a/v1", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+s.token)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("A2A-Version", "1.0")
			resp, err := s.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out["result"] == nil {
				t.Fatalf("%s: %v %v", method, out, err)
			}
			return out["result"].(map[string]any)
		}
		taskOf := func(res map[string]any) map[string]any {
			if t, ok := res["task"].(map[string]any); ok {
				return t
			}
			return res
		}
		stateOf := func(id string) (string, map[string]any) {
			task := taskOf(rpc("GetTask", map[string]any{"id": id}))
			return task["status"].(map[string]any)["state"].(string), task
		}
		data := []byte("one-oh\n")
		res := rpc("SendMessage", map[string]any{
			"message": map[string]any{"messageId": "m-10a", "role": "ROLE_USER", "parts": []any{
				map[string]any{"url": files.NamedInfoURI(hexSum(data)), "filename": "v1.txt", "mediaType": "text/plain",
					"metadata": map[string]any{files.PartMetadataKey: map[string]any{"path": "v1/v1.txt", "size": len(data), "sha256": hexSum(data)}}},
				map[string]any{"raw": base64.StdEncoding.EncodeToString(data), "filename": "raw.txt", "mediaType": "text/plain"},
			}},
			"configuration": map[string]any{"returnImmediately": true},
		})
		id := taskOf(res)["id"].(string)
		// Working with a status message: the transfer has begun.
		apptest.WaitFor(t, 30*time.Second, "the 1.0 task to take bytes", func() bool {
			st, task := stateOf(id)
			return st == "TASK_STATE_WORKING" && task["status"].(map[string]any)["message"] != nil
		})
		if code, body := s.put(a2a.TaskID(id), 0, data, ""); code != http.StatusCreated {
			t.Fatalf("PUT: %d %s", code, body)
		}
		var st string
		var task map[string]any
		apptest.WaitFor(t, 30*time.Second, "the 1.0 task to end", func() bool {
			st, task = stateOf(id)
			return st != "TASK_STATE_WORKING"
		})
		if st != "TASK_STATE_COMPLETED" {
			t.Fatalf("1.0 task: %v", task)
		}
		for _, p := range []string{"v1/v1.txt", "raw.txt"} {
			if got, err := os.ReadFile(filepath.Join(b.FilesDir, p)); err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s: %q %v", p, got, err)
			}
		}
	})

	t.Run("cancel removes the partial files", func(t *testing.T) {
		big := bytes.Repeat([]byte("x"), 1<<20)
		task := s.working(s.announce(announced("half.bin", 2<<20, hexSum(append(big, big...)))).ID)
		if code, body := s.put(task.ID, 0, big, fmt.Sprintf("bytes 0-%d/%d", len(big)-1, 2<<20)); code != http.StatusNoContent {
			t.Fatalf("first half: %d %s", code, body)
		}
		if ps := partials(t, b.FilesDir); len(ps) != 1 {
			t.Fatalf("partials while receiving: %v", ps)
		}
		if _, err := s.client.CancelTask(context.Background(), &a2a.TaskIDParams{ID: task.ID}); err != nil {
			t.Fatal(err)
		}
		if end := s.ended(task.ID); end.Status.State != a2a.TaskStateCanceled {
			t.Fatalf("task %s", end.Status.State)
		}
		apptest.WaitFor(t, 10*time.Second, "the partial to go", func() bool { return len(partials(t, b.FilesDir)) == 0 })
		if code, _ := s.put(task.ID, 0, big, fmt.Sprintf("bytes %d-%d/%d", len(big), 2*len(big)-1, 2<<20)); code != http.StatusNotFound {
			t.Fatalf("PUT after cancel: %d", code)
		}
	})
}
