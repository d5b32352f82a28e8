package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/shirou/gopsutil/v3/cpu"
	"github.com/shirou/gopsutil/v3/host"
	"github.com/shirou/gopsutil/v3/mem"
)

// DefaultPowerSupplyDir is where Linux lists power supplies
// (Documentation/ABI/testing/sysfs-class-power).
const DefaultPowerSupplyDir = "/sys/class/power_supply"

// hostFacts is what device.info reports that does not change while meshtray
// runs, gathered once by New.
type hostFacts struct {
	hostname, os, platform, version, kernel, arch string
	bootTime                                      uint64 // Unix seconds
	cpuCount                                      int    // logical CPUs
	cpuModel                                      string
	batteries                                     []string // sysfs directories of system batteries

	mu   sync.Mutex
	last *sample // guarded by mu
}

func gatherFacts(info host.InfoStat, osEnv, powerDir string, log *slog.Logger) *hostFacts {
	f := &hostFacts{
		hostname: info.Hostname,
		os:       osEnv,
		platform: info.Platform,
		version:  info.PlatformVersion,
		kernel:   info.KernelVersion,
		arch:     info.KernelArch,
		bootTime: info.BootTime,
	}
	if f.bootTime == 0 {
		if bt, err := host.BootTime(); err == nil {
			f.bootTime = bt
		} else {
			log.Debug("host.BootTime failed", "err", err)
		}
	}
	if n, err := cpu.Counts(true); err == nil {
		f.cpuCount = n
	} else {
		log.Debug("cpu.Counts failed", "err", err)
	}
	if infos, err := cpu.Info(); err == nil && len(infos) > 0 {
		f.cpuModel = strings.TrimSpace(infos[0].ModelName)
	} else {
		log.Debug("cpu.Info failed", "err", err)
	}
	if powerDir == "" {
		powerDir = DefaultPowerSupplyDir
	}
	f.batteries = findBatteries(powerDir)
	return f
}

// findBatteries lists the power supplies of type "Battery" that power the
// system (scope is not "Device": a mouse's battery is not the laptop's).
func findBatteries(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if readSysfs(filepath.Join(p, "type")) != "Battery" {
			continue
		}
		if readSysfs(filepath.Join(p, "scope")) == "Device" {
			continue
		}
		out = append(out, p)
	}
	return out
}

// readSysfs reads a small sysfs attribute, trimmed; "" when unreadable.
func readSysfs(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var buf [128]byte
	n, _ := f.Read(buf[:])
	return strings.TrimSpace(string(buf[:n]))
}

// Battery is one system battery in device.info.
type Battery struct {
	Name    string `json:"name"`              // e.g. BAT0
	Percent *int   `json:"percent,omitempty"` // 0-100, from sysfs capacity
	Status  string `json:"status,omitempty"`  // Charging, Discharging, Full, Not charging, Unknown
}

// DeviceInfo is the result of device.info. Memory and battery figures are
// sampled at most once a second (sampleTTL); the rest is read per call or
// fixed since start.
type DeviceInfo struct {
	Hostname         string    `json:"hostname"`
	OS               string    `json:"os"`             // OS environment string
	Platform         string    `json:"platform"`       // gopsutil platform: debian, darwin, Microsoft Windows 11 Pro
	Version          string    `json:"version"`        // platform version
	KernelVersion    string    `json:"kernel_version"` // may be empty
	Arch             string    `json:"arch"`           // as the OS reports it: x86_64, arm64
	UptimeS          uint64    `json:"uptime_s"`       // seconds since boot
	CPUCount         int       `json:"cpu_count"`      // logical CPUs
	CPUModel         string    `json:"cpu_model"`
	MemoryTotalBytes uint64    `json:"memory_total_bytes"`
	MemoryUsedBytes  uint64    `json:"memory_used_bytes"`
	Batteries        []Battery `json:"batteries,omitempty"` // Linux only; absent when none
}

const deviceInfoResultSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["hostname", "os", "platform", "version", "arch", "uptime_s", "cpu_count", "memory_total_bytes", "memory_used_bytes"],
  "properties": {
    "hostname": {"type": "string"},
    "os": {"type": "string", "description": "OS environment, e.g. \"Debian GNU/Linux 12 (x86_64)\""},
    "platform": {"type": "string"},
    "version": {"type": "string", "description": "platform version"},
    "kernel_version": {"type": "string"},
    "arch": {"type": "string", "description": "architecture as the OS reports it"},
    "uptime_s": {"type": "integer", "minimum": 0, "description": "seconds since boot"},
    "cpu_count": {"type": "integer", "minimum": 0, "description": "logical CPUs"},
    "cpu_model": {"type": "string"},
    "memory_total_bytes": {"type": "integer", "minimum": 0},
    "memory_used_bytes": {"type": "integer", "minimum": 0},
    "batteries": {"type": "array", "items": {
      "type": "object", "required": ["name"],
      "properties": {
        "name": {"type": "string"},
        "percent": {"type": "integer", "minimum": 0, "maximum": 100},
        "status": {"type": "string"}
      }
    }}
  }
}`

func deviceInfoCapability(f *hostFacts) *capability {
	return &capability{
		Capability: Capability{
			Name:        CapDeviceInfo,
			Description: "Facts about this device: host name, OS, uptime, CPU, memory, battery.",
			Params:      json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{},"additionalProperties":false}`),
			Result:      json.RawMessage(deviceInfoResultSchema),
			Effects:     EffectRead,
		},
		available: func() (bool, string) { return true, "" },
		run: func(ctx context.Context, _ Call, _ json.RawMessage) (Result, error) {
			info, err := f.read(ctx)
			if err != nil {
				return Result{}, err
			}
			return marshalResult(info, info.summary())
		},
	}
}

// sampleTTL is how long a sample of the changing values (memory,
// batteries) is reused. Reading /proc/meminfo costs ~30 µs of kernel time,
// as much as a whole loopback HTTP round trip, and an ACPI battery read can
// take milliseconds; device.info sits on the A2A hot path, so at most one
// sample a second is taken, and a call sees values at most that old.
const sampleTTL = time.Second

// sample is one reading of the values that change.
type sample struct {
	taken     time.Time
	memTotal  uint64
	memUsed   uint64
	batteries []Battery
}

// read fills a DeviceInfo: the cached facts, the uptime from the cached boot
// time, and a sample of memory and batteries no older than sampleTTL.
func (f *hostFacts) read(ctx context.Context) (DeviceInfo, error) {
	d := DeviceInfo{
		Hostname:      f.hostname,
		OS:            f.os,
		Platform:      f.platform,
		Version:       f.version,
		KernelVersion: f.kernel,
		Arch:          f.arch,
		CPUCount:      f.cpuCount,
		CPUModel:      f.cpuModel,
	}
	if now := uint64(time.Now().Unix()); f.bootTime > 0 && now > f.bootTime {
		d.UptimeS = now - f.bootTime
	}
	s, err := f.currentSample(ctx)
	if err != nil {
		return DeviceInfo{}, err
	}
	d.MemoryTotalBytes, d.MemoryUsedBytes = s.memTotal, s.memUsed
	d.Batteries = s.batteries // shared, never modified after the sample is taken
	return d, nil
}

func (f *hostFacts) currentSample(ctx context.Context) (*sample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last != nil && time.Since(f.last.taken) < sampleTTL {
		return f.last, nil
	}
	vm, err := mem.VirtualMemoryWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("device.info: memory: %w", err)
	}
	s := &sample{taken: time.Now(), memTotal: vm.Total, memUsed: vm.Used}
	for _, dir := range f.batteries {
		b := Battery{Name: filepath.Base(dir), Status: readSysfs(filepath.Join(dir, "status"))}
		if n, err := strconv.Atoi(readSysfs(filepath.Join(dir, "capacity"))); err == nil && n >= 0 && n <= 100 {
			b.Percent = &n
		}
		s.batteries = append(s.batteries, b)
	}
	f.last = s
	return s, nil
}

func (d DeviceInfo) summary() string {
	s := fmt.Sprintf("%s: %s, up %s, %d CPUs, memory %s of %s used",
		d.Hostname, d.OS, (time.Duration(d.UptimeS) * time.Second).String(), d.CPUCount,
		humanize.IBytes(uint64(d.MemoryUsedBytes)), humanize.IBytes(uint64(d.MemoryTotalBytes)))
	for _, b := range d.Batteries {
		if b.Percent != nil {
			s += fmt.Sprintf(", %s %d%%", b.Name, *b.Percent)
		}
	}
	return s
}
