//go:build !linux && !darwin

package sshmux

import (
	"errors"
	"net"
)

// Supported reports whether connections can be shared here: not on this
// system, whose sockets do not name the process at the other end.
func Supported() bool { return false }

func checkPeer(net.Conn) error { return errors.ErrUnsupported }
