//go:build !unix

package nodes

import "os/exec"

// killProcessGroup keeps exec's default cancellation: kill the process
// (TerminateProcess on Windows). Its children are not killed.
func killProcessGroup(cmd *exec.Cmd) {}
