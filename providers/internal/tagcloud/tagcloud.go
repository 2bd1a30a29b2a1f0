// Package tagcloud is the whole SSH-lease lifecycle of a VM cloud whose
// machines carry plain string tags instead of key-value labels
// (DigitalOcean, Linode): a provider maps its SDK onto the small API
// interface and gets Acquire, Resolve, List, Touch, ReleaseLease and
// Cleanup built from the shared cloud layer (providers/internal/cloud).
//
// Acquire checks the request, renders the ownership labels as tags
// (cloud.TagCodec) and the bootstrap as user data (a host key made by the
// client, the lease key, the self-destruct timer), creates the machine,
// trying sizes and regions in order while the cloud reports no capacity,
// waits for its public address and for sshd to answer with the injected
// host key, and tags it ready. The deletion is pushed on the rollback
// stack before the create call and finds the machine by its lease tag, so
// a create whose answer was lost is rolled back too. No SSH key is
// uploaded to the cloud: the bootstrap installs the lease key, so there is
// nothing else to leak.
//
// Release, Resolve, Touch, List and Cleanup find machines only by their
// tags (provider, lease, slug), never by name. Cleanup deletes a machine
// only when cloud.DecideCleanup says so for the caller's claims, and
// decides again on the freshly read machine just before deleting it.
package tagcloud

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Machine is one VM as the cloud reports it.
type Machine struct {
	// ID is the cloud's identifier of the machine.
	ID string
	// Tags are the machine's tags, in any order.
	Tags []string
	// Running is set when the machine is powered on.
	Running bool
	// Status is the cloud's word for the machine's state ("active",
	// "running", "off", ...).
	Status string
	// IPv4 is the machine's public IPv4 address, "" until it has one.
	// A cloud that reaches machines through a name (a load balancer's
	// hostname) may put the name here.
	IPv4 string
	// Port, if not zero, is the one port where the machine serves SSH at
	// IPv4, for a cloud that forwards a port of its own choosing to sshd
	// (a Kubernetes node port); zero means sshd's ports (Config.Ports).
	Port int
}

// Spec is what API.Create makes: one machine of a size in a region.
type Spec struct {
	Name, Size, Region, Image string
	// UserData is the cloud-init user data: the bootstrap script.
	UserData string
	// AuthorizedKey is the lease's public key, for clouds that want an
	// account key to deploy an image (the bootstrap installs it anyway).
	AuthorizedKey string
	Tags          []string
}

// API is the part of a cloud's API the lifecycle uses. Errors wrap the
// portable kinds of package provider: provider.ErrCapacity when the cloud
// has no room for a size in a region (or the account hit a limit), so
// that the next candidate is tried; provider.ErrNotFound from Get of a
// machine that is gone.
type API interface {
	// Create creates the machine and returns it as the cloud first
	// reports it.
	Create(ctx context.Context, s Spec) (Machine, error)
	// Get reads one machine.
	Get(ctx context.Context, id string) (Machine, error)
	// List returns every machine carrying tag.
	List(ctx context.Context, tag string) ([]Machine, error)
	// SetTags replaces m's tags with tags and returns the machine.
	SetTags(ctx context.Context, m Machine, tags []string) (Machine, error)
	// Delete deletes the machine; one that is already gone counts as
	// deleted.
	Delete(ctx context.Context, id string) error
}

// Config is a tag cloud's settings: the provider's options (already
// checked, with defaults) and what only Go programs set.
type Config struct {
	Options
	// Provider is the provider's canonical name (its provider tag).
	Provider string
	// Codec renders labels as the cloud's tags.
	Codec cloud.TagCodec
	// Ports are sshd's ports, tried in this order.
	Ports []int
	// PollInterval is the longest pause of the waits.
	PollInterval time.Duration
	// MapAddress rewrites a machine's address and SSH port to where
	// crabbox connects (a NAT, a test's fake box).
	MapAddress func(host string, port int) (string, int)
	// CallTimeout bounds every call of the cloud's API, whatever the
	// caller's context and HTTP client allow, so a request the cloud
	// never answers fails its step (and the acquire rolls back) instead
	// of blocking it; DefaultCallTimeout when zero.
	CallTimeout time.Duration
	// AgentUsers are users of the image's own management agent that the
	// box's sshd lets in as well (cloud.Bootstrap.AgentUsers).
	AgentUsers []string
}

