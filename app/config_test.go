package app

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshtray/files"
)

func TestLoadConfigFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		files   map[string]string
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "none", check: func(t *testing.T, c Config) {
			if c.Port != DefaultPort || c.Keychain != KeychainOS || c.keychainFromFile || c.Database.Sync != "normal" {
				t.Errorf("defaults changed: %+v", c)
			}
		}},
		{name: "toml", files: map[string]string{"config.toml": `
port = 47700
name = "desk"
keychain = "file"
approval_timeout = "30s"
[a2a]
max_tasks = 64
[database]
sync = "full"
[a2a.forward]
url = "http://127.0.0.1:9999"
[[nodes.run]]
name = "uname"
timeout = "5s"
env = ["KUBECONFIG"]
`}, check: func(t *testing.T, c Config) {
			if c.Port != 47700 || c.Name != "desk" || c.Keychain != KeychainFile || !c.keychainFromFile {
				t.Errorf("got %+v", c)
			}
			if c.ApprovalTimeout.Duration != 30*time.Second || c.A2A.MaxTasks != 64 || c.A2A.MaxLivePerGrant != 16 || c.Database.Sync != "full" {
				t.Errorf("got %+v", c)
			}
			if c.A2A.Forward.URL != "http://127.0.0.1:9999" || len(c.Nodes.Run) != 1 || c.Nodes.Run[0].Timeout.Duration != 5*time.Second {
				t.Errorf("got %+v", c)
			}
			if rr := runRules(c.Nodes.Run); len(rr) != 1 || rr[0].Name != "uname" || rr[0].Timeout != 5*time.Second || len(rr[0].Env) != 1 || rr[0].Env[0] != "KUBECONFIG" {
				t.Errorf("system.run rules handed to nodes: %+v", rr)
			}
		}},
		{name: "json", files: map[string]string{"config.json": `{"port": 47701, "log_level": "debug"}`},
			check: func(t *testing.T, c Config) {
				if c.Port != 47701 || c.LogLevel != "debug" || c.keychainFromFile {
					t.Errorf("got %+v", c)
				}
			}},
		{name: "unknown toml key", files: map[string]string{"config.toml": "prot = 1\n"}, wantErr: `unknown key "prot"`},
		{name: "unknown json key", files: map[string]string{"config.json": `{"prot": 1}`}, wantErr: `unknown field "prot"`},
		{name: "both", files: map[string]string{"config.toml": "", "config.json": "{}"}, wantErr: "keep one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for name, body := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			c := Defaults()
			c.StateDir = dir
			_, err := LoadConfigFile(&c)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	c := Defaults()
	c.Port = 70000
	c.Keychain = "vault"
	c.LogLevel = "loud"
	c.StateDir = " "
	c.Name = "Evil\x1b[2J\nline"
	c.Database.Sync = "off"
	err := c.Validate()
	for _, want := range []string{`database.sync "off"`, "port 70000", `keychain "vault"`, `log level "loud"`, "state dir is empty", "control or invisible characters"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
}

func TestStateLock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := AcquireLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = AcquireLock(dir)
	var running *ErrAlreadyRunning
	if !errors.As(err, &running) || running.PID != os.Getpid() {
		t.Fatalf("second lock: %v, want ErrAlreadyRunning with our pid", err)
	}
	if !strings.Contains(err.Error(), "already running (pid ") {
		t.Fatalf("message %q", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := AcquireLock(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l2.Release()
}

func TestSettingsPersist(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := openSettings(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Update(func(s *Settings) { s.A2AEnabled = true; s.LAN = true }); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, settingsFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("settings mode %v, want 0600", fi.Mode().Perm())
	}
	st2, err := openSettings(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s := st2.Get(); !s.A2AEnabled || !s.LAN {
		t.Fatalf("reloaded settings = %+v", s)
	}
}

// TestFilesZeroes: keep_free = "0" keeps nothing free (files.Limits gets a
// real 0, not its 256 MiB default); a cap of 0 is refused by name; keys
// left out take the files defaults.
func TestFilesZeroes(t *testing.T) {
	t.Parallel()
	load := func(t *testing.T, body string) (Config, error) {
		t.Helper()
		c := Defaults()
		c.StateDir = t.TempDir()
		if err := os.WriteFile(filepath.Join(c.StateDir, "config.toml"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadConfigFile(&c); err != nil {
			t.Fatal(err)
		}
		return c, c.Validate()
	}
	limits := func(t *testing.T, c Config) files.Limits {
		t.Helper()
		n := &Node{cfg: c, log: slog.New(slog.DiscardHandler)}
		n.cfg.Files.Dir = t.TempDir()
		n.startFiles()
		r, err := n.recv.receiver()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r.Limits()
	}
	c, err := load(t, "[files]\nkeep_free = \"0\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if l := limits(t, c); l.KeepFree != 0 || l.MaxFileSize != files.DefaultMaxFileSize || l.MaxFiles != files.DefaultMaxFiles {
		t.Errorf(`keep_free = "0": receiver limits %+v, want KeepFree 0 and the default caps`, l)
	}
	c, err = load(t, "[files]\nmax_files = 7\n")
	if err != nil {
		t.Fatal(err)
	}
	if l := limits(t, c); l.KeepFree != files.DefaultKeepFree || l.MaxFiles != 7 {
		t.Errorf("keep_free left out: receiver limits %+v, want KeepFree %d", l, files.DefaultKeepFree)
	}
	for _, key := range []string{"max_file_size", "max_transfer_size", "max_files"} {
		val := `"0"`
		if key == "max_files" {
			val = "0"
		}
		_, err := load(t, "[files]\n"+key+" = "+val+"\n")
		if err == nil || !strings.Contains(err.Error(), "files."+key+" is 0") || !strings.Contains(err.Error(), "leave it out for the default") {
			t.Errorf("%s = 0: Validate() = %v, want it refused by name", key, err)
		}
	}
}
