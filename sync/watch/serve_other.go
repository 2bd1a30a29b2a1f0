//go:build !linux

package watch

import (
	"context"
	"fmt"
	"net"
	"runtime"
)

// Serve watches the checkout at root and answers on ln; it needs Linux's
// inotify, so here it closes ln and returns ErrUnsupported.
func Serve(ctx context.Context, root string, ln net.Listener, opts ServeOptions) error {
	ln.Close()
	return fmt.Errorf("%w %s: watching checkouts needs Linux, not %s", ErrUnsupported, root, runtime.GOOS)
}
