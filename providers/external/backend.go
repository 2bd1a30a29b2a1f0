package external

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	gosync "sync"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// core is what both backends share: the program and its capabilities.
type core struct {
	prog     *program
	rt       provider.Runtime
	workRoot string
	// spec is what the backend reports as its Spec: the external
	// provider's, or for a Plugin the provider the program serves.
	spec provider.Spec
	// what names the program in errors.
	what string
	// plugin is set for a Plugin: the program is crabbox's own.
	plugin bool

	mu   gosync.Mutex
	caps *Capabilities // cached after the first successful call
}

// newCore makes the core of a backend for the program of c. sp, when not
// nil (a Plugin), is the provider the program serves: the backend reports
// it as its Spec and its leases as that provider's.
func newCore(c Config, sp *provider.Spec, rt provider.Runtime) (*core, error) {
	rt = rt.WithDefaults()
	prog, err := newProgram(c, rt)
	if err != nil {
		return nil, err
	}
	workRoot := c.WorkRoot
	if workRoot == "" {
		workRoot = DefaultWorkRoot
	}
	if !path.IsAbs(workRoot) {
		return nil, fmt.Errorf("external provider: config \"work-root\" %q is not an absolute path", workRoot)
	}
	if sp != nil {
		what := fmt.Sprintf("provider %s (program %s)", sp.Name, prog.path)
		return &core{prog: prog, rt: rt, workRoot: workRoot, spec: *sp, what: what, plugin: true}, nil
	}
	return &core{prog: prog, rt: rt, workRoot: workRoot, spec: spec.Clone(), what: "external provider " + prog.path}, nil
}

// call runs one operation and names the provider and operation in errors.
func (c *core) call(ctx context.Context, req Request) (Response, error) {
	if c.plugin {
		req.StateDir = c.rt.StateDir
	}
	resp, err := c.prog.call(ctx, req)
	switch {
	case err == nil:
		return resp, nil
	case c.plugin && resp.Error != "":
		// crabbox's own program reports the provider's own error, as the
		// provider would in-process.
		return resp, &refusal{msg: resp.Error, kind: errorKinds[resp.ErrorKind]}
	}
	return resp, fmt.Errorf("%s: %s: %w", c.what, req.Operation, err)
}

// refusal is a provider's own error message from its program, matching
// its error kind with errors.Is (the message already names it).
type refusal struct {
	msg  string
	kind error
}

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return r.kind }

// Capabilities asks the program what it can do (once; the answer is kept).
func (c *core) Capabilities(ctx context.Context) (Capabilities, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.caps != nil {
		return *c.caps, nil
	}
	resp, err := c.call(ctx, Request{Operation: OpCapabilities})
	if err != nil {
		return Capabilities{}, err
	}
	if resp.Capabilities == nil {
		return Capabilities{}, fmt.Errorf("%s: capabilities: response has no field capabilities", c.what)
	}
	c.caps = resp.Capabilities
	return *c.caps, nil
}

// Doctor asks the program for its own readiness check.
func (c *core) Doctor(ctx context.Context) ([]provider.Check, error) {
	if c.plugin {
		return c.pluginDoctor(ctx), nil
	}
	checks := []provider.Check{}
	caps, err := c.Capabilities(ctx)
	if err != nil {
		return append(checks, provider.Check{Name: "external program", Detail: err.Error()}), nil
	}
	checks = append(checks, provider.Check{
		Name: "external program", OK: true,
		Detail: fmt.Sprintf("%s speaks protocol %d (run=%v, files=%v, cleanup=%v, idempotentLeaseId=%v)", c.prog.path, ProtocolVersion, caps.Run, caps.Files, caps.Cleanup, caps.IdempotentLeaseID),
	})
	resp, err := c.call(ctx, Request{Operation: OpDoctor})
	if err != nil {
		return append(checks, provider.Check{Name: "external doctor", Detail: err.Error()}), nil
	}
	if len(resp.Checks) > 0 {
		return append(checks, resp.Checks...), nil
	}
	return append(checks, provider.Check{Name: "external doctor", OK: true, Detail: resp.Message}), nil
}

