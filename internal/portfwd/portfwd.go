// Package portfwd serves a local TCP listener whose connections each go
// to one destination reached through a dialer: a port of a box, over the
// lease's SSH connection. The root package's Lease.Forward is built on it.
//
// A connection the dialer cannot make is logged and closed alone; the
// forward keeps serving. The forward ends when its context ends, when it
// is closed or stopped, or when its listener fails, and then closes the
// listener and every connection it opened before Wait returns.
package portfwd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
)

// Dial connects to the forward's destination; ctx bounds the connecting
// only.
type Dial func(ctx context.Context) (net.Conn, error)

// Forward is a listener being served. Make it with Start.
type Forward struct {
	ln     net.Listener
	dial   Dial
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}

	mu      sync.Mutex
	closing bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup // a goroutine per accepted connection
}

// errClosed is the cause of a forward ended by Close.
var errClosed = errors.New("forward closed")

// Start serves ln until ctx ends, Close or Stop: each connection accepted
// is joined to a connection dial makes, data copied both ways (each
// direction's end passed on), and both closed once both directions ended.
// A nil log discards. The forward owns ln from now on.
func Start(ctx context.Context, ln net.Listener, dial Dial, log *slog.Logger) *Forward {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	f := &Forward{ln: ln, dial: dial, log: log, ctx: ctx, cancel: cancel, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	go f.serve()
	return f
}

// Addr is the address the forward listens on.
func (f *Forward) Addr() net.Addr { return f.ln.Addr() }

// Done is closed once the forward has ended and closed everything.
func (f *Forward) Done() <-chan struct{} { return f.done }

// Stop ends the forward with err, which Wait returns (unless it had
// ended already). It does not wait.
func (f *Forward) Stop(err error) { f.cancel(err) }

// Close ends the forward and waits until the listener and every
// connection are closed. Wait then returns nil, unless the forward had
// ended before for another reason.
func (f *Forward) Close() error {
	f.cancel(errClosed)
	<-f.done
	return nil
}

// Wait blocks until the forward ended and returns why: nil after Close,
// the context's cause when it ended, the error given to Stop, or the
// listener's failure.
func (f *Forward) Wait() error {
	<-f.done
	err := context.Cause(f.ctx)
	if errors.Is(err, errClosed) {
		return nil
	}
	return err
}

func (f *Forward) serve() {
	defer close(f.done)
	stop := context.AfterFunc(f.ctx, func() { f.ln.Close() })
	defer stop()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			f.cancel(fmt.Errorf("accept on %s: %w", f.ln.Addr(), err)) // a no-op once ended
			break
		}
		if !f.track(c) {
			c.Close()
			continue
		}
		f.wg.Go(func() { f.join(c) })
	}
	f.ln.Close()
	f.mu.Lock()
	f.closing = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// track records an open connection, unless the forward is ending.
func (f *Forward) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Forward) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	c.Close()
}

// join connects local to the destination and copies between them.
func (f *Forward) join(local net.Conn) {
	defer f.untrack(local)
	remote, err := f.dial(f.ctx)
	if err != nil {
		if f.ctx.Err() == nil {
			f.log.Warn("forward: connecting on the box failed; that connection is closed, the forward goes on",
				"local", f.ln.Addr().String(), "client", local.RemoteAddr().String(), "err", err)
		}
		return
	}
	if !f.track(remote) {
		remote.Close()
		return
	}
	defer f.untrack(remote)
	var wg sync.WaitGroup
	wg.Go(func() { copyThenCloseWrite(remote, local) })
	wg.Go(func() { copyThenCloseWrite(local, remote) })
	wg.Wait()
}

// copyThenCloseWrite copies src to dst and passes the end on: dst's
// write side is closed (or dst itself, when it cannot half-close). A
// failure either side closes both, so the other direction ends too.
func copyThenCloseWrite(dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		src.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = dst.Close()
}
