package cloud

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/crabbox-dev/crabbox/provider"
)

// Sweep is the cleanup of a VM cloud's machines (servers, instances,
// Droplets) of type M, found by crabbox's ownership labels: it deletes
// a machine only when DecideCleanup says so for the caller's claims, and
// decides again on the freshly read machine just before deleting it, so
// a lease touched in the meantime survives.
type Sweep[M any] struct {
	// Provider is the provider's canonical name.
	Provider string
	// Noun names a machine in the log ("server", "instance").
	Noun string
	// View returns a machine's cloud ID and labels.
	View func(m M) (id string, labels map[string]string)
	// Reread reads m again; an error matching provider.ErrNotFound means
	// it is gone.
	Reread func(ctx context.Context, m M) (M, error)
	// Delete deletes m (already gone counts as deleted).
	Delete func(ctx context.Context, m M) error
	// Log records each deletion; nil discards.
	Log *slog.Logger
}

// Run decides for every machine of found and, unless req.DryRun, deletes
// those to delete after reading them again and deciding again. It stops
// with ctx's error when ctx ends, returning the decisions made so far.
func (s Sweep[M]) Run(ctx context.Context, req provider.CleanupRequest, found []M) ([]provider.CleanupDecision, error) {
	var out []provider.CleanupDecision
	for _, m := range found {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		id, labels := s.View(m)
		d := s.decide(labels, req)
		dec := provider.CleanupDecision{LeaseID: labels[LabelLease], Slug: labels[LabelSlug], CloudID: id, Delete: d.Delete, Reason: d.Reason}
		if d.Delete && !req.DryRun {
			s.deleteDecided(ctx, m, req, &dec)
		}
		out = append(out, dec)
	}
	return out, nil
}

func (s Sweep[M]) decide(labels map[string]string, req provider.CleanupRequest) CleanupDecision {
	found := req.Claimed != nil && req.Claimed(labels[LabelLease])
	return DecideCleanup(CleanupInput{Labels: labels, Provider: s.Provider, Record: Record{Found: found}, Now: req.Now})
}

// deleteDecided reads m again, decides again on its fresh labels and
// deletes it if the decision holds, recording the outcome in dec.
func (s Sweep[M]) deleteDecided(ctx context.Context, m M, req provider.CleanupRequest, dec *provider.CleanupDecision) {
	fresh, err := s.Reread(ctx, m)
	if errors.Is(err, provider.ErrNotFound) {
		dec.Deleted, dec.Reason = true, dec.Reason+" (already gone)"
		return
	}
	if err != nil {
		dec.Err = fmt.Errorf("re-read: %w", err)
		return
	}
	_, labels := s.View(fresh)
	again := s.decide(labels, req)
	if !again.Delete || labels[LabelLease] != dec.LeaseID {
		dec.Delete, dec.Reason = false, "changed since listed: "+again.Reason
		return
	}
	if err := s.Delete(ctx, fresh); err != nil {
		dec.Err = err
		return
	}
	dec.Deleted = true
	if s.Log != nil {
		s.Log.Info(s.Provider+" lease cleaned up", "lease", dec.LeaseID, s.Noun, dec.CloudID, "reason", dec.Reason)
	}
}
