package ssh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	cryptossh "golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// rollbackTimeout bounds undoing a failed acquire, which runs even when the
// caller's context is already cancelled.
const rollbackTimeout = time.Minute

// Backend is the SSH-lease backend of one configured host. It is safe for
// concurrent use, also by several processes sharing a state directory.
type Backend struct {
	cfg     Config
	clock   clockwork.Clock
	log     *slog.Logger
	records *records
	pins    *pins
	handoff handoffs
}

var (
	_ provider.SSHLeaseBackend   = (*Backend)(nil)
	_ provider.CleanupBackend    = (*Backend)(nil)
	_ provider.ConnectionHandoff = (*Backend)(nil)
)

// Spec describes the provider.
func (b *Backend) Spec() provider.Spec { return spec.Clone() }

// Config is the backend's configuration, with defaults applied.
func (b *Backend) Config() Config { return b.cfg }

// Acquire makes a lease on the configured host: it records the lease,
// connects with the configured key file (trusting the host key on first use
// and pinning it), checks that the host has sh and tar, and creates
// <WorkRoot>/<LeaseID>. The lease key in req is not installed on the host:
// crabbox does not own it, so the target names the key file to use instead.
// On failure, what was created is removed again.
func (b *Backend) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	if err := b.cfg.checkAcquire(); err != nil {
		return provider.LeaseTarget{}, err
	}
	r, err := b.newRecord(req)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("on %s: %w", b.addr(), err)
	}
	// The caller (lease.Store.Acquire) names the provider and the lease.
	fail := func(err error) error { return fmt.Errorf("on %s: %w", r.addr(), err) }
	// The record comes first: if the process dies while the host is being
	// prepared, release and cleanup still find the lease.
	if err := b.records.create(r); err != nil {
		return provider.LeaseTarget{}, fail(err)
	}
	client, hostKey, touched, err := b.prepare(ctx, r)
	if err != nil {
		return provider.LeaseTarget{}, errors.Join(fail(err), b.rollback(ctx, r, touched))
	}
	ready, err := b.records.update(r.LeaseID, func(r *record) {
		r.State, r.HostKey = stateReady, lease.FormatPublicKey(hostKey)
	})
	if err != nil {
		client.Close()
		return provider.LeaseTarget{}, errors.Join(fail(err), b.rollback(ctx, r, true))
	}
	// The connection is the one the library would open: the target's user,
	// key file and host key. Hand it over (TakeConnection).
	b.handoff.put(b.clock, r.LeaseID, client)
	return ready.target(), nil
}

func (b *Backend) addr() string { return net.JoinHostPort(b.cfg.Host, strconv.Itoa(b.cfg.Port)) }

