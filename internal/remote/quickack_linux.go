package remote

import (
	"net"

	"golang.org/x/sys/unix"
)

// QuickAck makes the kernel acknowledge what arrives on c at once instead
// of delaying the ACK (by 40 ms on Linux), where it can.
//
// OpenSSH's sshd leaves Nagle's algorithm on for sessions without a
// terminal, so a small reply it writes while an earlier small packet is
// unacknowledged (the host keys it announces after authentication, then
// the confirmation of the first session) waits for the client's delayed
// ACK: 40 ms of nothing on every connection. Linux's quick-ACK mode ends
// by itself, so it is set again after every read.
func QuickAck(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	q := &quickAckConn{TCPConn: tc, raw: raw}
	q.set()
	return q
}

type quickAckConn struct {
	*net.TCPConn
	raw interface{ Control(func(uintptr)) error }
}

func (q *quickAckConn) set() {
	_ = q.raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1)
	})
}

func (q *quickAckConn) Read(p []byte) (int, error) {
	n, err := q.TCPConn.Read(p)
	if n > 0 {
		q.set()
	}
	return n, err
}
