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

// HeartbeatInterval is how often a lease in use is touched: a third of the
// idle timeout, clamped to [5s, 60s].
func HeartbeatInterval(idle time.Duration) time.Duration {
	return min(max(idle/3, 5*time.Second), 60*time.Second)
}