// newRecord is the record of a lease about to be acquired on the configured
// host.
func (b *Backend) newRecord(req provider.AcquireRequest) (record, error) {
	if !lease.IsID(req.LeaseID) {
		return record{}, fmt.Errorf("lease ID %q is malformed: want cbx_ and 12 lowercase hex digits", req.LeaseID)
	}
	if req.Slug != "" && !lease.ValidSlug(req.Slug) {
		return record{}, fmt.Errorf("slug %q is malformed: lowercase letters, digits and dashes, at most 41", req.Slug)
	}
	created := req.CreatedAt
	if created.IsZero() {
		created = b.clock.Now().UTC()
	}
	expires := req.ExpiresAt
	if expires.IsZero() {
		ttl, idle := req.TTL, req.IdleTimeout
		if ttl <= 0 {
			ttl = lease.DefaultTTL
		}
		if idle <= 0 {
			idle = lease.DefaultIdleTimeout
		}
		expires = lease.ExpiresAt(created, created, ttl, idle)
	}
	labels := maps.Clone(req.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels["provider"], labels["lease"] = Name, req.LeaseID
	if req.Slug != "" {
		labels["slug"] = req.Slug
	}
	if req.Keep {
		labels["keep"] = "true"
	}
	return record{
		LeaseID: req.LeaseID, Slug: req.Slug, State: stateAcquiring,
		Host: b.cfg.Host, Port: b.cfg.Port, User: b.cfg.User, KeyFile: b.cfg.KeyFile, WorkRoot: b.cfg.WorkRoot,
		Keep: req.Keep, Labels: labels,
		CreatedAt: created, LastTouchedAt: created, ExpiresAt: expires,
	}, nil
}

// prepare connects to r's host, checks its tools and creates the lease
// directory, and returns the connection. touched reports whether the host
// may have been changed, so a rollback must visit it.
func (b *Backend) prepare(ctx context.Context, r record) (client *cryptossh.Client, hostKey cryptossh.PublicKey, touched bool, err error) {
	dir, err := r.leaseDir()
	if err != nil {
		return nil, nil, false, err
	}
	client, hostKey, err = b.connect(ctx, r)
	if err != nil {
		return nil, nil, false, err
	}
	stdout, stderr, err := run(ctx, client, shellCommand(prepareScript, dir))
	if err == nil && strings.Contains(stdout, markerReady) {
		return client, hostKey, true, nil
	}
	client.Close()
	var exit *cryptossh.ExitError
	exited := errors.As(err, &exit)
	switch {
	case err != nil && !exited:
		// The connection broke or ctx ended: the directory may exist.
		return nil, nil, true, fmt.Errorf("prepare %s: %w", dir, err)
	case !strings.Contains(stdout, markerSh):
		return nil, nil, false, fmt.Errorf("cannot run sh as %s (crabbox needs a POSIX sh and tar on the host): %s", r.User, exitDetail(errOr(err, "no output"), stderr))
	case strings.Contains(stdout, markerMissing):
		_, missing, _ := strings.Cut(stdout, markerMissing)
		return nil, nil, false, fmt.Errorf("the host has no %s in the PATH of %s (crabbox needs a POSIX sh and tar on the host)", strings.Join(strings.Fields(missing), ", "), r.User)
	default:
		return nil, nil, false, fmt.Errorf("create work directory %s as %s: %s (the work root must be writable by the user, or creatable)", dir, r.User, exitDetail(errOr(err, "no confirmation"), stderr))
	}
}

func errOr(err error, what string) error {
	if err != nil {
		return err
	}
	return errors.New(what)
}

// rollback undoes a failed acquire: it releases the lease when the host may
// have been touched, else only drops the record. When the release fails
// the record stays, so ReleaseLease or Cleanup can finish later.
func (b *Backend) rollback(ctx context.Context, r record, touched bool) error {
	if !touched {
		return b.records.delete(r.LeaseID)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if err := b.release(ctx, r); err != nil {
		return fmt.Errorf("roll back lease %s on %s (its record is kept for release or cleanup): %w", r.LeaseID, r.addr(), err)
	}
	return nil
}

// Resolve finds a lease by ID or slug in the records. It does not contact the
// host.
func (b *Backend) Resolve(_ context.Context, req provider.ResolveRequest) (provider.LeaseTarget, error) {
	r, err := b.records.find(req.ID)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("resolve ssh lease: %w", err)
	}
	if r.State != stateReady {
		return provider.LeaseTarget{}, fmt.Errorf("resolve lease %s on %s: its acquire did not finish (release it): %w", r.LeaseID, r.addr(), provider.ErrNotFound)
	}
	return r.target(), nil
}

// List returns every recorded lease, on any host, with its labels. A lease
// whose acquire did not finish is listed with State "acquiring".
func (b *Backend) List(_ context.Context, _ provider.ListRequest) ([]provider.LeaseTarget, error) {
	all, err := b.records.list()
	if err != nil {
		return nil, err
	}
	out := make([]provider.LeaseTarget, 0, len(all))
	for _, r := range all {
		out = append(out, r.target())
	}
	return out, nil
}

// Touch moves the lease's recorded expiry to req.ExpiresAt. The host has no
// lease state of its own, so it is not contacted.
func (b *Backend) Touch(_ context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	id := req.Lease.LeaseID
	if req.ExpiresAt.IsZero() {
		return provider.LeaseTarget{}, fmt.Errorf("touch lease %s: no expiry given", id)
	}
	r, err := b.records.update(id, func(r *record) {
		r.ExpiresAt = req.ExpiresAt
		if !req.Now.IsZero() {
			r.LastTouchedAt = req.Now
		}
	})
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("touch lease %s: %w", id, err)
	}
	return r.target(), nil
}

