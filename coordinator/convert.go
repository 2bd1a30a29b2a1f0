package coordinator

import (
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// toAPILease is the public view of a lease: the private fields (create
// attempt, request hash, cleanup token) are left behind.
func toAPILease(l store.Lease) api.Lease {
	return api.Lease{
		ID: l.ID, Slug: l.Slug, Provider: l.Provider,
		Lifecycle: api.Lifecycle(l.Lifecycle), State: api.LeaseState(l.State),
		Owner: l.Owner, Org: l.Org, Target: api.Target(l.Target), Class: l.Class,
		ServerType: l.ServerType, CloudID: l.CloudID, ServerName: l.ServerName,
		Host: l.Host, SSHUser: l.SSHUser, SSHPort: l.SSHPort,
		SSHFallbackPorts: slices.Clone(l.SSHFallbackPorts), SSHHostKey: l.SSHHostKey,
		WorkRoot: l.WorkRoot, Keep: l.Keep,
		TTLSeconds: int(l.TTLSeconds), IdleTimeoutSeconds: int(l.IdleTimeoutSeconds),
		CreatedAt: utc(l.CreatedAt), UpdatedAt: utc(l.UpdatedAt),
		LastTouchedAt: utc(l.LastTouchedAt), ExpiresAt: utc(l.ExpiresAt),
		ReleasedAt: utc(l.ReleasedAt), EndedAt: utc(l.EndedAt),
		EstimatedHourlyUSD: l.EstimatedHourlyUSD, MaxEstimatedUSD: l.MaxEstimatedUSD,
		CleanupAttempts: l.CleanupAttempts, CleanupError: l.CleanupError,
		CleanupStartedAt: utc(l.CleanupStartedAt), CleanupRetryAt: utc(l.CleanupRetryAt),
		ReleaseDeletesServer: releaseDeletesServer(l), FailureError: l.FailureError,
		Labels: maps.Clone(l.Labels), Image: leaseImage(l), Location: l.Location,
		Telemetry: slices.Clone(l.Telemetry), TelemetryAt: utc(l.TelemetryAt),
		Pool: l.Pool,
	}
}

// leaseImage is the wire's image object of l, nil when it asked for none.
// A lease stored before image sources were recorded named its image in
// its request as far as anyone can tell.
func leaseImage(l store.Lease) *api.LeaseImage {
	if l.Image == "" {
		return nil
	}
	source := l.ImageSource
	if source == "" {
		source = api.ImageExplicit
	}
	return &api.LeaseImage{ID: l.Image, Source: source, Provider: l.Provider, Region: l.Location}
}

// releaseDeletesServer is the wire's releaseDeletesServer: true while a
// deletion is pending, false only when the lease ended with its server
// kept (existing clients read false as "kept"), else absent.
func releaseDeletesServer(l store.Lease) *bool {
	switch {
	case l.ReleaseDeletesServer:
		return ptr(true)
	case !l.State.Live() && (l.ServerKept || l.Lifecycle == store.LifecycleRegistered):
		return ptr(false)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

func toAPILeases(ls []store.Lease) []api.Lease {
	out := make([]api.Lease, 0, len(ls))
	for _, l := range ls {
		out = append(out, toAPILease(l))
	}
	return out
}

func toAPIRun(r store.Run) api.Run {
	out := api.Run{
		ID: r.ID, LeaseID: r.LeaseID, Slug: r.Slug, Owner: r.Owner, Org: r.Org,
		Provider: r.Provider, Target: api.Target(r.Target), Class: r.Class,
		ServerType: r.ServerType, Command: slices.Clone(r.Command), Label: r.Label,
		State: api.RunState(r.State), Phase: r.Phase, SyncMs: r.SyncMs,
		CommandMs: r.CommandMs, DurationMs: r.DurationMs, LogBytes: r.LogBytes,
		LogTruncated: r.LogTruncated, StartedAt: utc(r.StartedAt),
		LastEventAt: utc(r.LastEventAt), EventCount: int(r.EventCount), EndedAt: utc(r.EndedAt),
		Telemetry: slices.Clone(r.Telemetry),
	}
	if out.Command == nil {
		out.Command = []string{}
	}
	if r.ExitCode != nil {
		code := *r.ExitCode
		out.ExitCode = &code
	}
	if len(r.Results) > 0 {
		var res api.RunResults
		if json.Unmarshal(r.Results, &res) == nil {
			out.Results = &res
		}
	}
	return out
}

func toAPIEvent(e store.RunEvent) api.Event {
	return api.Event{
		RunID: e.RunID, Seq: e.Seq, Type: e.Type, Phase: e.Phase, Stream: e.Stream,
		Message: e.Message, Data: eventData(e.Data), CreatedAt: utc(e.CreatedAt),
	}
}

// eventData is an event's data as the wire's string: the store keeps the
// JSON encoding of the string the client sent; other JSON (stored by
// older coordinators) is passed on as its text.
func eventData(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

func toAPIGroup(g store.UsageGroup) api.UsageGroup {
	return api.UsageGroup{Key: g.Key, UsageTotals: toAPITotals(g)}
}

func toAPITotals(g store.UsageGroup) api.UsageTotals {
	return api.UsageTotals{
		Leases: g.Leases, ActiveLeases: g.ActiveLeases,
		RuntimeSeconds: g.RuntimeSeconds, EstimatedUSD: g.EstimatedUSD, ReservedUSD: g.ReservedUSD,
		Checkpoints: g.Checkpoints, CheckpointStorageUSD: g.CheckpointStorageUSD,
	}
}

func toAPIGroups(gs []store.UsageGroup) []api.UsageGroup {
	out := make([]api.UsageGroup, 0, len(gs))
	for _, g := range gs {
		out = append(out, toAPIGroup(g))
	}
	return out
}

func toStoreLimits(l api.Limits) store.Limits {
	return store.Limits{
		MaxActiveLeases: l.MaxActiveLeases, MaxActiveLeasesPerOwner: l.MaxActiveLeasesPerOwner,
		MaxActiveLeasesPerOrg: l.MaxActiveLeasesPerOrg, MaxMonthlyUSD: l.MaxMonthlyUSD,
		MaxMonthlyUSDPerOwner: l.MaxMonthlyUSDPerOwner, MaxMonthlyUSDPerOrg: l.MaxMonthlyUSDPerOrg,
	}
}

// utc returns t in UTC, keeping the zero time zero.
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}
