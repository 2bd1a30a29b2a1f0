package opensandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// cleanupTimeout bounds undoing a failed warmup and ending a cancelled
// command, which happen after the caller's context is done.
const cleanupTimeout = time.Minute

// Acquire steps after the sandbox's creation, for rollback errors.
const (
	stepReady cloud.Step = "ready"
	stepExecd cloud.Step = "execd"
)

// keepAlive is the entrypoint of crabbox's sandboxes: it does nothing, for
// as long as the sandbox lives.
var keepAlive = []string{"tail", "-f", "/dev/null"}

// Backend is the OpenSandbox provider's delegated backend. It keeps, per
// lease, how to reach its sandbox's execd (learnt at Warmup or looked up
// once); it runs nothing in-process beyond the calls it is making, so it
// needs no Close.
type Backend struct {
	cfg    Config
	rt     provider.Runtime
	api    *api
	stream *http.Client // the runtime's client without its overall timeout
	scheme string       // the server URL's, for endpoints answered without one

	mu     sync.Mutex
	execds map[string]*execd // by lease ID
}

// New returns a backend for cfg. It makes no API call.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rt = rt.WithDefaults()
	stream := *rt.HTTPClient
	stream.Timeout = 0
	scheme, _, _ := strings.Cut(cfg.Endpoint, "://")
	return &Backend{
		cfg: cfg, rt: rt, stream: &stream, scheme: scheme, execds: map[string]*execd{},
		api: &api{base: cfg.Endpoint + "/v1", key: cfg.APIKey, client: rt.HTTPClient, clock: rt.Clock},
	}, nil
}

// Spec describes the OpenSandbox provider.
func (b *Backend) Spec() provider.Spec { return Provider{}.Spec() }

// MaxLifetime is the longest the server lets a sandbox live, as configured
// (its max_sandbox_timeout_seconds).
func (b *Backend) MaxLifetime() time.Duration { return b.cfg.MaxLifetime }

// ownership is the metadata filter of this owner's crabbox sandboxes, and
// with a lease ID of that lease's.
func (b *Backend) ownership(leaseID string) map[string]string {
	m := cloud.Ownership(Name, leaseID)
	m[cloud.LabelOwner] = b.cfg.Owner
	return m
}

// timeoutUntil is the sandbox timeout (whole seconds from now, rounded
// up) for an expiry.
func timeoutUntil(now, expires time.Time) (int64, error) {
	d := expires.Sub(now)
	if d < MinTimeout {
		return 0, fmt.Errorf("expiry %s is less than %s away (now %s): OpenSandbox's shortest sandbox timeout is %s: %w",
			expires.Format(time.RFC3339), MinTimeout, now.Format(time.RFC3339), MinTimeout, provider.ErrPrecondition)
	}
	secs := int64(math.Ceil(d.Seconds()))
	if secs > math.MaxInt32 {
		return 0, fmt.Errorf("expiry %s is too far away", expires.Format(time.RFC3339))
	}
	return secs, nil
}

