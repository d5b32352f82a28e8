//go:build !unix && !windows

package files

import "syscall"

var errDiskQuota error = syscall.ENOSPC
