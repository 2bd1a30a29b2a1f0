package crabbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	gosync "sync"
	"time"
	"unicode"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/remote"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/run"
	"github.com/crabbox-dev/crabbox/sync"
)

// AcquireOptions shape a new lease.
type AcquireOptions struct {
	// Provider overrides the client's provider for this lease.
	Provider    string
	Slug        string
	TTL         time.Duration // default 90m
	IdleTimeout time.Duration // default 30m
	Keep        bool
	Labels      map[string]string
}

// Lease is a box held by this client: a claim in the lease store and, once
// used, one SSH connection that sync and commands share.
type Lease struct {
	client  *Client
	backend provider.SSHLeaseBackend

	// mu guards lease; connMu guards conn and is held while dialing, so
	// that a dial never blocks readers of the lease (the sync's local
	// half runs while the connection is made). connMu comes before mu.
	mu     gosync.Mutex
	lease  lease.Lease
	connMu gosync.Mutex
	conn   *ssh.Client
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

func (l *Lease) snapshot() lease.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease
}

// Workdir is the directory on the box that the local checkout at root (a
// path on this machine, such as "." or the top of a git checkout) syncs
// to: <workRoot>/<leaseID>/<name>-<hash>, where name is root's base name
// made a safe path element and hash is 8 hex digits of the SHA-256 of
// root's absolute path with symlinks resolved. Two checkouts of the same
// name never share a workdir; the same checkout always gets the same one.
func (l *Lease) Workdir(root string) string {
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
	b, err := c.sshBackend(opts.Provider)
	if err != nil {
		return nil, err
	}
	l, err := c.store.Acquire(ctx, b, lease.AcquireOptions{
		Slug: opts.Slug, TTL: opts.TTL, IdleTimeout: opts.IdleTimeout, Keep: opts.Keep, Labels: opts.Labels,
	})
	if err != nil {
		return nil, err
	}
	c.log.Info("lease acquired", "lease", l.Claim.ID, "slug", l.Claim.Slug, "provider", l.Claim.Provider)
	return &Lease{client: c, backend: b, lease: l}, nil
}

// Resolve finds a live lease by ID or slug among this client's claims.
func (c *Client) Resolve(ctx context.Context, ref string) (*Lease, error) {
	claim, err := c.store.Find(ref)
	if err != nil {
		return nil, err
	}
	b, err := c.sshBackend(claim.Provider)
	if err != nil {
		return nil, err
	}
	l, err := c.store.Resolve(ctx, b, claim.ID)
	if err != nil {
		return nil, err
	}
	return &Lease{client: c, backend: b, lease: l}, nil
}

