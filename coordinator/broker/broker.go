// Package broker adapts a coordinator into provider backends for the
// library's two coordinator modes: NewBrokered, whose leases the
// coordinator creates and owns (it holds the provider's credentials), and
// NewRegistered, which drives a provider direct and keeps the coordinator's
// inventory of its leases up to date.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// settingKeys are the provider settings a brokered lease request carries.
// Everything else (credentials above all) stays with the coordinator.
var settingKeys = []string{"target", "class", "server-type", "location", "image", "ssh-user", "work-root"}

// Settings turns the provider settings of a brokered lease into the parts
// of the coordinator's lease request that carry them (target, class,
// server type, location, image, SSH user, work root). Other settings stay
// here: credentials above all belong to the coordinator. For a provider
// this program does not link (linked false) another key is an error;
// for a linked one it is a setting only the direct provider reads.
func Settings(name string, cfg provider.Config, linked bool) (api.LeaseRequest, error) {
	var req api.LeaseRequest
	for k, v := range cfg {
		switch k {
		case "target":
			req.Target = api.Target(v)
		case "class":
			req.Class = v
		case "server-type":
			req.ServerType = v
		case "location":
			req.Location = v
		case "image":
			req.Image = api.ImageRef(v)
		case "ssh-user":
			req.SSHUser = v
		case "work-root":
			req.WorkRoot = v
		default:
			if !linked {
				return req, fmt.Errorf("provider %q (brokered by the coordinator): unknown config key %q (known: %s)", name, k, strings.Join(settingKeys, ", "))
			}
		}
	}
	return req, nil
}

// NeutralSSHUser is the user of the lease targets a brokered backend
// returns for a provider whose SSH login is a credential
// (provider.FeatureSSHLogin). It is for display only: the backend's
// SSHLogin asks the coordinator for the real login at each connection.
const NeutralSSHUser = "ssh-login"

// Option configures NewBrokered.
type Option func(*brokeredOptions)

type brokeredOptions struct {
	registry   *provider.Registry
	heartbeats *coordclient.Heartbeater
}

// WithHeartbeater sends the backend's heartbeats through h (over the
// coordinator's control websocket, HTTP when it has none) instead of one
// HTTP request each. h belongs to the caller, who closes it.
func WithHeartbeater(h *coordclient.Heartbeater) Option {
	return func(o *brokeredOptions) { o.heartbeats = h }
}

// heartbeat is a coordinator heartbeat, through h when there is one.
func heartbeat(ctx context.Context, coord *coordclient.Client, h *coordclient.Heartbeater, ref string, req api.HeartbeatRequest) (api.Lease, error) {
	if h != nil {
		return h.Heartbeat(ctx, ref, req)
	}
	return coord.Heartbeat(ctx, ref, req)
}

// WithRegistry sets the registry that tells NewBrokered whether the
// provider's SSH login is a credential: when it holds the provider and
// its Spec has provider.FeatureSSHLogin. The default is
// provider.Default(), the providers linked into this program.
func WithRegistry(r *provider.Registry) Option {
	return func(o *brokeredOptions) { o.registry = r }
}

