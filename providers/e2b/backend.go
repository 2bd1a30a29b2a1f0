package e2b

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// killTimeout bounds ending a cancelled command, which happens after the
// caller's context is done.
const killTimeout = 30 * time.Second

// stepEnvd is the acquire step after the sandbox's creation: making the
// work root through envd, which proves that envd answers.
const stepEnvd cloud.Step = "envd"

// stateRunning is E2B's state of a live sandbox; LeaseView.State is the
// sandbox's state at E2B ("running" or "paused").
const stateRunning = "running"

// Backend is the E2B provider's delegated backend. It keeps, per lease,
// how to reach its sandbox's envd (learnt at Warmup or looked up once);
// it runs nothing in-process beyond the calls it is making, so it needs
// no Close.
type Backend struct {
	cfg    Config
	rt     provider.Runtime
	api    *api
	stream *http.Client // the runtime's client without its overall timeout

	mu    sync.Mutex
	envds map[string]*envd // by lease ID
}

// New returns a backend for cfg. It makes no API call.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Owner == "" {
		cfg.Owner = cloud.CurrentUser()
	}
	rt = rt.WithDefaults()
	stream := *rt.HTTPClient
	stream.Timeout = 0
	return &Backend{
		cfg: cfg, rt: rt, stream: &stream, envds: map[string]*envd{},
		api: &api{base: cfg.APIURL, key: cfg.APIKey, client: rt.HTTPClient},
	}, nil
}

// Spec describes the E2B provider.
func (b *Backend) Spec() provider.Spec { return Provider{}.Spec() }

// MaxLifetime is the longest E2B lets a sandbox live, as configured (the
// plan's maximum).
func (b *Backend) MaxLifetime() time.Duration { return b.cfg.MaxLifetime }

// Warmup creates the lease's sandbox from the template, with crabbox's
// ownership labels as metadata and its timeout at the lease's expiry (at
// most the maximum lifetime away, which E2B would refuse), and makes the
// work root in it. If a step fails, or ctx ends, it kills every
// sandbox labelled with the lease before returning.
func (b *Backend) Warmup(ctx context.Context, req provider.WarmupRequest) (view provider.LeaseView, err error) {
	now := b.rt.Clock.Now().UTC()
	expires := req.ExpiresAt
	if expires.IsZero() {
		expires = lease.ExpiresAt(now, now, req.TTL, req.IdleTimeout)
	}
	if cap := now.Add(b.cfg.MaxLifetime); expires.After(cap) {
		expires = cap
	}
	if !lease.IsID(req.LeaseID) {
		return view, fmt.Errorf("e2b provider: warmup: lease ID %q is not a crabbox lease ID", req.LeaseID)
	}
	timeout, err := timeoutUntil(now, expires)
	if err != nil {
		return view, fmt.Errorf("e2b provider: warmup %s: %w", req.LeaseID, err)
	}
	labels, err := cloud.NewLabels(provider.AcquireRequest{
		LeaseID: req.LeaseID, Slug: req.Slug, TTL: req.TTL, IdleTimeout: req.IdleTimeout,
		CreatedAt: now, ExpiresAt: expires, Labels: req.Labels,
	}, cloud.LabelOptions{Provider: Name, ServerType: b.cfg.Template, Owner: b.cfg.Owner, State: cloud.StateReady})
	if err != nil {
		return view, fmt.Errorf("e2b provider: warmup: %w", err)
	}

	rb := cloud.NewRollback(b.rt.Logger.With("lease", req.LeaseID), killTimeout)
	defer rb.Finish(ctx, &err)
	// Pushed before the create call and finding its sandboxes by the
	// lease label, so that a create whose answer was lost is undone too.
	rb.Add(cloud.StepCreate, "sandboxes of lease "+req.LeaseID, func(ctx context.Context) error {
		b.forget(req.LeaseID)
		return b.killLease(ctx, req.LeaseID)
	})
	sb, err := b.api.create(ctx, newSandbox{TemplateID: b.cfg.Template, Timeout: timeout, Metadata: labels, Secure: true})
	if err != nil {
		return view, fmt.Errorf("e2b provider: warmup %s: %w", req.LeaseID, cloud.Failed(cloud.StepCreate, err))
	}
	e := b.envdOf(sb)
	if err := b.exec(ctx, e, []string{"mkdir", "-p", "--", b.cfg.WorkRoot}); err != nil {
		return view, fmt.Errorf("e2b provider: warmup %s: make the work root %s: %w", req.LeaseID, b.cfg.WorkRoot, cloud.Failed(stepEnvd, err))
	}
	b.remember(req.LeaseID, e)
	b.rt.Logger.Info("e2b sandbox created", "lease", req.LeaseID, "sandbox", sb.SandboxID, "template", b.cfg.Template)
	return provider.LeaseView{
		ID: req.LeaseID, Slug: labels[cloud.LabelSlug], Provider: Name, CloudID: sb.SandboxID, State: stateRunning,
		Labels: maps.Clone(labels), CreatedAt: now, ExpiresAt: now.Add(time.Duration(timeout) * time.Second), WorkRoot: b.cfg.WorkRoot,
	}, nil
}

