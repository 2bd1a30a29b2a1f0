package remote

import (
	"context"

	"golang.org/x/crypto/ssh"
)

// NewSession opens a session on client, giving up when ctx is done (a hung
// connection would otherwise block forever); a session that opens after
// that is closed.
func NewSession(ctx context.Context, client *ssh.Client) (*ssh.Session, error) {
	type opened struct {
		sess *ssh.Session
		err  error
	}
	c := make(chan opened, 1)
	go func() {
		sess, err := client.NewSession()
		c <- opened{sess, err}
	}()
	select {
	case o := <-c:
		return o.sess, o.err
	case <-ctx.Done():
		go func() {
			if o := <-c; o.sess != nil {
				o.sess.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// KeepaliveRequest is the global request that proves the box answers:
// sshd (and crabbox's own server) reply to it, with failure, which is an
// answer.
const KeepaliveRequest = "keepalive@openssh.com"

// Keepalive sends c a keepalive request and returns where its outcome
// arrives: nil once the box answered, or the connection's error. Callers
// wait on it as long as they choose; the request's goroutine ends with the
// answer or with the connection.
func Keepalive(c ssh.Conn) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, _, err := c.SendRequest(KeepaliveRequest, true, nil)
		done <- err
	}()
	return done
}
