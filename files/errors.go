package files

import "errors"

// Sentinel errors. The handler maps them to HTTP statuses (see the package
// doc); callers test them with errors.Is.
var (
	ErrBadName       = errors.New("files: name refused")
	ErrBadManifest   = errors.New("files: bad manifest")
	ErrTooMany       = errors.New("files: too many files")
	ErrTooLarge      = errors.New("files: too large")
	ErrNoSpace       = errors.New("files: not enough free space")
	ErrExists        = errors.New("files: transfer exists")
	ErrNotFound      = errors.New("files: no such transfer or file")
	ErrOffset        = errors.New("files: offset is not the received size")
	ErrBusy          = errors.New("files: another upload of this file is running")
	ErrSizeMismatch  = errors.New("files: size does not match the manifest")
	ErrHashMismatch  = errors.New("files: SHA-256 does not match the manifest")
	ErrTransferEnded = errors.New("files: transfer failed or was cancelled")
	ErrClosed        = errors.New("files: receiver closed")
)