// timeoutUntil is E2B's sandbox timeout (whole seconds from now, rounded
// up) for an expiry.
func timeoutUntil(now, expires time.Time) (int64, error) {
	d := expires.Sub(now)
	if d <= 0 {
		return 0, fmt.Errorf("expiry %s is not after now (%s)", expires.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	secs := int64(math.Ceil(d.Seconds()))
	if secs > math.MaxInt32 {
		return 0, fmt.Errorf("expiry %s is too far away", expires.Format(time.RFC3339))
	}
	return secs, nil
}

// List returns every crabbox sandbox of this provider, whoever made it.
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseView, error) {
	sbs, err := b.api.list(ctx, cloud.Ownership(Name, ""))
	if err != nil {
		return nil, fmt.Errorf("e2b provider: list: %w", err)
	}
	out := make([]provider.LeaseView, 0, len(sbs))
	for _, sb := range sbs {
		if v, ok := b.view(sb); ok {
			out = append(out, v)
		}
	}
	return out, nil
}

// Status finds the lease's sandbox by lease ID or slug.
func (b *Backend) Status(ctx context.Context, req provider.StatusRequest) (provider.LeaseView, error) {
	sb, err := b.find(ctx, req.ID)
	if err != nil {
		return provider.LeaseView{}, fmt.Errorf("e2b provider: status of %s: %w", req.ID, err)
	}
	v, _ := b.view(sb)
	return v, nil
}

// Stop kills every sandbox of the lease (by lease ID or slug); a lease
// that is already gone is stopped.
func (b *Backend) Stop(ctx context.Context, req provider.StopRequest) error {
	id := req.ID
	if !lease.IsID(id) {
		sb, err := b.find(ctx, id)
		if errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("e2b provider: stop %s: %w", req.ID, err)
		}
		id = sb.Metadata[cloud.LabelLease]
	}
	b.forget(id)
	if err := b.killLease(ctx, id); err != nil {
		return fmt.Errorf("e2b provider: stop %s: %w", req.ID, err)
	}
	b.rt.Logger.Info("e2b lease stopped", "lease", id)
	return nil
}

// killLease kills every sandbox labelled with lease ID id.
func (b *Backend) killLease(ctx context.Context, id string) error {
	sbs, err := b.api.list(ctx, cloud.Ownership(Name, id))
	if err != nil {
		return err
	}
	var errs []error
	for _, sb := range sbs {
		if sb.Metadata[cloud.LabelLease] != id {
			continue // the filter is E2B's; the label is checked again
		}
		errs = append(errs, b.api.kill(ctx, sb.SandboxID))
	}
	return errors.Join(errs...)
}