// NewBrokered returns the SSH-lease backend of provider name's leases
// brokered by the coordinator coord: create, resolve, list, heartbeat and
// release are coordinator calls (settings shapes each lease request; see
// Settings), and the box it returns is reached directly over SSH. store is
// the local lease store, whose claims hold each lease's idle timeout.
//
// When the registry (see WithRegistry) declares the provider's SSH login
// a credential (provider.FeatureSSHLogin), the backend is a
// provider.SSHLoginBackend: its lease targets carry NeutralSSHUser, never
// the login the coordinator sent, and SSHLogin reads the lease from the
// coordinator to get a fresh one. Other providers' backends make no such
// call. When it declares native checkpoints and forks, the backend is a
// provider.NativeForkBackend whose checkpoints the coordinator keeps.
func NewBrokered(coord *coordclient.Client, name string, settings api.LeaseRequest, store *lease.Store, clock clockwork.Clock, opts ...Option) provider.SSHLeaseBackend {
	o := brokeredOptions{registry: provider.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	b := &brokeredBackend{name: name, coord: coord, heartbeats: o.heartbeats, store: store, clock: clock, extra: settings, pollInterval: 2 * time.Second}
	p, err := o.registry.Lookup(name)
	switch {
	case err != nil:
	case p.Spec().Has(provider.FeatureSSHLogin):
		b.login = true
		return &brokeredLoginBackend{brokeredBackend: b}
	case p.Spec().Has(provider.FeatureCheckpoint) && p.Spec().Has(provider.FeatureFork):
		b.native = true
		return &brokeredNativeBackend{brokeredBackend: b}
	}
	return b
}

// brokeredBackend is the backend NewBrokered returns.
type brokeredBackend struct {
	name         string
	coord        *coordclient.Client
	heartbeats   *coordclient.Heartbeater
	store        *lease.Store
	clock        clockwork.Clock
	extra        api.LeaseRequest
	pollInterval time.Duration
	// login: the provider's SSH login is a credential, kept out of the
	// lease targets (see brokeredLoginBackend).
	login bool
	// native: the provider saves whole boxes, and the coordinator keeps
	// its checkpoints (see brokeredNativeBackend).
	native bool
}

func (b *brokeredBackend) Spec() provider.Spec {
	features := []provider.Feature{provider.FeatureSSH}
	if b.login {
		features = append(features, provider.FeatureSSHLogin)
	}
	if b.native {
		features = append(features, provider.FeatureCheckpoint, provider.FeatureFork)
	}
	return provider.Spec{
		Name:        b.name,
		Description: "leases brokered by the coordinator at " + b.coord.URL(),
		Kind:        provider.KindSSHLease,
		Targets:     []provider.Target{provider.TargetLinux},
		Features:    features,
		Coordinator: provider.CoordinatorSupported,
	}
}

// brokeredLoginBackend is the backend NewBrokered returns for a provider
// whose SSH login is a credential: the coordinator sends a fresh login to
// the lease's owner in every lease answer that connects (create, get,
// heartbeat), which the lease targets leave out and SSHLogin hands over.
type brokeredLoginBackend struct {
	*brokeredBackend
}

// SSHLogin reads the lease from the coordinator and returns the login in
// its answer, which the coordinator marks with sshLoginExpiresAt (an
// answer without it holds only the neutral user: an error). The
// coordinator decides how long the login stays valid (until the lease's
// expiry, at least), so req.ValidFor is not sent.
func (b *brokeredLoginBackend) SSHLogin(ctx context.Context, req provider.SSHLoginRequest) (provider.SSHLogin, error) {
	id := req.Lease.LeaseID
	l, err := b.coord.GetLease(ctx, id)
	if err != nil {
		return provider.SSHLogin{}, fmt.Errorf("SSH login for lease %s: %w", id, err)
	}
	t, err := b.reach(id, l)
	if err != nil {
		return provider.SSHLogin{}, err
	}
	if l.SSHLoginExpiresAt.IsZero() {
		// The answer holds the stored, neutral user: this coordinator
		// does not issue logins (or not to this caller).
		return provider.SSHLogin{}, fmt.Errorf("coordinator lease %s: the answer carries no SSH login (sshLoginExpiresAt); the coordinator at %s may be too old to broker provider %q, or the lease belongs to someone else",
			id, b.coord.URL(), b.name)
	}
	return provider.SSHLogin{Host: t.Host, Port: t.Port, User: t.User, ExpiresAt: l.SSHLoginExpiresAt}, nil
}

func (b *brokeredBackend) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	lr := b.extra
	lr.LeaseID, lr.Slug, lr.Provider = req.LeaseID, req.Slug, b.name
	lr.SSHPublicKey = req.PublicKey
	lr.TTLSeconds, lr.IdleTimeoutSeconds = seconds(req.TTL), seconds(req.IdleTimeout)
	lr.Keep, lr.Labels = req.Keep, maps.Clone(req.Labels)
	if lr.Pool == "" {
		// Any ready pool this create matches may hand over a box:
		// the lease store adopts its lease ID.
		lr.Pool = api.PoolAny
	}
	l, err := b.coord.CreateLease(ctx, lr)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	id := req.LeaseID
	if l.Pool != "" && l.ID != id {
		// A box of the coordinator's ready pool keeps the lease ID it
		// was made with: the target names it, labelled with its pool, and
		// the lease store adopts it (lease.Store.Acquire).
		id = l.ID
	}
	t, err := b.provisioned(ctx, id, l)
	if err == nil && l.Pool != "" {
		t.Labels = maps.Clone(t.Labels)
		if t.Labels == nil {
			t.Labels = map[string]string{}
		}
		t.Labels[lease.PoolLabel] = l.Pool
	}
	return t, err
}

