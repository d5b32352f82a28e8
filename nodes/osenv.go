package nodes

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/shirou/gopsutil/v3/host"
)

// OSReleasePaths are the files os-release(5) says to read, in order: the
// first that exists wins.
var OSReleasePaths = []string{"/etc/os-release", "/usr/lib/os-release"}

// maxOSReleaseSize bounds how much of an os-release file is read.
const maxOSReleaseSize = 64 << 10

// EnvOption changes how OSEnvironment describes a host.
type EnvOption func(*envConfig)

type envConfig struct {
	osRelease func() (map[string]string, error)
}

// WithOSRelease makes OSEnvironment use these os-release(5) fields (NAME,
// VERSION_ID, ...) for a Linux host instead of reading OSReleasePaths. A nil
// map means "no os-release file".
func WithOSRelease(fields map[string]string) EnvOption {
	return func(c *envConfig) {
		c.osRelease = func() (map[string]string, error) {
			if fields == nil {
				return nil, os.ErrNotExist
			}
			return fields, nil
		}
	}
}

// OSEnvironment is the one-line description of the operating system that
// meshtray shows for a device: `<OS name> <version> (<arch>)`, for example
// "Windows 11 (AMD64)", "macOS 15.1 (arm64)", "Debian GNU/Linux 12 (x86_64)",
// "Arch Linux (x86_64)" (a rolling release has no version). info is what
// gopsutil v3 host.Info() returned on the device; the rules per OS follow
// what gopsutil v3.24.5 puts in it:
//
//   - windows: Platform is the registry ProductName with "Microsoft "
//     prepended ("Microsoft Windows 10 Pro"), PlatformVersion
//     "10.0.<build>.<UBR> Build <build>.<UBR>". Windows 11 still calls itself
//     "Windows 10" in ProductName; Microsoft's rule is build >= 22000 means
//     Windows 11 (gopsutil applies it too; we apply it again so an InfoStat
//     from elsewhere is right). The edition ("Pro") is dropped. The arch uses
//     Windows' PROCESSOR_ARCHITECTURE names: AMD64, ARM64, x86.
//   - darwin: PlatformVersion is `sw_vers -productVersion` ("15.1"); the name
//     is "macOS" (10.12 and later), "OS X" (10.8-10.11), "Mac OS X" before.
//     KernelArch is `uname -m` (arm64, x86_64), kept as is.
//   - linux: gopsutil's Platform is a lowercase id ("debian") and its version
//     is often not the one people know (Debian's "12.5" from debian_version),
//     so the name and version come from os-release(5) NAME and VERSION_ID
//     (read from OSReleasePaths unless WithOSRelease is given); without
//     os-release, gopsutil's Platform and PlatformVersion. KernelArch is
//     `uname -m` (x86_64, aarch64), kept as is.
//   - anything else: Platform (or OS), PlatformVersion, KernelArch.
//
// Empty parts are left out: no version gives "Arch Linux (x86_64)", no arch
// gives "Windows 11"; an empty InfoStat gives "unknown OS".
func OSEnvironment(info host.InfoStat, opts ...EnvOption) string {
	cfg := envConfig{osRelease: func() (map[string]string, error) { return ReadOSRelease(OSReleasePaths...) }}
	for _, o := range opts {
		o(&cfg)
	}
	var name, version, arch string
	switch info.OS {
	case "windows":
		name, version = windowsName(info.Platform, info.PlatformVersion)
		arch = windowsArch(info.KernelArch)
	case "darwin":
		name, version = macName(info.PlatformVersion), info.PlatformVersion
		arch = info.KernelArch
	case "linux":
		name, version = linuxName(info, cfg.osRelease)
		arch = info.KernelArch
	default:
		name, version = otherName(info.Platform, info.OS), info.PlatformVersion
		arch = info.KernelArch
	}
	var b strings.Builder
	b.WriteString(name)
	if version != "" {
		b.WriteString(" ")
		b.WriteString(version)
	}
	if arch != "" {
		fmt.Fprintf(&b, " (%s)", arch)
	}
	return b.String()
}

