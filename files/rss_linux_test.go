package files

import (
	"os"
	"syscall"
)

// maxRSS is an exited process's peak resident set (getrusage ru_maxrss,
// KiB on Linux).
func maxRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10
	}
	return -1
}

// cpuSecs is the CPU time (user + system) an exited process used.
func cpuSecs(ps *os.ProcessState) float64 { return (ps.UserTime() + ps.SystemTime()).Seconds() }