// DefaultCallTimeout bounds one call of a cloud's API.
const DefaultCallTimeout = time.Minute

// Backend is the lease lifecycle on a tag cloud. Providers embed it and
// add Spec (and Doctor).
type Backend struct {
	cfg   Config
	api   API
	clock clockwork.Clock
	log   *slog.Logger
}

// New returns the lifecycle on api for cfg (its Options already
// checked), using rt's clock and logger. Unset ports, poll interval and
// address mapping get their defaults: 2222 then 22, 2 seconds, as is.
func New(cfg Config, api API, rt provider.Runtime) *Backend {
	if len(cfg.Ports) == 0 {
		cfg.Ports = cloud.DefaultPorts()
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 2 * time.Second
	}
	if cfg.MapAddress == nil {
		cfg.MapAddress = func(h string, p int) (string, int) { return h, p }
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	rt = rt.WithDefaults()
	return &Backend{cfg: cfg, api: boundedAPI{api, cfg.CallTimeout}, clock: rt.Clock, log: rt.Logger}
}

// boundedAPI gives every call of api at most d: an SDK whose request
// hangs returns context.DeadlineExceeded then (a call ended by the
// caller's context reports that context's error, as before).
type boundedAPI struct {
	api API
	d   time.Duration
}

// call runs f with a context bounded by a.d and names the bound when it
// ended f.
func call[T any](ctx context.Context, a boundedAPI, f func(context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeoutCause(ctx, a.d, fmt.Errorf("no answer from the API within %s: %w: %w", a.d, provider.ErrTransient, context.DeadlineExceeded))
	defer cancel()
	v, err := f(cctx)
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", context.Cause(cctx), err)
	}
	return v, err
}

func (a boundedAPI) Create(ctx context.Context, s Spec) (Machine, error) {
	return call(ctx, a, func(ctx context.Context) (Machine, error) { return a.api.Create(ctx, s) })
}

func (a boundedAPI) Get(ctx context.Context, id string) (Machine, error) {
	return call(ctx, a, func(ctx context.Context) (Machine, error) { return a.api.Get(ctx, id) })
}

func (a boundedAPI) List(ctx context.Context, tag string) ([]Machine, error) {
	return call(ctx, a, func(ctx context.Context) ([]Machine, error) { return a.api.List(ctx, tag) })
}

func (a boundedAPI) SetTags(ctx context.Context, m Machine, tags []string) (Machine, error) {
	return call(ctx, a, func(ctx context.Context) (Machine, error) { return a.api.SetTags(ctx, m, tags) })
}

func (a boundedAPI) Delete(ctx context.Context, id string) error {
	_, err := call(ctx, a, func(ctx context.Context) (struct{}, error) { return struct{}{}, a.api.Delete(ctx, id) })
	return err
}

// Name is the machine name of a lease: a valid hostname.
func Name(leaseID string) string { return "crabbox-" + strings.ReplaceAll(leaseID, "_", "-") }

// placement is one size in one region.
type placement struct{ Size, Region string }

func (p placement) String() string { return p.Size + " in " + p.Region }

// Acquire creates the lease's machine: create, address, SSH, ready tags.
// If a step fails, or ctx ends, it deletes the machine before returning.
func (b *Backend) Acquire(ctx context.Context, req provider.AcquireRequest) (target provider.LeaseTarget, err error) {
	return b.acquire(ctx, req, nil)
}

// Source is a machine image that a fork starts from: a snapshot of a box.
type Source struct {
	// Image is the Spec.Image of the machine's create.
	Image string
	// Regions are where the image can start machines; any when empty.
	Regions []string
}

// AcquireFrom is Acquire of a machine started from src (a fork of a
// native checkpoint), in the first of the configured regions that src
// has. The bootstrap installs no packages: the image has them.
func (b *Backend) AcquireFrom(ctx context.Context, req provider.AcquireRequest, src Source) (provider.LeaseTarget, error) {
	return b.acquire(ctx, req, &src)
}

func (b *Backend) acquire(ctx context.Context, req provider.AcquireRequest, src *Source) (target provider.LeaseTarget, err error) {
	log := b.log.With("lease", req.LeaseID)
	image, prepared, candidates := b.cfg.Image, b.cfg.Prepared, b.candidates()
	if src != nil {
		image, prepared = src.Image, true
		if len(src.Regions) > 0 {
			candidates = slices.DeleteFunc(candidates, func(p placement) bool { return !slices.Contains(src.Regions, p.Region) })
		}
		if len(candidates) == 0 {
			return target, fmt.Errorf("image %s is in the regions %v, none of the configured regions %v: %w", src.Image, src.Regions, b.cfg.Regions, provider.ErrPrecondition)
		}
	}
	st, err := cloud.StartAcquire(req, b.clock.Now(), cloud.LabelOptions{Provider: b.cfg.Provider, ServerType: b.cfg.Sizes[0], Owner: b.cfg.Owner},
		cloud.Bootstrap{Ports: b.cfg.Ports, WorkRoot: b.cfg.WorkRoot, Prepared: prepared, AgentUsers: b.cfg.AgentUsers})
	if err != nil {
		return target, err
	}
	hostKey, labels, userData := st.HostKey, st.Labels, st.UserData
	deadline := b.clock.Now().Add(b.cfg.BootTimeout)
	name := Name(req.LeaseID)

	rb := cloud.NewRollback(log, 0)
	defer rb.Finish(ctx, &err)
	rb.Add(cloud.StepCreate, "machine "+name, func(ctx context.Context) error {
		return b.deleteLease(ctx, req.LeaseID, cloud.StateFailed)
	})
	var m Machine
	_, err = cloud.FirstWithCapacity(ctx, log, candidates, func(ctx context.Context, p placement) error {
		l := maps.Clone(labels)
		l[cloud.LabelServerType] = p.Size
		tags, err := b.cfg.Codec.Tags(l)
		if err != nil {
			return err
		}
		m, err = b.api.Create(ctx, Spec{Name: name, Size: p.Size, Region: p.Region, Image: image, UserData: userData, AuthorizedKey: req.PublicKey, Tags: tags})
		if err != nil {
			return fmt.Errorf("create machine (%s): %w", p, err)
		}
		log.Info(b.cfg.Provider+" machine created", "machine", m.ID, "placement", p.String())
		return nil
	})
	if err != nil {
		return target, cloud.Failed(cloud.StepCreate, err)
	}

	m, err = b.waitAddress(ctx, m.ID, deadline)
	if err != nil {
		return target, cloud.Failed(cloud.StepAddress, err)
	}

	port, err := cloud.WaitForSSH(ctx, cloud.SSHWait{
		Host: m.IPv4, Ports: b.ports(m), HostKey: hostKey.PublicKey(), Clock: b.clock,
		Interval: b.cfg.PollInterval, Timeout: max(deadline.Sub(b.clock.Now()), time.Nanosecond),
		Dial: cloud.MappedDial(b.cfg.MapAddress), Log: log,
	})
	if err != nil {
		return target, cloud.Failed(cloud.StepSSH, err)
	}

	m, err = b.setLabels(ctx, m, func(l map[string]string) map[string]string {
		return cloud.WithSSHPort(cloud.WithState(l, cloud.StateReady), port)
	})
	if err != nil {
		return target, cloud.Failed(cloud.StepLabel, fmt.Errorf("tag the machine ready: %w", err))
	}
	target, err = b.target(m)
	if err != nil {
		return target, err
	}
	log.Info(b.cfg.Provider+" lease acquired", "machine", m.ID, "host", target.Host, "port", target.Port)
	return target, nil
}

// ports are where m may serve SSH, in the order to try them.
func (b *Backend) ports(m Machine) []int {
	if m.Port != 0 {
		return []int{m.Port}
	}
	return b.cfg.Ports
}

// candidates are the placements to try, every region of the first size
// before the next size.
func (b *Backend) candidates() []placement {
	var out []placement
	for _, s := range b.cfg.Sizes {
		for _, r := range b.cfg.Regions {
			out = append(out, placement{s, r})
		}
	}
	return out
}

// waitAddress polls the machine until it runs with a public IPv4 address,
// or the deadline passes.
func (b *Backend) waitAddress(ctx context.Context, id string, deadline time.Time) (Machine, error) {
	pace := cloud.NewBackoff(b.cfg.PollInterval)
	for {
		m, err := b.api.Get(ctx, id)
		if err != nil {
			return Machine{}, fmt.Errorf("read machine %s: %w", id, err)
		}
		if m.Running && m.IPv4 != "" {
			return m, nil
		}
		left := deadline.Sub(b.clock.Now())
		if left <= 0 {
			return Machine{}, fmt.Errorf("machine %s is %s with address %q after %s: %w", id, m.Status, m.IPv4, b.cfg.BootTimeout, provider.ErrTransient)
		}
		select {
		case <-ctx.Done():
			return Machine{}, fmt.Errorf("wait for the address of machine %s: %w", id, ctx.Err())
		case <-b.clock.After(min(pace.Next(), left)):
		}
	}
}

// labels reads m's labels from its tags.
func (b *Backend) labels(m Machine) map[string]string { return b.cfg.Codec.Labels(m.Tags) }

// setLabels rewrites m's crabbox tags with edit's labels, keeping tags of
// other tools.
func (b *Backend) setLabels(ctx context.Context, m Machine, edit func(map[string]string) map[string]string) (Machine, error) {
	tags, err := b.cfg.Codec.Tags(edit(b.labels(m)))
	if err != nil {
		return Machine{}, err
	}
	for _, t := range m.Tags {
		if !strings.Contains(t, ":") {
			tags = append(tags, t) // not crabbox's
		}
	}
	return b.api.SetTags(ctx, m, tags)
}

// target describes the box of machine m from its labels.
func (b *Backend) target(m Machine) (provider.LeaseTarget, error) {
	info, err := cloud.ParseLabels(b.labels(m))
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("machine %s: %w", m.ID, err)
	}
	t := provider.LeaseTarget{CloudID: m.ID, User: cloud.DefaultUser, WorkRoot: b.cfg.WorkRoot}
	info.Apply(&t)
	if m.Port != 0 {
		t.Port = m.Port
	}
	if t.Port == 0 {
		t.Port = b.cfg.Ports[0]
	}
	if m.IPv4 != "" {
		t.Host, t.Port = b.cfg.MapAddress(m.IPv4, t.Port)
	}
	if !m.Running {
		t.State = m.Status
	}
	return t, nil
}