// pluginDoctor is Doctor for crabbox's own program: which program, and
// the provider's own checks. The provider configures in the program, so
// a setting it refuses (a missing token) is a failed check of its own,
// in the provider's words.
func (c *core) pluginDoctor(ctx context.Context) []provider.Check {
	checks := []provider.Check{{Name: "program", OK: true, Detail: c.prog.path}}
	resp, err := c.call(ctx, Request{Operation: OpDoctor})
	if err != nil {
		return append(checks, provider.Check{Name: "settings", Detail: err.Error()})
	}
	if len(resp.Checks) == 0 {
		return append(checks, provider.Check{Name: "checks", OK: true, Detail: cmp.Or(resp.Message, "none")})
	}
	return append(checks, resp.Checks...)
}

// desired is the acquire request's lease description.
func desired(id, slug string, labels map[string]string) (*Desired, error) {
	if !lease.IsID(id) {
		return nil, fmt.Errorf("lease ID %q is malformed", id)
	}
	if !lease.ValidSlug(slug) {
		return nil, fmt.Errorf("slug %q is malformed", slug)
	}
	name := LeaseName(id, slug)
	all := maps.Clone(labels)
	if all == nil {
		all = map[string]string{}
	}
	for _, k := range []string{LabelLease, LabelSlug, LabelName} {
		if _, ok := all[k]; ok {
			return nil, fmt.Errorf("label %q is reserved for crabbox", k)
		}
	}
	all[LabelLease], all[LabelSlug], all[LabelName] = id, slug, name
	return &Desired{LeaseID: id, Slug: slug, Name: name, Labels: all}, nil
}

// acquire runs the acquire operation and validates its answer. When the
// answer describes a lease but is rejected, that lease is released.
func (c *core) acquire(ctx context.Context, d *Desired, keep, needSSH bool) (*Lease, error) {
	return c.acquireCall(ctx, Request{Operation: OpAcquire, Desired: d, Keep: keep}, needSSH)
}

// acquireCall runs req, an acquire or a fork of req.Desired, as acquire
// does.
func (c *core) acquireCall(ctx context.Context, req Request, needSSH bool) (*Lease, error) {
	d := req.Desired
	resp, err := c.call(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := checkLease("lease", resp.Lease, expect{leaseID: d.LeaseID, slug: d.Slug, ssh: needSSH}); err != nil {
		err = fmt.Errorf("%s: %s: rejected response: %w", c.what, req.Operation, err)
		if resp.Lease != nil {
			// Release what the program described, as it described it.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.prog.timeout)
			defer cancel()
			if _, rerr := c.call(rctx, Request{Operation: OpRelease, Lease: resp.Lease}); rerr != nil {
				err = errors.Join(err, fmt.Errorf("release the rejected lease: %w", rerr))
			}
		}
		return nil, err
	}
	return withReserved(resp.Lease), nil
}

// resolve finds a lease by ID or slug; no lease in the answer is ErrNotFound.
func (c *core) resolve(ctx context.Context, ref string, needSSH bool) (*Lease, error) {
	resp, err := c.call(ctx, Request{Operation: OpResolve, ID: ref})
	if err != nil {
		return nil, err
	}
	if resp.Lease == nil {
		return nil, fmt.Errorf("%s: resolve %s: %w", c.what, ref, provider.ErrNotFound)
	}
	want := expect{ssh: needSSH}
	if lease.IsID(ref) {
		want.leaseID = ref
	} else {
		want.slug = ref
	}
	if err := checkLease("lease", resp.Lease, want); err != nil {
		return nil, fmt.Errorf("%s: resolve %s: rejected response: %w", c.what, ref, err)
	}
	return withReserved(resp.Lease), nil
}

// list returns every lease the program lists, each validated.
func (c *core) list(ctx context.Context, needSSH bool) ([]Lease, error) {
	resp, err := c.call(ctx, Request{Operation: OpList})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	out := make([]Lease, 0, len(resp.Leases))
	for i := range resp.Leases {
		l := &resp.Leases[i]
		field := fmt.Sprintf("leases[%d]", i)
		if err := checkLease(field, l, expect{ssh: needSSH}); err != nil {
			return nil, fmt.Errorf("%s: list: rejected response: %w", c.what, err)
		}
		if seen[l.LeaseID] {
			return nil, fmt.Errorf("%s: list: rejected response: %s.leaseId %s is listed twice", c.what, field, l.LeaseID)
		}
		seen[l.LeaseID] = true
		out = append(out, *withReserved(l))
	}
	return out, nil
}

// release ends a lease; the program must treat a gone lease as released.
func (c *core) release(ctx context.Context, l *Lease) error {
	_, err := c.call(ctx, Request{Operation: OpRelease, Lease: l})
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	return err
}

// withReserved returns l with the reserved labels set by crabbox.
func withReserved(l *Lease) *Lease {
	out := *l
	out.Labels = maps.Clone(l.Labels)
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	out.Labels[LabelLease], out.Labels[LabelSlug], out.Labels[LabelName] = l.LeaseID, l.Slug, LeaseName(l.LeaseID, l.Slug)
	if out.Name == "" {
		out.Name = LeaseName(l.LeaseID, l.Slug)
	}
	return &out
}

// Backend is the SSH-lease backend: the program hands out boxes that
// crabbox reaches over SSH.
type Backend struct{ *core }

// New returns an SSH-lease backend for the program of c, which is no
// native checkpoint backend: it refuses c.Workspace (Configure returns a
// backend with the checkpoint interfaces).
func New(c Config, rt provider.Runtime) (*Backend, error) {
	if len(c.Workspace) > 0 {
		return nil, errors.New("external provider: New makes no native checkpoint backend: configure workspace through Provider.Configure")
	}
	return newBackend(c, nil, rt)
}

func newBackend(c Config, sp *provider.Spec, rt provider.Runtime) (*Backend, error) {
	co, err := newCore(c, sp, rt)
	if err != nil {
		return nil, err
	}
	return &Backend{co}, nil
}

// Spec describes the external provider.
func (b *Backend) Spec() provider.Spec { return b.spec.Clone() }

// Acquire asks the program for a box for req.LeaseID.
func (b *Backend) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	return b.acquireOp(ctx, OpAcquire, req, nil)
}

