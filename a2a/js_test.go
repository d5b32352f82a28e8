package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// jsDir holds the Node project pinning @a2a-js/sdk 0.3.14
// (package.json + package-lock.json).
const jsDir = "testdata/js"

// ensureNodeModules installs the pinned JS client with npm ci when
// node_modules is missing. node and npm must be on PATH: a missing tool
// fails the test with the install command, never a silent skip.
func ensureNodeModules(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: apt-get install -y nodejs npm (Node >= 18)")
	}
	if _, err := os.Stat(filepath.Join(jsDir, "node_modules", "@a2a-js", "sdk", "package.json")); err == nil {
		return node
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatal("npm is not installed: apt-get install -y npm")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = jsDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", jsDir, err, out)
	}
	return node
}

// TestJSClient: the official @a2a-js/sdk 0.3.14 client resolves the card,
// sends a message (blocking) and streams a task against the server, over
// a real loopback listener, through the node executor on the real nodes registry.
func TestJSClient(t *testing.T) {
	t.Parallel()
	node := ensureNodeModules(t)
	reg := realRegistry(t, nil)
	env := newEnv(t, Options{Executor: NewNodeExecutor(reg, nil), Manifest: reg})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs", env.hs.URL, tokA, "please run device.info", "system.notify")
	cmd.Dir = jsDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client.mjs: %v\nstderr:\n%s", err, stderr.String())
	}
	hostname, _ := os.Hostname()
	var out struct {
		Card struct {
			Name, URL, ProtocolVersion string
		}
		Sent struct {
			Kind      string
			ID        string
			Status    struct{ State string }
			Artifacts []struct {
				Parts []struct {
					Kind string
					Data map[string]any
					Text string
				}
			}
		}
		Events []struct {
			Kind   string
			Final  bool
			Status struct{ State string }
		}
		Got struct {
			ID      string
			History []struct{ Role string }
		}
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("client output: %v\n%s", err, stdout.String())
	}
	if out.Card.Name != "testbox" || out.Card.URL != env.hs.URL+RPCPath || out.Card.ProtocolVersion != "0.3.0" {
		t.Errorf("card as the JS client saw it: %+v", out.Card)
	}
	s := out.Sent
	if s.Kind != "task" || s.Status.State != "completed" || len(s.Artifacts) != 1 || len(s.Artifacts[0].Parts) != 1 ||
		s.Artifacts[0].Parts[0].Kind != "data" || s.Artifacts[0].Parts[0].Data["hostname"] != hostname {
		t.Errorf("message/send result: %+v", s)
	}
	var kinds []string
	for _, ev := range out.Events {
		k := ev.Kind
		if ev.Kind == "task" || ev.Kind == "status-update" {
			k += ":" + ev.Status.State
		}
		if ev.Final {
			k += ":final"
		}
		kinds = append(kinds, k)
	}
	// system.notify without a title: the stream ends at input-required.
	if want := "task:submitted status-update:working status-update:input-required:final"; strings.Join(kinds, " ") != want {
		t.Errorf("stream events %v, want %s", kinds, want)
	}
	if out.Got.ID != s.ID || len(out.Got.History) != 1 {
		t.Errorf("tasks/get with historyLength 1: %+v", out.Got)
	}
}
