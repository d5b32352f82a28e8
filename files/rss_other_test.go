//go:build !linux

package files

import "os"

func maxRSS(*os.ProcessState) int64 { return -1 }

func cpuSecs(ps *os.ProcessState) float64 { return (ps.UserTime() + ps.SystemTime()).Seconds() }