// acquireOp runs the acquire operation, or with an artifact the fork
// operation, for req.
func (b *Backend) acquireOp(ctx context.Context, op string, req provider.AcquireRequest, a *provider.CheckpointArtifact) (provider.LeaseTarget, error) {
	d, err := desired(req.LeaseID, req.Slug, req.Labels)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("external provider: %s: %w", op, err)
	}
	d.PublicKey = req.PublicKey
	d.TTLSeconds, d.IdleTimeoutSeconds = int64(req.TTL/time.Second), int64(req.IdleTimeout/time.Second)
	d.CreatedAt, d.ExpiresAt = req.CreatedAt, req.ExpiresAt
	l, err := b.acquireCall(ctx, Request{Operation: op, Desired: d, Keep: req.Keep, Artifact: a}, true)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	if l.ExpiresAt.IsZero() {
		l.ExpiresAt = req.ExpiresAt
	}
	if l.CreatedAt.IsZero() {
		l.CreatedAt = req.CreatedAt
	}
	return b.target(l), nil
}

// Resolve finds a live lease by ID or slug.
func (b *Backend) Resolve(ctx context.Context, req provider.ResolveRequest) (provider.LeaseTarget, error) {
	l, err := b.resolve(ctx, req.ID, true)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	return b.target(l), nil
}

// List returns the program's leases.
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseTarget, error) {
	ls, err := b.list(ctx, true)
	if err != nil {
		return nil, err
	}
	out := make([]provider.LeaseTarget, 0, len(ls))
	for i := range ls {
		out = append(out, b.target(&ls[i]))
	}
	return out, nil
}

// Touch sends the lease with its new expiry; the program records it.
func (b *Backend) Touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	sent := wireLease(req.Lease)
	sent.ExpiresAt = req.ExpiresAt
	resp, err := b.call(ctx, Request{Operation: OpTouch, Lease: sent, Now: req.Now})
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	if err := checkLease("lease", resp.Lease, expect{leaseID: req.Lease.LeaseID, ssh: true}); err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("%s: touch: rejected response: %w", b.what, err)
	}
	l := withReserved(resp.Lease)
	if l.ExpiresAt.IsZero() {
		l.ExpiresAt = req.ExpiresAt
	}
	return b.target(l), nil
}