// Warmup creates the lease's sandbox from the image, with crabbox's
// ownership labels as metadata and its timeout at the lease's expiry (at
// most the maximum lifetime away, which the server would refuse), waits
// for it to run and for execd to answer, and makes the work root. If a
// step fails, or ctx ends, it deletes every sandbox labelled with the
// lease before returning.
func (b *Backend) Warmup(ctx context.Context, req provider.WarmupRequest) (view provider.LeaseView, err error) {
	now := b.rt.Clock.Now().UTC()
	if !lease.IsID(req.LeaseID) {
		return view, fmt.Errorf("opensandbox provider: warmup: lease ID %q is not a crabbox lease ID", req.LeaseID)
	}
	expires := req.ExpiresAt
	if expires.IsZero() {
		expires = lease.ExpiresAt(now, now, req.TTL, req.IdleTimeout)
	}
	if cap := now.Add(b.cfg.MaxLifetime); expires.After(cap) {
		expires = cap
	}
	timeout, err := timeoutUntil(now, expires)
	if err != nil {
		return view, fmt.Errorf("opensandbox provider: warmup %s: %w", req.LeaseID, err)
	}
	labels, err := cloud.NewLabels(provider.AcquireRequest{
		LeaseID: req.LeaseID, Slug: req.Slug, TTL: req.TTL, IdleTimeout: req.IdleTimeout,
		CreatedAt: now, ExpiresAt: now.Add(time.Duration(timeout) * time.Second), Labels: req.Labels,
	}, cloud.LabelOptions{Provider: Name, ServerType: b.cfg.Image, Owner: b.cfg.Owner, State: cloud.StateReady})
	if err != nil {
		return view, fmt.Errorf("opensandbox provider: warmup: %w", err)
	}
	create := createRequest{
		Image: imageSpec{URI: b.cfg.Image}, Timeout: timeout, Metadata: labels, Entrypoint: keepAlive,
		ResourceLimits: map[string]string{"cpu": b.cfg.CPU, "memory": b.cfg.Memory},
	}
	if b.cfg.Platform != "" {
		os, arch, _ := strings.Cut(b.cfg.Platform, "/")
		create.Platform = &platformSpec{OS: os, Arch: arch}
	}

	rb := cloud.NewRollback(b.rt.Logger.With("lease", req.LeaseID), cleanupTimeout)
	defer rb.Finish(ctx, &err)
	// Pushed before the create call and finding its sandboxes by the
	// lease label, so that a create whose answer was lost is undone too.
	rb.Add(cloud.StepCreate, "sandboxes of lease "+req.LeaseID, func(ctx context.Context) error {
		b.forget(req.LeaseID)
		return b.removeLease(ctx, req.LeaseID)
	})
	sb, err := b.api.create(ctx, create)
	if err != nil {
		return view, fmt.Errorf("opensandbox provider: warmup %s: %w", req.LeaseID, cloud.Failed(cloud.StepCreate, err))
	}
	if sb, err = b.waitRunning(ctx, sb); err != nil {
		return view, fmt.Errorf("opensandbox provider: warmup %s: %w", req.LeaseID, cloud.Failed(stepReady, err))
	}
	e, err := b.connect(ctx, sb.ID)
	if err == nil {
		err = e.mkdir(ctx, b.cfg.WorkRoot, 0o755)
	}
	if err != nil {
		return view, fmt.Errorf("opensandbox provider: warmup %s: make the work root %s: %w", req.LeaseID, b.cfg.WorkRoot, cloud.Failed(stepExecd, err))
	}
	b.remember(req.LeaseID, e)
	b.rt.Logger.Info("opensandbox sandbox created", "lease", req.LeaseID, "sandbox", sb.ID, "image", b.cfg.Image)
	v, _ := b.view(sb)
	return v, nil
}

// waitRunning polls a new sandbox until it runs (the create answer says
// Pending), for at most the ready timeout; one that fails or ends is an
// error naming the server's reason.
func (b *Backend) waitRunning(ctx context.Context, sb sandboxJSON) (sandboxJSON, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.ReadyTimeout)
	defer cancel()
	poll := cloud.NewBackoff(2 * time.Second)
	for {
		got, err := b.api.get(ctx, sb.ID)
		if err != nil {
			return sb, err
		}
		switch st := got.Status; {
		case st.State == stateRunning:
			return got, nil
		case ended(st.State) || st.State == "Paused":
			return got, fmt.Errorf("sandbox %s is %s, not running: %s %s", sb.ID, st.State, st.Reason, st.Message)
		}
		select {
		case <-ctx.Done():
			return sb, fmt.Errorf("sandbox %s still %s after %s: %w", sb.ID, got.Status.State, b.cfg.ReadyTimeout, ctx.Err())
		case <-b.rt.Clock.After(poll.Next()):
		}
	}
}

