//go:build windows

package files

import "golang.org/x/sys/windows"

func knownDownloads() (string, error) {
	return windows.KnownFolderPath(windows.FOLDERID_Downloads, 0)
}

// freeSpace is the number of bytes the calling user may still write on the
// volume holding dir (GetDiskFreeSpaceExW's lpFreeBytesAvailableToCaller,
// which honours quotas).
func freeSpace(dir string) (uint64, error) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return 0, err
	}
	var avail, total, free uint64
	if err := windows.GetDiskFreeSpaceEx(p, &avail, &total, &free); err != nil {
		return 0, err
	}
	return avail, nil
}
