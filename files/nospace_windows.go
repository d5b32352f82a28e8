//go:build windows

package files

import "golang.org/x/sys/windows"

// ERROR_DISK_FULL; ENOSPC is ERROR_HANDLE_DISK_FULL on Windows.
var errDiskQuota error = windows.ERROR_DISK_FULL
