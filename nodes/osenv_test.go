package nodes

import (
	"strings"
	"testing"

	"github.com/shirou/gopsutil/v3/host"
)

func TestOSEnvironment(t *testing.T) {
	t.Parallel()
	debian := map[string]string{"PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)", "NAME": "Debian GNU/Linux", "VERSION_ID": "12", "ID": "debian"}
	ubuntu := map[string]string{"NAME": "Ubuntu", "VERSION_ID": "24.04", "ID": "ubuntu"}
	fedora := map[string]string{"NAME": "Fedora Linux", "VERSION_ID": "40", "ID": "fedora"}
	arch := map[string]string{"NAME": "Arch Linux", "ID": "arch", "BUILD_ID": "rolling"}
	tests := []struct {
		name      string
		info      host.InfoStat
		osRelease map[string]string
		want      string
	}{
		// What gopsutil v3.24.5 host_windows.go returns: "Microsoft " +
		// ProductName (+ CSDVersion), version "major.minor.build.UBR Build build.UBR",
		// KernelArch from GetNativeSystemInfo in uname style.
		{"windows 10", host.InfoStat{OS: "windows", Platform: "Microsoft Windows 10 Pro", PlatformVersion: "10.0.19045.4291 Build 19045.4291", KernelArch: "x86_64"}, nil, "Windows 10 (AMD64)"},
		{"windows 11 reported as 10", host.InfoStat{OS: "windows", Platform: "Microsoft Windows 10 Pro", PlatformVersion: "10.0.22631.4317 Build 22631.4317", KernelArch: "x86_64"}, nil, "Windows 11 (AMD64)"},
		{"windows 11 first build", host.InfoStat{OS: "windows", Platform: "Microsoft Windows 10 Home", PlatformVersion: "10.0.22000.194 Build 22000.194", KernelArch: "x86_64"}, nil, "Windows 11 (AMD64)"},
		{"windows 10 last build before 11", host.InfoStat{OS: "windows", Platform: "Microsoft Windows 10 Home", PlatformVersion: "10.0.21999.1 Build 21999.1", KernelArch: "x86_64"}, nil, "Windows 10 (AMD64)"},
		{"windows 11 already fixed by gopsutil", host.InfoStat{OS: "windows", Platform: "Microsoft Windows 11 Pro", PlatformVersion: "10.0.26100.2033 Build 26100.2033", KernelArch: "aarch64"}, nil, "Windows 11 (ARM64)"},
		{"windows server", host.InfoStat{OS: "windows", Platform: "Microsoft Windows Server 2022 Datacenter", PlatformVersion: "10.0.20348.2700 Build 20348.2700", KernelArch: "x86_64"}, nil, "Windows Server 2022 (AMD64)"},
		{"windows server r2", host.InfoStat{OS: "windows", Platform: "Microsoft Windows Server 2012 R2 Standard", PlatformVersion: "6.3.9600.0 Build 9600.0", KernelArch: "x86_64"}, nil, "Windows Server 2012 R2 (AMD64)"},
		{"windows 7 service pack, 32-bit", host.InfoStat{OS: "windows", Platform: "Microsoft Windows 7 Professional Service Pack 1", PlatformVersion: "6.1.7601.0 Build 7601.0", KernelArch: "i686"}, nil, "Windows 7 (x86)"},
		{"windows without product name", host.InfoStat{OS: "windows", PlatformVersion: "10.0.22631.1 Build 22631.1", KernelArch: "x86_64"}, nil, "Windows 11 (AMD64)"},
		// host_darwin.go: Platform from kern.ostype lowercased, version from sw_vers -productVersion.
		{"macOS arm", host.InfoStat{OS: "darwin", Platform: "darwin", PlatformVersion: "15.1", KernelArch: "arm64"}, nil, "macOS 15.1 (arm64)"},
		{"macOS intel", host.InfoStat{OS: "darwin", Platform: "darwin", PlatformVersion: "13.6.9", KernelArch: "x86_64"}, nil, "macOS 13.6.9 (x86_64)"},
		{"OS X", host.InfoStat{OS: "darwin", Platform: "darwin", PlatformVersion: "10.11.6", KernelArch: "x86_64"}, nil, "OS X 10.11.6 (x86_64)"},
		// host_linux.go: Platform is an id, version from debian_version / lsb.
		{"debian", host.InfoStat{OS: "linux", Platform: "debian", PlatformFamily: "debian", PlatformVersion: "12.5", KernelArch: "x86_64"}, debian, "Debian GNU/Linux 12 (x86_64)"},
		{"ubuntu", host.InfoStat{OS: "linux", Platform: "ubuntu", PlatformFamily: "debian", PlatformVersion: "24.04", KernelArch: "aarch64"}, ubuntu, "Ubuntu 24.04 (aarch64)"},
		{"fedora", host.InfoStat{OS: "linux", Platform: "fedora", PlatformFamily: "fedora", PlatformVersion: "40", KernelArch: "x86_64"}, fedora, "Fedora Linux 40 (x86_64)"},
		{"arch rolling", host.InfoStat{OS: "linux", Platform: "arch", PlatformFamily: "arch", KernelArch: "x86_64"}, arch, "Arch Linux (x86_64)"},
		{"linux without os-release", host.InfoStat{OS: "linux", Platform: "alpine", PlatformVersion: "3.20.1", KernelArch: "x86_64"}, nil, "Alpine Linux 3.20.1 (x86_64)"},
		{"linux without anything", host.InfoStat{OS: "linux", KernelArch: "riscv64"}, nil, "Linux (riscv64)"},
		{"os-release without NAME", host.InfoStat{OS: "linux", KernelArch: "x86_64"}, map[string]string{"VERSION_ID": "1"}, "Linux 1 (x86_64)"},
		{"freebsd", host.InfoStat{OS: "freebsd", Platform: "freebsd", PlatformVersion: "14.1-RELEASE", KernelArch: "amd64"}, nil, "FreeBSD 14.1-RELEASE (amd64)"},
		{"unknown OS name", host.InfoStat{OS: "plan9", KernelArch: "386"}, nil, "Plan9 (386)"},
		{"unknown", host.InfoStat{}, nil, "unknown OS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := OSEnvironment(tt.info, WithOSRelease(tt.osRelease)); got != tt.want {
				t.Errorf("OSEnvironment = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestOSEnvironmentHere runs the real gopsutil host.Info() and os-release
// of this machine through OSEnvironment.
func TestOSEnvironmentHere(t *testing.T) {
	t.Parallel()
	info, err := host.Info()
	if err != nil {
		t.Fatal(err)
	}
	got := OSEnvironment(*info)
	if info.OS == "linux" {
		rel, err := ReadOSRelease(OSReleasePaths...)
		if err != nil {
			t.Fatalf("this Linux machine has no os-release: %v", err)
		}
		want := rel["NAME"]
		if rel["VERSION_ID"] != "" {
			want += " " + rel["VERSION_ID"]
		}
		want += " (" + info.KernelArch + ")"
		if got != want {
			t.Errorf("OSEnvironment = %q, want %q", got, want)
		}
	}
	if strings.Contains(got, "unknown") || !strings.HasSuffix(got, ")") {
		t.Errorf("OSEnvironment = %q", got)
	}
	t.Logf("this machine: %s", got)
}

func TestParseOSRelease(t *testing.T) {
	t.Parallel()
	in := `# comment
NAME="Debian GNU/Linux"
VERSION_ID="12"
ID=debian
PRETTY_NAME='Debian GNU/Linux 12 (bookworm)'
ESCAPED="a \"quoted\" \$word and \\ and \` + "`" + ` here"
EMPTY=
bad line without equals
UNQUOTED=two words
 SPACED_KEY = x
`
	got, err := ParseOSRelease(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"NAME":        "Debian GNU/Linux",
		"VERSION_ID":  "12",
		"ID":          "debian",
		"PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)",
		"ESCAPED":     "a \"quoted\" $word and \\ and ` here",
		"EMPTY":       "",
	}
	if len(got) != len(want) {
		t.Errorf("got %d fields %q, want %d", len(got), got, len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

func TestGoArch(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "i686": "386", "armv7l": "arm", "riscv64": "riscv64", "sparc": "sparc"} {
		if got := GoArch(in); got != want {
			t.Errorf("GoArch(%q) = %q, want %q", in, got, want)
		}
	}
}