// provisioned waits while the coordinator's lease l (of lease id)
// provisions, and returns it as an SSH target.
func (b *brokeredBackend) provisioned(ctx context.Context, id string, l api.Lease) (provider.LeaseTarget, error) {
	var err error
	for l.State == api.LeaseProvisioning {
		t := b.clock.NewTimer(b.pollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return provider.LeaseTarget{}, fmt.Errorf("lease %s still provisioning at the coordinator: %w", l.ID, ctx.Err())
		case <-t.Chan():
		}
		if l, err = b.coord.GetLease(ctx, id); err != nil {
			return provider.LeaseTarget{}, err
		}
	}
	return b.target(id, l)
}

func seconds(d time.Duration) int { return int(d / time.Second) }

// target converts the coordinator's lease into an SSH target, rejecting an
// answer for another lease or provider, or one that cannot be reached.
// For a provider whose login is a credential, the target's user is
// NeutralSSHUser: the library stores targets.
//
// An answer that carries a login (sshLoginExpiresAt) for a provider this
// program does not know as one is refused, so that the credential is
// never stored as a target's user.
//
// An answer to the lease's owner carries the coordinator's access key for
// the box (accessKey): the target asks the library to install it
// (provider.LeaseTarget.AccessKeys), except on a box of a ready pool,
// whose take installed it, and a box reached through logins, which the
// coordinator cannot reach itself.
func (b *brokeredBackend) target(id string, l api.Lease) (provider.LeaseTarget, error) {
	if !b.login && !l.SSHLoginExpiresAt.IsZero() {
		return provider.LeaseTarget{}, fmt.Errorf("coordinator lease %s: provider %q's SSH login is a credential issued per connection, and this crabbox does not link provider %q to ask for one: %w",
			id, b.name, b.name, provider.ErrPrecondition)
	}
	t, err := b.reach(id, l)
	switch {
	case err != nil:
	case b.login:
		t.User = NeutralSSHUser
	case l.AccessKey != "" && l.Pool == "":
		// The library installs the coordinator's access key on the box
		// (a ready pool's take installed it already).
		t.AccessKeys = []string{l.AccessKey}
	}
	return t, err
}

