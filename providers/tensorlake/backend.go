package tensorlake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// killTimeout bounds ending a cancelled command and rolling back a warmup,
// both of which happen after the caller's context is done.
const killTimeout = 30 * time.Second

// Warmup's steps after the create call.
const (
	stepRunning cloud.Step = "running" // wait until the sandbox runs
	stepLabels  cloud.Step = "labels"  // write the labels file through the proxy
)

// pollInterval is the longest pause while waiting for a sandbox to run.
const pollInterval = 2 * time.Second

// namePrefix starts the name of every sandbox crabbox makes.
const namePrefix = "crabbox-"

// LabelsFile is the file, under the work root, holding the labels of
// lease ID id.
func LabelsFile(id string) string { return ".crabbox-lease-" + id + ".json" }

// Backend is the Tensorlake provider's delegated backend. It keeps, per
// lease, how to reach its sandbox's proxy (learnt at Warmup or looked up
// once); it runs nothing in-process between calls, so it needs no Close.
type Backend struct {
	cfg     Config
	rt      provider.Runtime
	api     *control
	proxyC  *client // the runtime's HTTP client without its overall timeout
	ownerID string

	mu      sync.Mutex
	proxies map[string]*sandboxProxy // by lease ID
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
		cfg: cfg, rt: rt, ownerID: ownerTag(cfg.Owner), proxies: map[string]*sandboxProxy{},
		api:    &control{c: &client{key: cfg.APIKey, http: rt.HTTPClient, clock: rt.Clock}, base: cfg.APIURL},
		proxyC: &client{key: cfg.APIKey, http: &stream, clock: rt.Clock},
	}, nil
}

// Spec describes the Tensorlake provider.
func (b *Backend) Spec() provider.Spec { return Provider{}.Spec() }

// MaxLifetime is the longest timeout Tensorlake grants a sandbox, as
// configured (the plan's maximum).
func (b *Backend) MaxLifetime() time.Duration { return b.cfg.MaxLifetime }

// SandboxName is the name of the sandbox of a lease made for owner: the
// owner's short hash, the lease ID's hex and the slug, a valid hostname
// label (at most 63 characters; a longer slug is left out).
func SandboxName(owner, leaseID, slug string) string {
	n := namePrefix + ownerTag(owner) + "-" + strings.TrimPrefix(leaseID, "cbx_")
	if slug != "" && len(n)+1+len(slug) <= 63 {
		n += "-" + slug
	}
	return n
}

// parseName returns the lease ID and slug of a sandbox name made by
// SandboxName for this backend's owner; ok is false for any other name.
func (b *Backend) parseName(name string) (id, slug string, ok bool) {
	rest, ok := strings.CutPrefix(name, namePrefix+b.ownerID+"-")
	if !ok || len(rest) < 12 {
		return "", "", false
	}
	id, rest = "cbx_"+rest[:12], rest[12:]
	if !lease.IsID(id) {
		return "", "", false
	}
	if rest != "" {
		slug, ok = strings.CutPrefix(rest, "-")
		if !ok || !lease.ValidSlug(slug) {
			return "", "", false
		}
	}
	return id, slug, true
}

