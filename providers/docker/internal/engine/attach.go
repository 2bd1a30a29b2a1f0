package engine

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
)

// AttachOptions choose the streams ContainerAttach attaches to.
type AttachOptions struct {
	Stdin, Stdout, Stderr bool
}

// Attach is a connection attached to a container's streams. Write the
// container's stdin to Conn; read its output from Reader, which for a
// container without a TTY multiplexes stdout and stderr (see
// github.com/moby/moby/api/pkg/stdcopy).
type Attach struct {
	Conn   net.Conn
	Reader *bufio.Reader
}

// CloseWrite ends the container's stdin; its output goes on.
func (a *Attach) CloseWrite() error {
	if cw, ok := a.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("the connection to the engine (%T) cannot end stdin alone", a.Conn)
}

// Close closes the connection.
func (a *Attach) Close() error { return a.Conn.Close() }

// ContainerAttach attaches to a container's streams, as they are from now
// on, over a connection of its own that the engine takes over from HTTP.
// ctx bounds setting the connection up; close the Attach to end it.
func (c *Client) ContainerAttach(ctx context.Context, id string, opts AttachOptions) (*Attach, error) {
	op := "attach to container " + id
	q := url.Values{"stream": {"1"}}
	for name, on := range map[string]bool{"stdin": opts.Stdin, "stdout": opts.Stdout, "stderr": opts.Stderr} {
		if on {
			q.Set(name, "1")
		}
	}
	p, err := containerPath(op, id, "/attach")
	if err != nil {
		return nil, err
	}
	u, err := c.versioned(ctx, p, q)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")

	conn, err := c.dial(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", op, context.Cause(ctx))
		}
		return nil, &ConnectError{Op: op, Host: c.ep.host, Err: err}
	}
	// Until the engine answers, ctx ending closes the connection.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	a, err := upgrade(op, conn, req)
	if !stop() {
		err = errors.Join(fmt.Errorf("%s: %w", op, context.Cause(ctx)), err)
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return a, nil
}

// upgrade sends req on conn and reads the engine's answer, which takes the
// connection over from HTTP: 101 Switching Protocols, or 200 from engines
// that do not switch explicitly.
func upgrade(op string, conn net.Conn, req *http.Request) (*Attach, error) {
	if err := req.Write(conn); err != nil {
		return nil, fmt.Errorf("%s: send the request: %w", op, err)
	}
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, fmt.Errorf("%s: read the answer: %w", op, err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols && res.StatusCode != http.StatusOK {
		return nil, answerError(op, res)
	}
	return &Attach{Conn: conn, Reader: br}, nil
}

// dial opens a connection to the engine, with TLS if it speaks TLS.
func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	raw, err := c.dialRaw(ctx)
	if err != nil || c.ep.tls == nil {
		return raw, err
	}
	conn := tls.Client(raw, c.ep.tls)
	if err := conn.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		return nil, err
	}
	return conn, nil
}
