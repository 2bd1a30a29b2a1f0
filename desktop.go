package crabbox

import (
	"context"
	"errors"
	"fmt"
	"image/png"
	"io"
	"maps"
	"net"
	"net/url"
	gosync "sync"

	"github.com/crabbox-dev/crabbox/internal/rfb"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// ErrNoDesktop is wrapped by the error of a desktop call (Screenshot,
// ServeVNC, DesktopURL) on a lease whose box has no desktop, and of an
// acquire asking for a desktop from a provider that has none.
var ErrNoDesktop = errors.New("no desktop")

// desktopLabels returns opts' labels with the desktop label when opts
// ask for a desktop, after checking that the provider has one (b's Spec
// declares provider.FeatureDesktop).
func desktopLabels(b provider.Backend, opts AcquireOptions) (map[string]string, error) {
	if !opts.Desktop && !provider.WantsDesktop(opts.Labels) {
		return opts.Labels, nil
	}
	if name := b.Spec().Name; !b.Spec().Has(provider.FeatureDesktop) {
		return nil, fmt.Errorf("acquire a lease with a desktop: provider %q has no desktop (the docker provider has: --provider docker): %w", name, ErrNoDesktop)
	}
	labels := maps.Clone(opts.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[provider.DesktopLabel] = "true"
	return labels, nil
}

// Desktop reports whether the lease's box has a desktop: it was acquired
// with AcquireOptions.Desktop (its claim carries provider.DesktopLabel).
func (l *Lease) Desktop() bool {
	if l == nil || l.keep == nil {
		return false
	}
	return provider.WantsDesktop(l.snapshot().Claim.Labels)
}

// needDesktop says why the desktop call what cannot be made on l.
func (l *Lease) needDesktop(ctx context.Context, what string) error {
	if err := l.use(ctx, what); err != nil {
		return err
	}
	if l.delegated != nil {
		return l.errNoSSH(what)
	}
	if !l.Desktop() {
		return fmt.Errorf("%s on lease %s: the box has no desktop (acquire one with --desktop, on a provider that has desktops such as docker): %w", what, l.ID(), ErrNoDesktop)
	}
	return nil
}

// dialVNC connects to the box's VNC server through the lease's SSH
// connection (a direct-tcpip channel to provider.DesktopVNCAddr on the
// box). Dialing is a use of the lease.
func (l *Lease) dialVNC(ctx context.Context, what string) (net.Conn, error) {
	conn, err := l.SSH(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s on lease %s: %w", what, l.ID(), err)
	}
	l.keep.Used()
	nc, err := conn.DialContext(ctx, "tcp", provider.DesktopVNCAddr)
	if err != nil {
		return nil, fmt.Errorf("%s on lease %s: connect to the box's VNC server at %s: %w", what, l.ID(), provider.DesktopVNCAddr, err)
	}
	return nc, nil
}

// Screenshot writes a PNG picture of the lease's desktop to w: it speaks
// RFB to the box's VNC server through the lease's SSH connection and
// takes one full frame. A lease without a desktop gives an error
// wrapping ErrNoDesktop, and nothing is written.
func (l *Lease) Screenshot(ctx context.Context, w io.Writer) error {
	const what = "screenshot"
	if err := l.needDesktop(ctx, what); err != nil {
		return err
	}
	nc, err := l.dialVNC(ctx, what)
	if err != nil {
		return err
	}
	img, err := rfb.Screenshot(ctx, nc)
	if err != nil {
		return fmt.Errorf("%s on lease %s: %w", what, l.ID(), err)
	}
	if err := png.Encode(w, img); err != nil {
		return fmt.Errorf("%s on lease %s: write the PNG: %w", what, l.ID(), err)
	}
	return nil
}

// ServeVNC relays every connection accepted on ln to the box's VNC
// server through the lease's SSH connection, so that a VNC viewer
// pointed at ln's address shows the desktop, until ctx ends (then it
// closes ln and the relayed connections and returns nil) or ln fails. A
// connection the box refuses is closed and logged; the others go on.
func (l *Lease) ServeVNC(ctx context.Context, ln net.Listener) error {
	const what = "serve VNC"
	if err := l.needDesktop(ctx, what); err != nil {
		if ln != nil {
			_ = ln.Close()
		}
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	var wg gosync.WaitGroup
	defer func() {
		// The relays end with ctx.
		cancel()
		stop()
		_ = ln.Close()
		wg.Wait()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("%s on lease %s: %w", what, l.ID(), err)
		}
		wg.Go(func() { l.relayVNC(ctx, c) })
	}
}

// relayVNC copies between c and a new connection to the box's VNC
// server until either ends or ctx does.
func (l *Lease) relayVNC(ctx context.Context, c net.Conn) {
	defer c.Close()
	box, err := l.dialVNC(ctx, "serve VNC")
	if err != nil {
		l.client.log.Warn("VNC connection not relayed", "lease", l.ID(), "err", err)
		return
	}
	defer box.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close(); _ = box.Close() })
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(box, c)
		_ = box.Close()
	}()
	_, _ = io.Copy(c, box)
	_ = c.Close()
	<-done
}

// DesktopURL is the coordinator portal's page that shows the lease's
// desktop in a browser (WebVNC), for a lease brokered by or registered
// with a coordinator; ok is false for a lease the library reaches
// directly (use ServeVNC). A lease without a desktop gives an error
// wrapping ErrNoDesktop.
func (l *Lease) DesktopURL() (u string, ok bool, err error) {
	if l == nil || l.keep == nil {
		return "", false, errors.New("desktop URL: no lease")
	}
	if !l.Desktop() {
		return "", false, fmt.Errorf("desktop URL of lease %s: the box has no desktop: %w", l.ID(), ErrNoDesktop)
	}
	cl := l.snapshot().Claim
	if (cl.Route != lease.RouteBrokered && cl.Route != lease.RouteRegistered) || cl.Coordinator == "" {
		return "", false, nil
	}
	base, err := url.Parse(cl.Coordinator)
	if err != nil {
		return "", false, fmt.Errorf("desktop URL of lease %s: coordinator URL %q: %w", l.ID(), cl.Coordinator, err)
	}
	return base.JoinPath("portal", "leases", cl.ID, "vnc").String(), true, nil
}
