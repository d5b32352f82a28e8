package nodes

import "syscall"

// setPdeathsig makes the kernel send SIGKILL to the command when the node
// dies, however it dies (prctl(2) PR_SET_PDEATHSIG, set between fork and
// exec). The signal follows the thread that started the command; Go
// threads live as long as the process unless a goroutine locked to one
// exits, which meshtray never does.
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
