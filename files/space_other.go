//go:build !windows && !linux && !darwin && !freebsd && !openbsd

package files

import "math"

func knownDownloads() (string, error) { return "", nil }

// freeSpace is unknown here: no up-front check, a full disk still fails the
// write cleanly.
func freeSpace(string) (uint64, error) { return math.MaxUint64, nil }
