package crabbox

import (
	"context"
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
	if opts.IdleTimeout < 0 || opts.IdleTimeout > 0 && opts.IdleTimeout < time.Second {
		return LeaseInfo{}, fmt.Errorf("heartbeat lease %s: idle timeout %s: want at least 1s", ref, opts.IdleTimeout)
	}
	l, err := c.resolve(ctx, ref, false) // touched below, at once
	if err != nil {
		return LeaseInfo{}, err
	}
	defer l.Close()
	if opts.IdleTimeout > 0 {
		_, err := c.store.Update(l.ID(), func(cl *lease.Claim) error {
			cl.IdleSeconds = int64(opts.IdleTimeout / time.Second)
			return nil
		})
		if err != nil {
			return LeaseInfo{}, fmt.Errorf("heartbeat lease %s: set idle timeout: %w", l.ID(), err)
		}
	}
	if err := l.Touch(ctx); err != nil { // the touch reads the new idle timeout
		return LeaseInfo{}, err
	}
	return c.Status(ctx, l.ID())
}