// ours reports whether m carries crabbox's tags of this provider (and of
// leaseID, when set).
func (b *Backend) ours(m Machine, leaseID string) bool {
	l := b.labels(m)
	return l[cloud.LabelCrabbox] == "true" && l[cloud.LabelProvider] == b.cfg.Provider && (leaseID == "" || l[cloud.LabelLease] == leaseID)
}

// machines lists crabbox's machines of this provider: of one lease when
// leaseID is set, else all.
func (b *Backend) machines(ctx context.Context, leaseID string) ([]Machine, error) {
	tag := b.cfg.Codec.Tag(cloud.LabelProvider, b.cfg.Provider)
	if leaseID != "" {
		tag = b.cfg.Codec.Tag(cloud.LabelLease, leaseID)
	}
	all, err := b.api.List(ctx, tag)
	if err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	return slices.DeleteFunc(all, func(m Machine) bool { return !b.ours(m, leaseID) }), nil
}

// live reports whether m is a running box of a lease that is ready.
func (b *Backend) live(m Machine) bool {
	st := b.labels(m)[cloud.LabelState]
	return m.Running && (st == cloud.StateReady || st == cloud.StateRunning)
}

// Resolve finds the running machine of a lease by lease ID or slug.
func (b *Backend) Resolve(ctx context.Context, req provider.ResolveRequest) (provider.LeaseTarget, error) {
	m, err := b.resolve(ctx, req.ID)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("resolve %s lease %s: %w", b.cfg.Provider, req.ID, err)
	}
	return b.target(m)
}

