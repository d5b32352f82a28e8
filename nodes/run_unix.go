//go:build unix

package nodes

import (
	"os/exec"
	"syscall"
)

// killProcessGroup starts cmd as the leader of a new process group and makes
// its cancellation kill the whole group (kill(2) with a negative pid), so
// children the command started die with it. Where the OS has it (Linux),
// the command also dies with the node (setPdeathsig).
func killProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(cmd.SysProcAttr)
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
