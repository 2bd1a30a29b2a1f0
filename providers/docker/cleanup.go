package docker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	eng "github.com/crabbox-dev/crabbox/providers/docker/internal/engine"

	"github.com/crabbox-dev/crabbox/provider"
)

// Cleanup decides about every crabbox container of the engine and, unless
// req.DryRun, deletes those it decided to delete. A container is deleted
// only when the caller holds a claim for its lease and either its acquire
// was abandoned by a process that died, its expiry passed, or it stopped
// (a kept box: only once its expiry passed; keep holds it while its lease
// lives, never beyond). Before deleting, it re-reads the container and decides
// again, so a box touched in the meantime stays. It also removes the images
// of deleted checkpoints that no box uses any more.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	claimed := req.Claimed
	if claimed == nil {
		claimed = func(string) bool { return false }
	}
	now := req.Now
	if now.IsZero() {
		now = b.rt.Clock.Now()
	}
	found, err := b.boxes(ctx)
	if err != nil {
		return nil, fmt.Errorf("docker cleanup: %w", err)
	}
	seen := map[string]bool{}
	var out []provider.CleanupDecision
	for _, x := range found {
		seen[x.leaseID()] = true
		out = append(out, b.cleanupBox(ctx, x, claimed(x.leaseID()), now, req.DryRun))
	}
	if !req.DryRun {
		b.sweepCheckpoints(ctx)
		if err := b.sweepLocks(seen); err != nil {
			return out, fmt.Errorf("docker cleanup: %w", err)
		}
	}
	return out, nil
}

func (b *Backend) cleanupBox(ctx context.Context, x box, claimed bool, now time.Time, dryRun bool) provider.CleanupDecision {
	d := provider.CleanupDecision{LeaseID: x.leaseID(), Slug: x.labels[labelSlug], CloudID: x.name}
	st, release := acquireUnknown, func(bool) {}
	if claimed {
		var err error
		// An abandoned acquire's lock stays held until the container is
		// gone, so no second cleanup works on it meanwhile.
		if st, release, err = b.probeAcquire(x.leaseID()); err != nil {
			d.Reason = err.Error()
			return d
		}
	}
	// The lock file goes only with the container.
	defer func() { release(d.Deleted) }()
	d.Delete, d.Reason = decide(x, b.expiry(ctx, x), claimed, st, now)
	if !d.Delete || dryRun {
		return d
	}
	// Re-read the box and decide again: it may have been touched, or be
	// gone, since the list.
	again, err := b.find(ctx, x.leaseID())
	if err != nil {
		d.Delete, d.Reason = false, "re-reading the container: "+err.Error()
		return d
	}
	if del, reason := decide(again, b.expiry(ctx, again), claimed, st, now); !del {
		d.Delete, d.Reason = false, reason
		return d
	}
	if err := b.remove(ctx, again.containerID); err != nil {
		d.Err = err
		return d
	}
	d.Deleted = true
	b.forgetRecord(d.LeaseID)
	b.rt.Logger.Info("docker cleanup deleted a container", "lease", d.LeaseID, "container", x.name, "reason", d.Reason)
	return d
}

// expiry is a box's current expiry: from its lease record while it runs,
// else from its label. Either way it is capped at created_at + ttl_secs,
// so nothing inside a box can extend its life past its TTL.
func (b *Backend) expiry(ctx context.Context, x box) time.Time {
	expires := unixLabel(x.labels, labelExpiresAt)
	if x.running() {
		if rec, err := b.record(ctx, x); err == nil {
			expires = rec.ExpiresAt
		}
	}
	ttl, err := strconv.ParseInt(x.labels[labelTTL], 10, 64)
	if created := unixLabel(x.labels, labelCreatedAt); err == nil && ttl > 0 && !created.IsZero() && !expires.IsZero() {
		if limit := created.Add(time.Duration(ttl) * time.Second); expires.After(limit) {
			expires = limit
		}
	}
	return expires
}

// decide is the cleanup rule for one box: whether to delete it, and why.
func decide(x box, expires time.Time, claimed bool, st acquireState, now time.Time) (bool, string) {
	switch {
	case !claimed:
		return false, "no local claim: another client's box"
	case st == acquireRunning:
		return false, "acquire in progress"
	case st == acquireAbandoned:
		// Before keep: the lease never came to be, so there is nothing to keep.
		return true, "acquire did not finish and its process is gone"
	case expires.IsZero():
		return false, "no expiry on the container: left alone"
	case x.labels[labelKeep] == "true" && now.Before(expires):
		// A kept box stays while its lease lives, stopped or not; once
		// expired it goes like any other.
		return false, "keep=true: kept while live until " + expires.UTC().Format(time.RFC3339)
	case x.state == eng.StateExited || x.state == eng.StateDead:
		return true, fmt.Sprintf("box stopped (container %s)", x.state)
	case !now.Before(expires):
		return true, "expired at " + expires.UTC().Format(time.RFC3339)
	}
	return false, "live until " + expires.UTC().Format(time.RFC3339)
}
