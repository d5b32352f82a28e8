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

// jsDir holds the Node project pinning @a2a-js/sdk 0.3.14 (A2A 0.3),
// jsDir1 the one pinning 1.3.0 (A2A 1.0); each is package.json +
// package-lock.json, installed with npm ci.
const (
	jsDir  = "testdata/js"
	jsDir1 = "testdata/js1"
)

// ensureNodeModules installs the pinned JS client of jsDir with npm ci
// when node_modules is missing. node and npm must be on PATH: a missing
// tool fails the test with the install command, never a silent skip.
func ensureNodeModules(t *testing.T, jsDir string) string {
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
	node := ensureNodeModules(t, jsDir)
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

// TestJSClientV1: the official @a2a-js/sdk 1.3.0 client resolves the union
// card, picks its 1.0 interface (sending A2A-Version: 1.0), sends a message
// and streams a task, through the node executor on the real nodes
// registry.
func TestJSClientV1(t *testing.T) {
	t.Parallel()
	node := ensureNodeModules(t, jsDir1)
	// @a2a-js/sdk 1.x declares engines node >= 20 (Debian 12's nodejs is
	// 18): say so rather than fail obscurely inside the SDK.
	if v, err := exec.Command(node, "--version").Output(); err != nil {
		t.Fatalf("node --version: %v", err)
	} else if major, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(string(v)), "v"), "."); len(major) < 2 || major < "20" {
		t.Fatalf("@a2a-js/sdk 1.3.0 needs Node >= 20, this is %s: install Node 20 (NodeSource) for this test", strings.TrimSpace(string(v)))
	}
	reg := realRegistry(t, nil)
	env := newEnv(t, Options{Executor: NewNodeExecutor(reg, nil), Manifest: reg})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs", env.hs.URL, tokA, "please run device.info", "system.notify")
	cmd.Dir = jsDir1
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client.mjs (1.3.0): %v\nstderr:\n%s", err, stderr.String())
	}
	hostname, _ := os.Hostname()
	var out struct {
		Card struct {
			Name       string
			Interfaces []struct{ URL, ProtocolBinding, ProtocolVersion string }
		}
		Versions []string
		Sent     struct {
			ID        string
			State     string
			Artifacts [][]struct {
				Kind string
				Data map[string]any
			}
		}
		Events []struct{ Kind, State string }
		Got    struct {
			ID      string
			History []string
		}
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("client output: %v\n%s", err, stdout.String())
	}
	if out.Card.Name != "testbox" || len(out.Card.Interfaces) != 2 || out.Card.Interfaces[0].ProtocolVersion != "1.0" || out.Card.Interfaces[0].URL != env.hs.URL+RPCPath {
		t.Errorf("card as the JS 1.3.0 client saw it: %+v", out.Card)
	}
	for _, v := range out.Versions {
		if v != "1.0" {
			t.Errorf("the JS 1.3.0 client sent A2A-Version %q (all: %q)", v, out.Versions)
			break
		}
	}
	s := out.Sent
	if s.State != "TASK_STATE_COMPLETED" || len(s.Artifacts) != 1 || len(s.Artifacts[0]) != 1 ||
		s.Artifacts[0][0].Kind != "data" || s.Artifacts[0][0].Data["hostname"] != hostname {
		t.Errorf("SendMessage result: %+v", s)
	}
	var kinds []string
	for _, ev := range out.Events {
		kinds = append(kinds, ev.Kind+":"+ev.State)
	}
	// system.notify without a title: the stream ends at input-required.
	if want := "task:TASK_STATE_SUBMITTED statusUpdate:TASK_STATE_WORKING statusUpdate:TASK_STATE_INPUT_REQUIRED"; strings.Join(kinds, " ") != want {
		t.Errorf("stream events %v, want %s", kinds, want)
	}
	if out.Got.ID != s.ID || len(out.Got.History) != 1 || out.Got.History[0] != "ROLE_USER" {
		t.Errorf("GetTask with historyLength 1: %+v", out.Got)
	}
}