// reach is target with the user the coordinator sent. Its errors never
// name the user.
func (b *brokeredBackend) reach(id string, l api.Lease) (provider.LeaseTarget, error) {
	bad := func(format string, args ...any) (provider.LeaseTarget, error) {
		return provider.LeaseTarget{}, fmt.Errorf("coordinator lease %s: "+format, append([]any{id}, args...)...)
	}
	switch {
	case l.ID != id:
		return bad("answer names lease %q", l.ID)
	case l.Provider != "" && l.Provider != b.name:
		return bad("answer names provider %q, want %q", l.Provider, b.name)
	case l.State != api.LeaseActive:
		msg := ""
		if l.FailureError != "" {
			msg = ": " + l.FailureError
		}
		return bad("is %s, not active%s: %w", l.State, msg, provider.ErrNotFound)
	case l.Access == string(api.ShareRead):
		return bad("is shared with you to read: its box (ssh, runs, forwards) needs use: %w", provider.ErrPrecondition)
	case l.Host == "":
		return bad("no SSH host")
	case l.SSHUser == "":
		return bad("no SSH user")
	case l.WorkRoot == "":
		return bad("no work root")
	}
	portStr := l.SSHPort
	if portStr == "" {
		portStr = api.DefaultSSHPort
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || port > 65535 {
		return bad("SSH port %q is not a port number", l.SSHPort)
	}
	return provider.LeaseTarget{
		LeaseID: l.ID, Slug: l.Slug, Provider: b.name, CloudID: l.CloudID,
		Host: l.Host, Port: port, User: l.SSHUser, HostKey: l.SSHHostKey, WorkRoot: l.WorkRoot,
		State: string(l.State), Labels: l.Labels, CreatedAt: l.CreatedAt, ExpiresAt: l.ExpiresAt,
	}, nil
}

func (b *brokeredBackend) Resolve(ctx context.Context, req provider.ResolveRequest) (provider.LeaseTarget, error) {
	l, err := b.coord.GetLease(ctx, req.ID)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	return b.target(l.ID, l)
}

func (b *brokeredBackend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseTarget, error) {
	ls, err := b.coord.ListLeases(ctx, coordclient.ListLeasesOptions{
		State: api.LeaseActive, Provider: b.name, Limit: api.MaxLeaseListLimit,
	})
	if err != nil {
		return nil, err
	}
	out := make([]provider.LeaseTarget, 0, len(ls))
	for _, l := range ls {
		t, err := b.target(l.ID, l)
		if err != nil { // listed, so live, even if not reachable as described
			t = provider.LeaseTarget{LeaseID: l.ID, Slug: l.Slug, Provider: b.name, State: string(l.State)}
		}
		out = append(out, t)
	}
	return out, nil
}

func (b *brokeredBackend) Touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	hb := api.HeartbeatRequest{ExpectedProvider: b.name}
	if cl, err := b.store.Get(req.Lease.LeaseID); err == nil && cl.IdleSeconds > 0 {
		hb.IdleTimeoutSeconds = int(cl.IdleSeconds)
	}
	l, err := heartbeat(ctx, b.coord, b.heartbeats, req.Lease.LeaseID, hb)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	return b.target(req.Lease.LeaseID, l)
}

func (b *brokeredBackend) ReleaseLease(ctx context.Context, req provider.ReleaseRequest) error {
	del := true
	_, err := b.coord.Release(ctx, req.Lease.LeaseID, api.ReleaseRequest{Delete: &del, ExpectedProvider: b.name})
	if AlreadyOver(err) {
		return nil
	}
	return err
}

// AlreadyOver reports whether a release failed only because the lease is
// already gone or ended.
func AlreadyOver(err error) bool {
	return errors.Is(err, provider.ErrNotFound) ||
		coordclient.IsCode(err, api.CodeLeaseEnded) || coordclient.IsCode(err, api.CodeLeaseExpired)
}

// registeredBackend is the backend NewRegistered returns.
type registeredBackend struct {
	provider.SSHLeaseBackend
	coord      *coordclient.Client
	heartbeats *coordclient.Heartbeater
	store      *lease.Store
	log        *slog.Logger
}

// registeredCleanupBackend keeps the direct backend's cleanup.
type registeredCleanupBackend struct {
	*registeredBackend
	cleanup provider.CleanupBackend
}

func (r registeredCleanupBackend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	return r.cleanup.Cleanup(ctx, req)
}

