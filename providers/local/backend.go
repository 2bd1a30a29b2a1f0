package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"sync"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// Backend is the local provider's SSH-lease backend. Close it to stop the
// boxes it serves in-process; boxes served by agents outlive it.
type Backend struct {
	cfg   Config
	rt    provider.Runtime
	user  string
	clone fileCloner // reflink; tests replace it

	mu     sync.Mutex
	closed bool
	boxes  map[string]*box // in-process boxes by lease ID
	wg     sync.WaitGroup  // in-process boxes' goroutines
}

// box is a box served in-process by a goroutine of the Backend.
type box struct {
	cancel  context.CancelFunc
	touched chan struct{} // Touch pokes the box to re-read its expiry
	done    chan struct{} // closed when serve has returned
	err     error         // serve's result, set before done is closed
}

// New returns a backend keeping its leases under cfg.Root.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	if cfg.Root == "" {
		return nil, errors.New("local provider: Config.Root is required")
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("local provider: root %s: %w", cfg.Root, err)
	}
	cfg.Root = root
	return &Backend{cfg: cfg, rt: rt.WithDefaults(), user: currentUser(), clone: reflink, boxes: map[string]*box{}}, nil
}

// currentUser is the SSH user of local boxes: the OS user serving them.
func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if name := os.Getenv("USER"); name != "" {
		return name
	}
	return "crabbox"
}

// Spec describes the local provider.
func (b *Backend) Spec() provider.Spec { return Provider{}.Spec() }

func (b *Backend) leaseDir(id string) string { return filepath.Join(b.cfg.Root, id) }

// Close stops every box the backend serves in-process, removing their lease
// directories, and waits for them. Agents are left running (a goroutine
// reaping each agent this backend started runs until that agent exits).
// Acquire fails after Close.
func (b *Backend) Close() error {
	b.mu.Lock()
	b.closed = true
	stopping := make([]*box, 0, len(b.boxes))
	for _, bx := range b.boxes {
		stopping = append(stopping, bx)
		bx.cancel()
	}
	b.mu.Unlock()
	b.wg.Wait()
	var errs []error
	for _, bx := range stopping {
		errs = append(errs, bx.err)
	}
	return errors.Join(errs...)
}

// Acquire creates the lease directory, host key and record, and starts
// serving the box, in-process or through an agent. If any step fails it
// removes what it made.
func (b *Backend) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	target, err := b.acquire(ctx, req)
	if err != nil {
		// The caller (lease.Store.Acquire) names the provider and the lease.
		return provider.LeaseTarget{}, err
	}
	b.rt.Logger.Info("local lease acquired", "lease", req.LeaseID, "port", target.Port, "expires", target.ExpiresAt)
	return target, nil
}

func (b *Backend) acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	return b.acquireFrom(ctx, req, "")
}

