package files

import (
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// Bounds of a sent path (bytes). 255 is the component limit of ext4, APFS
// and NTFS (in UTF-16 units there, which 255 bytes never exceed).
const (
	maxPathLen      = 1024
	maxComponentLen = 255
	maxDepth        = 16
)

// partialSuffix ends the temporary name of a file being received; no sent
// name may end in it.
const partialSuffix = ".meshtray-partial"

// CleanPath checks a sender's slash-separated relative path and returns the
// path it is saved under, relative to the receive folder. It never returns a
// path that leaves the folder; the receiver also opens every path through
// os.Root, which refuses to follow anything out of it.
//
// Refused (ErrBadName), because no honest sender produces them: an empty
// path or component ("a//b"), "." and ".." components, an absolute path
// (leading "/" or "\"), any "\" (a Windows separator) or ":" (drive letters
// "C:", NTFS alternate streams "a:b"), NUL and other control characters
// (U+0000–U+001F, U+007F), invalid UTF-8, a path over 1024 bytes, a
// component over 255 bytes, more than 16 components, and names ending in
// ".meshtray-partial".
//
// Cleaned, because they are ordinary names on one OS and broken on another
// (Microsoft, "Naming Files, Paths, and Namespaces"): trailing dots and
// spaces of a component are trimmed (a component left empty is refused);
// the characters < > " | ? * become "_"; a reserved device name — CON, PRN,
// AUX, NUL, COM0–COM9, LPT0–LPT9 and their superscript-digit forms, in any
// case, with or without an extension — gets a "_" prefix ("CON.txt" ->
// "_CON.txt").
func CleanPath(p string) (string, error) {
	refuse := func(why string) (string, error) {
		return "", fmt.Errorf("%w: %q (%s)", ErrBadName, p, why)
	}
	if p == "" {
		return refuse("empty")
	}
	if len(p) > maxPathLen {
		return refuse("path too long")
	}
	if !utf8.ValidString(p) {
		return refuse("not UTF-8")
	}
	for _, r := range p {
		switch {
		case r < 0x20 || r == 0x7f:
			return refuse("control character")
		case r == '\\':
			return refuse(`"\" is not a separator here`)
		case r == ':':
			return refuse(`":" (drive letter or stream)`)
		}
	}
	if p[0] == '/' {
		return refuse("absolute")
	}
	parts := strings.Split(p, "/")
	if len(parts) > maxDepth {
		return refuse("too deep")
	}
	for i, c := range parts {
		if c == "" || c == "." || c == ".." {
			return refuse("empty, . or .. component")
		}
		if len(c) > maxComponentLen {
			return refuse("component too long")
		}
		c = strings.TrimRight(c, ". ")
		if c == "" {
			return refuse("component of dots and spaces")
		}
		c = strings.Map(func(r rune) rune {
			if strings.ContainsRune(`<>"|?*`, r) {
				return '_'
			}
			return r
		}, c)
		if reservedName(c) {
			c = "_" + c
		}
		parts[i] = c
	}
	out := strings.Join(parts, "/")
	if strings.HasSuffix(out, partialSuffix) {
		return refuse("temporary-file suffix")
	}
	return path.Clean(out), nil
}

// reservedName reports whether a component is a Windows device name, with
// any extension ("NUL.tar.gz" too): Windows resolves such names to the
// device whatever follows the first dot, and ignores trailing spaces before
// the dot.
func reservedName(c string) bool {
	stem, _, _ := strings.Cut(c, ".")
	stem = strings.ToUpper(strings.TrimRight(stem, " "))
	switch stem {
	case "CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$":
		return true
	}
	if len(stem) >= 4 && (strings.HasPrefix(stem, "COM") || strings.HasPrefix(stem, "LPT")) {
		switch stem[3:] {
		case "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "¹", "²", "³":
			return true
		}
	}
	return false
}

// numbered returns the k-th alternative of a taken base name, the way
// browsers number downloads: "report.pdf" -> "report (1).pdf"; a name
// without a stem (".bashrc") or extension gets the number at its end. The
// result stays within maxComponentLen bytes (a longer name is ENAMETOOLONG
// on every file system): the stem is shortened at a rune boundary, and an
// extension too long to keep counts as part of the stem.
func numbered(base string, k int) string {
	ext := path.Ext(base)
	stem := strings.TrimSuffix(base, ext)
	num := fmt.Sprintf(" (%d)", k)
	if stem == "" || len(num)+len(ext) >= maxComponentLen {
		stem, ext = base, ""
	}
	for len(stem)+len(num)+len(ext) > maxComponentLen {
		_, n := utf8.DecodeLastRuneInString(stem)
		stem = stem[:len(stem)-n]
	}
	return stem + num + ext
}
