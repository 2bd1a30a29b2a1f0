package crabbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	gosync "sync"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	coordbroker "github.com/crabbox-dev/crabbox/coordinator/broker"
	"github.com/crabbox-dev/crabbox/internal/handover"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// Ready pools: boxes made ahead of demand, so that an acquire that names
// the pool (AcquireOptions.Pool) takes one at once. Without a coordinator
// a pool lives in the client's state directory: its definition, and its
// idle boxes as ordinary lease claims marked with the pool's key, kept,
// owned by no process, that expire after the pool's maximum age like any
// lease (Cleanup deletes them then). When the pool's provider is brokered
// by the client's coordinator, the coordinator keeps the pool instead
// (the /v1/ready-pools routes, admin only).

// DefaultPoolMaxAge is how long an idle pool box lives unless
// PoolOptions.MaxAge says otherwise; MinPoolMaxAge and MaxPoolMaxAge
// bound it (the coordinator's bounds, api.*PoolMaxAgeSeconds).
const (
	DefaultPoolMaxAge = api.DefaultPoolMaxAgeSeconds * time.Second
	MinPoolMaxAge     = api.MinPoolMaxAgeSeconds * time.Second
	MaxPoolMaxAge     = api.MaxPoolMaxAgeSeconds * time.Second
)

// defaultPoolParallel bounds how many boxes EnsurePool makes at once.
const defaultPoolParallel = 4

// poolCheckTimeout bounds the check of a box taken from a pool (connect,
// one command).
const poolCheckTimeout = 30 * time.Second

// ErrCoordinatorPools is wrapped by Pools' error when the coordinator
// could not be asked for its pools: the local ones are still returned.
var ErrCoordinatorPools = errors.New("coordinator pools not listed")

// PoolAsked is how the lease l relates to the ready pool key its acquire
// named (AcquireOptions.Pool): taken from it (Hit), or made the ordinary
// way because the pool had no box ready.
func PoolAsked(key string, l *Lease) *LeasePool { return poolAsked(key, l.Claim()) }

// LeasePool is how a lease relates to a ready pool (LeaseInfo.Pool).
type LeasePool struct {
	Key string `json:"key"`
	// Hit: the box was taken from the pool. False for an idle box still
	// waiting in it (Idle), and for a lease an acquire that named the
	// pool made the ordinary way because the pool had no box ready (the
	// crabbox command reports that; the lease's own record names no
	// pool then).
	Hit     bool      `json:"hit"`
	Idle    bool      `json:"idle,omitempty"`
	TakenAt time.Time `json:"takenAt,omitzero"`
	// Coordinator is the URL of the coordinator whose pool it is; empty
	// for a pool of the state directory.
	Coordinator string `json:"coordinator,omitempty"`
}

// poolAsked is how the lease of cl relates to the pool key its acquire
// asked for: taken from it, or made the ordinary way.
func poolAsked(key string, cl lease.Claim) *LeasePool {
	if p := poolOf(cl); p != nil {
		return p
	}
	p := &LeasePool{Key: key}
	if cl.Route == lease.RouteBrokered {
		p.Coordinator = cl.Coordinator
	}
	return p
}

// poolOf is the pool of the lease of cl, or nil.
func poolOf(cl lease.Claim) *LeasePool {
	if cl.Pool == "" {
		return nil
	}
	p := &LeasePool{Key: cl.Pool, Hit: !cl.PoolTakenAt.IsZero(), Idle: cl.PoolTakenAt.IsZero(), TakenAt: cl.PoolTakenAt}
	if cl.Route == lease.RouteBrokered {
		p.Coordinator = cl.Coordinator
	}
	return p
}