// connect learns where the sandbox's execd is and waits until it answers.
func (b *Backend) connect(ctx context.Context, sandboxID string) (*execd, error) {
	ep, err := b.api.endpoint(ctx, sandboxID, ExecdPort, b.cfg.ServerProxy)
	if err != nil {
		return nil, err
	}
	e, err := newExecd(sandboxID, ep, b.scheme, b.stream)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.ReadyTimeout)
	defer cancel()
	poll := cloud.NewBackoff(time.Second)
	for {
		err := e.ping(ctx)
		if err == nil {
			return e, nil
		}
		if definite(err) && !errors.Is(err, provider.ErrNotFound) {
			return nil, err // refused, not starting
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("execd of sandbox %s does not answer: %w", sandboxID, err)
		case <-b.rt.Clock.After(poll.Next()):
		}
	}
}

// List returns this owner's crabbox sandboxes that have not ended.
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseView, error) {
	sbs, err := b.api.list(ctx, b.ownership(""))
	if err != nil {
		return nil, fmt.Errorf("opensandbox provider: list: %w", err)
	}
	out := make([]provider.LeaseView, 0, len(sbs))
	for _, sb := range sbs {
		if v, ok := b.view(sb); ok && !ended(sb.Status.State) {
			out = append(out, v)
		}
	}
	return out, nil
}

// Status finds the lease's sandbox by lease ID or slug; one that has
// ended is not found.
func (b *Backend) Status(ctx context.Context, req provider.StatusRequest) (provider.LeaseView, error) {
	sb, err := b.live(ctx, req.ID)
	if err != nil {
		return provider.LeaseView{}, fmt.Errorf("opensandbox provider: status of %s: %w", req.ID, err)
	}
	v, _ := b.view(sb)
	return v, nil
}

// Stop deletes every sandbox of the lease (by lease ID or slug); a lease
// that is already gone is stopped.
func (b *Backend) Stop(ctx context.Context, req provider.StopRequest) error {
	id := req.ID
	if !lease.IsID(id) {
		sb, err := b.find(ctx, id)
		if errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("opensandbox provider: stop %s: %w", req.ID, err)
		}
		id = sb.Metadata[cloud.LabelLease]
	}
	b.forget(id)
	if err := b.removeLease(ctx, id); err != nil {
		return fmt.Errorf("opensandbox provider: stop %s: %w", req.ID, err)
	}
	b.rt.Logger.Info("opensandbox lease stopped", "lease", id)
	return nil
}

// removeLease deletes every sandbox of this owner labelled with lease ID
// id.
func (b *Backend) removeLease(ctx context.Context, id string) error {
	sbs, err := b.api.list(ctx, b.ownership(id))
	if err != nil {
		return err
	}
	var errs []error
	for _, sb := range sbs {
		if _, ok := b.view(sb); !ok || sb.Metadata[cloud.LabelLease] != id {
			continue // the filter is the server's; the labels are checked again
		}
		errs = append(errs, b.api.remove(ctx, sb.ID))
	}
	return errors.Join(errs...)
}

// Touch moves the sandbox's expiration to req.ExpiresAt, but never past
// the maximum lifetime from its creation, and returns the lease with the
// expiration the server granted. An expiration already at or past the one
// asked for is left as it is (the server only extends).
func (b *Backend) Touch(ctx context.Context, req provider.DelegatedTouchRequest) (provider.LeaseView, error) {
	sb, err := b.live(ctx, req.ID)
	if err != nil {
		return provider.LeaseView{}, fmt.Errorf("opensandbox provider: touch %s: %w", req.ID, err)
	}
	want := req.ExpiresAt.UTC().Truncate(time.Second)
	if cap := sb.CreatedAt.Add(b.cfg.MaxLifetime); !sb.CreatedAt.IsZero() && want.After(cap) {
		want = cap.UTC().Truncate(time.Second)
	}
	if sb.ExpiresAt == nil || want.After(*sb.ExpiresAt) {
		granted, err := b.api.renew(ctx, sb.ID, want)
		if err != nil {
			return provider.LeaseView{}, fmt.Errorf("opensandbox provider: touch %s: %w", req.ID, err)
		}
		if granted.IsZero() {
			granted = want
		}
		sb.ExpiresAt = &granted
	}
	v, _ := b.view(sb)
	return v, nil
}

