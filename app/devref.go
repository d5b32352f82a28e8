package app

import (
	"strings"

	"meshtray/a2a/delegate"
)

// matchDevices returns the items a person's reference ref names: those
// whose name equals ref (case-insensitively) or whose device ID starts
// with ref (dashes and case ignored, at least delegate.MinDevicePrefix
// characters: the short ID the tables show). The one rule by which
// `send`, `--on` and `peers rm` find a device; more than one match is the
// caller's ambiguity to report.
func matchDevices[T any](ref string, items []T, name, id func(T) string) []T {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return nil
	}
	norm := func(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "")) }
	want := norm(ref)
	var out []T
	for _, x := range items {
		d := id(x)
		if strings.EqualFold(name(x), ref) ||
			len(want) >= delegate.MinDevicePrefix && d != "" && strings.HasPrefix(norm(d), want) {
			out = append(out, x)
		}
	}
	return out
}