// windowsName turns gopsutil's ProductName and version into ("Windows", "11")
// or ("Windows Server", "2022").
func windowsName(platform, platformVersion string) (name, version string) {
	p := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(platform), "Microsoft"))
	fields := strings.Fields(p)
	if len(fields) >= 2 && fields[0] == "Windows" {
		if fields[1] == "Server" {
			if len(fields) >= 3 {
				version = fields[2]
				if len(fields) >= 4 && fields[3] == "R2" {
					version += " R2"
				}
			}
			return "Windows Server", version
		}
		version = fields[1]
		if version == "10" && windowsBuild(platformVersion) >= 22000 {
			version = "11"
		}
		return "Windows", version
	}
	// No usable ProductName: derive the release from the kernel version
	// (major.minor.build) as Microsoft documents for RtlGetVersion.
	major, minor, build := windowsKernelVersion(platformVersion)
	switch {
	case major == 10 && build >= 22000:
		return "Windows", "11"
	case major == 10:
		return "Windows", "10"
	case major == 6 && minor == 3:
		return "Windows", "8.1"
	case major == 6 && minor == 2:
		return "Windows", "8"
	case major == 6 && minor == 1:
		return "Windows", "7"
	}
	return "Windows", ""
}

// windowsBuild returns the build number of a gopsutil Windows
// PlatformVersion ("10.0.22631.4317 Build 22631.4317"), or 0.
func windowsBuild(v string) int {
	_, _, build := windowsKernelVersion(v)
	return build
}

func windowsKernelVersion(v string) (major, minor, build int) {
	head, _, _ := strings.Cut(strings.TrimSpace(v), " ")
	parts := strings.Split(head, ".")
	num := func(i int) int {
		if i >= len(parts) {
			return 0
		}
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return 0
		}
		return n
	}
	return num(0), num(1), num(2)
}

// windowsArch maps gopsutil's KernelArch on Windows (GetNativeSystemInfo
// translated to uname-style names) back to Windows' own
// PROCESSOR_ARCHITECTURE names.
func windowsArch(a string) string {
	switch strings.ToLower(a) {
	case "x86_64", "amd64":
		return "AMD64"
	case "aarch64", "arm64":
		return "ARM64"
	case "i386", "i486", "i586", "i686", "x86":
		return "x86"
	case "arm":
		return "ARM"
	case "ia64":
		return "IA64"
	}
	return a
}

func macName(version string) string {
	major, minor := 0, 0
	parts := strings.Split(version, ".")
	if len(parts) > 0 {
		major, _ = strconv.Atoi(parts[0])
	}
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[1])
	}
	switch {
	case major == 10 && minor >= 8 && minor < 12:
		return "OS X"
	case major == 10 && minor < 8:
		return "Mac OS X"
	}
	return "macOS"
}

// linuxPlatformNames are display names for gopsutil platform ids, used only
// when the host has no os-release file.
var linuxPlatformNames = map[string]string{
	"debian":    "Debian GNU/Linux",
	"ubuntu":    "Ubuntu",
	"linuxmint": "Linux Mint",
	"raspbian":  "Raspbian GNU/Linux",
	"fedora":    "Fedora Linux",
	"redhat":    "Red Hat Enterprise Linux",
	"centos":    "CentOS Linux",
	"rocky":     "Rocky Linux",
	"almalinux": "AlmaLinux",
	"arch":      "Arch Linux",
	"alpine":    "Alpine Linux",
	"gentoo":    "Gentoo",
	"opensuse":  "openSUSE",
	"slackware": "Slackware",
	"amazon":    "Amazon Linux",
}