// ReleaseLease ends the lease. The lease may carry only its ID and slug
// (the rollback of an acquire whose answer was lost).
func (b *Backend) ReleaseLease(ctx context.Context, req provider.ReleaseRequest) error {
	return b.release(ctx, wireLease(req.Lease))
}

// target converts a validated lease object.
func (b *Backend) target(l *Lease) provider.LeaseTarget {
	t := leaseTarget(l, b.spec.Name)
	if t.WorkRoot == "" {
		t.WorkRoot = b.workRoot
	}
	if t.Host != "" && t.Port == 0 {
		t.Port = 22
	}
	return t
}

// wireLease is the lease object crabbox sends back to the program.
func wireLease(t provider.LeaseTarget) *Lease {
	l := &Lease{
		LeaseID: t.LeaseID, Slug: t.Slug, CloudID: t.CloudID, Status: t.State,
		Labels: maps.Clone(t.Labels), WorkRoot: t.WorkRoot, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt,
	}
	if t.Slug != "" {
		l.Name = LeaseName(t.LeaseID, t.Slug)
	}
	if t.Host != "" {
		l.SSH = &SSH{User: t.User, Host: t.Host, Port: t.Port, Key: t.KeyFile, HostKey: t.HostKey}
	}
	return l
}

// Cleanup lists the program's leases and deletes those that are past their
// expiry and claimed by the caller; keep=true holds a lease only until its
// expiry. Leases without an expiry are unknown and left alone. A program with capabilities.cleanup gets one
// cleanup call with the leases to delete; otherwise each is released.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	ls, err := b.list(ctx, false)
	if err != nil {
		return nil, err
	}
	var decisions []provider.CleanupDecision
	var doomed []Lease
	for _, l := range ls {
		d := provider.CleanupDecision{LeaseID: l.LeaseID, Slug: l.Slug, CloudID: l.CloudID}
		switch {
		case req.Claimed == nil || !req.Claimed(l.LeaseID):
			d.Reason = "no local claim: another client's lease"
		case l.ExpiresAt.IsZero():
			d.Reason = "no expiry reported: unknown, left alone"
		case req.Now.Before(l.ExpiresAt) && l.Labels["keep"] == "true":
			d.Reason = "kept (keep=true) while live until " + l.ExpiresAt.Format(time.RFC3339)
		case req.Now.Before(l.ExpiresAt):
			d.Reason = "live until " + l.ExpiresAt.Format(time.RFC3339)
		default:
			d.Delete, d.Reason = true, "expired at "+l.ExpiresAt.Format(time.RFC3339)
			doomed = append(doomed, l)
		}
		decisions = append(decisions, d)
	}
	if req.DryRun || len(doomed) == 0 {
		return decisions, nil
	}
	deleted, err := b.deleteExpired(ctx, doomed, req.Now)
	if err != nil {
		return decisions, err
	}
	for i := range decisions {
		if !decisions[i].Delete {
			continue
		}
		if derr, ok := deleted[decisions[i].LeaseID]; ok && derr == nil {
			decisions[i].Deleted = true
		} else {
			decisions[i].Err = derr
		}
	}
	return decisions, nil
}

// deleteExpired deletes the leases and reports, per lease ID, nil when it
// was deleted or why not.
func (b *Backend) deleteExpired(ctx context.Context, doomed []Lease, now time.Time) (map[string]error, error) {
	out := map[string]error{}
	caps, err := b.Capabilities(ctx)
	if err != nil {
		return nil, err
	}
	if !caps.Cleanup {
		for i := range doomed {
			out[doomed[i].LeaseID] = b.release(ctx, &doomed[i])
		}
		return out, nil
	}
	resp, err := b.call(ctx, Request{Operation: OpCleanup, Leases: doomed, Now: now})
	if err != nil {
		return nil, err
	}
	asked := map[string]bool{}
	for _, l := range doomed {
		asked[l.LeaseID] = true
		out[l.LeaseID] = errors.New("the program's cleanup did not report it deleted")
	}
	for i, l := range resp.Leases {
		if !asked[l.LeaseID] {
			return nil, fmt.Errorf("%s: cleanup: rejected response: leases[%d].leaseId %q is not one crabbox asked to delete", b.what, i, l.LeaseID)
		}
		out[l.LeaseID] = nil
	}
	return out, nil
}
