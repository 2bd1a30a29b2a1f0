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
