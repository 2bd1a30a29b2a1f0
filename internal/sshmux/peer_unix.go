//go:build linux || darwin

package sshmux

import (
	"fmt"
	"net"
	"os"
)

// Supported reports whether connections can be shared here: where the
// socket's peer credentials name the process at the other end.
func Supported() bool { return true }

// checkPeer fails unless the process at the other end of c runs as this
// user.
func checkPeer(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("not a Unix socket: %T", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var uid uint32
	var credErr error
	if err := raw.Control(func(fd uintptr) { uid, credErr = peerUID(int(fd)) }); err != nil {
		return err
	}
	if credErr != nil {
		return fmt.Errorf("peer credentials: %w", credErr)
	}
	if int(uid) != os.Getuid() {
		return fmt.Errorf("peer runs as user %d, not %d", uid, os.Getuid())
	}
	return nil
}