// Warmup creates the lease's sandbox, named for the lease, with its
// timeout at the lease's TTL (at most the maximum lifetime, which
// Tensorlake would not grant), waits until it runs and writes the lease's
// labels into it. If a step fails, or ctx ends, it terminates every
// sandbox of the lease's name before returning.
func (b *Backend) Warmup(ctx context.Context, req provider.WarmupRequest) (view provider.LeaseView, err error) {
	now := b.rt.Clock.Now().UTC()
	if !lease.IsID(req.LeaseID) {
		return view, fmt.Errorf("tensorlake provider: warmup: lease ID %q is not a crabbox lease ID", req.LeaseID)
	}
	// Tensorlake cannot move a sandbox's timeout later: the sandbox lives
	// for the lease's TTL, and the idle timeout is the library's.
	expires := now.Add(req.TTL)
	if req.TTL <= 0 {
		expires = req.ExpiresAt
	}
	if expires.IsZero() {
		expires = lease.ExpiresAt(now, now, req.TTL, req.IdleTimeout)
	}
	if cap := now.Add(b.cfg.MaxLifetime); expires.After(cap) {
		expires = cap
	}
	timeout, err := timeoutUntil(now, expires)
	if err != nil {
		return view, fmt.Errorf("tensorlake provider: warmup %s: %w", req.LeaseID, err)
	}
	labels, err := cloud.NewLabels(provider.AcquireRequest{
		LeaseID: req.LeaseID, Slug: req.Slug, TTL: req.TTL, IdleTimeout: req.IdleTimeout,
		CreatedAt: now, ExpiresAt: now.Add(time.Duration(timeout) * time.Second), Labels: req.Labels,
	}, cloud.LabelOptions{Provider: Name, ServerType: b.cfg.Image, Owner: b.cfg.Owner, State: cloud.StateReady})
	if err != nil {
		return view, fmt.Errorf("tensorlake provider: warmup: %w", err)
	}
	name := SandboxName(b.cfg.Owner, req.LeaseID, labels[cloud.LabelSlug])

	rb := cloud.NewRollback(b.rt.Logger.With("lease", req.LeaseID), killTimeout)
	defer rb.Finish(ctx, &err)
	// Pushed before the create call and finding the sandboxes by name, so
	// that a create whose answer was lost is undone too.
	rb.Add(cloud.StepCreate, "sandboxes of lease "+req.LeaseID, func(ctx context.Context) error {
		b.forget(req.LeaseID)
		return b.terminateLease(ctx, req.LeaseID)
	})
	sb, err := b.api.create(ctx, createRequest{
		Name: name, Image: b.cfg.Image, TimeoutSecs: timeout,
		Resources: resources{CPUs: b.cfg.CPUs, MemoryMB: b.cfg.MemoryMB},
	})
	if err != nil {
		return view, fmt.Errorf("tensorlake provider: warmup %s: %w", req.LeaseID, cloud.Failed(cloud.StepCreate, err))
	}
	sb, err = b.waitRunning(ctx, sb.id())
	if err != nil {
		return view, fmt.Errorf("tensorlake provider: warmup %s: %w", req.LeaseID, cloud.Failed(stepRunning, err))
	}
	p, err := b.proxyOf(sb)
	if err != nil {
		return view, fmt.Errorf("tensorlake provider: warmup %s: %w", req.LeaseID, cloud.Failed(stepRunning, err))
	}
	doc, err := json.Marshal(labels)
	if err != nil {
		return view, fmt.Errorf("tensorlake provider: warmup %s: %w", req.LeaseID, err)
	}
	if err := p.writeBytes(ctx, b.labelsPath(req.LeaseID), doc); err != nil {
		return view, fmt.Errorf("tensorlake provider: warmup %s: write the lease's labels: %w", req.LeaseID, cloud.Failed(stepLabels, err))
	}
	b.remember(req.LeaseID, p)
	b.rt.Logger.Info("tensorlake sandbox created", "lease", req.LeaseID, "sandbox", sb.id(), "name", name, "timeout_secs", timeout)
	return provider.LeaseView{
		ID: req.LeaseID, Slug: labels[cloud.LabelSlug], Provider: Name, CloudID: sb.id(), State: statusRunning,
		Labels: maps.Clone(labels), CreatedAt: now, ExpiresAt: now.Add(time.Duration(timeout) * time.Second), WorkRoot: b.cfg.WorkRoot,
	}, nil
}

func (b *Backend) labelsPath(id string) string { return b.cfg.WorkRoot + "/" + LabelsFile(id) }

// timeoutUntil is the sandbox timeout (whole seconds from now, rounded
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

