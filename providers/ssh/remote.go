package ssh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/internal/remote"

	cryptossh "golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

const (
	dialTimeout      = 30 * time.Second
	handshakeTimeout = 30 * time.Second
	// maxOutput bounds what is kept of a remote command's stdout and stderr.
	maxOutput = 16 << 10
)

// Remote commands. Each runs as `sh -c '<script>' crabbox <dir>` so that it
// works whatever the user's login shell is; scripts are one line and use
// neither single quotes nor "!" (csh history) for the same reason.
const (
	markerSh      = "crabbox-sh"
	markerMissing = "crabbox-missing:"
	markerReady   = "crabbox-ready"

	// prepareScript checks the tools crabbox needs, then creates the lease
	// directory $1.
	prepareScript = `echo ` + markerSh + `; missing=""; for tool in tar; do command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"; done; if [ -n "$missing" ]; then echo "` + markerMissing + `$missing"; exit 0; fi; mkdir -p -- "$1" && echo ` + markerReady

	// removeScript removes the lease directory $1 and only it.
	removeScript = `rm -rf -- "$1"`
)

// shellCommand renders sh -c script with dir as $1, quoted for any POSIX
// login shell.
func shellCommand(script, dir string) string {
	return "sh -c " + remote.Quote(script) + " crabbox " + remote.Quote(dir)
}

// connect dials r's host as r's user with r's key file and checks the host
// key against its pin, pinning it on first use. It returns the client and
// the host's key.
func (b *Backend) connect(ctx context.Context, r record) (*cryptossh.Client, cryptossh.PublicKey, error) {
	addr := r.addr()
	key, err := lease.LoadKeyFile(r.KeyFile)
	if err != nil {
		return nil, nil, err
	}
	pinned, err := b.pins.lookup(addr)
	if err != nil {
		return nil, nil, err
	}
	client, hostKey, err := b.dial(ctx, addr, r.User, key.Signer, hostKeyAlgorithms(pinned))
	var negotiation *cryptossh.AlgorithmNegotiationError
	if len(pinned) > 0 && errors.As(err, &negotiation) && negotiation.What == "host key" {
		// The host no longer offers a key of the pinned type. Look at the
		// key it does offer: the pin check then reports the change.
		client, hostKey, err = b.dial(ctx, addr, r.User, key.Signer, nil)
	}
	if err != nil {
		if strings.Contains(err.Error(), "unable to authenticate") {
			return nil, nil, fmt.Errorf("log in to %s as %s with key %s: %w: %w", addr, r.User, r.KeyFile, provider.ErrUnauthenticated, err)
		}
		return nil, nil, fmt.Errorf("connect to %s as %s: %w", addr, r.User, err)
	}
	if len(pinned) == 0 {
		b.log.Info("trusted host key on first use", "host", addr, "fingerprint", cryptossh.FingerprintSHA256(hostKey), "known_hosts", b.pins.path)
	}
	return client, hostKey, nil
}

// dial opens one SSH connection, honouring ctx through the TCP connect and
// the handshake.
func (b *Backend) dial(ctx context.Context, addr, user string, signer cryptossh.Signer, algos []string) (*cryptossh.Client, cryptossh.PublicKey, error) {
	var seen cryptossh.PublicKey
	cfg := &cryptossh.ClientConfig{
		User: user,
		Auth: []cryptossh.AuthMethod{cryptossh.PublicKeys(signer)},
		HostKeyCallback: func(_ string, _ net.Addr, key cryptossh.PublicKey) error {
			if err := b.pins.check(addr, key); err != nil {
				return err
			}
			seen = key
			return nil
		},
		HostKeyAlgorithms: algos,
	}
	d := net.Dialer{Timeout: dialTimeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	c, chans, reqs, err := cryptossh.NewClientConn(remote.QuickAck(conn), addr, cfg)
	if !stop() {
		conn.Close()
		return nil, nil, fmt.Errorf("ssh handshake: %w", context.Cause(ctx))
	}
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return cryptossh.NewClient(c, chans, reqs), seen, nil
}

// run runs cmd on c and returns what it wrote (each bounded to maxOutput).
// Cancelling ctx closes the connection.
func run(ctx context.Context, c *cryptossh.Client, cmd string) (stdout, stderr string, err error) {
	sess, err := c.NewSession()
	if err != nil {
		return "", "", fmt.Errorf("open session: %w", err)
	}
	defer sess.Close()
	var out, errOut cappedBuffer
	sess.Stdout, sess.Stderr = &out, &errOut
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	err = sess.Run(cmd)
	if !stop() && err != nil {
		err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
	}
	return out.String(), errOut.String(), err
}

// exitDetail describes a failed remote command by its stderr, or its error
// when it wrote nothing.
func exitDetail(err error, stderr string) string {
	if s := strings.TrimSpace(stderr); s != "" {
		return s
	}
	return err.Error()
}

// cappedBuffer keeps the first maxOutput bytes written to it.
type cappedBuffer struct{ b []byte }

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if room := maxOutput - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (c *cappedBuffer) String() string { return string(c.b) }