func linuxName(info host.InfoStat, osRelease func() (map[string]string, error)) (name, version string) {
	if fields, err := osRelease(); err == nil {
		name = fields["NAME"]
		if name == "" {
			// os-release(5): "If not set, a default of NAME=Linux may be used."
			name = "Linux"
		}
		return name, fields["VERSION_ID"]
	}
	if n, ok := linuxPlatformNames[info.Platform]; ok {
		return n, info.PlatformVersion
	}
	if info.Platform != "" {
		return titleFirst(info.Platform), info.PlatformVersion
	}
	return "Linux", info.PlatformVersion
}

var otherNames = map[string]string{
	"freebsd":   "FreeBSD",
	"openbsd":   "OpenBSD",
	"netbsd":    "NetBSD",
	"dragonfly": "DragonFly BSD",
	"solaris":   "Solaris",
	"illumos":   "illumos",
	"aix":       "AIX",
	"android":   "Android",
}

func otherName(platform, goos string) string {
	for _, p := range []string{platform, goos} {
		if p == "" {
			continue
		}
		if n, ok := otherNames[strings.ToLower(p)]; ok {
			return n
		}
		return titleFirst(p)
	}
	return "unknown OS"
}

func titleFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// ReadOSRelease reads the first existing file of paths as os-release(5).
// It returns an error wrapping fs.ErrNotExist when none exists.
func ReadOSRelease(paths ...string) (map[string]string, error) {
	for _, p := range paths {
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return ParseOSRelease(io.LimitReader(f, maxOSReleaseSize))
	}
	return nil, fmt.Errorf("os-release: none of %v: %w", paths, os.ErrNotExist)
}

// ParseOSRelease parses os-release(5) text: newline-separated KEY=value
// assignments, '#' comments and blank lines ignored, values optionally
// enclosed in double or single quotes, and in double quotes the shell
// escapes \" \\ \$ \` honoured. Malformed lines are skipped, as the
// specification asks.
func ParseOSRelease(r io.Reader) (map[string]string, error) {
	fields := make(map[string]string)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok || key == "" || strings.ContainsAny(key, " \t") {
			continue
		}
		v, ok := unquoteOSRelease(val)
		if !ok {
			continue
		}
		fields[key] = v
	}
	return fields, sc.Err()
}

func unquoteOSRelease(v string) (string, bool) {
	if v == "" {
		return "", true
	}
	switch v[0] {
	case '\'':
		if len(v) < 2 || v[len(v)-1] != '\'' {
			return "", false
		}
		return v[1 : len(v)-1], true
	case '"':
		if len(v) < 2 || v[len(v)-1] != '"' {
			return "", false
		}
		inner := v[1 : len(v)-1]
		var b strings.Builder
		for i := 0; i < len(inner); i++ {
			c := inner[i]
			if c == '\\' && i+1 < len(inner) && strings.IndexByte("\"\\$`", inner[i+1]) >= 0 {
				b.WriteByte(inner[i+1])
				i++
				continue
			}
			b.WriteByte(c)
		}
		return b.String(), true
	}
	if strings.ContainsAny(v, " \t\"'") {
		return "", false
	}
	return v, true
}

// GoArch maps a KernelArch from gopsutil (`uname -m` style: x86_64,
// aarch64, i686, armv7l) to Go's GOARCH names (amd64, arm64, 386, arm), the
// form Device.Arch uses. Unknown names are returned unchanged.
func GoArch(kernelArch string) string {
	switch a := strings.ToLower(kernelArch); {
	case a == "x86_64" || a == "amd64":
		return "amd64"
	case a == "aarch64" || a == "arm64" || a == "aarch64_be":
		return "arm64"
	case a == "i386" || a == "i486" || a == "i586" || a == "i686" || a == "x86":
		return "386"
	case strings.HasPrefix(a, "armv") || a == "arm":
		return "arm"
	case a == "ppc64le" || a == "ppc64" || a == "s390x" || a == "riscv64" || a == "mips64" || a == "mips64le" || a == "loong64":
		return a
	}
	return kernelArch
}
