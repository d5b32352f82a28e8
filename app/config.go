package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"
	"github.com/dustin/go-humanize"

	"meshtray/files"
	"meshtray/store"
)

// DefaultPort is the TCP port of the node's HTTP surfaces (DESIGN.md).
const DefaultPort = 47654

// Keychain backends selectable with --keychain.
const (
	KeychainOS   = "os"
	KeychainFile = "file"
)

// Config is the node's configuration: defaults, then the config file in the
// state dir (config.toml or config.json, same keys), then command-line flags.
// Runtime toggles the owner flips while the node runs (A2A publishing, LAN
// reachability, capability policies) are Settings, not Config.
type Config struct {
	// StateDir holds the config file, settings, the lock, the control token
	// and, with --keychain file, the secrets file. Default: the OS user config
	// dir + "/meshtray".
	StateDir string `toml:"-" json:"-"`
	// Port is the TCP port of every listener (loopback HTTP, tailnet/LAN HTTPS).
	Port int `toml:"port" json:"port"`
	// Name is the device name shown to peers. Default: the host name.
	Name string `toml:"name" json:"name"`
	// Keychain is "os" (go-keyring) or "file" (0600 file in the state dir).
	Keychain string `toml:"keychain" json:"keychain"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `toml:"log_level" json:"log_level"`
	// ApprovalTimeout is how long a delegation or capability call waits for
	// the owner before it is refused.
	ApprovalTimeout Duration `toml:"approval_timeout" json:"approval_timeout"`
	// Tailscale enables the tailnet watcher and HTTPS listeners on the
	// device's tailnet addresses.
	Tailscale *bool `toml:"tailscale" json:"tailscale"`

	A2A   A2AConfig   `toml:"a2a" json:"a2a"`
	Nodes NodesConfig `toml:"nodes" json:"nodes"`
	Files FilesConfig `toml:"files" json:"files"`
	Audit AuditConfig `toml:"audit" json:"audit"`
	// Database configures meshtray.db (the [database] table).
	Database DatabaseConfig `toml:"database" json:"database"`

	// ResetDatabase moves an unreadable database aside (kept as
	// meshtray.db.corrupt-<time>) and starts with an empty one; only from
	// the command line (store.ResetFlag), never from the config file.
	ResetDatabase bool `toml:"-" json:"-"`

	// LogFile is the file the node's log also goes to (the tray app's);
	// "" when it logs to stderr only (serve). Status reports its dir.
	LogFile string `toml:"-" json:"-"`

	// keychainFromFile records that the config file (not a flag) chose the
	// keychain backend; see the --keychain rule in Open.
	keychainFromFile bool
}

// A2AConfig configures the A2A surface.
type A2AConfig struct {
	MaxTasks        int           `toml:"max_tasks" json:"max_tasks"`                   // task store bound (default 512)
	MaxLivePerGrant int           `toml:"max_live_per_grant" json:"max_live_per_grant"` // running tasks per grant (default 16; tasks waiting for their caller are bounded apart)
	Forward         ForwardConfig `toml:"forward" json:"forward"`
}

// AuditConfig bounds the audit trail (the [audit] table): entries beyond
// MaxEntries, and entries older than MaxAge, are pruned at start, every
// AuditPruneEvery, and as entries are appended; the chain stays verifiable
// from the newest pruned entry (store.PruneAudit).
type AuditConfig struct {
	MaxEntries int      `toml:"max_entries" json:"max_entries"` // default 100000 (store.DefaultAuditMaxEntries)
	MaxAge     Duration `toml:"max_age" json:"max_age"`         // default 8760h: 365 days (store.DefaultAuditMaxAge)
}

// DatabaseConfig configures the database (the [database] table).
type DatabaseConfig struct {
	// Sync is what a write acknowledging a task's end waits for: "normal"
	// (the default: committed, so it survives a crash of meshtray; a
	// power loss may lose the last seconds of task ends, the database
	// stays consistent; decisions and audit entries are synced to the disk
	// still) or "full" (every one synced to the disk first: it survives a
	// power loss, at about a millisecond per write on a typical disk).
	// See store.Durability.
	Sync string `toml:"sync" json:"sync"`
}

// ForwardConfig relays approved incoming tasks to another A2A agent.
type ForwardConfig struct {
	URL   string `toml:"url" json:"url"`     // base URL of the upstream agent (its card is fetched)
	Token string `toml:"token" json:"token"` // bearer token for it; prefer `meshtray forward set --token-stdin` (keychain)
}

// LogValue implements slog.LogValuer without the token.
func (f ForwardConfig) LogValue() slog.Value {
	return slog.GroupValue(slog.String("url", f.URL), slog.Bool("token_set", f.Token != ""))
}

// LogValue implements slog.LogValuer: the settings an operator needs, the
// forward token left out.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("state_dir", c.StateDir),
		slog.Int("port", c.Port),
		slog.String("name", c.Name),
		slog.String("keychain", c.Keychain),
		slog.String("log_level", c.LogLevel),
		slog.Duration("approval_timeout", c.ApprovalTimeout.Duration),
		slog.Bool("tailscale", c.TailscaleEnabled()),
		slog.Any("forward", c.A2A.Forward),
		slog.Int("run_rules", len(c.Nodes.Run)),
		slog.Int("audit_max_entries", c.Audit.MaxEntries),
		slog.Duration("audit_max_age", c.Audit.MaxAge.Duration),
		slog.String("database_sync", c.Database.Sync),
	)
}

// FilesConfig configures receiving files (package files). Sizes are bytes,
// written as a number or with a unit: "16GiB", "500MB" (ByteSize).
type FilesConfig struct {
	// Dir is the receive folder. Default: files.DefaultDir(), the user's
	// download folder + "/meshtray".
	Dir string `toml:"dir" json:"dir"`
	// MaxFileSize bounds one file (default files.DefaultMaxFileSize, 16 GiB).
	// The three caps must be positive (Validate); Defaults sets them.
	MaxFileSize ByteSize `toml:"max_file_size" json:"max_file_size"`
	// MaxTransferSize bounds all files of one transfer (default
	// files.DefaultMaxTransferSize, 64 GiB).
	MaxTransferSize ByteSize `toml:"max_transfer_size" json:"max_transfer_size"`
	// MaxFiles bounds the files of one transfer (default
	// files.DefaultMaxFiles, 1000).
	MaxFiles int `toml:"max_files" json:"max_files"`
	// KeepFree is the free space a transfer must leave on the folder's disk
	// (default files.DefaultKeepFree, 256 MiB, set by Defaults); 0 keeps
	// nothing free.
	KeepFree ByteSize `toml:"keep_free" json:"keep_free"`
}

// ByteSize is a size in bytes, written in config files as a number or a
// number with a unit, read by go-humanize's ParseBytes: B, KB/MB/GB/TB
// (powers of 1000), KiB/MiB/GiB/TiB or Ki/Mi/Gi/Ti (powers of 1024),
// case-insensitive, a space allowed before the unit, "1.5GiB" and
// "1,000 KB" too. A lone K, M, G, T (P, E) is a power of 1024, as
// meshtray always read it (humanize would read 1000); nothing may follow
// the unit. At most 2^62 bytes.
type ByteSize int64

// maxByteSize bounds a ByteSize (far above any disk; keeps sums of sizes
// in an int64).
const maxByteSize = 1 << 62

// UnmarshalText reads "16GiB", "500 MB", "4G", "1048576".
func (b *ByteSize) UnmarshalText(t []byte) error {
	s := strings.TrimSpace(string(t))
	if n := len(s); n > 0 && strings.IndexByte("kKmMgGtTpPeE", s[n-1]) >= 0 {
		s += "iB" // a lone K/M/G/T: binary, as before (humanize reads "4G" as 4e9)
	}
	v, err := humanize.ParseBytes(s)
	if err != nil {
		return fmt.Errorf("size %q: want a number of bytes, or one with a unit (16GiB, 500MB)", string(t))
	}
	if v > maxByteSize {
		return fmt.Errorf("size %q is too large", string(t))
	}
	*b = ByteSize(v)
	return nil
}

// UnmarshalJSON takes a number or a string (UnmarshalText).
func (b *ByteSize) UnmarshalJSON(j []byte) error {
	if len(j) > 0 && j[0] == '"' {
		var s string
		if err := json.Unmarshal(j, &s); err != nil {
			return err
		}
		return b.UnmarshalText([]byte(s))
	}
	var v int64
	if err := json.Unmarshal(j, &v); err != nil {
		return fmt.Errorf("size: %w", err)
	}
	*b = ByteSize(v)
	return nil
}

// NodesConfig configures the capability registry.
type NodesConfig struct {
	// Run is the system.run allowlist; empty means system.run is unavailable.
	Run []RunRule `toml:"run" json:"run"`
}

// RunRule allows one program for system.run.
type RunRule struct {
	Name    string   `toml:"name" json:"name"`       // argv[0] as the caller sends it
	Path    string   `toml:"path" json:"path"`       // absolute path; default: looked up in PATH at start
	Timeout Duration `toml:"timeout" json:"timeout"` // default and maximum run time
	// Env names variables of the node's environment passed to the program
	// on top of the minimal one every command gets (PATH, HOME, LANG, LC_*,
	// TZ, USER).
	Env []string `toml:"env" json:"env"`
}

// Duration is a time.Duration written as "90s", "2m" in config files.
type Duration struct{ time.Duration }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// DefaultStateDir is the OS user config dir + "/meshtray".
func DefaultStateDir() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "meshtray")
}

// Defaults returns the configuration before the config file and flags.
func Defaults() Config {
	name, _ := os.Hostname()
	return Config{
		StateDir:        DefaultStateDir(),
		Port:            DefaultPort,
		Name:            name,
		Keychain:        KeychainOS,
		LogLevel:        "info",
		ApprovalTimeout: Duration{120 * time.Second},
		A2A:             A2AConfig{MaxTasks: 512, MaxLivePerGrant: 16},
		Audit:           AuditConfig{MaxEntries: store.DefaultAuditMaxEntries, MaxAge: Duration{store.DefaultAuditMaxAge}},
		Database:        DatabaseConfig{Sync: store.DurableNormal.String()},
		Files: FilesConfig{MaxFileSize: files.DefaultMaxFileSize, MaxTransferSize: files.DefaultMaxTransferSize,
			MaxFiles: files.DefaultMaxFiles, KeepFree: files.DefaultKeepFree},
	}
}

// ConfigFiles are the config file names looked for in the state dir.
var ConfigFiles = []string{"config.toml", "config.json"}

// LoadConfigFile overlays the config file found in cfg.StateDir onto cfg.
// A missing file is not an error; two files, or an unknown key, are.
func LoadConfigFile(cfg *Config) (path string, err error) {
	var found []string
	for _, name := range ConfigFiles {
		p := filepath.Join(cfg.StateDir, name)
		if _, err := os.Stat(p); err == nil {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", fmt.Errorf("both %s and %s exist: keep one", found[0], found[1])
	}
	path = found[0]
	b, err := os.ReadFile(path)
	if err != nil {
		return path, err
	}
	before := cfg.Keychain
	fileCfg := *cfg
	fileCfg.Keychain = ""
	if strings.HasSuffix(path, ".toml") {
		md, err := toml.Decode(string(b), &fileCfg)
		if err != nil {
			return path, fmt.Errorf("%s: %w", path, err)
		}
		if un := md.Undecoded(); len(un) > 0 {
			return path, fmt.Errorf("%s: unknown key %q", path, un[0].String())
		}
	} else {
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&fileCfg); err != nil {
			return path, fmt.Errorf("%s: %w", path, err)
		}
	}
	if fileCfg.Keychain == "" {
		fileCfg.Keychain = before
	} else {
		fileCfg.keychainFromFile = true
	}
	*cfg = fileCfg
	return path, nil
}

// Validate checks the configuration and fills derived defaults.
func (c *Config) Validate() error {
	var errs []error
	if c.Port < 0 || c.Port > 65535 { // 0: any free port (tests)
		errs = append(errs, fmt.Errorf("port %d out of range 0-65535 (0: any free port)", c.Port))
	}
	if strings.TrimSpace(c.StateDir) == "" {
		errs = append(errs, errors.New("state dir is empty (--state-dir, or leave it out for the default)"))
	}
	if strings.TrimSpace(c.Name) == "" {
		errs = append(errs, errors.New("name is empty"))
	}
	if strings.IndexFunc(c.Name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		errs = append(errs, fmt.Errorf("name %q has control or invisible characters", c.Name))
	}
	if len(c.Name) > 64 {
		errs = append(errs, fmt.Errorf("name is %d bytes long; at most 64", len(c.Name)))
	}
	switch c.Keychain {
	case KeychainOS, KeychainFile:
	default:
		errs = append(errs, fmt.Errorf("keychain %q: want %q or %q", c.Keychain, KeychainOS, KeychainFile))
	}
	if _, err := ParseLogLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	if c.ApprovalTimeout.Duration <= 0 {
		errs = append(errs, errors.New("approval_timeout must be positive"))
	}
	if c.A2A.MaxTasks <= 0 || c.A2A.MaxLivePerGrant <= 0 {
		errs = append(errs, errors.New("a2a.max_tasks and a2a.max_live_per_grant must be positive"))
	}
	for _, lim := range []struct {
		key string
		v   int64
		def string
	}{
		{"max_file_size", int64(c.Files.MaxFileSize), humanize.IBytes(files.DefaultMaxFileSize)},
		{"max_transfer_size", int64(c.Files.MaxTransferSize), humanize.IBytes(files.DefaultMaxTransferSize)},
		{"max_files", int64(c.Files.MaxFiles), fmt.Sprint(files.DefaultMaxFiles)},
	} {
		if lim.v <= 0 {
			errs = append(errs, fmt.Errorf("files.%s is %d: a cap of 0 would refuse every transfer; leave it out for the default (%s)", lim.key, lim.v, lim.def))
		}
	}
	if c.Files.KeepFree < 0 {
		errs = append(errs, errors.New("files.keep_free must not be negative (0 keeps nothing free)"))
	}
	if c.Files.Dir != "" && !filepath.IsAbs(c.Files.Dir) {
		errs = append(errs, fmt.Errorf("files.dir %q must be an absolute path", c.Files.Dir))
	}
	if d, err := store.ParseDurability(c.Database.Sync); err != nil || d == store.DurableCommit {
		errs = append(errs, fmt.Errorf("database.sync %q: want \"normal\" or \"full\"", c.Database.Sync))
	}
	if c.Audit.MaxEntries <= 0 || c.Audit.MaxAge.Duration <= 0 {
		errs = append(errs, errors.New("audit.max_entries and audit.max_age must be positive"))
	}
	for i, r := range c.Nodes.Run {
		if r.Name == "" {
			errs = append(errs, fmt.Errorf("nodes.run[%d]: name is empty", i))
		}
	}
	return errors.Join(errs...)
}

// TailscaleEnabled reports whether the tailnet watcher runs (default on).
func (c *Config) TailscaleEnabled() bool { return c.Tailscale == nil || *c.Tailscale }

// ParseLogLevel maps debug|info|warn|error to a slog.Level.
func ParseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log level %q: want debug, info, warn or error", s)
	}
	return l, nil
}
