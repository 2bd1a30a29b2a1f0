package local

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// probeTimeout bounds one liveness probe; a box on loopback answers in
// milliseconds.
const probeTimeout = 5 * time.Second

// errProbeDone ends a probe's handshake once the host key has been seen.
var errProbeDone = errors.New("local: liveness probe done")

// live reports whether the box of r is serving: its port answers an SSH
// handshake with exactly the record's host key. A reused port (another
// program, or another lease's box) does not count, so neither does a stale
// record of a process that died.
func live(ctx context.Context, r record) bool { return probe(ctx, r.Port, r.HostKey) }

// probe reports whether loopback port answers an SSH handshake with
// exactly hostKey (authorized_keys form).
func probe(ctx context.Context, port int, hostKey string) bool {
	if port <= 0 {
		return false
	}
	want, err := parsePublicKey(hostKey)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	addr := net.JoinHostPort(loopback, strconv.Itoa(port))
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	var matched atomic.Bool // set on the handshake's goroutine
	// The handshake always fails: the callback ends it before authentication.
	_, _, _, _ = ssh.NewClientConn(conn, addr, &ssh.ClientConfig{
		User: "crabbox-probe",
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			matched.Store(bytes.Equal(key.Marshal(), want.Marshal()))
			return errProbeDone
		},
	})
	return matched.Load()
}