// acquireFrom is Acquire of a box whose work root is a copy of the
// directory from (a checkpoint's), or empty when from is "".
func (b *Backend) acquireFrom(ctx context.Context, req provider.AcquireRequest, from string) (provider.LeaseTarget, error) {
	if err := checkLeaseID(req.LeaseID); err != nil {
		return provider.LeaseTarget{}, err
	}
	if _, err := parsePublicKey(req.PublicKey); err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("lease public key: %w", err)
	}
	if now := b.rt.Clock.Now(); !req.ExpiresAt.After(now) {
		return provider.LeaseTarget{}, fmt.Errorf("expiry %s is not after now (%s)", req.ExpiresAt.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	dir := b.leaseDir(req.LeaseID)
	if err := b.create(ctx, dir, req, from); err != nil {
		return provider.LeaseTarget{}, err
	}
	port, err := b.start(ctx, req.LeaseID, dir)
	if err != nil {
		return provider.LeaseTarget{}, errors.Join(err, removeDir(dir))
	}
	rec, err := readRecord(dir)
	if err == nil && rec.Port != port {
		err = fmt.Errorf("box announced port %d but recorded %d", port, rec.Port)
	}
	if err != nil {
		return provider.LeaseTarget{}, errors.Join(err, b.remove(context.WithoutCancel(ctx), req.LeaseID))
	}
	return rec.target(dir), nil
}

// create makes the lease directory with its host key, work root (a copy of
// from, when set) and record. The record comes last: a directory without
// one is not a lease yet.
func (b *Backend) create(ctx context.Context, dir string, req provider.AcquireRequest, from string) error {
	if err := os.MkdirAll(b.cfg.Root, 0o700); err != nil {
		return fmt.Errorf("create root: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("lease directory %s already exists: %w", dir, provider.ErrConflict)
		}
		return fmt.Errorf("create lease directory: %w", err)
	}
	err := func() error {
		// Before anything else: the directory is this process's until a
		// box serves it, and its leftovers are known for such once the
		// process is gone.
		if err := writeProc(dir, proc{PID: os.Getpid()}); err != nil {
			return fmt.Errorf("write %s: %w", procFile, err)
		}
		hostKey, err := newHostKey(dir)
		if err != nil {
			return fmt.Errorf("host key: %w", err)
		}
		if from != "" {
			c := &copier{clone: b.clone}
			if err := c.copyTree(ctx, from, filepath.Join(dir, workDir)); err != nil {
				return fmt.Errorf("copy the checkpoint's work root: %w", notFoundIfGone(err))
			}
		} else if err := os.Mkdir(filepath.Join(dir, workDir), 0o700); err != nil {
			return fmt.Errorf("create work root: %w", err)
		}
		return writeRecord(dir, record{
			ID: req.LeaseID, Slug: req.Slug, CreatedAt: req.CreatedAt, ExpiresAt: req.ExpiresAt,
			Labels: req.Labels, User: b.user, HostKey: hostKey, AuthorizedKey: req.PublicKey,
		})
	}()
	if err != nil {
		return errors.Join(err, removeDir(dir))
	}
	return nil
}

// start serves the box of dir and returns its port once it is ready.
func (b *Backend) start(ctx context.Context, id, dir string) (int, error) {
	if b.cfg.Agent != "" {
		return b.startAgent(ctx, dir)
	}
	return b.startInProcess(ctx, id, dir)
}

// startInProcess serves the box on a goroutine owned by the backend.
func (b *Backend) startInProcess(ctx context.Context, id, dir string) (int, error) {
	boxCtx, cancel := context.WithCancel(context.Background())
	bx := &box{cancel: cancel, touched: make(chan struct{}, 1), done: make(chan struct{})}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		cancel()
		return 0, errors.New("local backend is closed")
	}
	b.boxes[id] = bx
	b.wg.Add(1)
	b.mu.Unlock()

	ready := make(chan int, 1)
	go func() {
		defer b.wg.Done()
		defer cancel()
		bx.err = serve(boxCtx, dir, serveOptions{
			clock:   b.rt.Clock,
			log:     b.rt.Logger,
			ready:   func(port int) error { ready <- port; return nil },
			touched: bx.touched,
		})
		b.mu.Lock()
		if b.boxes[id] == bx {
			delete(b.boxes, id)
		}
		b.mu.Unlock()
		close(bx.done)
	}()
	select {
	case port := <-ready:
		return port, nil
	case <-bx.done:
		return 0, bx.err
	case <-ctx.Done():
		cancel()
		<-bx.done
		return 0, ctx.Err()
	}
}

// inProcess returns the in-process box of lease id, or nil.
func (b *Backend) inProcess(id string) *box {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.boxes[id]
}

// Resolve finds a live lease by ID or slug. A lease whose box is not
// serving is not found.
func (b *Backend) Resolve(ctx context.Context, req provider.ResolveRequest) (provider.LeaseTarget, error) {
	rec, err := b.find(ctx, req.ID)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("resolve local lease %s: %w", req.ID, err)
	}
	return rec.target(b.leaseDir(rec.ID)), nil
}

// find returns the live lease named ref, an ID or a slug.
func (b *Backend) find(ctx context.Context, ref string) (record, error) {
	if checkLeaseID(ref) == nil {
		rec, err := readRecord(b.leaseDir(ref))
		switch {
		case err == nil && live(ctx, rec):
			return rec, nil
		case err == nil:
			return record{}, fmt.Errorf("box is not running: %w", provider.ErrNotFound)
		case !errors.Is(err, fs.ErrNotExist):
			return record{}, err
		}
	}
	var found []record
	for _, e := range b.scan() {
		if e.ok && e.rec.Slug == ref && live(ctx, e.rec) {
			found = append(found, e.rec)
		}
	}
	switch len(found) {
	case 0:
		return record{}, fmt.Errorf("no running box: %w", provider.ErrNotFound)
	case 1:
		return found[0], nil
	default:
		return record{}, fmt.Errorf("slug names %d running boxes (%s, %s, ...): %w", len(found), found[0].ID, found[1].ID, provider.ErrConflict)
	}
}

