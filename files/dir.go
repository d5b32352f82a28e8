package files

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// AppFolder is the folder meshtray receives into, inside the download dir.
const AppFolder = "meshtray"

// DefaultDir returns the default receive folder: the user's download
// directory joined with AppFolder. The download directory is, on Windows,
// the Downloads known folder (FOLDERID_Downloads, which the user may have
// moved); on macOS ~/Downloads; elsewhere XDG_DOWNLOAD_DIR from
// $XDG_CONFIG_HOME/user-dirs.dirs (default ~/.config/user-dirs.dirs, the
// freedesktop xdg-user-dirs format: a line XDG_DOWNLOAD_DIR="$HOME/..." or
// an absolute path), falling back to ~/Downloads when the file or the line
// is missing or names $HOME itself (xdg-user-dirs' "disabled").
func DefaultDir() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	dl := filepath.Join(home, "Downloads")
	switch runtime.GOOS {
	case "windows":
		if p, err := knownDownloads(); err == nil && p != "" {
			dl = p
		}
	case "darwin", "ios":
	default:
		cfg := os.Getenv("XDG_CONFIG_HOME")
		if cfg == "" || !filepath.IsAbs(cfg) {
			cfg = filepath.Join(home, ".config")
		}
		if p := xdgUserDir(filepath.Join(cfg, "user-dirs.dirs"), "XDG_DOWNLOAD_DIR", home); p != "" {
			dl = p
		}
	}
	return filepath.Join(dl, AppFolder), nil
}

// xdgUserDir reads one entry of a user-dirs.dirs file; "" when absent,
// malformed or equal to home.
func xdgUserDir(file, key, home string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	var found string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") || strings.TrimSpace(k) != key {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
			continue
		}
		v = v[1 : len(v)-1]
		v = strings.ReplaceAll(v, `\"`, `"`)
		v = strings.ReplaceAll(v, `\\`, `\`)
		switch {
		case v == "$HOME" || v == "$HOME/":
			found = ""
		case strings.HasPrefix(v, "$HOME/"):
			found = filepath.Join(home, v[len("$HOME/"):])
		case filepath.IsAbs(v):
			found = filepath.Clean(v)
		default:
			continue
		}
	}
	if found != "" && filepath.Clean(found) == filepath.Clean(home) {
		return ""
	}
	return found
}
