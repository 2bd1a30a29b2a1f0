package cloud

import (
	"fmt"
	"time"
)

// DefaultGrace is how long after its expiry a box still labelled
// provisioning or running is left alone: it may belong to an acquire or a
// run that is slow rather than dead.
const DefaultGrace = 12 * time.Hour

// Record is the caller's own record of a lease: its local claim in direct
// mode, or the coordinator's lease record when brokered.
type Record struct {
	// Found is set when the record exists. Without it the box belongs to
	// someone else and is never deleted.
	Found bool
	// State is the record's state when it knows better than the box's
	// labels: StateFailed for an acquire whose rollback did not finish,
	// StateReleased for a release that did not finish. Empty otherwise.
	State string
}

// CleanupInput is everything the cleanup decision depends on.
type CleanupInput struct {
	// Labels are the box's labels, as just read from the cloud.
	Labels map[string]string
	// Provider is the canonical name of the provider sweeping; boxes of
	// other providers are skipped.
	Provider string
	Record   Record
	Now      time.Time
	// Grace is DefaultGrace when zero.
	Grace time.Duration
}

// CleanupDecision says whether to delete a box, and why.
type CleanupDecision struct {
	Delete bool
	Reason string
}

// DecideCleanup decides whether a box may be deleted:
//
//   - no crabbox=true, another provider, no valid lease ID or no valid
//     expires_at: skip (not ours, or unknown);
//   - no record (claim or coordinator record): skip, another client's box;
//   - state failed or released (on the box or in the record): delete, kept
//     or not: an acquire that failed or a release that was asked for left
//     no lease to keep;
//   - before expires_at: skip, the lease is live (keep=true changes only
//     the reason: a kept box is never deleted while its lease lives);
//   - past expires_at: delete when ready; when provisioning, running or in
//     an unknown state only once the grace period after expiry has passed.
//     keep=true does not hold a box past its expiry: an expired kept box
//     (Hetzner and Azure bill a stopped one) is cleaned up like any other.
//
// It is a pure function; callers run it again on the freshly re-read box
// just before deleting, so a lease touched in the meantime survives.
func DecideCleanup(in CleanupInput) CleanupDecision {
	skip := func(format string, args ...any) CleanupDecision {
		return CleanupDecision{Reason: fmt.Sprintf(format, args...)}
	}
	del := func(format string, args ...any) CleanupDecision {
		return CleanupDecision{Delete: true, Reason: fmt.Sprintf(format, args...)}
	}
	l := in.Labels
	if l[LabelCrabbox] != "true" {
		return skip("no %s=true label: not a crabbox box", LabelCrabbox)
	}
	if l[LabelProvider] != in.Provider {
		return skip("%s=%q: not a %s box", LabelProvider, l[LabelProvider], in.Provider)
	}
	info, err := ParseLabels(l)
	if err != nil {
		return skip("unreadable labels, leaving it alone: %v", err)
	}
	if _, ok := l[LabelExpiresAt]; !ok {
		return skip("no %s label: expiry unknown, leaving it alone", LabelExpiresAt)
	}
	if !in.Record.Found {
		return skip("no claim for lease %s: another client's box", info.LeaseID)
	}
	for _, state := range []string{in.Record.State, info.State} {
		if state == StateFailed || state == StateReleased {
			return del("state %s", state)
		}
	}
	expires := info.ExpiresAt.Format(time.RFC3339)
	if in.Now.Before(info.ExpiresAt) {
		if info.Keep {
			return skip("%s=true: kept while live until %s", LabelKeep, expires)
		}
		return skip("live until %s", expires)
	}
	if info.State == StateReady {
		return del("expired at %s", expires)
	}
	grace := in.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	if end := info.ExpiresAt.Add(grace); in.Now.Before(end) {
		return skip("state %q, expired at %s: waiting for the grace period until %s", info.State, expires, end.Format(time.RFC3339))
	}
	return del("state %q, expired at %s and past the %s grace period", info.State, expires, grace)
}
