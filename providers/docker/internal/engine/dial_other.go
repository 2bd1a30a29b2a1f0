//go:build !windows

package engine

import (
	"context"
	"errors"
	"net"
)

// DefaultHost is the engine's address when none is given.
const DefaultHost = "unix:///var/run/docker.sock"

const pipesSupported = false

func dialPipe(context.Context, string) (net.Conn, error) {
	return nil, errors.New("named pipes exist only on Windows")
}