func (b *Backend) resolve(ctx context.Context, ref string) (Machine, error) {
	return cloud.ResolveLive(ctx, ref, func(ctx context.Context, leaseID, slug string) ([]Machine, error) {
		if slug == "" {
			return b.machines(ctx, leaseID)
		}
		found, err := b.machines(ctx, "")
		return slices.DeleteFunc(found, func(m Machine) bool { return b.labels(m)[cloud.LabelSlug] != slug }), err
	}, b.live, "machine", func(m Machine) any { return m.ID })
}

// List returns every crabbox machine of the provider, whatever its state.
// Machines whose tags do not parse are logged and left out.
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseTarget, error) {
	all, err := b.machines(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list %s leases: %w", b.cfg.Provider, err)
	}
	return cloud.Targets(b.log, all, b.target, b.cfg.Provider+" machine with unreadable tags", "machine",
		func(m Machine) any { return m.ID }), nil
}

// Touch records activity on the lease's machine: its last_touched_at and
// expires_at tags.
func (b *Backend) Touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	t, err := b.touch(ctx, req)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("touch %s lease %s: %w", b.cfg.Provider, req.Lease.LeaseID, err)
	}
	return t, nil
}

func (b *Backend) touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	if err := cloud.CheckTouch(req); err != nil {
		return provider.LeaseTarget{}, err
	}
	m, err := b.leaseMachine(ctx, req.Lease)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	m, err = b.setLabels(ctx, m, func(l map[string]string) map[string]string { return cloud.Touch(l, req.Now, req.ExpiresAt) })
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("update tags: %w", err)
	}
	return b.target(m)
}

