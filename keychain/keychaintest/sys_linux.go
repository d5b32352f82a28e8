package keychaintest

import "syscall"

var sigStop, sigCont, sigTerm = syscall.SIGSTOP, syscall.SIGCONT, syscall.SIGTERM

func supported() error { return nil }

// sysProcAttr makes the daemons die with the test process (even when it is
// killed by a test timeout), so no orphan keeps a socket in /tmp.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