// LeaseInfo is a lease as list and status report it.
type LeaseInfo struct {
	ID        string            `json:"id"`
	Slug      string            `json:"slug"`
	Provider  string            `json:"provider"`
	State     string            `json:"state"`
	Host      string            `json:"host,omitempty"`
	Port      int               `json:"port,omitempty"`
	WorkRoot  string            `json:"workRoot,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
	ExpiresAt time.Time         `json:"expiresAt"`
	Keep      bool              `json:"keep"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// Lease states reported by List and Status besides the claim's own.
const (
	StateGone    = "gone"    // the claim remains but the provider no longer has the box
	StateExpired = "expired" // past its expiry
)

// List returns this client's leases, oldest first, with their state checked
// against each provider: a box the provider no longer has is "gone".
func (c *Client) List(ctx context.Context) ([]LeaseInfo, error) {
	claims, err := c.store.List()
	if err != nil {
		return nil, err
	}
	live := map[string]map[string]bool{} // provider -> lease IDs the provider lists
	out := make([]LeaseInfo, 0, len(claims))
	for _, cl := range claims {
		info := infoOf(cl, c.rt.Clock.Now())
		if info.State == string(lease.StateReady) {
			ids, err := c.liveIDs(ctx, cl.Provider, live)
			if err != nil {
				return nil, err
			}
			if !ids[cl.ID] {
				info.State = StateGone
			}
		}
		out = append(out, info)
	}
	return out, nil
}

func (c *Client) liveIDs(ctx context.Context, name string, cache map[string]map[string]bool) (map[string]bool, error) {
	if ids, ok := cache[name]; ok {
		return ids, nil
	}
	if db, ok := c.delegatedRunBackend(name); ok {
		return c.delegatedLiveIDs(ctx, name, db, cache) // delegated.go
	}
	b, err := c.sshBackend(name)
	if err != nil {
		return nil, err
	}
	targets, err := b.List(ctx, provider.ListRequest{})
	if err != nil {
		return nil, fmt.Errorf("list %s leases: %w", name, err)
	}
	ids := map[string]bool{}
	for _, t := range targets {
		ids[t.LeaseID] = true
	}
	cache[name] = ids
	return ids, nil
}

// Status reports one lease by ID or slug.
func (c *Client) Status(ctx context.Context, ref string) (LeaseInfo, error) {
	claim, err := c.store.Find(ref)
	if err != nil {
		return LeaseInfo{}, err
	}
	info := infoOf(claim, c.rt.Clock.Now())
	if db, ok := c.delegatedRunBackend(claim.Provider); ok {
		return c.statusDelegated(ctx, db, info) // delegated.go
	}
	if info.State == string(lease.StateReady) {
		b, err := c.sshBackend(claim.Provider)
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
		ID: cl.ID, Slug: cl.Slug, Provider: cl.Provider, State: string(cl.State),
		CreatedAt: cl.CreatedAt, ExpiresAt: cl.ExpiresAt, Keep: cl.Keep, Labels: cl.Labels,
	}
	if cl.Target != nil {
		info.Host, info.Port, info.WorkRoot = cl.Target.Host, cl.Target.Port, cl.Target.WorkRoot
	}
	if cl.State == lease.StateReady && cl.Expired(now) {
		info.State = StateExpired
	}
	return info
}

// Stop releases the lease with the given ID or slug. A claim whose box is
// already gone is simply dropped.
func (c *Client) Stop(ctx context.Context, ref string) error {
	claim, err := c.store.Find(ref)
	if err != nil {
		return err
	}
	if db, ok := c.delegatedRunBackend(claim.Provider); ok {
		return c.stopDelegated(ctx, db, claim) // delegated.go
	}
	b, err := c.sshBackend(claim.Provider)
	if err != nil {
		return err
	}
	return c.store.Release(ctx, b, claim)
}

// Touch records activity, moving the lease's expiry.
func (l *Lease) Touch(ctx context.Context) error {
	cur := l.snapshot()
	next, err := l.client.store.Touch(ctx, l.backend, cur)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.lease = next
	l.mu.Unlock()
	return nil
}

// Release closes the connection and ends the lease at its provider.
func (l *Lease) Release(ctx context.Context) error {
	closeErr := l.Close()
	if err := l.client.store.Release(ctx, l.backend, l.snapshot().Claim); err != nil {
		return err
	}
	return closeErr
}

// Close closes the lease's SSH connection without releasing the lease.
func (l *Lease) Close() error {
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
func (l *Lease) SSH(ctx context.Context) (*ssh.Client, error) {
	l.connMu.Lock()
	defer l.connMu.Unlock()
	if l.conn != nil {
		return l.conn, nil
	}
	s := l.snapshot()
	t := s.Target
	addr := net.JoinHostPort(t.Host, strconv.Itoa(t.Port))
	cfg := &ssh.ClientConfig{
		User:            t.User,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(s.Key.Signer)},
		HostKeyCallback: l.client.store.HostKeyCallback(s.Claim.ID),
		Timeout:         30 * time.Second,
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connect to lease %s at %s: %w", s.Claim.ID, addr, err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(deadline)
	}
	conn, chans, reqs, err := ssh.NewClientConn(remote.QuickAck(nc), addr, cfg)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("connect to lease %s at %s: %w", s.Claim.ID, addr, err)
	}
	_ = nc.SetDeadline(time.Time{})
	l.conn = ssh.NewClient(conn, chans, reqs)
	return l.conn, nil
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
	// 20 GiB); Warn, if set, receives the warning past the soft ones.
	ForceLarge bool
	Warn       func(string)
	// Exclude holds gitignore-style patterns left out of the sync, on top
	// of the built-in excludes and the checkout's .crabboxignore.
	Exclude []string
}

// Sync copies the directory at root, a git checkout or a plain directory,
// to the lease's workdir for it (Workdir(root)). A home directory or a
// directory holding one, and crabbox's state directory or a directory
// holding it, are refused (ErrUnsafeSyncDir).
func (l *Lease) Sync(ctx context.Context, root string, opts SyncOptions) (sync.Stats, error) {
	if err := refuseSync(realPath(root), l.client.store.Dir()); err != nil {
		return sync.Stats{}, fmt.Errorf("sync: %w", err)
	}
	p, err := l.client.prepareSync(ctx, root, opts)
	if err != nil {
		return sync.Stats{}, err
	}
	if err := l.syncTo(p); err != nil {
		return sync.Stats{}, err
	}
	return l.pushPrepared(ctx, p)
}

// prepareSync does the local half of a sync, which needs neither a box nor
// a connection: syncTo then tells it where the lease wants the checkout.
func (c *Client) prepareSync(ctx context.Context, root string, opts SyncOptions) (*sync.Prepared, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("sync %s: %w", root, err)
	}
	return sync.Prepare(ctx, sync.Options{
		Root: abs, Progress: opts.Progress,
		Checksum: opts.Checksum, FullResync: opts.FullResync, Force: opts.ForceLarge, Warn: opts.Warn,
		CacheFile: c.hashCache(abs), Exclude: opts.Exclude,
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

// Run runs a command on the box. A non-zero exit is not an error: it is in
// the result. Errors are crabbox's own failures (connection, cancellation).
func (l *Lease) Run(ctx context.Context, req run.Request) (run.Result, error) {
	conn, err := l.SSH(ctx)
	if err != nil {
		return run.Result{}, err
	}
	res, err := run.Run(ctx, conn, req)
	if err != nil {
		return res, fmt.Errorf("run on %s: %w", l.ID(), err)
	}
	return res, nil
}

// hashCache is the file caching content hashes of the checkout at root, so
// that unchanged files are not read again on the next sync.
func (c *Client) hashCache(root string) string {
	sum := sha256.Sum256([]byte(root))
	return filepath.Join(c.store.Dir(), "cache", hex.EncodeToString(sum[:8])+".hashes")
}
