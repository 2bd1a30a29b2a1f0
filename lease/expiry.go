package lease

import "time"

// Defaults for lease lifetimes.
const (
	DefaultTTL         = 90 * time.Minute
	DefaultIdleTimeout = 30 * time.Minute
)

// ExpiresAt is when a lease expires: min(created+ttl, lastTouched+idle).
func ExpiresAt(created, lastTouched time.Time, ttl, idle time.Duration) time.Time {
	byTTL := created.Add(ttl)
	byIdle := lastTouched.Add(idle)
	if byIdle.Before(byTTL) {
		return byIdle
	}
	return byTTL
}

// HeartbeatInterval is how often a held lease is touched: a third of the
// idle timeout, at least 5s (unless the idle timeout is shorter than 15s:
// a lease is touched at least three times per idle timeout) and at most
// 60s.
func HeartbeatInterval(idle time.Duration) time.Duration {
	d := min(max(idle/3, 5*time.Second), 60*time.Second)
	if d > idle/3 {
		d = max(idle/3, 100*time.Millisecond)
	}
	return d
}
