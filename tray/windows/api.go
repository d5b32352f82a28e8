package windows

import (
	"context"
	"time"
)

// callTimeout bounds one control-API call (loopback).
const callTimeout = 10 * time.Second

// fetch runs one control-API call f (bounded by callTimeout) and, when it
// succeeds, keeps its answer in out. (The tray's controller has the same
// pair; the two packages share no code but the app.Client they call.)
func fetch[T any](ctx context.Context, out *T, f func(context.Context) (T, error)) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	v, err := f(ctx)
	if err == nil {
		*out = v
	}
	return err
}

// send runs one control-API call f that answers nothing, bounded by
// callTimeout.
func send(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return f(ctx)
}
