package files

import (
	"encoding/hex"
	"fmt"
)

// Entry is one file of a transfer as the sender announces it: the shape a
// FilePart of the A2A message carries (name and media type in the part,
// path, size and SHA-256 in its metadata).
type Entry struct {
	// Name is the file's base name.
	Name string `json:"name"`
	// Path is the slash-separated path relative to what was sent: Name for a
	// single file, "folder/sub/name" for a file of a sent folder. It must
	// end in Name. See CleanPath for what the receiver accepts.
	Path string `json:"path"`
	// Size in bytes.
	Size int64 `json:"size"`
	// MediaType is the IANA media type (RFC 6838), "" when unknown.
	MediaType string `json:"media_type,omitempty"`
	// SHA256 is the lowercase hex SHA-256 of the content (64 characters).
	SHA256 string `json:"sha256"`
}

// Manifest is the list of files of one transfer, in sending order; a file's
// index in Files is its index on the wire.
type Manifest struct {
	Files []Entry `json:"files"`
}

// Total is the sum of the sizes of the files.
func (m Manifest) Total() int64 {
	var n int64
	for _, e := range m.Files {
		n += e.Size
	}
	return n
}

// Saved is one file the receiver verified and named: what the A2A result
// artifact lists.
type Saved struct {
	// Path is where it was saved, slash-separated, relative to Result.Dir.
	// It differs from the sent path when a name was cleaned or taken
	// ("name (1).ext").
	Path      string `json:"path"`
	Size      int64  `json:"size"`
	MediaType string `json:"media_type,omitempty"`
	SHA256    string `json:"sha256"`
}

// Result is the outcome of a transfer: the receive folder and every file
// saved in it, in manifest order.
type Result struct {
	Dir   string  `json:"dir,omitempty"`
	Files []Saved `json:"files"`
}

func checkSHA256(s string) error {
	if len(s) != 64 {
		return fmt.Errorf("%w: sha256 must be 64 hex characters", ErrBadManifest)
	}
	if _, err := hex.DecodeString(s); err != nil {
		return fmt.Errorf("%w: sha256 is not hex", ErrBadManifest)
	}
	for _, c := range s {
		if c >= 'A' && c <= 'F' {
			return fmt.Errorf("%w: sha256 must be lowercase hex", ErrBadManifest)
		}
	}
	return nil
}
