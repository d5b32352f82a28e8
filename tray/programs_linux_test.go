//go:build linux

package tray

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The programs the tray tests run, built once per test binary into a
// directory of their own (under the test binary's directory, which go test
// removes after the run):
//
//   - meshtray: this test binary (hard-linked, else copied), which runs as
//     the meshtray command with the tray wired in (envTrayMain);
//   - meshtray-ui: the real window program, `go build -tags meshtray_ui`
//     of main.go, which the tray starts from next to its own executable.
var (
	progOnce sync.Once
	progDir  string
	progErr  error
)

// programs returns the directory holding meshtray and meshtray-ui.
func programs(t testing.TB) string {
	t.Helper()
	progOnce.Do(func() { progDir, progErr = buildPrograms() })
	if progErr != nil {
		t.Fatal(progErr)
	}
	return progDir
}

// trayExe is the meshtray of programs: the tray child finds meshtray-ui
// next to it.
func trayExe(t testing.TB) string { return filepath.Join(programs(t), "meshtray") }

// uiExe is the real meshtray-ui of programs.
func uiExe(t testing.TB) string { return filepath.Join(programs(t), UIProgram) }

func buildPrograms() (string, error) {
	dir, err := os.MkdirTemp(filepath.Dir(os.Args[0]), "programs-")
	if err != nil {
		if dir, err = os.MkdirTemp("", "meshtray-programs-"); err != nil {
			return "", err
		}
	}
	if err := linkOrCopy(os.Args[0], filepath.Join(dir, "meshtray")); err != nil {
		return "", err
	}
	if err := goBuild(filepath.Join(dir, UIProgram), raceEnabled, "meshtray_ui"); err != nil {
		return "", err
	}
	return dir, nil
}

// goBuild builds main.go (package meshtray) with tags into out; race
// builds it with -race.
func goBuild(out string, race bool, tags string, env ...string) error {
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, "meshtray")...)
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, b)
	}
	return nil
}

func linkOrCopy(src, dst string) error {
	if os.Link(src, dst) == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
