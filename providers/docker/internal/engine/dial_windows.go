//go:build windows

package engine

import (
	"context"
	"net"
	"path/filepath"

	"github.com/Microsoft/go-winio"
)

// DefaultHost is the engine's address when none is given.
const DefaultHost = "npipe:////./pipe/docker_engine"

const pipesSupported = true

// dialPipe connects to the named pipe of a DOCKER_HOST npipe:// address,
// whose path uses forward slashes (//./pipe/docker_engine).
func dialPipe(ctx context.Context, addr string) (net.Conn, error) {
	return winio.DialPipeContext(ctx, filepath.FromSlash(addr))
}
