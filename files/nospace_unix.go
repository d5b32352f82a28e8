//go:build unix

package files

import "syscall"

var errDiskQuota error = syscall.EDQUOT