// Touch moves the sandbox's timeout to req.ExpiresAt and returns the
// lease with the end E2B granted: E2B answers a timeout past the plan's
// maximum lifetime with 204 but ends the sandbox at that maximum, so the
// sandbox's end is read back rather than assumed.
func (b *Backend) Touch(ctx context.Context, req provider.DelegatedTouchRequest) (provider.LeaseView, error) {
	sb, err := b.find(ctx, req.ID)
	if err != nil {
		return provider.LeaseView{}, fmt.Errorf("e2b provider: touch %s: %w", req.ID, err)
	}
	now := b.rt.Clock.Now().UTC()
	timeout, err := timeoutUntil(now, req.ExpiresAt)
	if err != nil {
		return provider.LeaseView{}, fmt.Errorf("e2b provider: touch %s: %w: %w", req.ID, provider.ErrPrecondition, err)
	}
	if err := b.api.setTimeout(ctx, sb.SandboxID, timeout); err != nil {
		return provider.LeaseView{}, fmt.Errorf("e2b provider: touch %s: %w", req.ID, err)
	}
	granted, err := b.api.get(ctx, sb.SandboxID)
	if err != nil {
		return provider.LeaseView{}, fmt.Errorf("e2b provider: touch %s: read the granted end: %w", req.ID, err)
	}
	sb.EndAt = granted.EndAt
	if sb.EndAt.IsZero() { // an answer without endAt: what was asked
		sb.EndAt = now.Add(time.Duration(timeout) * time.Second)
	}
	v, _ := b.view(sb)
	return v, nil
}

// find returns the sandbox of the lease with ID or slug id; none is
// provider.ErrNotFound.
func (b *Backend) find(ctx context.Context, id string) (listedSandbox, error) {
	key := cloud.LabelSlug
	if lease.IsID(id) {
		key = cloud.LabelLease
	} else if id == "" || cloud.SanitizeValue(id) != id {
		return listedSandbox{}, fmt.Errorf("%q is not a lease ID or slug: %w", id, provider.ErrNotFound)
	}
	filter := cloud.Ownership(Name, "")
	filter[key] = id
	sbs, err := b.api.list(ctx, filter)
	if err != nil {
		return listedSandbox{}, err
	}
	for _, sb := range sbs {
		if _, ok := b.view(sb); ok && sb.Metadata[key] == id {
			return sb, nil
		}
	}
	return listedSandbox{}, fmt.Errorf("no e2b sandbox of lease %s: %w", id, provider.ErrNotFound)
}

// view is the lease view of a listed sandbox; ok is false when its
// metadata is not crabbox's.
func (b *Backend) view(sb listedSandbox) (provider.LeaseView, bool) {
	info, err := cloud.ParseLabels(sb.Metadata)
	if err != nil || info.Provider != Name {
		return provider.LeaseView{}, false
	}
	state := sb.State
	if state == "" {
		state = stateRunning
	}
	return provider.LeaseView{
		ID: info.LeaseID, Slug: info.Slug, Provider: Name, CloudID: sb.SandboxID, State: state,
		Labels: info.Labels, CreatedAt: info.CreatedAt, ExpiresAt: sb.EndAt.UTC(), WorkRoot: b.cfg.WorkRoot,
	}, true
}

// envdOf is the envd client of a sandbox the API described.
func (b *Backend) envdOf(sb sandbox) *envd {
	base := b.cfg.SandboxURL
	if base == "" {
		domain := b.cfg.Domain
		if sb.Domain != nil && validHostname(*sb.Domain) {
			domain = *sb.Domain
		}
		base = fmt.Sprintf("https://%d-%s.%s", EnvdPort, sb.SandboxID, domain)
	}
	return &envd{sandboxID: sb.SandboxID, base: base, token: sb.EnvdAccessToken, user: b.cfg.User, client: b.stream}
}

// envdFor returns the envd client of the lease's sandbox, looking the
// sandbox up (its access token is in its detail) the first time.
func (b *Backend) envdFor(ctx context.Context, leaseID string) (*envd, error) {
	b.mu.Lock()
	e := b.envds[leaseID]
	b.mu.Unlock()
	if e != nil {
		return e, nil
	}
	listed, err := b.find(ctx, leaseID)
	if err != nil {
		return nil, err
	}
	sb, err := b.api.get(ctx, listed.SandboxID)
	if err != nil {
		return nil, err
	}
	e = b.envdOf(sb)
	b.remember(leaseID, e)
	return e, nil
}

func (b *Backend) remember(leaseID string, e *envd) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.envds[leaseID] = e
}

func (b *Backend) forget(leaseID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.envds, leaseID)
}