// waitRunning reads the sandbox until it runs; one that ends first, or
// any other status than pending, is an error.
func (b *Backend) waitRunning(ctx context.Context, id string) (sandboxInfo, error) {
	backoff := cloud.NewBackoff(pollInterval)
	for {
		sb, err := b.api.get(ctx, id)
		if err != nil {
			return sandboxInfo{}, err
		}
		switch sb.Status {
		case statusRunning:
			return sb, nil
		case statusPending, "":
		default:
			return sandboxInfo{}, fmt.Errorf("sandbox %s is %s (outcome %q), not running", id, sb.Status, sb.Outcome)
		}
		select {
		case <-ctx.Done():
			return sandboxInfo{}, fmt.Errorf("waiting for sandbox %s to run: %w", id, context.Cause(ctx))
		case <-b.rt.Clock.After(backoff.Next()):
		}
	}
}

// proxyOf is the proxy client of a sandbox the API described.
func (b *Backend) proxyOf(sb sandboxInfo) (*sandboxProxy, error) {
	base := b.cfg.ProxyURL
	if base == "" {
		base = strings.TrimRight(sb.SandboxURL, "/")
		if _, ok := parseHTTPBase(base); !ok {
			return nil, fmt.Errorf("sandbox %s: the API names no usable sandbox_url (%q); set proxy-url", sb.id(), sb.SandboxURL)
		}
	}
	return &sandboxProxy{c: b.proxyC, base: base, sandboxID: sb.id()}, nil
}

func parseHTTPBase(v string) (string, bool) {
	if checkBaseURL("sandbox_url", v) != nil {
		return "", false
	}
	return v, true
}

// mine returns this owner's crabbox sandboxes that have not ended.
func (b *Backend) mine(ctx context.Context) ([]sandboxInfo, error) {
	all, err := b.api.list(ctx)
	if err != nil {
		return nil, err
	}
	var out []sandboxInfo
	for _, sb := range all {
		if _, _, ok := b.parseName(sb.Name); ok && sb.Status != statusTerminated {
			out = append(out, sb)
		}
	}
	return out, nil
}

// List returns this owner's crabbox sandboxes. The caller's labels of a
// running sandbox are read from its labels file.
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseView, error) {
	sbs, err := b.mine(ctx)
	if err != nil {
		return nil, fmt.Errorf("tensorlake provider: list: %w", err)
	}
	out := make([]provider.LeaseView, 0, len(sbs))
	for _, sb := range sbs {
		out = append(out, b.view(ctx, sb))
	}
	return out, nil
}

// Status finds the lease's sandbox by lease ID or slug.
func (b *Backend) Status(ctx context.Context, req provider.StatusRequest) (provider.LeaseView, error) {
	sb, err := b.find(ctx, req.ID)
	if err != nil {
		return provider.LeaseView{}, fmt.Errorf("tensorlake provider: status of %s: %w", req.ID, err)
	}
	return b.view(ctx, sb), nil
}

// Stop terminates every sandbox of the lease (by lease ID or slug); a
// lease that is already gone is stopped.
func (b *Backend) Stop(ctx context.Context, req provider.StopRequest) error {
	id := req.ID
	if !lease.IsID(id) {
		sb, err := b.find(ctx, id)
		if errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("tensorlake provider: stop %s: %w", req.ID, err)
		}
		id, _, _ = b.parseName(sb.Name)
	}
	b.forget(id)
	if err := b.terminateLease(ctx, id); err != nil {
		return fmt.Errorf("tensorlake provider: stop %s: %w", req.ID, err)
	}
	b.rt.Logger.Info("tensorlake lease stopped", "lease", id)
	return nil
}