// LeaseMachine finds the live machine of lease l: by its cloud ID when
// the target has one (checking its tags), else by the lease tag.
func (b *Backend) LeaseMachine(ctx context.Context, l provider.LeaseTarget) (Machine, error) {
	return b.leaseMachine(ctx, l)
}

// Labels reads m's labels from its tags.
func (b *Backend) Labels(m Machine) map[string]string { return b.labels(m) }

// Rebuilt waits until machine id, rebuilt from an image with its own
// user data, runs with an address and answers SSH with the host key its
// host_key tag pins, moves its ssh_port tag if it answered on another
// port, and returns its target.
func (b *Backend) Rebuilt(ctx context.Context, id string) (provider.LeaseTarget, error) {
	deadline := b.clock.Now().Add(b.cfg.BootTimeout)
	m, err := b.waitAddress(ctx, id, deadline)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	hostKey, err := cloud.ParseHostKeyLabel(b.labels(m)[cloud.LabelHostKey])
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("machine %s: %w", id, err)
	}
	port, err := cloud.WaitForSSH(ctx, cloud.SSHWait{
		Host: m.IPv4, Ports: b.ports(m), HostKey: hostKey, Clock: b.clock,
		Interval: b.cfg.PollInterval, Timeout: max(deadline.Sub(b.clock.Now()), time.Nanosecond),
		Dial: cloud.MappedDial(b.cfg.MapAddress), Log: b.log.With("machine", id),
	})
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	if b.labels(m)[cloud.LabelSSHPort] != strconv.Itoa(port) {
		if m, err = b.setLabels(ctx, m, func(l map[string]string) map[string]string { return cloud.WithSSHPort(l, port) }); err != nil {
			return provider.LeaseTarget{}, fmt.Errorf("tag the machine's SSH port: %w", err)
		}
	}
	return b.target(m)
}

