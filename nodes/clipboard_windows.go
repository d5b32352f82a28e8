//go:build windows

package nodes

import (
	"context"

	atotto "github.com/atotto/clipboard"
)

// clipboard uses github.com/atotto/clipboard, which talks to the Win32
// clipboard API. It takes no context: on ctx's end the call is abandoned
// (its goroutine finishes on its own) and the read is cut after the fact.
type clipboard struct{}

func newClipboard(func(string) string) *clipboard { return &clipboard{} }

func (c *clipboard) available() (bool, string) { return true, "" }

func (c *clipboard) read(ctx context.Context) (string, bool, error) {
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() { s, err := atotto.ReadAll(); ch <- res{s, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			return "", false, r.err
		}
		b, truncated := cutUTF8([]byte(r.s), MaxClipboardBytes)
		return string(b), truncated, nil
	case <-ctx.Done():
		return "", false, ctx.Err()
	}
}

func (c *clipboard) write(ctx context.Context, text string) error {
	ch := make(chan error, 1)
	go func() { ch <- atotto.WriteAll(text) }()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
