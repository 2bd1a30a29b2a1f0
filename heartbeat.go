package crabbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
)

// HeartbeatOptions shape a heartbeat.
type HeartbeatOptions struct {
	// IdleTimeout, if positive, becomes the lease's idle timeout for this
	// and every later touch. Zero keeps the current one.
	IdleTimeout time.Duration
}

// Heartbeat touches the live lease with the given ID or slug, moving its
// expiry to min(created+ttl, now+idle), and returns it as Status does.
// An expired or vanished lease cannot be revived.
func (c *Client) Heartbeat(ctx context.Context, ref string, opts HeartbeatOptions) (LeaseInfo, error) {
	if err := c.ready(ctx, "heartbeat lease "+ref); err != nil {
		return LeaseInfo{}, err
	}
	if opts.IdleTimeout < 0 || opts.IdleTimeout > 0 && opts.IdleTimeout < time.Second {
		return LeaseInfo{}, fmt.Errorf("heartbeat lease %s: idle timeout %s: want at least 1s", ref, opts.IdleTimeout)
	}
	l, err := c.resolve(ctx, ref, false) // touched below, at once
	if err != nil {
		return LeaseInfo{}, err
	}
	defer l.Close()
	setIdle := func(seconds int64) error {
		_, err := c.store.Update(l.ID(), func(cl *lease.Claim) error { cl.IdleSeconds = seconds; return nil })
		return err
	}
	old := l.Claim().IdleSeconds
	if opts.IdleTimeout > 0 {
		if err := setIdle(int64(opts.IdleTimeout / time.Second)); err != nil {
			return LeaseInfo{}, fmt.Errorf("heartbeat lease %s: set idle timeout: %w", l.ID(), err)
		}
	}
	if err := l.Touch(ctx); err != nil { // the touch reads the new idle timeout
		if opts.IdleTimeout > 0 { // a heartbeat that failed changes nothing
			err = errors.Join(err, setIdle(old))
		}
		return LeaseInfo{}, err
	}
	return c.Status(ctx, l.ID())
}
