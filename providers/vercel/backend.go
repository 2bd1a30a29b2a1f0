package vercel

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// Tags crabbox sets on its sandboxes. Vercel allows maxTags tags per
// sandbox, so a lease carries at most maxTags-3 labels of the caller.
const (
	TagCrabbox = "crabbox" // "true"
	TagLease   = "lease"   // the lease ID
	TagSlug    = "slug"    // the lease's slug
	maxTags    = 5
)

// namePrefix starts the name of every sandbox crabbox makes.
const namePrefix = "crabbox-"

// cleanupTimeout bounds the removal of a half-made sandbox after the
// caller has given up.
const cleanupTimeout = time.Minute

// Session statuses after which nothing runs in the sandbox.
var endedStatuses = []string{"stopping", "stopped", "failed", "aborted"}

// Backend is the Vercel provider's delegated backend. It runs nothing in
// this process between calls, so it needs no Close.
type Backend struct {
	cfg Config
	rt  provider.Runtime
	api *api
}

// New returns a backend for cfg. It makes no API call.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rt = rt.WithDefaults()
	return &Backend{cfg: cfg, rt: rt, api: newAPI(cfg, rt.HTTPClient)}, nil
}

// Spec describes the Vercel provider.
func (b *Backend) Spec() provider.Spec { return Provider{}.Spec() }

// SandboxName is the name of the sandbox of a lease: unique within the
// project, a valid hostname label.
func SandboxName(leaseID string) string {
	return namePrefix + strings.ReplaceAll(leaseID, "_", "-")
}

// owner returns the lease ID a sandbox provably belongs to: its tags mark
// it as crabbox's, name a lease ID, and its name is that lease's.
func owner(s sandboxJSON) (string, bool) {
	id := s.Tags[TagLease]
	if s.Tags[TagCrabbox] != "true" || !lease.IsID(id) || s.Name != SandboxName(id) {
		return "", false
	}
	return id, true
}

func ended(status string) bool { return slices.Contains(endedStatuses, status) }

// tags are the sandbox tags of a new lease.
func tags(req provider.WarmupRequest) (map[string]string, error) {
	out := map[string]string{TagCrabbox: "true", TagLease: req.LeaseID}
	if req.Slug != "" {
		out[TagSlug] = req.Slug
	}
	for _, k := range slices.Sorted(maps.Keys(req.Labels)) {
		if k == TagCrabbox || k == TagLease || k == TagSlug {
			return nil, fmt.Errorf("label %q is reserved for crabbox: %w", k, provider.ErrPrecondition)
		}
		out[k] = req.Labels[k]
	}
	if len(out) > maxTags {
		return nil, fmt.Errorf("%d labels (%s) do not fit: a Vercel sandbox has at most %d tags and crabbox uses %d: %w",
			len(req.Labels), strings.Join(slices.Sorted(maps.Keys(req.Labels)), ", "), maxTags, len(out)-len(req.Labels), provider.ErrPrecondition)
	}
	return out, nil
}

func millis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// sessionStart is when a session started, from which its timeout counts.
func sessionStart(se sessionJSON) time.Time {
	if se.StartedAt != 0 {
		return millis(se.StartedAt)
	}
	return millis(se.CreatedAt)
}

// expiry is when the sandbox's session times out.
func expiry(sb sandboxJSON, se *sessionJSON) time.Time {
	if se != nil && se.ID != "" && !ended(se.Status) {
		start := se.StartedAt
		if start == 0 {
			start = se.CreatedAt
		}
		return millis(start + se.Timeout)
	}
	return millis(sb.ExpiresAt)
}

func (b *Backend) view(sb sandboxJSON, se *sessionJSON) provider.LeaseView {
	status := sb.Status
	if se != nil && se.Status != "" {
		status = se.Status
	}
	return provider.LeaseView{
		ID: sb.Tags[TagLease], Slug: sb.Tags[TagSlug], Provider: Name, CloudID: sb.Name, State: status,
		Labels: maps.Clone(sb.Tags), CreatedAt: millis(sb.CreatedAt), ExpiresAt: expiry(sb, se),
		WorkRoot: b.cfg.WorkRoot,
	}
}

// MaxLifetime is the longest Vercel lets a sandbox session run, as
// configured (the plan's maximum).
func (b *Backend) MaxLifetime() time.Duration { return b.cfg.MaxLifetime }

