package tray

import "os/exec"

// startDetached starts a helper program (a file manager opener) and reaps
// it when it exits; the tray does not wait for it.
func startDetached(cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait() //nolint:errcheck // the opener's status tells nothing more
	return nil
}