// ReleaseLease removes <WorkRoot>/<LeaseID> on the lease's host, and nothing
// else, then deletes the record. The host, user and work root come from the
// record, not from req or the current configuration. A lease without a
// record is already released: that succeeds, so a target carrying only the
// lease ID (as after a failed acquire) is enough. If the host cannot be
// reached, the error is returned and the record stays.
func (b *Backend) ReleaseLease(ctx context.Context, req provider.ReleaseRequest) error {
	id := req.Lease.LeaseID
	if !lease.IsID(id) {
		return fmt.Errorf("release lease %q: malformed lease ID: want cbx_ and 12 lowercase hex digits", id)
	}
	b.handoff.drop(id, nil)
	r, err := b.records.get(id)
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release lease %s: %w", id, err)
	}
	return b.release(ctx, r)
}

// release removes r's lease directory on its host, then r's record.
func (b *Backend) release(ctx context.Context, r record) error {
	fail := func(err error) error { return fmt.Errorf("release lease %s on %s: %w", r.LeaseID, r.addr(), err) }
	dir, err := r.leaseDir()
	if err != nil {
		return fail(err)
	}
	client, _, err := b.connect(ctx, r)
	if err != nil {
		return fail(err)
	}
	defer client.Close()
	if _, stderr, err := run(ctx, client, shellCommand(removeScript, dir)); err != nil {
		return fail(fmt.Errorf("remove %s: %s", dir, exitDetail(err, stderr)))
	}
	if err := b.records.delete(r.LeaseID); err != nil {
		return fail(err)
	}
	return nil
}

// Cleanup decides for every recorded lease whether it is expired and
// claimed by the caller, and releases those unless req.DryRun. Just before
// releasing, it re-reads the record, so a lease touched meanwhile stays.
// Failed releases are reported in their decision's Err.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	now := req.Now
	if now.IsZero() {
		now = b.clock.Now()
	}
	all, err := b.records.list()
	if err != nil {
		return nil, fmt.Errorf("cleanup ssh leases: %w", err)
	}
	out := make([]provider.CleanupDecision, 0, len(all))
	for _, r := range all {
		d := decide(r, req.Claimed, now)
		if d.Delete && !req.DryRun {
			d = b.sweep(ctx, r, req.Claimed, now)
		} else if d.Delete {
			d.Reason += " (dry run)"
		}
		out = append(out, d)
	}
	return out, nil
}

// sweep re-reads r, re-decides, and releases it if it is still to be deleted.
func (b *Backend) sweep(ctx context.Context, r record, claimed func(string) bool, now time.Time) provider.CleanupDecision {
	cur, err := b.records.get(r.LeaseID)
	if errors.Is(err, provider.ErrNotFound) {
		d := decide(r, claimed, now)
		d.Delete, d.Reason = false, "already released"
		return d
	}
	if err != nil {
		d := decide(r, claimed, now)
		d.Err = err
		return d
	}
	d := decide(cur, claimed, now)
	if !d.Delete {
		return d
	}
	if d.Err = b.release(ctx, cur); d.Err == nil {
		d.Deleted = true
	}
	return d
}

// decide is cleanup's rule for one lease: only an expired lease the caller
// holds a claim for is deleted. keep=true holds a lease while it lives,
// never beyond its expiry.
func decide(r record, claimed func(string) bool, now time.Time) provider.CleanupDecision {
	d := provider.CleanupDecision{LeaseID: r.LeaseID, Slug: r.Slug}
	switch {
	case claimed == nil || !claimed(r.LeaseID):
		d.Reason = "no local claim: another client's lease"
	case r.ExpiresAt.IsZero():
		d.Reason = "no expiry recorded"
	case now.Before(r.ExpiresAt) && r.Keep:
		d.Reason = "kept (keep=true) while live until " + r.ExpiresAt.UTC().Format(time.RFC3339)
	case now.Before(r.ExpiresAt):
		d.Reason = "live until " + r.ExpiresAt.UTC().Format(time.RFC3339)
	default:
		d.Delete = true
		d.Reason = "expired at " + r.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return d
}