// PoolOptions define a ready pool (Client.EnsurePool).
type PoolOptions struct {
	// Key names the pool (at most 63 of a-z, 0-9 and -, not starting
	// with -); empty: the provider's name, plus "-" and its class
	// setting when one is set.
	Key string
	// Provider makes the pool's boxes (default: the client's), with the
	// client's settings of it.
	Provider string
	// Size is how many ready boxes the pool keeps (0 to api.MaxPoolBoxes).
	Size int
	// MaxAge is how long an idle box lives before it expires (default
	// DefaultPoolMaxAge; MinPoolMaxAge to MaxPoolMaxAge, and at most the
	// provider's longest lifetime).
	MaxAge time.Duration
	// Labels are set on the pool's boxes, with pool=<key>. A
	// coordinator's pool takes none.
	Labels map[string]string
	// Parallel bounds how many boxes are made at once (default 4).
	Parallel int
}

// PoolInfo is a ready pool as EnsurePool, Pools and DrainPool report it.
type PoolInfo struct {
	Key           string `json:"key"`
	Provider      string `json:"provider"`
	Size          int    `json:"size"`
	MaxAgeSeconds int64  `json:"maxAgeSeconds"`
	// Ready counts the idle boxes waiting to be taken; Provisioning the
	// boxes being made.
	Ready        int `json:"ready"`
	Provisioning int `json:"provisioning"`
	// Made and Removed count the boxes this call made, and released
	// (expired, surplus, or drained).
	Made    int `json:"made,omitempty"`
	Removed int `json:"removed,omitempty"`
	// Config holds the provider settings the boxes are made with (a
	// local pool's).
	Config map[string]string `json:"config,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// Coordinator is the URL of the coordinator that keeps the pool;
	// empty for a pool of this state directory.
	Coordinator string    `json:"coordinator,omitempty"`
	LastError   string    `json:"lastError,omitempty"`
	CreatedAt   time.Time `json:"createdAt,omitzero"`
	UpdatedAt   time.Time `json:"updatedAt,omitzero"`
	Boxes       []PoolBox `json:"boxes,omitempty"`
}

// PoolBox is one box of a pool not yet taken.
type PoolBox struct {
	LeaseID string `json:"leaseId"`
	Slug    string `json:"slug,omitempty"`
	// State is ready, provisioning, expired or failed.
	State     string    `json:"state"`
	Host      string    `json:"host,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}

// EnsurePool defines (or redefines) a ready pool and brings it to its
// size: it releases its expired boxes and those beyond opts.Size, makes
// the missing ones (at most opts.Parallel at once) and returns the pool.
// A box whose making fails leaves nothing behind (see Acquire); the
// others stay in the pool, and the error says what failed.
//
// Without a coordinator for the provider the pool lives in the state
// directory, and its boxes are the provider's ordinary boxes: the local
// provider's in-process boxes end with the Client, so a pool meant to
// outlive it needs an agent (the local provider's agent setting, as the
// crabbox command sets) or another provider. When the provider is
// brokered by the client's coordinator, the pool is the coordinator's:
// it is put (target opts.Size) and reconciled once at once.
func (c *Client) EnsurePool(ctx context.Context, opts PoolOptions) (PoolInfo, error) {
	if err := c.ready(ctx, "ensure a ready pool"); err != nil {
		return PoolInfo{}, err
	}
	name := cmp.Or(opts.Provider, c.provider)
	key, err := c.poolKey(name, opts)
	if err != nil {
		return PoolInfo{}, err
	}
	if c.poolBrokered(name) {
		return c.ensureCoordinatorPool(ctx, key, name, opts)
	}
	if _, ok := c.delegatedRunBackend(name); ok {
		return PoolInfo{}, fmt.Errorf("ready pool %s: provider %q runs commands itself: a pool holds SSH-lease boxes", key, name)
	}
	b, err := c.sshBackendAt(name, nil)
	if err != nil {
		return PoolInfo{}, fmt.Errorf("ready pool %s: %w", key, err)
	}
	canonical := b.Spec().Name
	maxAge := cmp.Or(opts.MaxAge, DefaultPoolMaxAge)
	if limit := maxLifetime(b); limit > 0 && maxAge > limit {
		maxAge = limit
	}
	unlock, err := c.store.LockPool(ctx, key)
	if err != nil {
		return PoolInfo{}, err
	}
	defer unlock()
	now := c.rt.Clock.Now().UTC()
	def := lease.Pool{
		Key: key, Provider: canonical, Size: opts.Size, MaxAgeSeconds: int64(maxAge / time.Second),
		Config: c.poolSettings(canonical), Labels: maps.Clone(opts.Labels), CreatedAt: now, UpdatedAt: now,
	}
	old, err := c.store.GetPool(key)
	switch {
	case err == nil && old.Provider != canonical:
		return PoolInfo{}, fmt.Errorf("ready pool %s holds %s boxes, not %s: drain it first (crabbox pool drain %s) or choose another key", key, old.Provider, canonical, key)
	case err == nil:
		def.CreatedAt = old.CreatedAt
	case !errors.Is(err, provider.ErrNotFound):
		return PoolInfo{}, err
	}
	if err := c.store.PutPool(def); err != nil {
		return PoolInfo{}, err
	}
	return c.fillPool(ctx, def, cmp.Or(opts.Parallel, defaultPoolParallel))
}

// poolKey checks opts and returns the pool's key.
func (c *Client) poolKey(name string, opts PoolOptions) (string, error) {
	key := opts.Key
	if key == "" {
		key = name
		if p, err := c.registry.Lookup(name); err == nil {
			key = p.Spec().Name
		}
		if class := c.configs[key]["class"]; class != "" {
			key += "-" + class
		}
	}
	switch {
	case !api.IsPoolKey(key):
		return "", badPoolKey(key)
	case opts.Size < 0 || opts.Size > api.MaxPoolBoxes:
		return "", fmt.Errorf("ready pool %s: size %d is out of range (0 to %d)", key, opts.Size, api.MaxPoolBoxes)
	case opts.MaxAge != 0 && (opts.MaxAge < MinPoolMaxAge || opts.MaxAge > MaxPoolMaxAge):
		return "", fmt.Errorf("ready pool %s: maximum age %s is out of range (%s to %s)", key, opts.MaxAge, MinPoolMaxAge, MaxPoolMaxAge)
	case opts.Parallel < 0:
		return "", fmt.Errorf("ready pool %s: negative parallelism %d", key, opts.Parallel)
	}
	for k := range opts.Labels {
		if k == "" || k == lease.PoolLabel {
			return "", fmt.Errorf("ready pool %s: label %q is reserved or empty", key, k)
		}
	}
	return key, nil
}

// poolBrokered reports whether pools of the named provider are the
// coordinator's: it brokers the provider's leases (not only registers
// them).
func (c *Client) poolBrokered(name string) bool {
	if c.broker == nil || c.broker.mode == BrokerRegistered {
		return false
	}
	_, ok, _ := c.brokerFor(name)
	return ok
}

// poolSettings are the settings of the named provider a local pool's
// boxes are made with: the locating ones and those set away from their
// defaults, except options that may hold secrets (never stored).
func (c *Client) poolSettings(name string) map[string]string {
	p, err := c.registry.Lookup(name)
	if err != nil {
		return nil
	}
	spec := p.Spec()
	cfg, err := c.settings(name, spec)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, o := range spec.Options {
		v, set := cfg[o.Name]
		if !set || (!o.Locates && (v == o.Default || maySecret(o.Name))) {
			continue
		}
		out[o.Name] = v
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// maySecret reports whether a provider option of that name may hold a
// secret (an external program's environment, arguments or config).
func maySecret(name string) bool {
	switch name {
	case "env", "args", "config", "pass-env":
		return true
	}
	for _, w := range []string{"token", "secret", "password", "credential"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// fillPool brings the local pool def to its size.
func (c *Client) fillPool(ctx context.Context, def lease.Pool, parallel int) (PoolInfo, error) {
	removed, rmErr := c.trimPool(ctx, def)
	boxes, err := c.store.PoolBoxes(def.Key)
	if err != nil {
		return PoolInfo{}, err
	}
	now := c.rt.Clock.Now()
	have := 0
	for _, cl := range boxes {
		if cl.IdlePoolBox(def.Key, now) || (cl.State == lease.StateAcquiring && !(cl.Process != nil && cl.Process.Gone())) {
			have++
		}
	}
	made, makeErr := c.makePoolBoxes(ctx, def, max(def.Size-have, 0), parallel)
	info, err := c.localPoolInfo(def)
	info.Made, info.Removed = made, removed
	return info, errors.Join(rmErr, makeErr, err)
}

// trimPool releases the boxes of the local pool def that expired and the
// oldest idle ones beyond its size; it returns how many it released.
func (c *Client) trimPool(ctx context.Context, def lease.Pool) (int, error) {
	taken, err := c.store.TakePoolBoxes(def.Key, func(free []lease.Claim) []lease.Claim {
		now := c.rt.Clock.Now()
		var out, idle []lease.Claim
		for _, cl := range free {
			if cl.Expired(now) {
				out = append(out, cl)
			} else {
				idle = append(idle, cl)
			}
		}
		if surplus := len(idle) - def.Size; surplus > 0 {
			out = append(out, idle[:surplus]...)
		}
		return out
	})
	if err != nil {
		return 0, err
	}
	return len(taken), c.releasePoolBoxes(ctx, taken)
}

// releasePoolBoxes releases boxes taken for removal (TakePoolBoxes).
func (c *Client) releasePoolBoxes(ctx context.Context, boxes []lease.Claim) error {
	var errs []error
	for _, cl := range boxes {
		errs = append(errs, c.discardPoolBox(ctx, cl))
	}
	return errors.Join(errs...)
}

// discardPoolBox releases a pool box this process took, which must not
// be handed out (or is surplus). Should the release fail, the claim is
// left not kept and owned by this process: cleanup releases it once the
// process is gone.
func (c *Client) discardPoolBox(ctx context.Context, cl lease.Claim) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	b, err := c.leaseBackend(cl)
	if err == nil {
		err = c.store.Release(ctx, b, cl)
	}
	if err != nil {
		return fmt.Errorf("release pool box %s (left for cleanup): %w", cl.ID, err)
	}
	c.log.Info("pool box released", "lease", cl.ID, "pool", cl.Pool)
	return nil
}

// makePoolBoxes makes n boxes of the local pool def, at most parallel at
// once, and returns how many it made.
func (c *Client) makePoolBoxes(ctx context.Context, def lease.Pool, n, parallel int) (int, error) {
	if n == 0 {
		return 0, nil
	}
	b, route, err := c.poolBackend(def)
	if err != nil {
		return 0, fmt.Errorf("ready pool %s: %w", def.Key, err)
	}
	labels := maps.Clone(def.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[lease.PoolLabel] = def.Key
	terms := route
	terms.TTL, terms.IdleTimeout, terms.Keep, terms.Labels, terms.Pool = def.MaxAge(), def.MaxAge(), true, labels, def.Key
	var (
		wg   gosync.WaitGroup
		mu   gosync.Mutex
		made int
		errs []error
		sem  = make(chan struct{}, parallel)
	)
	for range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				return
			}
			g, err := c.store.Acquire(ctx, b, terms)
			if err == nil {
				if hb, ok := b.(provider.ConnectionHandoff); ok {
					if conn := hb.TakeConnection(g.Claim.ID); conn != nil {
						conn.Close() // whoever takes the box connects anew
					}
				}
				c.log.Info("pool box made", "pool", def.Key, "lease", g.Claim.ID)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else {
				made++
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil && len(errs) == 0 {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return made, fmt.Errorf("ready pool %s: %d of %d boxes not made: %w", def.Key, n-made, n, errors.Join(errs...))
	}
	return made, nil
}

// localPoolInfo describes the local pool def and its boxes.
func (c *Client) localPoolInfo(def lease.Pool) (PoolInfo, error) {
	info := PoolInfo{
		Key: def.Key, Provider: def.Provider, Size: def.Size, MaxAgeSeconds: def.MaxAgeSeconds,
		Config: def.Config, Labels: def.Labels, CreatedAt: def.CreatedAt, UpdatedAt: def.UpdatedAt,
	}
	boxes, err := c.store.PoolBoxes(def.Key)
	if err != nil {
		return info, err
	}
	now := c.rt.Clock.Now()
	for _, cl := range boxes {
		box := PoolBox{LeaseID: cl.ID, Slug: cl.Slug, CreatedAt: cl.CreatedAt, ExpiresAt: cl.ExpiresAt}
		if cl.Target != nil {
			box.Host = cl.Target.Host
		}
		switch {
		case cl.State == lease.StateAcquiring:
			box.State = "provisioning"
			info.Provisioning++
		case cl.State == lease.StateFailed:
			box.State = "failed"
		case cl.Expired(now):
			box.State = "expired"
		default:
			box.State = "ready"
			info.Ready++
		}
		info.Boxes = append(info.Boxes, box)
	}
	return info, nil
}

// Pools lists the ready pools: those of the state directory, by key,
// then the coordinator's, when the client has one (an admin's view; a
// coordinator that could not be asked makes the error wrap
// ErrCoordinatorPools, with the local pools still returned).
func (c *Client) Pools(ctx context.Context) ([]PoolInfo, error) {
	if err := c.ready(ctx, "list ready pools"); err != nil {
		return nil, err
	}
	defs, defErr := c.store.Pools()
	out := make([]PoolInfo, 0, len(defs))
	for _, def := range defs {
		info, err := c.localPoolInfo(def)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	if c.broker == nil || c.broker.mode == BrokerRegistered {
		return out, defErr
	}
	pools, err := c.broker.coord.ReadyPools(ctx)
	if err != nil {
		return out, errors.Join(defErr, fmt.Errorf("%w: %w", ErrCoordinatorPools, err))
	}
	for _, p := range pools {
		out = append(out, c.infoOfReadyPool(p))
	}
	return out, defErr
}

// DrainPool removes the ready pool key: a pool of the state directory
// loses its definition and its idle boxes are released (boxes already
// taken are ordinary leases now, and stay); otherwise the client's
// coordinator deletes its pool of that key. It returns the pool as it
// was, with Removed counting the boxes released.
func (c *Client) DrainPool(ctx context.Context, key string) (PoolInfo, error) {
	def, unlock, remote, err := c.poolOp(ctx, "drain", key, c.coordDrain)
	if remote != nil || err != nil {
		return deref(remote), err
	}
	defer unlock()
	info, err := c.localPoolInfo(def)
	if err != nil {
		return PoolInfo{}, err
	}
	// The definition goes first: nothing refills the pool from now on.
	if err := c.store.RemovePool(key); err != nil {
		return PoolInfo{}, err
	}
	taken, err := c.store.TakePoolBoxes(key, func(free []lease.Claim) []lease.Claim { return free })
	if err != nil {
		return info, err
	}
	info.Removed = len(taken)
	return info, c.releasePoolBoxes(ctx, taken)
}

// acquirePooled leases a box of the ready pool opts.Pool: of the state
// directory's pool of that key, the oldest idle box that proves fresh and
// alive, else one made the ordinary way with the pool's provider and
// settings; without such a pool, when the provider is brokered, the
// coordinator's pool of that key.
func (c *Client) acquirePooled(ctx context.Context, opts AcquireOptions) (*Lease, error) {
	key := opts.Pool
	if !api.IsPoolKey(key) {
		return nil, fmt.Errorf("acquire from ready pool: %w", badPoolKey(key))
	}
	def, err := c.store.GetPool(key)
	if errors.Is(err, provider.ErrNotFound) {
		name := cmp.Or(opts.Provider, c.provider)
		if c.poolBrokered(name) {
			return c.acquireBrokeredPool(ctx, name, opts)
		}
		return nil, fmt.Errorf("acquire from ready pool %s: no such pool in %s: make it first (crabbox pool ensure --pool %s, or Client.EnsurePool): %w",
			key, c.store.Dir(), key, provider.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if opts.Provider != "" {
		if p, err := c.registry.Lookup(opts.Provider); err != nil || p.Spec().Name != def.Provider {
			return nil, fmt.Errorf("acquire from ready pool %s: it holds %s boxes, not %s", key, def.Provider, opts.Provider)
		}
	}
	b, route, err := c.poolBackend(def)
	if err != nil {
		return nil, fmt.Errorf("acquire from ready pool %s: %w", key, err)
	}
	opts = c.capLifetime(b, opts)
	for {
		cl, err := c.store.TakePoolBox(key, lease.TakeTerms{
			Slug: opts.Slug, TTL: opts.TTL, IdleTimeout: opts.IdleTimeout, Keep: opts.Keep, Labels: opts.Labels,
		})
		if errors.Is(err, provider.ErrNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		l, err := c.handOver(ctx, cl)
		if err == nil {
			c.log.Info("lease taken from ready pool", "lease", cl.ID, "pool", key)
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, errors.Join(err, c.discardPoolBox(ctx, cl))
		}
		c.log.Warn("pool box not handed out: releasing it", "lease", cl.ID, "pool", key, "err", err)
		if err := c.discardPoolBox(ctx, cl); err != nil {
			c.log.Warn("pool box not released", "lease", cl.ID, "err", err)
		}
	}
	c.log.Info("ready pool has no box: acquiring one the ordinary way", "pool", key)
	return c.acquireSSH(ctx, b, route, opts)
}

// poolBackend is the backend the boxes of the local pool def are made
// through, and the route their claims record: direct with the pool's
// settings, and registered with the client's coordinator in
// BrokerRegistered mode.
func (c *Client) poolBackend(def lease.Pool) (provider.SSHLeaseBackend, lease.Terms, error) {
	route := lease.Terms{Route: lease.RouteDirect, Config: maps.Clone(def.Config)}
	b, err := c.sshBackendAt(def.Provider, def.Config)
	if err != nil || c.broker == nil || c.broker.mode != BrokerRegistered {
		return b, route, err
	}
	route.Route, route.Coordinator = lease.RouteRegistered, c.broker.coord.URL()
	return coordbroker.NewRegistered(b, c.broker.coord, c.store, c.log, coordbroker.WithHeartbeater(c.broker.heartbeats)), route, nil
}

// handOver makes the pool box cl, just taken, its taker's lease: its
// expiry moves at its provider to the taker's terms, and it must answer
// and be fresh (no lease directory under its work root: never used). The
// move and the check run side by side: both talk to the box.
func (c *Client) handOver(ctx context.Context, cl lease.Claim) (*Lease, error) {
	b, err := c.leaseBackend(cl)
	if err != nil {
		return nil, err
	}
	g, err := c.store.Recorded(cl)
	if err != nil {
		return nil, err
	}
	type touched struct {
		target provider.LeaseTarget
		err    error
	}
	moved := make(chan touched, 1)
	checkCtx, stopCheck := context.WithCancel(ctx)
	defer stopCheck()
	go func() {
		t, err := b.Touch(ctx, provider.TouchRequest{Lease: g.Target, Now: cl.LastTouchedAt, ExpiresAt: cl.ExpiresAt})
		if err != nil {
			stopCheck() // the box is not handed out: no need to wait for it to answer
		}
		moved <- touched{t, err}
	}()
	h := c.hold(b, g, false)
	checkErr := h.checkFresh(checkCtx)
	m := <-moved
	if m.err != nil {
		checkErr = errors.Join(fmt.Errorf("move the expiry of pool box %s: %w", cl.ID, m.err), checkErr)
	}
	if checkErr == nil {
		_, checkErr = c.store.Update(cl.ID, func(x *lease.Claim) error { x.Target = &m.target; return nil })
	}
	if checkErr != nil {
		h.Close()
		return nil, checkErr
	}
	return h, nil
}

// checkFresh proves that the box answers and was never used: its lease's
// directory under the work root, where every workdir of the lease goes,
// holds nothing.
func (l *Lease) checkFresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, poolCheckTimeout)
	defer cancel()
	conn, err := l.SSH(ctx)
	if err != nil {
		return fmt.Errorf("check pool box: %w", err)
	}
	if err := handover.Fresh(ctx, conn, path.Join(l.Target().WorkRoot, l.ID())); err != nil {
		return fmt.Errorf("check pool box %s: %w", l.ID(), err)
	}
	return nil
}

// acquireBrokeredPool leases a box through the coordinator, asking for
// its ready pool opts.Pool (api.LeaseRequest.Pool); the claim records
// the pool when the coordinator's lease says it came from it.
func (c *Client) acquireBrokeredPool(ctx context.Context, name string, opts AcquireOptions) (*Lease, error) {
	b, err := c.brokeredPool(name, opts.Pool)
	if err != nil {
		return nil, err
	}
	opts = c.capLifetime(b, opts)
	lo := lease.Terms{
		Route: lease.RouteBrokered, Coordinator: c.broker.coord.URL(),
		Slug: opts.Slug, TTL: opts.TTL, IdleTimeout: opts.IdleTimeout, Keep: opts.Keep, Labels: opts.Labels,
	}
	g, err := c.store.Acquire(ctx, b, lo)
	if err != nil {
		return nil, err
	}
	// A box the coordinator took from its pool comes under its own lease
	// ID, marked with the pool (lease.Store.Acquire adopts it).
	c.log.Info("lease acquired", "lease", g.Claim.ID, "slug", g.Claim.Slug, "provider", g.Claim.Provider, "pool", g.Claim.Pool)
	return c.hold(b, g, false), nil
}

// brokeredPool is the brokered backend of the named provider whose
// creates ask the coordinator for its ready pool key.
func (c *Client) brokeredPool(name, key string) (provider.SSHLeaseBackend, error) {
	canonical, linked := name, false
	if p, err := c.registry.Lookup(name); err == nil {
		canonical, linked = p.Spec().Name, true
	}
	cacheKey := "brokered\x00" + canonical + "\x00pool=" + key
	c.broker.mu.Lock()
	defer c.broker.mu.Unlock()
	if b, ok := c.broker.backends[cacheKey]; ok {
		return b, nil
	}
	settings, err := coordbroker.Settings(canonical, c.configs[canonical], linked)
	if err != nil {
		return nil, err
	}
	settings.Pool = key
	b := coordbroker.NewBrokered(c.broker.coord, canonical, settings, c.store, c.rt.Clock,
		coordbroker.WithRegistry(c.registry), coordbroker.WithHeartbeater(c.broker.heartbeats))
	c.broker.backends[cacheKey] = b
	return b, nil
}

// ensureCoordinatorPool puts the coordinator's pool key (target
// opts.Size) and reconciles it once.
func (c *Client) ensureCoordinatorPool(ctx context.Context, key, name string, opts PoolOptions) (PoolInfo, error) {
	if len(opts.Labels) > 0 {
		return PoolInfo{}, fmt.Errorf("ready pool %s: the coordinator keeps it, and a coordinator's pool takes no labels", key)
	}
	canonical, linked := name, false
	if p, err := c.registry.Lookup(name); err == nil {
		canonical, linked = p.Spec().Name, true
	}
	settings, err := coordbroker.Settings(canonical, c.configs[canonical], linked)
	if err != nil {
		return PoolInfo{}, err
	}
	spec := api.ReadyPoolSpec{
		Provider: canonical, Class: settings.Class, ServerType: settings.ServerType, Image: settings.Image,
		Location: settings.Location, Target: opts.Size, MaxAgeSeconds: int64(opts.MaxAge / time.Second),
	}
	if _, _, err := c.broker.coord.PutReadyPool(ctx, key, spec); err != nil {
		return PoolInfo{}, fmt.Errorf("ensure ready pool %s at the coordinator: %w", key, err)
	}
	p, err := c.broker.coord.ReconcileReadyPool(ctx, key)
	if err != nil {
		return PoolInfo{}, fmt.Errorf("reconcile ready pool %s at the coordinator: %w", key, err)
	}
	return c.infoOfReadyPool(p), nil
}

// infoOfReadyPool describes a coordinator's pool.
func (c *Client) infoOfReadyPool(p api.ReadyPool) PoolInfo {
	info := PoolInfo{
		Key: p.Key, Provider: p.Provider, Size: p.CurrentTarget, MaxAgeSeconds: p.MaxAgeSeconds,
		Ready: p.Ready, Provisioning: p.Provisioning, Coordinator: c.broker.coord.URL(),
		LastError: p.LastError, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	}
	if info.MaxAgeSeconds == 0 {
		info.MaxAgeSeconds = api.DefaultPoolMaxAgeSeconds
	}
	for _, b := range p.Boxes {
		info.Boxes = append(info.Boxes, PoolBox{LeaseID: b.LeaseID, State: b.State, Host: b.Host, CreatedAt: b.CreatedAt})
	}
	slices.SortFunc(info.Boxes, func(a, b PoolBox) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return info
}

// RefillPool brings the ready pool key back to its size with the
// definition it was made with (provider, settings, size, maximum age,
// labels), as EnsurePool did: after boxes were taken from it. A pool the
// state directory does not hold is the coordinator's, when the client has
// one, which reconciles it once.
func (c *Client) RefillPool(ctx context.Context, key string) (PoolInfo, error) {
	def, unlock, remote, err := c.poolOp(ctx, "refill", key, c.coordReconcile)
	if remote != nil || err != nil {
		return deref(remote), err
	}
	defer unlock()
	return c.fillPool(ctx, def, defaultPoolParallel)
}

// badPoolKey is the error for a malformed pool key.
func badPoolKey(key string) error {
	return fmt.Errorf("ready pool key %q is malformed: want at most %d characters of a-z, 0-9 and -, not starting with -", key, api.MaxPoolKeyLen)
}

// poolOp starts the operation doing ("drain", "refill") on the ready pool
// key. A pool of the state directory comes back with its definition as it
// is under the pool's lock, which unlock releases. Without one, when the
// client's coordinator brokers providers, the pool is the coordinator's:
// remote runs there and its answer comes back as done (unlock is nil).
func (c *Client) poolOp(ctx context.Context, doing, key string, remote func(context.Context, string) (api.ReadyPool, error)) (def lease.Pool, unlock func(), done *PoolInfo, err error) {
	if err := c.ready(ctx, doing+" ready pool "+key); err != nil {
		return lease.Pool{}, nil, nil, err
	}
	if !api.IsPoolKey(key) {
		return lease.Pool{}, nil, nil, badPoolKey(key)
	}
	def, err = c.store.GetPool(key)
	if errors.Is(err, provider.ErrNotFound) && c.broker != nil && c.broker.mode != BrokerRegistered {
		p, err := remote(ctx, key)
		if err != nil {
			return lease.Pool{}, nil, nil, fmt.Errorf("%s ready pool %s at the coordinator: %w", doing, key, err)
		}
		info := c.infoOfReadyPool(p)
		return lease.Pool{}, nil, &info, nil
	}
	if err != nil {
		return lease.Pool{}, nil, nil, err
	}
	if unlock, err = c.store.LockPool(ctx, key); err != nil {
		return lease.Pool{}, nil, nil, err
	}
	if def, err = c.store.GetPool(key); err != nil { // drained meanwhile
		unlock()
		return lease.Pool{}, nil, nil, err
	}
	return def, unlock, nil, nil
}

func (c *Client) coordDrain(ctx context.Context, key string) (api.ReadyPool, error) {
	return c.broker.coord.DeleteReadyPool(ctx, key)
}

func (c *Client) coordReconcile(ctx context.Context, key string) (api.ReadyPool, error) {
	return c.broker.coord.ReconcileReadyPool(ctx, key)
}

func deref(p *PoolInfo) PoolInfo {
	if p == nil {
		return PoolInfo{}
	}
	return *p
}
