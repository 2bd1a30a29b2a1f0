package crabbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"sync/atomic"
	"time"
	"unicode"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/internal/handover"
	"github.com/crabbox-dev/crabbox/internal/remote"
	"github.com/crabbox-dev/crabbox/internal/sshmux"
	"github.com/crabbox-dev/crabbox/internal/units"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/run"
	"github.com/crabbox-dev/crabbox/sync"
	"github.com/crabbox-dev/crabbox/sync/watch"
)

// AcquireOptions shape a new lease.
type AcquireOptions struct {
	// Provider overrides the client's provider for this lease.
	Provider    string
	Slug        string
	TTL         time.Duration // default 90m
	IdleTimeout time.Duration // default 30m
	// Keep makes the lease outlive the process that acquired it (a warm
	// lease, reused from other processes until stopped or expired).
	// Without it the lease belongs to that process: should the process
	// die without releasing it, cleanup releases it at once.
	Keep   bool
	Labels map[string]string
	// Desktop asks for a box with a desktop (an X display and a VNC
	// server; see provider.FeatureDesktop, Lease.Screenshot and
	// Lease.ServeVNC): the lease gets the label provider.DesktopLabel.
	// A provider without desktops refuses it (ErrNoDesktop) before
	// anything is made; so does a ready pool.
	Desktop bool
	// Pool, if set, takes the box from the ready pool of that key (see
	// Client.EnsurePool): at once when it has a box that answers and was
	// never used, else one is made the ordinary way with the pool's
	// provider and settings (Lease.Claim().Pool tells which). Provider,
	// if set, must be the pool's. Without a pool of that key in the state
	// directory, a provider brokered by the client's coordinator asks the
	// coordinator for its pool of that key.
	Pool string
	// Warn, if set, receives one-line notices about the lease's terms:
	// a TTL asked for beyond the longest lifetime the provider grants
	// (a provider.LifetimeCapper) is capped to it, and Warn says so.
	Warn func(string)
}

// Lease is a box held by this client: a claim in the lease store and, once
// used, one SSH connection that sync and commands share.
//
// A held lease keeps itself alive: it is touched every heartbeat interval
// (a third of its idle timeout, at most a minute) and around every use
// (sync, each command's start and end), until Close or Release. Close or
// Release every Lease you acquire or resolve.
//
// Close or Release ends the handle: from then on every method that uses
// the box (Sync, Run, Exec, SSH, Shell, Touch, Release, ...) returns an
// error for which errors.Is(err, ErrClosed) holds, and never connects
// again; Close returns nil. The accessors (ID, Claim, ...) still describe
// the lease. A nil *Lease, or one not made by Client.Acquire or
// Client.Resolve, and a nil context give an error, never a panic.
type Lease struct {
	client  *Client
	backend provider.SSHLeaseBackend
	// delegated is set instead of backend for a lease of a delegated
	// backend, which has no SSH (delegated.go).
	delegated provider.DelegatedRunBackend
	keep      *lease.Keepalive // holds the lease as last touched

	// shared marks a lease resolved for reuse, whose connection may be
	// shared with other processes (WithSharedConnections).
	shared bool
	// relayed marks a lease of the coordinator shared with this user
	// (not its owner): its box is reached through the coordinator
	// (coordinator.go), and the handle never releases it.
	relayed bool

	// connMu guards conn and is held while dialing.
	connMu gosync.Mutex
	conn   *ssh.Client
	// ended is closed when the connection endedOf ends (connEnded); both
	// guarded by connMu.
	ended   chan struct{}
	endedOf *ssh.Client

	// closed is set by Close or Release: the handle is done (see use).
	closed atomic.Bool
	// synced is the local directory last synced through the handle
	// (SyncedDir).
	synced atomic.Pointer[string]
	// execMu guards execs (the commands running through Exec), drained,
	// closed when execs drops to zero while Release waits, and unclean,
	// set once a command's run ended in an error (cancelled, connection
	// lost), which may have left the command running.
	execMu  gosync.Mutex
	execs   int
	drained chan struct{}
	unclean bool
}

// use says why l cannot do what (a phrase such as "sync"): a nil handle,
// or one not made by Client.Acquire or Client.Resolve, a nil ctx, or a
// handle ended by Close or Release (ErrClosed). Every method of Lease
// that takes a context checks it first.
func (l *Lease) use(ctx context.Context, what string) error {
	switch {
	case l == nil || l.keep == nil:
		return fmt.Errorf("%s: no lease: the *crabbox.Lease is nil or was not made by Client.Acquire or Client.Resolve", what)
	case ctx == nil:
		return fmt.Errorf("%s on lease %s: nil context", what, l.ID())
	case l.closed.Load():
		return l.errClosed(what)
	}
	return nil
}

// errClosed is the error of what asked of the ended handle l.
func (l *Lease) errClosed(what string) error {
	return fmt.Errorf("%s on lease %s: the handle was closed or released: %w", what, l.ID(), ErrClosed)
}

// SyncedDir is the local directory (absolute) last synced to the box
// through this handle, by Sync or by a Run that synced, or "" when it
// synced nothing: the directory whose copy on the box a Run without
// RunRequest.Root runs in.
func (l *Lease) SyncedDir() string {
	if l == nil {
		return ""
	}
	if dir := l.synced.Load(); dir != nil {
		return *dir
	}
	return ""
}

// noteSynced records that the checkout co was synced through the handle,
// from its directory co.Rel.
func (l *Lease) noteSynced(co sync.Checkout) {
	dir := filepath.Join(co.Root, filepath.FromSlash(co.Rel))
	l.synced.Store(&dir)
}

// ID is the lease ID (cbx_...).
func (l *Lease) ID() string { return l.snapshot().Claim.ID }

// Slug is the lease's friendly name.
func (l *Lease) Slug() string { return l.snapshot().Claim.Slug }

// Provider is the name of the provider that supplied the box.
func (l *Lease) Provider() string { return l.snapshot().Claim.Provider }

// ExpiresAt is when the lease expires unless touched.
func (l *Lease) ExpiresAt() time.Time { return l.snapshot().Claim.ExpiresAt }

// Target is how the box is reached.
func (l *Lease) Target() provider.LeaseTarget { return l.snapshot().Target }