// Warmup creates the lease's sandbox, tagged with the lease, whose session
// times out at req.ExpiresAt (at most the maximum lifetime away). If the create call fails in a way that may
// have left a sandbox behind (a lost answer, a server error, ctx ending),
// it deletes the lease's sandbox before returning.
func (b *Backend) Warmup(ctx context.Context, req provider.WarmupRequest) (provider.LeaseView, error) {
	if !lease.IsID(req.LeaseID) {
		return provider.LeaseView{}, fmt.Errorf("vercel: lease ID %q is not a crabbox lease ID", req.LeaseID)
	}
	tg, err := tags(req)
	if err != nil {
		return provider.LeaseView{}, fmt.Errorf("vercel: warm up %s: %w", req.LeaseID, err)
	}
	now := b.rt.Clock.Now()
	expires := req.ExpiresAt
	if expires.IsZero() {
		expires = now.Add(min(req.TTL, req.IdleTimeout))
	}
	if cap := now.Add(b.cfg.MaxLifetime); expires.After(cap) {
		expires = cap
	}
	if !expires.After(now) {
		return provider.LeaseView{}, fmt.Errorf("vercel: warm up %s: expiry %s is not after now (%s)",
			req.LeaseID, expires.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	name := SandboxName(req.LeaseID)
	got, err := b.api.createSandbox(ctx, createSandboxBody{
		Name: name, Runtime: b.cfg.Runtime, Timeout: expires.Sub(now).Milliseconds(),
		Resources: resources{VCPUs: b.cfg.VCPUs}, Persistent: false, Tags: tg,
	})
	if err == nil {
		if id, ok := owner(got.Sandbox); !ok || id != req.LeaseID || got.Session.ID == "" {
			err = fmt.Errorf("create sandbox %s: the answer names sandbox %q with lease tag %q and session %q", name, got.Sandbox.Name, got.Sandbox.Tags[TagLease], got.Session.ID)
		}
	}
	if err != nil {
		if !definite(err) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			if rerr := b.remove(rctx, req.LeaseID); rerr != nil {
				err = errors.Join(err, fmt.Errorf("remove what the failed warmup left (cleanup will retry): %w", rerr))
			}
		}
		return provider.LeaseView{}, fmt.Errorf("vercel: warm up %s: %w", req.LeaseID, err)
	}
	b.rt.Logger.Info("vercel sandbox created", "lease", req.LeaseID, "sandbox", name, "session", got.Session.ID)
	return b.view(got.Sandbox, &got.Session), nil
}

// lookup finds the sandbox of a lease by lease ID or slug, whatever its
// state. A sandbox that is not provably the lease's is not found.
func (b *Backend) lookup(ctx context.Context, id string) (sandboxAndSession, error) {
	name := ""
	if lease.IsID(id) {
		name = SandboxName(id)
	} else {
		all, err := b.list(ctx)
		if err != nil {
			return sandboxAndSession{}, err
		}
		var ids []string
		for _, s := range all {
			if s.Tags[TagSlug] == id {
				ids = append(ids, s.Tags[TagLease])
			}
		}
		switch len(ids) {
		case 0:
			return sandboxAndSession{}, fmt.Errorf("vercel: no sandbox for lease %q: %w", id, provider.ErrNotFound)
		case 1:
			id, name = ids[0], SandboxName(ids[0])
		default:
			return sandboxAndSession{}, fmt.Errorf("vercel: slug %q names several leases (%s): %w", id, strings.Join(ids, ", "), provider.ErrConflict)
		}
	}
	got, err := b.api.getSandbox(ctx, name)
	if err != nil {
		return got, fmt.Errorf("vercel: lease %s: %w", id, err)
	}
	if owner, ok := owner(got.Sandbox); !ok || owner != id {
		return got, fmt.Errorf("vercel: sandbox %s is not crabbox's lease %s (tags %v): %w", name, id, got.Sandbox.Tags, provider.ErrNotFound)
	}
	return got, nil
}

// live is lookup for a lease whose session still runs.
func (b *Backend) live(ctx context.Context, id string) (sandboxAndSession, error) {
	got, err := b.lookup(ctx, id)
	if err != nil {
		return got, err
	}
	if ended(got.Session.Status) || got.Session.ID == "" {
		return got, fmt.Errorf("vercel: lease %s has ended (session %s %s): %w", id, got.Session.ID, got.Session.Status, provider.ErrNotFound)
	}
	return got, nil
}

// list returns crabbox's sandboxes in the project.
func (b *Backend) list(ctx context.Context) ([]sandboxJSON, error) {
	all, err := b.api.listSandboxes(ctx, namePrefix, TagCrabbox, "true", 100)
	if err != nil {
		return nil, fmt.Errorf("vercel: %w", err)
	}
	out := all[:0]
	for _, s := range all {
		if _, ok := owner(s); ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// Status returns a live lease by ID or slug; an ended one is not found.
func (b *Backend) Status(ctx context.Context, req provider.StatusRequest) (provider.LeaseView, error) {
	got, err := b.live(ctx, req.ID)
	if err != nil {
		return provider.LeaseView{}, err
	}
	return b.view(got.Sandbox, &got.Session), nil
}

// List returns the crabbox sandboxes of the project whose session has not
// ended (ended ones are gone for Status too; Stop and Cleanup still find
// them).
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseView, error) {
	all, err := b.list(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]provider.LeaseView, 0, len(all))
	for _, s := range all {
		if !ended(s.Status) {
			out = append(out, b.view(s, nil))
		}
	}
	return out, nil
}

// Stop stops the lease's session and deletes its sandbox; a lease that is
// already gone is stopped.
func (b *Backend) Stop(ctx context.Context, req provider.StopRequest) error {
	id := req.ID
	if !lease.IsID(id) {
		got, err := b.lookup(ctx, id)
		if errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		id = got.Sandbox.Tags[TagLease]
	}
	if err := b.remove(ctx, id); err != nil {
		return fmt.Errorf("vercel: stop %s: %w", id, err)
	}
	return nil
}

// remove stops and deletes the sandbox of lease id if it is provably the
// lease's; a missing sandbox is removed.
func (b *Backend) remove(ctx context.Context, id string) error {
	got, err := b.lookup(ctx, id)
	if errors.Is(err, provider.ErrNotFound) {
		var ae *APIError
		if errors.As(err, &ae) {
			return nil // no such sandbox
		}
		return err // a sandbox of that name that is not the lease's: left alone
	}
	if err != nil {
		return err
	}
	return b.delete(ctx, got)
}

// delete stops got's session if it runs, then deletes the sandbox.
func (b *Backend) delete(ctx context.Context, got sandboxAndSession) error {
	if got.Session.ID != "" && !ended(got.Session.Status) {
		if err := b.api.stopSession(ctx, got.Session.ID); err != nil && !errors.Is(err, provider.ErrNotFound) {
			return err
		}
	}
	if err := b.api.deleteSandbox(ctx, got.Sandbox.Name); err != nil && !errors.Is(err, provider.ErrNotFound) {
		return err
	}
	b.rt.Logger.Info("vercel sandbox deleted", "lease", got.Sandbox.Tags[TagLease], "sandbox", got.Sandbox.Name)
	return nil
}

// Touch extends the session's timeout so that it lasts at least until
// req.ExpiresAt, or until the plan's maximum session duration from its
// start if that comes first (Vercel refuses a longer one); a session that
// already lasts longer is left as it is. The returned view's ExpiresAt is
// the session's end as Vercel then reports it.
func (b *Backend) Touch(ctx context.Context, req provider.DelegatedTouchRequest) (provider.LeaseView, error) {
	got, err := b.live(ctx, req.ID)
	if err != nil {
		return provider.LeaseView{}, err
	}
	want := req.ExpiresAt
	if start := sessionStart(got.Session); !start.IsZero() && want.After(start.Add(b.cfg.MaxLifetime)) {
		want = start.Add(b.cfg.MaxLifetime)
	}
	if more := want.Sub(expiry(got.Sandbox, &got.Session)); more > 0 {
		ms := (more + time.Millisecond - 1).Milliseconds()
		se, err := b.api.extendTimeout(ctx, got.Session.ID, ms)
		if err != nil {
			return provider.LeaseView{}, fmt.Errorf("vercel: touch %s: %w", req.ID, err)
		}
		got.Session = se
	}
	return b.view(got.Sandbox, &got.Session), nil
}
