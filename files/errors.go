package files

import (
	"errors"
	"fmt"
)

// Sentinel errors. The handler maps them to HTTP statuses (see the package
// doc); callers test them with errors.Is.
//
// Their texts reach the people on both ends of a transfer (the sender
// reads the receiver's refusal), so they are words without a package
// prefix; the announced size and SHA-256 are "the announced" ones, never
// "the manifest" (the capability manifest is another thing).
var (
	ErrBadName       = errors.New("name refused")
	ErrBadManifest   = errors.New("malformed announcement")
	ErrTooMany       = errors.New("too many files")
	ErrTooLarge      = errors.New("too large")
	ErrNoSpace       = errors.New("not enough free space")
	ErrExists        = errors.New("the transfer exists already")
	ErrNotFound      = errors.New("no such transfer or file")
	ErrOffset        = errors.New("the offset is not the received size")
	ErrBusy          = errors.New("another upload of this file is running")
	ErrSizeMismatch  = errors.New("the size does not match the announced size")
	ErrHashMismatch  = errors.New("the SHA-256 does not match the announced SHA-256")
	ErrTransferEnded = errors.New("the transfer failed or was canceled")
	ErrClosed        = errors.New("the receiver is closed")
)

// FileError is a refusal or failure of one file of a transfer: its index
// in the announcement, its path as sent, and why (wrapping a sentinel).
type FileError struct {
	Index int
	Path  string
	Err   error
}

func (e *FileError) Error() string { return fmt.Sprintf("%q: %v", e.Path, e.Err) }
func (e *FileError) Unwrap() error { return e.Err }