// Claim is the lease's record in the local store.
func (l *Lease) Claim() lease.Claim { return l.snapshot().Claim }

// snapshot is the lease as last touched; nothing for a handle not made by
// Acquire or Resolve, so that the accessors never panic.
func (l *Lease) snapshot() lease.Grant {
	if l == nil || l.keep == nil {
		return lease.Grant{}
	}
	return l.keep.Grant()
}

// hold wraps a lease just acquired (touchNow false) or resolved for reuse
// (touchNow true: resolving is a use) in a handle that keeps it alive.
func (c *Client) hold(b provider.SSHLeaseBackend, l lease.Grant, touchNow bool) *Lease {
	return c.track(&Lease{client: c, backend: b, keep: c.store.Keep(b, l, c.log, touchNow)})
}

// track adds h to the handles Client.Close closes.
func (c *Client) track(h *Lease) *Lease {
	c.mu.Lock()
	c.held[h] = struct{}{}
	c.mu.Unlock()
	return h
}

// Workdir is the directory on the box that the local checkout at root (a
// path on this machine, such as "." or the top of a git checkout) syncs
// to: <workRoot>/<leaseID>/<name>-<hash>, where name is root's base name
// made a safe path element and hash is 8 hex digits of the SHA-256 of
// root's absolute path with symlinks resolved. Two checkouts of the same
// name never share a workdir; the same checkout always gets the same one.
//
// A delegated lease's sandbox is its own: its workdir is
// <workRoot>/<name>-<hash>, with the sandbox's work root.
func (l *Lease) Workdir(root string) string {
	if l != nil && l.delegated != nil {
		return path.Join(l.sandboxRoot(), checkoutKey(root))
	}
	s := l.snapshot()
	return path.Join(s.Target.WorkRoot, s.Claim.ID, checkoutKey(root))
}