// List returns the leases whose boxes are serving, with their labels.
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseTarget, error) {
	var out []provider.LeaseTarget
	for _, e := range b.scan() {
		if e.ok && live(ctx, e.rec) {
			out = append(out, e.rec.target(e.dir))
		}
	}
	return out, ctx.Err()
}

// entry is one directory under the root.
type entry struct {
	id, dir string
	rec     record
	ok      bool  // rec was read
	err     error // why not, when !ok
	modTime time.Time
}

// scan reads every lease directory under the root. Unreadable records are
// logged and reported with ok unset.
func (b *Backend) scan() []entry {
	des, err := os.ReadDir(b.cfg.Root)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			b.rt.Logger.Warn("read local lease root", "root", b.cfg.Root, "err", err)
		}
		return nil
	}
	var out []entry
	for _, de := range des {
		if !de.IsDir() || checkLeaseID(de.Name()) != nil {
			continue
		}
		e := entry{id: de.Name(), dir: b.leaseDir(de.Name())}
		if info, err := de.Info(); err == nil {
			e.modTime = info.ModTime()
		}
		if e.rec, e.err = readRecord(e.dir); e.err == nil {
			e.ok = true
		} else if !errors.Is(e.err, fs.ErrNotExist) {
			b.rt.Logger.Warn("read local lease record", "lease", e.id, "err", e.err)
		}
		out = append(out, e)
	}
	return out
}

// Touch moves the lease's expiry to req.ExpiresAt. An in-process box re-arms
// its timer at once; an agent finds the new expiry when its timer fires.
func (b *Backend) Touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	id := req.Lease.LeaseID
	rec, err := b.touch(ctx, id, req.ExpiresAt)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("touch local lease %s: %w", id, err)
	}
	return rec.target(b.leaseDir(id)), nil
}

func (b *Backend) touch(ctx context.Context, id string, expires time.Time) (record, error) {
	if err := checkLeaseID(id); err != nil {
		return record{}, err
	}
	if expires.IsZero() {
		return record{}, errors.New("no expiry given")
	}
	dir := b.leaseDir(id)
	rec, err := readRecord(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !live(ctx, rec)) {
		return record{}, fmt.Errorf("box is not running: %w", provider.ErrNotFound)
	}
	if err != nil {
		return record{}, err
	}
	rec.ExpiresAt = expires
	if err := writeRecord(dir, rec); err != nil {
		return record{}, err
	}
	if bx := b.inProcess(id); bx != nil {
		select {
		case bx.touched <- struct{}{}:
		default: // a poke is already pending
		}
	}
	return rec, nil
}

// ReleaseLease stops the lease's box and removes its directory. It needs
// only the lease ID, and releasing a lease that is gone succeeds.
func (b *Backend) ReleaseLease(ctx context.Context, req provider.ReleaseRequest) error {
	id := req.Lease.LeaseID
	if err := checkLeaseID(id); err != nil {
		return fmt.Errorf("release local lease: %w", err)
	}
	if err := b.remove(ctx, id); err != nil {
		return fmt.Errorf("release local lease %s: %w", id, err)
	}
	b.rt.Logger.Info("local lease released", "lease", id)
	return nil
}

// remove stops the box of lease id, wherever it is served, and removes the
// lease directory.
func (b *Backend) remove(ctx context.Context, id string) error {
	dir := b.leaseDir(id)
	if bx := b.inProcess(id); bx != nil {
		bx.cancel()
		select {
		case <-bx.done:
		case <-ctx.Done():
			return fmt.Errorf("wait for the box to stop: %w", ctx.Err())
		}
		return errors.Join(bx.err, removeDir(dir))
	}
	// The record may be unreadable while an agent still serves the box:
	// locate falls back to proc.json, which the serving process wrote.
	ref := locate(dir)
	switch st, why := ref.status(ctx); st {
	case boxUnknown:
		return fmt.Errorf("cannot tell whether the box still serves, so it is left alone: %s; stop its process and remove %s by hand", why, dir)
	case boxServing:
		if !ref.agent {
			return fmt.Errorf("box is served in-process by another program (pid %d), which stops it when it closes its backend or at the lease's expiry: %w",
				ref.pid, provider.ErrPrecondition)
		}
		if err := b.stopAgent(ctx, id, ref); err != nil {
			return err
		}
	}
	return removeDir(dir)
}

func removeDir(dir string) error {
	if err := removeTree(dir); err != nil {
		return fmt.Errorf("remove lease directory: %w", err)
	}
	return nil
}