// find returns the sandbox of this owner's lease with ID or slug id,
// whatever its state; none is provider.ErrNotFound.
func (b *Backend) find(ctx context.Context, id string) (sandboxJSON, error) {
	key := cloud.LabelSlug
	if lease.IsID(id) {
		key = cloud.LabelLease
	} else if id == "" || cloud.SanitizeValue(id) != id {
		return sandboxJSON{}, fmt.Errorf("%q is not a lease ID or slug: %w", id, provider.ErrNotFound)
	}
	filter := b.ownership("")
	filter[key] = id
	sbs, err := b.api.list(ctx, filter)
	if err != nil {
		return sandboxJSON{}, err
	}
	var found []sandboxJSON
	for _, sb := range sbs {
		if _, ok := b.view(sb); ok && sb.Metadata[key] == id {
			found = append(found, sb)
		}
	}
	// A live one wins over ended ones of the same lease.
	for _, sb := range found {
		if !ended(sb.Status.State) {
			return sb, nil
		}
	}
	if len(found) > 0 {
		return found[0], nil
	}
	return sandboxJSON{}, fmt.Errorf("no opensandbox sandbox of lease %s: %w", id, provider.ErrNotFound)
}

// live is find for a lease whose sandbox has not ended.
func (b *Backend) live(ctx context.Context, id string) (sandboxJSON, error) {
	sb, err := b.find(ctx, id)
	if err != nil {
		return sb, err
	}
	if ended(sb.Status.State) {
		return sb, fmt.Errorf("sandbox %s of lease %s is %s: %w", sb.ID, id, sb.Status.State, provider.ErrNotFound)
	}
	return sb, nil
}

// view is the lease view of a sandbox; ok is false when its metadata is
// not this owner's crabbox labels.
func (b *Backend) view(sb sandboxJSON) (provider.LeaseView, bool) {
	info, err := cloud.ParseLabels(sb.Metadata)
	if err != nil || info.Provider != Name || info.Owner != b.cfg.Owner {
		return provider.LeaseView{}, false
	}
	v := provider.LeaseView{
		ID: info.LeaseID, Slug: info.Slug, Provider: Name, CloudID: sb.ID, State: sb.Status.State,
		Labels: maps.Clone(info.Labels), CreatedAt: sb.CreatedAt.UTC(), WorkRoot: b.cfg.WorkRoot,
	}
	if sb.ExpiresAt != nil {
		v.ExpiresAt = sb.ExpiresAt.UTC()
	}
	return v, true
}

// execdFor returns the execd client of the lease's sandbox, looking it up
// the first time.
func (b *Backend) execdFor(ctx context.Context, leaseID string) (*execd, error) {
	b.mu.Lock()
	e := b.execds[leaseID]
	b.mu.Unlock()
	if e != nil {
		return e, nil
	}
	sb, err := b.live(ctx, leaseID)
	if err != nil {
		return nil, err
	}
	ep, err := b.api.endpoint(ctx, sb.ID, ExecdPort, b.cfg.ServerProxy)
	if err != nil {
		return nil, err
	}
	if e, err = newExecd(sb.ID, ep, b.scheme, b.stream); err != nil {
		return nil, err
	}
	b.remember(leaseID, e)
	return e, nil
}

func (b *Backend) remember(leaseID string, e *execd) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.execds[leaseID] = e
}

func (b *Backend) forget(leaseID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.execds, leaseID)
}
