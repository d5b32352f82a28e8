package egress

import (
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Cause is the short form of a failed outbound connection, the one
// wording of a dial error every command shows a person: "connection
// refused", "connection reset", "no answer in time", "the connection
// closed mid-answer", "cannot resolve HOST", "the address is not allowed
// for a request from the network" (ErrRefused), else the operation and
// the system's words ("dial: no route to host"), with no URL (StripURLs)
// and no chain of Go error prefixes. It says nothing about which device
// or address: the caller's sentence does.
func Cause(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, ErrRefused):
		return "the address is not allowed for a request from the network"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &ne) && ne.Timeout():
		return "no answer in time"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "the connection closed mid-answer"
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return "cannot resolve " + dns.Name
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		inner := op.Err
		var se *os.SyscallError // "connect: no route to host": the system's words only
		if errors.As(inner, &se) {
			inner = se.Err
		}
		return op.Op + ": " + inner.Error()
	}
	return StripURLs(err)
}

// StripURLs is err's text with each *url.Error's `Op "URL"` reduced to Op
// (net/http's `Post "https://host/a2a/v1": ...` becomes "Post: ...") and
// any other mention of the URL replaced by "[url]".
func StripURLs(err error) string {
	s := err.Error()
	for e := err; e != nil; {
		var ue *url.Error
		if !errors.As(e, &ue) {
			break
		}
		if ue.URL != "" {
			s = strings.ReplaceAll(s, ue.Op+" "+strconv.Quote(ue.URL), ue.Op)
			s = strings.ReplaceAll(s, ue.URL, "[url]")
		}
		e = ue.Err
	}
	return s
}