// terminateLease terminates every live sandbox named for lease ID id.
func (b *Backend) terminateLease(ctx context.Context, id string) error {
	sbs, err := b.mine(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, sb := range sbs {
		if got, _, _ := b.parseName(sb.Name); got == id {
			errs = append(errs, b.api.terminate(ctx, sb.id()))
		}
	}
	return errors.Join(errs...)
}

// find returns the live sandbox of the lease with ID or slug id; none is
// provider.ErrNotFound.
func (b *Backend) find(ctx context.Context, id string) (sandboxInfo, error) {
	byID := lease.IsID(id)
	if !byID && !lease.ValidSlug(id) {
		return sandboxInfo{}, fmt.Errorf("%q is not a lease ID or slug: %w", id, provider.ErrNotFound)
	}
	sbs, err := b.mine(ctx)
	if err != nil {
		return sandboxInfo{}, err
	}
	for _, sb := range sbs {
		lid, slug, _ := b.parseName(sb.Name)
		if byID && lid == id || !byID && slug == id {
			return sb, nil
		}
	}
	return sandboxInfo{}, fmt.Errorf("no tensorlake sandbox of lease %s: %w", id, provider.ErrNotFound)
}

// view is the lease view of one of this owner's sandboxes: identity from
// its name, times from the API, labels from its labels file while it runs
// (without them when the file cannot be read).
func (b *Backend) view(ctx context.Context, sb sandboxInfo) provider.LeaseView {
	id, slug, _ := b.parseName(sb.Name)
	v := provider.LeaseView{ID: id, Slug: slug, Provider: Name, CloudID: sb.id(), State: sb.Status, WorkRoot: b.cfg.WorkRoot}
	if sb.CreatedAt > 0 {
		v.CreatedAt = time.UnixMilli(sb.CreatedAt).UTC()
		if sb.TimeoutSecs > 0 {
			v.ExpiresAt = v.CreatedAt.Add(time.Duration(sb.TimeoutSecs) * time.Second)
		}
	}
	if sb.Status != statusRunning {
		return v
	}
	labels, err := b.readLabels(ctx, sb)
	if err != nil {
		b.rt.Logger.Debug("tensorlake: lease labels unreadable", "lease", id, "sandbox", sb.id(), "err", err)
		return v
	}
	if info, err := cloud.ParseLabels(labels); err == nil && info.LeaseID == id {
		v.Labels = info.Labels
		if v.CreatedAt.IsZero() {
			v.CreatedAt = info.CreatedAt
		}
		if v.ExpiresAt.IsZero() {
			v.ExpiresAt = info.ExpiresAt
		}
	}
	return v
}

// readLabels reads a sandbox's labels file.
func (b *Backend) readLabels(ctx context.Context, sb sandboxInfo) (map[string]string, error) {
	p, err := b.proxyOf(sb)
	if err != nil {
		return nil, err
	}
	id, _, _ := b.parseName(sb.Name)
	rc, err := p.readFile(ctx, b.labelsPath(id))
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var labels map[string]string
	if err := json.NewDecoder(io.LimitReader(rc, 64<<10)).Decode(&labels); err != nil {
		return nil, err
	}
	return labels, nil
}

// proxyFor returns the proxy client of the lease's sandbox, looking the
// sandbox up the first time.
func (b *Backend) proxyFor(ctx context.Context, leaseID string) (*sandboxProxy, error) {
	b.mu.Lock()
	p := b.proxies[leaseID]
	b.mu.Unlock()
	if p != nil {
		return p, nil
	}
	sb, err := b.find(ctx, leaseID)
	if err != nil {
		return nil, err
	}
	if sb.Status != statusRunning {
		return nil, fmt.Errorf("sandbox %s of lease %s is %s, not running: %w", sb.id(), leaseID, sb.Status, provider.ErrPrecondition)
	}
	if sb.SandboxURL == "" && b.cfg.ProxyURL == "" { // the list may leave it out
		if sb, err = b.api.get(ctx, sb.id()); err != nil {
			return nil, err
		}
	}
	if p, err = b.proxyOf(sb); err != nil {
		return nil, err
	}
	b.remember(leaseID, p)
	return p, nil
}

func (b *Backend) remember(leaseID string, p *sandboxProxy) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.proxies[leaseID] = p
}

func (b *Backend) forget(leaseID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.proxies, leaseID)
}