func (b *Backend) leaseMachine(ctx context.Context, l provider.LeaseTarget) (Machine, error) {
	if !lease.IsID(l.LeaseID) {
		return Machine{}, fmt.Errorf("lease ID %q is not a crabbox lease ID", l.LeaseID)
	}
	if l.CloudID == "" {
		return b.resolve(ctx, l.LeaseID)
	}
	m, err := b.api.Get(ctx, l.CloudID)
	if err != nil {
		return Machine{}, fmt.Errorf("read machine %s: %w", l.CloudID, err)
	}
	if !b.ours(m, l.LeaseID) || !b.live(m) {
		return Machine{}, fmt.Errorf("machine %s is not this lease's running machine: %w", l.CloudID, provider.ErrNotFound)
	}
	return m, nil
}

// ReleaseLease deletes the lease's machines, found by the lease tag. It
// needs only the lease ID, and succeeds when they are already gone.
func (b *Backend) ReleaseLease(ctx context.Context, req provider.ReleaseRequest) error {
	id := req.Lease.LeaseID
	if !lease.IsID(id) {
		return fmt.Errorf("release %s lease: lease ID %q is not a crabbox lease ID", b.cfg.Provider, id)
	}
	if err := b.deleteLease(ctx, id, cloud.StateReleased); err != nil {
		return fmt.Errorf("release %s lease %s: %w", b.cfg.Provider, id, err)
	}
	b.log.Info(b.cfg.Provider+" lease released", "lease", id)
	return nil
}

// deleteLease deletes every machine tagged with the lease. One it fails
// to delete it tries to tag with state orphan (failed or released), so
// that cleanup deletes it as soon as it sees it.
func (b *Backend) deleteLease(ctx context.Context, leaseID, orphan string) error {
	ms, err := b.machines(ctx, leaseID)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range ms {
		if err := b.delete(ctx, m); err != nil {
			errs = append(errs, err)
			if _, lerr := b.setLabels(ctx, m, func(l map[string]string) map[string]string { return cloud.WithState(l, orphan) }); lerr != nil {
				b.log.Warn(b.cfg.Provider+" machine left behind, untagged", "machine", m.ID, "lease", leaseID, "err", lerr)
			} else {
				b.log.Warn(b.cfg.Provider+" machine left behind for cleanup", "machine", m.ID, "lease", leaseID, "state", orphan)
			}
		}
	}
	return errors.Join(errs...)
}

func (b *Backend) delete(ctx context.Context, m Machine) error {
	if err := b.api.Delete(ctx, m.ID); err != nil {
		return fmt.Errorf("delete machine %s: %w", m.ID, err)
	}
	b.log.Info(b.cfg.Provider+" machine deleted", "machine", m.ID, "lease", b.labels(m)[cloud.LabelLease])
	return nil
}

// Cleanup decides for every machine with crabbox's tags of this provider
// whether to delete it (cloud.DecideCleanup: only with a claim of the
// caller, expired or failed, kept ones too once expired), and unless
// req.DryRun deletes it, after reading it again and deciding again, so a
// lease touched in the meantime survives.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	all, err := b.machines(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("clean up %s: %w", b.cfg.Provider, err)
	}
	return cloud.Sweep[Machine]{
		Provider: b.cfg.Provider, Noun: "machine", Log: b.log,
		View:   func(m Machine) (string, map[string]string) { return m.ID, b.labels(m) },
		Reread: func(ctx context.Context, m Machine) (Machine, error) { return b.api.Get(ctx, m.ID) },
		Delete: b.delete,
	}.Run(ctx, req, all)
}
