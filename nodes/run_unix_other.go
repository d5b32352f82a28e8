//go:build unix && !linux

package nodes

import "syscall"

// setPdeathsig: no parent-death signal here; a command the node's death
// leaves behind runs to its end.
func setPdeathsig(*syscall.SysProcAttr) {}