// checkoutKey is the name of the workdir of the checkout at root (see
// Lease.Workdir).
func checkoutKey(root string) string {
	abs, err := filepath.Abs(root)
	if err != nil {
		abs = filepath.Clean(root)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	sum := sha256.Sum256([]byte(abs))
	return safeName(filepath.Base(abs)) + "-" + hex.EncodeToString(sum[:4])
}

// safeName keeps the letters, digits, '.', '_' and '-' of a base name
// (others become '_'), drops leading dots and keeps at most 48 runes, so
// that it is one ordinary path element on any box; "checkout" when
// nothing is left.
func safeName(base string) string {
	const max = 48
	var b strings.Builder
	n := 0
	for _, r := range base {
		if n == max {
			break
		}
		switch {
		case r == '.' && b.Len() == 0:
			continue
		case r == '.' || r == '_' || r == '-', unicode.IsLetter(r), unicode.IsDigit(r):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		n++
	}
	if b.Len() == 0 {
		return "checkout"
	}
	return b.String()
}

// Acquire leases a new box.
func (c *Client) Acquire(ctx context.Context, opts AcquireOptions) (*Lease, error) {
	if err := c.ready(ctx, "acquire a lease"); err != nil {
		return nil, err
	}
	if db, ok := c.delegatedRunBackend(opts.Provider); ok && (opts.Pool == "" || opts.Provider != "") {
		if opts.Pool != "" {
			return nil, fmt.Errorf("acquire from ready pool %s: provider %q runs commands itself: pools hold SSH-lease boxes", opts.Pool, db.Spec().Name)
		}
		if _, err := desktopLabels(db, opts); err != nil {
			return nil, err
		}
		return c.warmup(ctx, db, c.capLifetime(db, opts)) // delegated.go
	}
	if opts.Pool != "" {
		if opts.Desktop || provider.WantsDesktop(opts.Labels) {
			return nil, fmt.Errorf("acquire from ready pool %s: pools' boxes have no desktop: %w", opts.Pool, ErrNoDesktop)
		}
		return c.acquirePooled(ctx, opts) // pool.go
	}
	b, lo, err := c.newLease(opts.Provider)
	if err != nil {
		return nil, err
	}
	if opts.Labels, err = desktopLabels(b, opts); err != nil {
		return nil, err
	}
	return c.acquireSSH(ctx, b, lo, opts)
}

// acquireSSH leases a new box of the SSH-lease backend b on the terms lo
// (the route, and a checkpoint to start from) and opts.
func (c *Client) acquireSSH(ctx context.Context, b provider.SSHLeaseBackend, lo lease.Terms, opts AcquireOptions) (*Lease, error) {
	opts = c.capLifetime(b, opts)
	lo.Slug, lo.TTL, lo.IdleTimeout, lo.Keep, lo.Labels = opts.Slug, opts.TTL, opts.IdleTimeout, opts.Keep, opts.Labels
	l, err := c.store.Acquire(ctx, b, lo)
	if err != nil {
		return nil, err
	}
	c.log.Info("lease acquired", "lease", l.Claim.ID, "slug", l.Claim.Slug, "provider", l.Claim.Provider)
	h := c.hold(b, l, false)
	if hb, ok := b.(provider.ConnectionHandoff); ok {
		// The connection the provider prepared the box with: no need to
		// connect again.
		h.conn = hb.TakeConnection(l.Claim.ID)
	}
	if len(l.Target.AccessKeys) > 0 {
		// Let the coordinator in now, not at the first command: a box
		// warmed up to be shared (or opened in the portal's terminal) may
		// never see one from its owner. The connection stays for the
		// commands that follow.
		if h.conn != nil {
			h.installAccessKeys(ctx, l, h.conn)
		} else if _, err := h.SSH(ctx); err != nil {
			c.log.Warn("could not connect to install the coordinator's access key; the coordinator cannot reach the box until a command connects", "lease", l.Claim.ID, "err", err)
		}
	}
	return h, nil
}

// maxLifetime is the longest lifetime b's provider grants a box (a
// provider.LifetimeCapper), or zero for none.
func maxLifetime(b provider.Backend) time.Duration {
	if lc, ok := b.(provider.LifetimeCapper); ok {
		return max(lc.MaxLifetime(), 0)
	}
	return 0
}

// capLifetime caps opts.TTL to the longest lifetime b's provider grants,
// so that a lease never claims to outlive its box. A TTL the caller asked
// for is reported through opts.Warn (and logged); the default TTL is
// capped with a log line only, as nobody asked for it.
func (c *Client) capLifetime(b provider.Backend, opts AcquireOptions) AcquireOptions {
	limit := maxLifetime(b)
	ttl := opts.TTL
	if ttl == 0 {
		ttl = lease.DefaultTTL
	}
	if limit == 0 || ttl <= limit {
		return opts
	}
	msg := fmt.Sprintf("%s grants at most %s; the lease's TTL is %s, not %s",
		b.Spec().Name, units.Duration(limit), units.Duration(limit), units.Duration(ttl))
	c.log.Info("lease TTL capped to the provider's maximum lifetime", "provider", b.Spec().Name, "asked", ttl, "max", limit)
	if opts.TTL != 0 && opts.Warn != nil {
		opts.Warn(msg)
	}
	opts.TTL = limit
	return opts
}

// Resolve finds a live lease by ID or slug among this client's claims.
// Resolving a lease is a use of it: its expiry moves (in the background,
// adding no wait), and the handle keeps it alive until Close or Release.
func (c *Client) Resolve(ctx context.Context, ref string) (*Lease, error) {
	if err := c.ready(ctx, "resolve lease "+ref); err != nil {
		return nil, err
	}
	return c.resolve(ctx, ref, true)
}

func (c *Client) resolve(ctx context.Context, ref string, touchNow bool) (*Lease, error) {
	claim, err := c.store.Find(ref)
	if errors.Is(err, provider.ErrNotFound) && c.broker != nil {
		return c.resolveShared(ctx, ref, err) // coordinator.go
	}
	if err != nil {
		return nil, err
	}
	if db, ok := c.delegatedOf(claim); ok {
		cl, err := c.store.ResolveDelegated(ctx, db, claim.ID)
		if err != nil {
			return nil, err
		}
		return c.holdDelegated(db, cl, touchNow), nil // delegated.go
	}
	b, err := c.leaseBackend(claim)
	if err != nil {
		return nil, err
	}
	l, err := c.store.Resolve(ctx, b, claim.ID)
	if err != nil {
		return nil, err
	}
	h := c.hold(b, l, touchNow)
	h.shared = true
	return h, nil
}

// LeaseInfo is a lease as list and status report it.
type LeaseInfo struct {
	ID        string            `json:"id"`
	Slug      string            `json:"slug"`
	Provider  string            `json:"provider"`
	State     LeaseState        `json:"state"`
	Host      string            `json:"host,omitempty"`
	Port      int               `json:"port,omitempty"`
	WorkRoot  string            `json:"workRoot,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
	ExpiresAt time.Time         `json:"expiresAt"`
	Keep      bool              `json:"keep"`
	Labels    map[string]string `json:"labels,omitempty"`
	// Route is how the lease is driven: direct, brokered or registered
	// (with Coordinator, the coordinator's URL).
	Route       string `json:"route,omitempty"`
	Coordinator string `json:"coordinator,omitempty"`
	// Elsewhere marks a coordinator lease this client has no claim for
	// (made on another machine, in CI, or with another state directory):
	// it is listed so that its owner finds it, but it cannot be used from
	// here (no key); stop it from where it was made, or with crabbox admin
	// release.
	Elsewhere bool `json:"elsewhere,omitempty"`
	// Pool is set for a lease of a ready pool: taken from it, or an
	// idle box waiting in it.
	Pool *LeasePool `json:"pool,omitempty"`
	// Error says why the state is unknown.
	Error string `json:"error,omitempty"`
}

// LeaseState is a lease's state as List and Status report it: its claim's
// (acquiring, ready, failed), or what asking its provider found.
type LeaseState string

// Lease states.
const (
	StateAcquiring            = LeaseState(lease.StateAcquiring) // the provider may be creating the box
	StateReady                = LeaseState(lease.StateReady)     // the box is there
	StateFailed               = LeaseState(lease.StateFailed)    // an acquire or release did not finish; cleanup finishes it
	StateGone      LeaseState = "gone"                           // the claim remains but the provider no longer has the box
	StateExpired   LeaseState = "expired"                        // past its expiry
	StateUnknown   LeaseState = "unknown"                        // the provider (or coordinator) could not be asked; Error says why
)

// List returns this client's leases, oldest first, with their state checked
// against where each lives (its provider, or the coordinator that brokers
// it): a box that is no longer there is "gone", and one that could not be
// asked is "unknown", with the reason in Error.
func (c *Client) List(ctx context.Context) ([]LeaseInfo, error) {
	if err := c.ready(ctx, "list leases"); err != nil {
		return nil, err
	}
	claims, err := c.store.List()
	if err != nil {
		return nil, err
	}
	live := map[string]map[string]bool{} // backend -> lease IDs it lists
	out := make([]LeaseInfo, 0, len(claims))
	for _, cl := range claims {
		info := infoOf(cl, c.rt.Clock.Now())
		if info.State == StateReady {
			ids, err := c.liveIDs(ctx, cl, live)
			switch {
			case ctx.Err() != nil:
				return nil, ctx.Err()
			case err != nil:
				info.State, info.Error = StateUnknown, err.Error()
			case !ids[cl.ID]:
				info.State = StateGone
			}
		}
		out = append(out, info)
	}
	if c.broker == nil {
		return out, nil
	}
	remote, err := c.coordinatorLeases(ctx, claims)
	if err != nil {
		return out, fmt.Errorf("%w: %w", ErrCoordinatorLeases, err)
	}
	return append(out, remote...), nil
}

// ErrCoordinatorLeases is wrapped by List's error when the coordinator
// could not be asked for its leases: the local ones are still returned.
var ErrCoordinatorLeases = errors.New("coordinator leases not listed")

// coordinatorLeases are the user's live coordinator leases that have no
// claim here, oldest first.
func (c *Client) coordinatorLeases(ctx context.Context, claims []lease.Claim) ([]LeaseInfo, error) {
	claimed := make(map[string]bool, len(claims))
	for _, cl := range claims {
		claimed[cl.ID] = true
	}
	var out []LeaseInfo
	for _, state := range []api.LeaseState{api.LeaseProvisioning, api.LeaseActive} {
		leases, err := c.broker.coord.ListLeases(ctx, coordclient.ListLeasesOptions{State: state})
		if err != nil {
			return nil, err
		}
		for _, l := range leases {
			if !claimed[l.ID] {
				out = append(out, infoOfCoordinator(l, c.broker.coord.URL()))
			}
		}
	}
	slices.SortFunc(out, func(a, b LeaseInfo) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// infoOfCoordinator describes a coordinator's lease record.
func infoOfCoordinator(l api.Lease, url string) LeaseInfo {
	info := LeaseInfo{
		ID: l.ID, Slug: l.Slug, Provider: l.Provider, State: StateReady, Host: l.Host, WorkRoot: l.WorkRoot,
		CreatedAt: l.CreatedAt, ExpiresAt: l.ExpiresAt, Keep: l.Keep, Labels: l.Labels,
		Route: string(lease.RouteBrokered), Coordinator: url, Elsewhere: true,
	}
	if l.Pool != "" {
		info.Pool = &LeasePool{Key: l.Pool, Hit: true}
	}
	if port, err := strconv.Atoi(l.SSHPort); err == nil {
		info.Port = port
	}
	if l.Lifecycle == api.LifecycleRegistered {
		info.Route = string(lease.RouteRegistered)
	}
	switch l.State {
	case api.LeaseProvisioning:
		info.State = StateAcquiring
	case api.LeaseActive:
	case api.LeaseExpired:
		info.State = StateExpired
	default:
		info.State = StateGone
	}
	return info
}

// liveIDs are the IDs of the live leases of the backend that drives cl's
// lease, listed once per backend (cache).
func (c *Client) liveIDs(ctx context.Context, cl lease.Claim, cache map[string]map[string]bool) (map[string]bool, error) {
	key := leaseKey(cl)
	if ids, ok := cache[key]; ok {
		return ids, nil
	}
	if db, ok := c.delegatedOf(cl); ok {
		return c.delegatedLiveIDs(ctx, key, db, cache) // delegated.go
	}
	b, err := c.leaseBackend(cl)
	if err != nil {
		return nil, err
	}
	targets, err := b.List(ctx, provider.ListRequest{})
	if err != nil {
		return nil, fmt.Errorf("list %s leases: %w", cl.Provider, err)
	}
	ids := map[string]bool{}
	for _, t := range targets {
		ids[t.LeaseID] = true
	}
	cache[key] = ids
	return ids, nil
}

// Status reports one lease by ID or slug.
func (c *Client) Status(ctx context.Context, ref string) (LeaseInfo, error) {
	if err := c.ready(ctx, "status of lease "+ref); err != nil {
		return LeaseInfo{}, err
	}
	claim, err := c.store.Find(ref)
	if errors.Is(err, provider.ErrNotFound) && c.broker != nil {
		// Perhaps a coordinator lease made elsewhere.
		l, cerr := c.broker.coord.GetLease(ctx, ref)
		if cerr == nil {
			return infoOfCoordinator(l, c.broker.coord.URL()), nil
		}
		if !errors.Is(cerr, provider.ErrNotFound) {
			return LeaseInfo{}, fmt.Errorf("%w (and the coordinator: %w)", err, cerr)
		}
	}
	if err != nil {
		return LeaseInfo{}, err
	}
	info := infoOf(claim, c.rt.Clock.Now())
	if db, ok := c.delegatedOf(claim); ok {
		return c.statusDelegated(ctx, db, info) // delegated.go
	}
	if info.State == StateReady {
		b, err := c.leaseBackend(claim)
		if err != nil {
			return LeaseInfo{}, err
		}
		_, err = b.Resolve(ctx, provider.ResolveRequest{ID: claim.ID})
		switch {
		case errors.Is(err, provider.ErrNotFound):
			info.State = StateGone
		case err != nil:
			return LeaseInfo{}, fmt.Errorf("status of lease %s: %w", claim.ID, err)
		}
	}
	return info, nil
}

func infoOf(cl lease.Claim, now time.Time) LeaseInfo {
	info := LeaseInfo{
		ID: cl.ID, Slug: cl.Slug, Provider: cl.Provider, State: LeaseState(cl.State),
		CreatedAt: cl.CreatedAt, ExpiresAt: cl.ExpiresAt, Keep: cl.Keep, Labels: cl.Labels,
		Route: string(cl.Route), Coordinator: cl.Coordinator, Pool: poolOf(cl),
	}
	if cl.Target != nil {
		info.Host, info.Port, info.WorkRoot = cl.Target.Host, cl.Target.Port, cl.Target.WorkRoot
	}
	if cl.State == lease.StateReady && cl.Expired(now) {
		info.State = StateExpired
	}
	return info
}

// Stop releases the lease with the given ID or slug, ending first the
// commands running on it (see Lease.Release). A claim whose box is
// already gone is simply dropped. A lease whose claim is damaged is looked
// up by ID at the client's provider, released there, and its damaged claim
// dropped.
func (c *Client) Stop(ctx context.Context, ref string) error {
	if err := c.ready(ctx, "stop lease "+ref); err != nil {
		return err
	}
	claim, err := c.store.Find(ref)
	if d := (*lease.DamagedClaim)(nil); errors.As(err, &d) {
		return c.stopDamaged(ctx, d) // cleanup.go
	}
	if err != nil {
		return err
	}
	if db, ok := c.delegatedOf(claim); ok {
		return c.store.Stop(ctx, db, claim)
	}
	b, err := c.leaseBackend(claim)
	if err != nil {
		return err
	}
	c.stopCommands(ctx, b, claim)
	c.stopSharing(ctx, claim.ID)
	return c.store.Release(ctx, b, claim)
}

// stopCommandsTimeout bounds ending a lease's commands before it is
// released: long enough for a command's group to be sent SIGTERM and, after
// run.DefaultKillGrace, SIGKILL; a box that does not answer must not hold
// the release up for longer.
const stopCommandsTimeout = 20 * time.Second

// stopDialTimeout bounds connecting to a box to end its commands.
const stopDialTimeout = 5 * time.Second

// stopCommands ends the commands running on the ready lease of claim
// before it is released (see Lease.stopCommands), reaching the box as the
// claim recorded it.
func (c *Client) stopCommands(ctx context.Context, b provider.SSHLeaseBackend, claim lease.Claim) {
	if g, err := c.store.Recorded(claim); err == nil {
		(&Lease{client: c, backend: b}).stopCommands(ctx, g, nil)
	}
}

// stopCommands ends the commands running on the lease of g, whichever
// process started them (run.StopAll), before the lease is released: a box
// that outlives its lease (the local machine, a shared SSH host) must not
// keep them running. It uses conn when not nil and dials the box otherwise
// (never through a shared connection, which is about to end). It is best
// effort and bounded in time: a box that cannot be reached is released all
// the same, and what failed is logged.
func (l *Lease) stopCommands(ctx context.Context, g lease.Grant, conn *ssh.Client) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopCommandsTimeout)
	defer cancel()
	id, log := g.Claim.ID, l.client.log
	if conn == nil {
		// A box that does not answer at once is taken for gone.
		dctx, cancel := context.WithTimeout(ctx, stopDialTimeout)
		defer cancel()
		var err error
		if lb, ok := l.backend.(provider.SSHLoginBackend); ok {
			conn, err = l.dialLogin(dctx, lb, g)
		} else {
			conn, _, err = l.dial(dctx, g, g.Target.Host, g.Target.Port, g.Target.User)
		}
		if err != nil {
			log.Debug("commands of the lease not stopped: the box does not answer", "lease", id, "err", err)
			return
		}
		defer conn.Close()
	}
	res, err := run.StopAll(ctx, conn, id, 0)
	switch {
	case err != nil:
		log.Warn("commands of the lease not stopped before its release", "lease", id, "err", err)
	case res.Stopped > 0:
		log.Info("commands of the lease stopped before its release", "lease", id, "commands", res.Stopped)
	}
}

// Touch records activity now, moving the lease's expiry to
// min(created+ttl, now+idle). A held lease is touched on its own; Touch is
// for callers that want the new expiry at once.
func (l *Lease) Touch(ctx context.Context) error {
	if err := l.use(ctx, "touch"); err != nil {
		return err
	}
	return l.keep.Touch(ctx)
}

// releaseTimeout bounds a release (of a held lease, or at the end of a
// one-shot run), which goes on when the caller's context is cancelled.
const releaseTimeout = 2 * time.Minute

// Release ends the commands running on the lease (the process groups of
// every command run on it, from this process or another: see run.StopAll;
// best effort, within about 20 seconds; skipped for a lease acquired here
// and not kept whose commands all ended cleanly), closes the connection
// and ends the lease at its provider. It completes even when ctx is
// cancelled (it is bounded by its own timeout), so `defer l.Release(ctx)`
// is safe; ctx's error is reported only if the release did not finish.
//
// A lease shared with this user (reached through the coordinator) is not
// its to release: Release only closes the handle.
//
// Release ends the handle, as Close does. Releasing an ended handle (a
// second Release, or Release after Close) releases nothing and returns
// ErrClosed: a closed handle no longer holds its lease; Client.Stop
// releases a lease by ID.
func (l *Lease) Release(ctx context.Context) error {
	if err := l.use(ctx, "release"); err != nil {
		return err
	}
	if l.relayed {
		// Not this user's lease: it stays as it was, for its owner.
		return l.Close()
	}
	if l.delegated == nil && l.keep.Err() == nil && l.mayRunCommands() {
		// The lease's commands end first, this process's and others'.
		l.connMu.Lock()
		conn := l.conn
		l.connMu.Unlock()
		l.stopCommands(ctx, l.snapshot(), conn)
		// This handle's own runs of them learn how they ended before
		// the connection closes.
		l.waitExecs(execDrainTimeout)
	}
	ok, closeErr := l.end()
	if !ok {
		return l.errClosed("release")
	}
	// Another process may share the lease's connection, even when this one
	// acquired it.
	l.client.stopSharing(ctx, l.snapshot().Claim.ID)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	release := func() error { return l.client.store.Release(rctx, l.backend, l.snapshot().Claim) }
	if l.delegated != nil {
		release = func() error { return l.client.store.Stop(rctx, l.delegated, l.snapshot().Claim) }
	}
	if err := release(); err != nil {
		return errors.Join(err, ctx.Err())
	}
	return closeErr
}

// Close stops keeping the lease alive and closes its SSH connection,
// without releasing the lease, and ends the handle (see Lease). Closing an
// ended handle returns nil.
func (l *Lease) Close() error {
	if l == nil || l.keep == nil {
		return l.use(context.Background(), "close")
	}
	_, err := l.end()
	return err
}

// end ends the handle, closing it as Close does; ok is false when it had
// already ended (and nothing was done).
func (l *Lease) end() (ok bool, err error) {
	if !l.closed.CompareAndSwap(false, true) {
		return false, nil
	}
	return true, l.shut()
}

// shut stops the keepalive, untracks the handle and closes its connection.
func (l *Lease) shut() error {
	l.keep.Stop()
	l.client.mu.Lock()
	delete(l.client.held, l)
	l.client.mu.Unlock()
	l.connMu.Lock()
	defer l.connMu.Unlock()
	if l.conn == nil {
		return nil
	}
	err := l.conn.Close()
	l.conn = nil
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// SSH returns the lease's SSH connection, dialing it on first use with the
// lease key and the pinned host key.
//
// A lease of a provider.SSHLoginBackend is reached with a short-lived
// login that is itself a secret (a gateway token as user name): SSH asks
// the backend for a fresh login at each dial, connects where and as it
// says, and keeps it only for that dial; it is never stored, logged or
// part of an error. Such a gateway may let a connection in before the box
// behind it answers (a sandbox whose SSH server is still starting), so a
// new connection is proven with an empty session and, when that fails
// after the host key was accepted, dialed again a few times (with a fresh
// login each time) for up to about 15 seconds.
func (l *Lease) SSH(ctx context.Context) (*ssh.Client, error) {
	if err := l.use(ctx, "connect"); err != nil {
		return nil, err
	}
	if l.delegated != nil {
		return nil, l.errNoSSH("connect")
	}
	l.connMu.Lock()
	defer l.connMu.Unlock()
	if l.closed.Load() { // closed while this waited for the lock
		return nil, l.errClosed("connect")
	}
	if l.conn != nil {
		return l.conn, nil
	}
	s := l.snapshot()
	if l.relayed {
		conn, err := l.client.dialRelay(ctx, s.Claim.ID)
		if err != nil {
			return nil, err
		}
		l.conn = conn
		return conn, nil
	}
	if lb, ok := l.backend.(provider.SSHLoginBackend); ok {
		conn, err := l.dialLogin(ctx, lb, s)
		if err != nil {
			return nil, err
		}
		l.conn = conn
		return conn, nil
	}
	socket := l.shareSocket()
	if socket != "" {
		conn, err := sshmux.Dial(ctx, socket)
		if err == nil {
			l.conn = conn
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		l.client.log.Debug("no shared connection", "lease", s.Claim.ID, "err", err)
		if !errors.Is(err, sshmux.ErrNoServer) {
			socket = "" // one serves, but lost the box: it ends on its own
		}
	}
	t := s.Target
	conn, _, err := l.dial(ctx, s, t.Host, t.Port, t.User)
	if err != nil {
		return nil, err
	}
	l.conn = conn
	if socket != "" {
		if err := l.client.startShare(ctx, s.Claim.ID, socket); err != nil {
			l.client.log.Debug("start sharing the connection", "lease", s.Claim.ID, "err", err)
		}
	}
	return conn, nil
}

// shareSocket is where the lease's connection is shared, or "" when it is
// not (see WithSharedConnections).
func (l *Lease) shareSocket() string {
	if !l.shared || l.client.startShare == nil || !sshmux.Supported() {
		return ""
	}
	return l.client.shareSocket(l.snapshot().Claim.ID)
}

// shareSocket is where the connection of lease id is shared.
func (c *Client) shareSocket(id string) string {
	return filepath.Join(c.store.Dir(), "share", id+".sock")
}

// stopSharingTimeout bounds asking a shared connection to end.
const stopSharingTimeout = 5 * time.Second

// stopSharing ends the shared connection of lease id, if one is served:
// the lease is being released.
func (c *Client) stopSharing(ctx context.Context, id string) {
	if c.startShare == nil || !sshmux.Supported() {
		return
	}
	// A release goes on when ctx is cancelled (Ctrl-C), and so does this.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopSharingTimeout)
	defer cancel()
	socket := c.shareSocket(id)
	if err := sshmux.Stop(ctx, socket); err != nil {
		c.log.Debug("stop the shared connection", "lease", id, "err", err)
	}
	// The lease is gone: so is any use of its lock and log.
	os.Remove(socket + ".lock")
	os.Remove(socket + ".log")
}

// ShareConnection serves the SSH connection of the lease ref to the
// processes that reuse it (see WithSharedConnections) on socket, until
// nobody used it for idle (zero means 10 minutes), the lease is released
// or its box stops answering, or ctx ends; ready, if set, is called once
// it serves. It does not keep the lease alive: only the processes that use
// it do. A lease of a delegated backend, or reached through
// per-connection logins, cannot be shared.
func (c *Client) ShareConnection(ctx context.Context, ref, socket string, idle time.Duration, ready func()) error {
	if err := c.ready(ctx, "share the connection of lease "+ref); err != nil {
		return err
	}
	claim, err := c.store.Find(ref)
	if err != nil {
		return err
	}
	if _, ok := c.delegatedOf(claim); ok {
		return fmt.Errorf("lease %s is a delegated sandbox: it has no SSH connection to share", claim.ID)
	}
	b, err := c.leaseBackend(claim)
	if err != nil {
		return err
	}
	if _, ok := b.(provider.SSHLoginBackend); ok {
		return fmt.Errorf("lease %s is reached with a login per connection: its connection is not shared", claim.ID)
	}
	g, err := c.store.Resolve(ctx, b, claim.ID)
	if err != nil {
		return err
	}
	l := &Lease{client: c, backend: b}
	t := g.Target
	conn, _, err := l.dial(ctx, g, t.Host, t.Port, t.User)
	if err != nil {
		return err
	}
	defer conn.Close()
	return sshmux.ListenAndServe(ctx, socket, sshmux.Config{
		Upstream: conn,
		Idle:     idle,
		Alive: func() bool {
			_, err := c.store.Get(claim.ID)
			return err == nil
		},
		Clock:  c.rt.Clock,
		Logger: c.log,
	}, ready)
}

// dial connects to host:port as user with the lease key, checking the
// box's host key against the lease's pin (or pinning it). keyAccepted
// reports whether the box's host key was seen and accepted, so that a
// failure after it happened behind the right server. Errors name the
// lease and the address, never the user.
func (l *Lease) dial(ctx context.Context, s lease.Grant, host string, port int, user string) (conn *ssh.Client, keyAccepted bool, err error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	check := l.client.store.HostKeyCallback(s.Claim.ID)
	var accepted atomic.Bool // set by the handshake's goroutine
	cfg := &ssh.ClientConfig{
		User: user,
		Auth: []ssh.AuthMethod{ssh.PublicKeys(s.Key.Signer)},
		HostKeyCallback: func(hostname string, remote net.Addr, key ssh.PublicKey) error {
			if err := check(hostname, remote, key); err != nil {
				return err
			}
			accepted.Store(true)
			return nil
		},
		Timeout: 30 * time.Second,
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, false, fmt.Errorf("connect to lease %s at %s: %w", s.Claim.ID, addr, err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(deadline)
	}
	c, chans, reqs, err := ssh.NewClientConn(remote.QuickAck(nc), addr, cfg)
	if err != nil {
		nc.Close()
		return nil, accepted.Load(), fmt.Errorf("connect to lease %s at %s: %w", s.Claim.ID, addr, err)
	}
	_ = nc.SetDeadline(time.Time{})
	conn = ssh.NewClient(c, chans, reqs)
	l.installAccessKeys(ctx, s, conn)
	return conn, true, nil
}

// installAccessKeys makes the box of s accept the target's access keys
// (its coordinator's, see provider.LeaseTarget.AccessKeys) next to the
// lease key, over conn, the connection just opened: once per lease, as
// the claim records (Claim.InstalledKeys). A failure is logged, not
// returned: the box still serves its owner, only the coordinator cannot
// reach it (its features say so).
func (l *Lease) installAccessKeys(ctx context.Context, s lease.Grant, conn *ssh.Client) {
	want := s.Target.AccessKeys
	if len(want) == 0 || s.Target.KeyFile != "" {
		return
	}
	id := s.Claim.ID
	if cur, err := l.client.store.Get(id); err == nil && slices.Equal(cur.InstalledKeys, want) {
		return
	}
	keys := []ssh.PublicKey{s.Key.Signer.PublicKey()}
	for _, line := range want {
		k, err := lease.ParsePublicKey(line)
		if err != nil {
			l.client.log.Warn("the coordinator's access key is malformed; not installed", "lease", id, "err", err)
			return
		}
		keys = append(keys, k)
	}
	if err := handover.SetKeys(ctx, conn, keys...); err != nil {
		l.client.log.Warn("the coordinator's access key was not installed on the box", "lease", id, "err", err)
		return
	}
	if _, err := l.client.store.Update(id, func(c *lease.Claim) error {
		c.InstalledKeys = slices.Clone(want)
		return nil
	}); err != nil {
		l.client.log.Debug("record the installed access key", "lease", id, "err", err)
	}
}

// loginPauses are the pauses between the dials of a login lease's
// connection (see Lease.SSH): one more dial than pauses, about 15 seconds
// in all.
var loginPauses = []time.Duration{
	250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second,
}

// dialLogin connects to a lease of a login backend (see Lease.SSH).
func (l *Lease) dialLogin(ctx context.Context, lb provider.SSHLoginBackend, s lease.Grant) (*ssh.Client, error) {
	id := s.Claim.ID
	pauses := loginPauses
	if l.client.loginPauses != nil {
		pauses = l.client.loginPauses
	}
	for attempt := 0; ; attempt++ {
		login, err := lb.SSHLogin(ctx, provider.SSHLoginRequest{Lease: s.Target, ValidFor: loginValidFor(l.client.rt.Clock.Now(), s.Claim.ExpiresAt)})
		if err != nil {
			return nil, fmt.Errorf("connect to lease %s: SSH login: %w", id, err)
		}
		if login.Host == "" || login.User == "" || login.Port <= 0 || login.Port > 65535 {
			return nil, fmt.Errorf("connect to lease %s: the provider's SSH login lacks a host, port or user (%s)", id, login)
		}
		conn, accepted, err := l.dial(ctx, s, login.Host, login.Port, login.User)
		if err == nil {
			// Prove that the box behind the gateway answers.
			var sess *ssh.Session
			if sess, err = conn.NewSession(); err == nil {
				sess.Close()
				return conn, nil
			}
			conn.Close()
			err = fmt.Errorf("connect to lease %s at %s: open a session: %w", id, net.JoinHostPort(login.Host, strconv.Itoa(login.Port)), err)
		}
		if !accepted || ctx.Err() != nil || attempt == len(pauses) {
			return nil, err
		}
		l.client.log.Debug("SSH login not answered yet; retrying", "lease", id, "attempt", attempt+1, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (after: %w)", ctx.Err(), err)
		case <-l.client.rt.Clock.After(pauses[attempt]):
		}
	}
}

// loginValidFor is how long a login to a lease expiring at expires should
// stay valid: until the expiry, at least a minute and at most an hour. A
// gateway checks the login when the connection opens (Daytona's does), so
// a connection may outlive it; a new connection asks for a new one.
func loginValidFor(now, expires time.Time) time.Duration {
	return min(max(expires.Sub(now), time.Minute), time.Hour)
}

// SyncOptions control a sync.
type SyncOptions struct {
	// Progress, if set, is called as files are sent.
	Progress func(files int, bytes int64)
	// Checksum verifies file contents on the box instead of trusting the
	// manifest crabbox left there; FullResync starts the workdir over.
	Checksum   bool
	FullResync bool
	// ForceLarge goes past the guardrails' hard limits (150,000 files or
	// 20 GiB in the checkout's file set); Warn, if set, receives the
	// warning of a sync about to send more than the soft ones (50,000
	// files or 5 GiB): a first sync or a big change, never an unchanged
	// rerun. See sync.Limits. Warn also hears of a workdir found deleted
	// or replaced on the box, which the sync then sends whole.
	ForceLarge bool
	Warn       func(string)
	// Exclude holds gitignore-style patterns left out of the sync, on top
	// of the built-in excludes and the checkout's .crabboxignore.
	Exclude []string
	// RefuseOutsideLinks fails the sync on a symlink whose target is
	// absolute or leads outside the checkout; by default such a link is
	// synced as a link (nothing it points to is read or sent) and Warn
	// hears of it. SkipSubmodules leaves git submodules out; by default
	// the tracked files of initialised submodules are synced.
	RefuseOutsideLinks bool
	SkipSubmodules     bool
}

// Sync copies the checkout holding dir to the lease's workdir for it
// (Workdir(the checkout's top)), as a run from dir would: a directory
// inside a git checkout stands for the whole checkout, and a directory
// outside git is synced as it is. A home directory or a directory holding
// one, and crabbox's state directory or a directory holding it, are refused
// (ErrUnsafeSyncDir). Once synced, dir is the handle's SyncedDir: a Run
// without RunRequest.Root runs in its copy on the box.
func (l *Lease) Sync(ctx context.Context, dir string, opts SyncOptions) (sync.Stats, error) {
	if err := l.use(ctx, "sync"); err != nil {
		return sync.Stats{}, err
	}
	l.keep.Used()
	co, err := sync.FindSyncRoot(ctx, dir, true, l.client.store.Dir())
	if err != nil {
		return sync.Stats{}, fmt.Errorf("sync: %w", err)
	}
	p, err := l.client.prepareSync(ctx, co.Root, opts)
	if err != nil {
		return sync.Stats{}, err
	}
	defer l.client.startWantedWatch(ctx, p.Root())
	if err := l.syncTo(p); err != nil {
		return sync.Stats{}, err
	}
	push := l.pushPrepared
	if l.delegated != nil {
		push = l.syncDelegated
	}
	stats, err := push(ctx, p)
	if err == nil {
		l.noteSynced(co)
	}
	return stats, err
}

// prepareSync does the local half of a sync, which needs neither a box nor
// a connection: syncTo then tells it where the lease wants the checkout.
func (c *Client) prepareSync(ctx context.Context, root string, opts SyncOptions) (*sync.Prepared, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("sync %s: %w", root, err)
	}
	return sync.Prepare(ctx, sync.Options{
		Root: abs, Progress: opts.Progress, Changes: c.changeClock(abs),
		Checksum: opts.Checksum, FullResync: opts.FullResync, Force: opts.ForceLarge, Warn: opts.Warn,
		CacheFile: c.hashCache(abs), Exclude: opts.Exclude, Limits: c.syncLimits,
		RefuseOutsideLinks: opts.RefuseOutsideLinks, SkipSubmodules: opts.SkipSubmodules,
	})
}

// syncTo points a prepared sync at the lease's workdir for its checkout.
func (l *Lease) syncTo(p *sync.Prepared) error {
	return p.SetRemoteDir(l.Workdir(p.Root()))
}

// pushPrepared sends a prepared sync, pointed at the box by syncTo.
func (l *Lease) pushPrepared(ctx context.Context, p *sync.Prepared) (sync.Stats, error) {
	conn, err := l.SSH(ctx)
	if err != nil {
		return sync.Stats{}, err
	}
	stats, err := p.Push(ctx, conn)
	if err != nil {
		return stats, fmt.Errorf("sync to %s: %w", l.ID(), err)
	}
	return stats, nil
}

// Exec runs one command on the box as req says and nothing else: no sync,
// no timeout policy, no history (Run does all that). A non-zero exit is
// not an error: it is in the result. Errors are crabbox's own failures
// (connection, cancellation).
//
// A command is a use of the lease: it is touched when the command starts
// (in the background) and when it ends, unless it was touched just before.
// The command is tagged with the lease (req.Lease is set to its ID), so
// that stopping or releasing the lease ends it.
func (l *Lease) Exec(ctx context.Context, req run.Command) (run.Result, error) {
	if err := l.use(ctx, "run"); err != nil {
		return run.Result{}, err
	}
	if err := l.keep.Err(); err != nil {
		return run.Result{}, fmt.Errorf("run on %s: %w", l.ID(), err)
	}
	if l.delegated != nil {
		return l.execDelegated(ctx, req, "", "")
	}
	l.keep.Used()
	conn, err := l.SSH(ctx)
	if err != nil {
		return run.Result{}, err
	}
	req.Lease = l.ID() // so that stopping the lease ends the command
	l.execStarted()
	res, err := run.Run(ctx, conn, req)
	l.execEnded(err != nil)
	if err != nil {
		if lost := l.keep.Err(); lost != nil {
			err = fmt.Errorf("%w (%w)", err, lost)
		}
		return res, fmt.Errorf("run on %s: %w", l.ID(), err)
	}
	if ctx.Err() == nil {
		_ = l.keep.UsedSync(ctx) // a failure is logged; the result stands
	}
	return res, nil
}

// mayRunCommands reports whether commands may be running on the lease as
// it is released: unless the lease is this process's alone (acquired here,
// not kept) and every command run through this handle ended cleanly, which
// saves a one-shot run's release a session on the box.
func (l *Lease) mayRunCommands() bool {
	l.execMu.Lock()
	defer l.execMu.Unlock()
	return l.shared || l.snapshot().Claim.Keep || l.execs > 0 || l.unclean
}

// execDrainTimeout bounds how long Release waits for the handle's running
// commands to report their end once they were stopped.
const execDrainTimeout = 5 * time.Second

func (l *Lease) execStarted() {
	l.execMu.Lock()
	l.execs++
	l.execMu.Unlock()
}

func (l *Lease) execEnded(failed bool) {
	l.execMu.Lock()
	defer l.execMu.Unlock()
	l.unclean = l.unclean || failed
	if l.execs--; l.execs == 0 && l.drained != nil {
		close(l.drained)
		l.drained = nil
	}
}

// waitExecs waits, for at most d, until no command runs through Exec.
func (l *Lease) waitExecs(d time.Duration) {
	l.execMu.Lock()
	if l.execs == 0 {
		l.execMu.Unlock()
		return
	}
	if l.drained == nil {
		l.drained = make(chan struct{})
	}
	drained := l.drained
	l.execMu.Unlock()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-drained:
	case <-timer.C:
	}
}

// changeClock is the change clock of the checkout at root, or nil without
// WithChangeWatch.
func (c *Client) changeClock(root string) sync.ChangeClock {
	if c.startWatch == nil || !watch.Supported() {
		return nil
	}
	return &watchClock{c: c, root: root, client: watch.Client{Socket: watch.SocketPath(filepath.Join(c.store.Dir(), "watch"), root)}}
}

// watchClock asks a checkout's watcher. When none answers, it notes that
// the checkout wants one, which startWantedWatch starts once the sync is
// done: the watcher's first walk of the checkout then takes no CPU from
// the sync (a first sync is CPU-bound). Only a later sync trusts what a
// watcher says, so starting it late misses nothing.
type watchClock struct {
	c      *Client
	root   string
	client watch.Client
}

func (w *watchClock) Clock(ctx context.Context) (string, error) {
	token, err := w.client.Clock(ctx)
	w.wanted(err)
	return token, err
}

// Changes makes the watcher a sync.ChangeJournal: a sync after a few
// edits lists only the files they named.
func (w *watchClock) Changes(ctx context.Context, since string) (string, []string, bool, error) {
	token, paths, all, err := w.client.Changes(ctx, since)
	w.wanted(err)
	return token, paths, all, err
}

// wanted notes that the checkout wants a watcher when err says none
// answers (and none refused the checkout lately).
func (w *watchClock) wanted(err error) {
	if !errors.Is(err, watch.ErrNoWatcher) || watch.Refused(w.client.Socket, w.c.rt.Clock.Now()) != "" {
		return
	}
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.c.watchWanted[w.root] = w.client.Socket
}

// startWantedWatch starts the watcher that a sync of the checkout at root
// found missing, if any; a sync calls it once it is done.
func (c *Client) startWantedWatch(ctx context.Context, root string) {
	c.mu.Lock()
	socket, ok := c.watchWanted[root]
	delete(c.watchWanted, root)
	c.mu.Unlock()
	if !ok || ctx.Err() != nil {
		return
	}
	if err := c.startWatch(ctx, root, socket); err != nil {
		c.log.Debug("start change watcher", "root", root, "err", err)
	}
}

// hashCache is the file caching content hashes of the checkout at root, so
// that unchanged files are not read again on the next sync.
func (c *Client) hashCache(root string) string {
	sum := sha256.Sum256([]byte(root))
	return filepath.Join(c.store.Dir(), "cache", hex.EncodeToString(sum[:8])+".hashes")
}
