// Package ctxio holds I/O helpers bound to a context.
package ctxio

import (
	"context"
	"io"
)

// Reader reads from r until ctx ends: a long copy (a log being compressed, a
// file streamed to a client) stops at the next read once the request or the
// shutdown cancels ctx.
type Reader struct {
	Ctx context.Context
	R   io.Reader
}

func (c Reader) Read(p []byte) (int, error) {
	if err := c.Ctx.Err(); err != nil {
		return 0, err
	}
	return c.R.Read(p)
}
