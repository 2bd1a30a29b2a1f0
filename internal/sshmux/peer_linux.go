package sshmux

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
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
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if credErr != nil {
		return fmt.Errorf("peer credentials: %w", credErr)
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("peer runs as user %d, not %d", cred.Uid, os.Getuid())
	}
	return nil
}