// NewRegistered returns b with its leases registered with the coordinator
// coord: b drives every lease, and the coordinator keeps an inventory
// record of it (created on acquire, heartbeated on touch, released on
// release). Failing to update that record is logged, never fatal, and the
// coordinator never touches the box.
// The backend keeps b's cleanup and, for a provider whose SSH login is a
// credential, b's SSHLogin: the login is b's own, never registered.
// Of the options only WithHeartbeater applies.
func NewRegistered(b provider.SSHLeaseBackend, coord *coordclient.Client, store *lease.Store, log *slog.Logger, opts ...Option) provider.SSHLeaseBackend {
	var o brokeredOptions
	for _, opt := range opts {
		opt(&o)
	}
	r := &registeredBackend{SSHLeaseBackend: b, coord: coord, heartbeats: o.heartbeats, store: store, log: log}
	cb, cleanup := b.(provider.CleanupBackend)
	lb, login := b.(provider.SSHLoginBackend)
	switch {
	case cleanup && login:
		return registeredCleanupLoginBackend{registeredCleanupBackend{r, cb}, lb}
	case cleanup:
		return registeredCleanupBackend{r, cb}
	case login:
		return registeredLoginBackend{r, lb}
	}
	return r
}

// registeredLoginBackend keeps the direct backend's SSHLogin.
type registeredLoginBackend struct {
	*registeredBackend
	login provider.SSHLoginBackend
}

func (r registeredLoginBackend) SSHLogin(ctx context.Context, req provider.SSHLoginRequest) (provider.SSHLogin, error) {
	return r.login.SSHLogin(ctx, req)
}

// registeredCleanupLoginBackend keeps both.
type registeredCleanupLoginBackend struct {
	registeredCleanupBackend
	login provider.SSHLoginBackend
}

func (r registeredCleanupLoginBackend) SSHLogin(ctx context.Context, req provider.SSHLoginRequest) (provider.SSHLogin, error) {
	return r.login.SSHLogin(ctx, req)
}

func (r *registeredBackend) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	t, err := r.SSHLeaseBackend.Acquire(ctx, req)
	if err != nil {
		return t, err
	}
	r.register(ctx, t, seconds(req.TTL), seconds(req.IdleTimeout), req.Keep, req.Labels)
	return t, nil
}

func (r *registeredBackend) register(ctx context.Context, t provider.LeaseTarget, ttl, idle int, keep bool, labels map[string]string) {
	_, err := r.coord.Register(ctx, t.LeaseID, api.RegistrationRequest{
		Slug: t.Slug, Provider: r.Spec().Name, Target: api.TargetLinux, CloudID: t.CloudID,
		Host: t.Host, SSHUser: t.User, SSHPort: strconv.Itoa(t.Port), SSHHostKey: t.HostKey,
		WorkRoot: t.WorkRoot, TTLSeconds: ttl, IdleTimeoutSeconds: idle, Keep: keep, Labels: labels,
	})
	if err != nil {
		r.log.Warn("lease not registered with the coordinator", "lease", t.LeaseID, "err", err)
	}
}

func (r *registeredBackend) Touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	t, err := r.SSHLeaseBackend.Touch(ctx, req)
	if err != nil {
		return t, err
	}
	_, err = heartbeat(ctx, r.coord, r.heartbeats, t.LeaseID, api.HeartbeatRequest{ExpectedProvider: r.Spec().Name})
	if errors.Is(err, provider.ErrNotFound) {
		if cl, gerr := r.store.Get(t.LeaseID); gerr == nil {
			r.register(ctx, t, int(cl.TTLSeconds), int(cl.IdleSeconds), cl.Keep, cl.Labels)
			return t, nil
		}
	}
	if err != nil {
		r.log.Warn("coordinator heartbeat of a registered lease failed", "lease", t.LeaseID, "err", err)
	}
	return t, nil
}

func (r *registeredBackend) ReleaseLease(ctx context.Context, req provider.ReleaseRequest) error {
	if err := r.SSHLeaseBackend.ReleaseLease(ctx, req); err != nil {
		return err
	}
	_, err := r.coord.Release(ctx, req.Lease.LeaseID, api.ReleaseRequest{ExpectedProvider: r.Spec().Name})
	if err != nil && !AlreadyOver(err) {
		r.log.Warn("registered lease not released at the coordinator", "lease", req.Lease.LeaseID, "err", err)
	}
	return nil
}
