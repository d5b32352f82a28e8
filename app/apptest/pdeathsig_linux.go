package apptest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd when this test process dies (a
// test timeout must not leave nodes running).
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
