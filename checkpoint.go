package crabbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/remote"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/sync"
)

// CheckpointOptions say what Lease.Checkpoint saves.
type CheckpointOptions struct {
	// Dir is a directory of the local checkout whose workdir on the box
	// is saved (a directory inside a git checkout stands for the whole
	// checkout, as for Sync); empty means the handle's SyncedDir.
	Dir string
	// Name is a name to find the checkpoint by besides its ID: lowercase
	// letters, digits and dashes, unique among the client's checkpoints.
	Name string
	// Paths are more directories of the box an archive checkpoint saves:
	// absolute, or starting with "~/" for the login's home (caches such
	// as "~/.cache/go-build", a toolchain). A native checkpoint saves
	// the whole box anyway.
	Paths []string
	// Archive makes crabbox's own archive checkpoint even on a provider
	// that saves whole boxes (provider.FeatureCheckpoint).
	Archive bool
	Labels  map[string]string
}

// Checkpoint saves the lease's workspace so that new leases start from it
// (Client.Fork) and leases are put back to it (Lease.Restore).
//
// On a provider that saves whole boxes natively (an image, a snapshot:
// provider.FeatureCheckpoint) the checkpoint is the provider's artifact:
// everything on the box, installed packages too. Elsewhere, or with
// opts.Archive, it is crabbox's own: archives of the checkout's workdir,
// its sync state and opts.Paths, kept in the client's state directory,
// which any SSH-lease provider can restore. Either way the sync state
// comes along, so the first sync into a fork or restored lease sends only
// what changed since.
//
// A checkpoint that fails half-way leaves nothing: no record, archive or
// provider artifact.
func (l *Lease) Checkpoint(ctx context.Context, opts CheckpointOptions) (lease.Checkpoint, error) {
	if err := l.use(ctx, "checkpoint"); err != nil {
		return lease.Checkpoint{}, err
	}
	if l.delegated != nil {
		return lease.Checkpoint{}, l.errNoSSH("checkpoint")
	}
	l.keep.Used()
	c := l.client
	g := l.snapshot()
	cp := lease.Checkpoint{
		ID: lease.NewCheckpointID(), Name: opts.Name, Kind: lease.CheckpointArchive, State: lease.CheckpointCreating,
		Provider: g.Claim.Provider, Config: maps.Clone(g.Claim.Config), SourceLease: g.Claim.ID,
		Route: g.Claim.Route, Coordinator: g.Claim.Coordinator,
		Paths: opts.Paths, CreatedAt: c.store.Clock().Now().UTC(), Labels: maps.Clone(opts.Labels),
	}
	creator := lease.ThisProcess()
	cp.Creator = &creator
	if err := c.checkNewCheckpoint(cp); err != nil {
		return lease.Checkpoint{}, err
	}
	nb, native := l.backend.(provider.NativeCheckpointBackend)
	native = native && !opts.Archive && l.backend.Spec().Has(provider.FeatureCheckpoint)
	dir := cmp.Or(opts.Dir, l.SyncedDir())
	switch {
	case dir != "":
		co, err := sync.FindSyncRoot(ctx, dir, true, c.store.Dir())
		if err != nil {
			return lease.Checkpoint{}, fmt.Errorf("checkpoint lease %s: %w", g.Claim.ID, err)
		}
		cp.Checkout, cp.SourceWorkdir = co.Root, l.Workdir(co.Root)
	case !native:
		return lease.Checkpoint{}, fmt.Errorf("checkpoint lease %s: no checkout to save: name its directory (CheckpointOptions.Dir), or sync first", g.Claim.ID)
	}
	if native {
		cp.Kind = lease.CheckpointNative
	}
	if err := c.store.PutCheckpoint(cp); err != nil {
		return lease.Checkpoint{}, err
	}
	var err error
	if native {
		err = l.saveNative(ctx, nb, &cp)
	}
	if err == nil {
		err = l.saveArchive(ctx, &cp)
	}
	if err == nil {
		cp.State, cp.Creator = lease.CheckpointReady, nil
		err = c.store.PutCheckpoint(cp)
	}
	if err != nil {
		if cp.Artifact != nil { // a failed save deleted its own leftovers
			err = errors.Join(err, lease.DeleteCheckpointArtifacts(ctx, nb, cp.ID))
		}
		return lease.Checkpoint{}, errors.Join(err, c.store.RemoveCheckpoint(cp.ID))
	}
	c.log.Info("checkpoint created", "checkpoint", cp.ID, "lease", g.Claim.ID, "kind", cp.Kind, "size", cp.Size)
	return cp, nil
}

// checkNewCheckpoint refuses a checkpoint whose name is malformed or
// taken, or whose paths are not box paths.
func (c *Client) checkNewCheckpoint(cp lease.Checkpoint) error {
	for _, p := range cp.Paths {
		if err := sync.CheckBoxPath(p); err != nil {
			return fmt.Errorf("checkpoint lease %s: %w", cp.SourceLease, err)
		}
	}
	if cp.Name == "" {
		return nil
	}
	if !lease.ValidSlug(cp.Name) {
		return fmt.Errorf("checkpoint name %q is malformed: lowercase letters, digits and dashes, at most 41", cp.Name)
	}
	if _, err := c.store.GetCheckpoint(cp.Name); !errors.Is(err, provider.ErrNotFound) {
		return fmt.Errorf("checkpoint name %q is taken: delete that checkpoint first or choose another name", cp.Name)
	}
	return nil
}

// saveNative makes cp the provider's checkpoint of the box.
func (l *Lease) saveNative(ctx context.Context, nb provider.NativeCheckpointBackend, cp *lease.Checkpoint) error {
	a, err := lease.NativeCheckpoint(ctx, nb, provider.CheckpointRequest{Lease: l.Target(), CheckpointID: cp.ID, Labels: cp.Labels})
	if err != nil {
		return err
	}
	cp.Artifact, cp.Size = &a, a.SizeBytes
	return nil
}

// The parts of an archive checkpoint, in the store's numbering: the
// workdir, its sync state, then the paths in order.
const (
	partWorkdir = 0
	partState   = 1
	partPaths   = 2
)

// saveArchive saves the paths of cp into the store, each as a
// zstd-compressed tar archive, and, for an archive checkpoint, the workdir
// and its sync state too (a native checkpoint holds those already, but
// not necessarily the paths: a local box's copy is of its work root).
func (l *Lease) saveArchive(ctx context.Context, cp *lease.Checkpoint) error {
	if cp.Kind == lease.CheckpointNative && len(cp.Paths) == 0 {
		return nil
	}
	conn, err := l.SSH(ctx)
	if err != nil {
		return err
	}
	save := func(n int, missing string, fn func(io.Writer) error) error {
		size, err := writePart(l.client.store.CheckpointPart(cp.ID, n), fn)
		if errors.Is(err, sync.ErrNoTree) {
			return fmt.Errorf("checkpoint lease %s: %s", cp.SourceLease, missing)
		}
		if err != nil {
			return fmt.Errorf("checkpoint lease %s: %w", cp.SourceLease, err)
		}
		cp.Size += size
		return nil
	}
	if cp.Kind == lease.CheckpointArchive {
		// The state first: should a sync run in between, the tree's
		// marker disagrees with it and the first sync after a restore
		// sends all.
		if err := save(partState, "nothing synced from "+cp.Checkout+" is on it: run or sync from that checkout first", func(w io.Writer) error {
			return sync.SaveState(ctx, conn, cp.SourceWorkdir, w)
		}); err != nil {
			return err
		}
		if err := save(partWorkdir, "its workdir "+cp.SourceWorkdir+" is gone", func(w io.Writer) error {
			return sync.SaveTree(ctx, conn, cp.SourceWorkdir, w)
		}); err != nil {
			return err
		}
	}
	for i, p := range cp.Paths {
		if err := save(partPaths+i, p+" is not a directory on the box", func(w io.Writer) error { return sync.SaveTree(ctx, conn, p, w) }); err != nil {
			return err
		}
	}
	return nil
}

// writePart writes what fn writes, compressed, to the file name (0600),
// which exists only once it is whole, and returns its size.
func writePart(name string, fn func(io.Writer) error) (int64, error) {
	tmp := name + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp)
	zw, err := zstd.NewWriter(f, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err == nil {
		err = fn(zw)
		err = errors.Join(err, zw.Close())
	}
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close())
	if err != nil {
		return 0, err
	}
	st, err := os.Stat(tmp)
	if err != nil {
		return 0, err
	}
	return st.Size(), os.Rename(tmp, name)
}

// readPart runs fn with the decompressed content of the part file name.
func readPart(name string, fn func(io.Reader) error) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("checkpoint archive: %w", err)
	}
	defer f.Close()
	zr, err := zstd.NewReader(f, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return fmt.Errorf("checkpoint archive %s: %w", name, err)
	}
	defer zr.Close()
	return fn(zr)
}

// Checkpoints lists the client's checkpoints, oldest first.
func (c *Client) Checkpoints(ctx context.Context) ([]lease.Checkpoint, error) {
	if err := c.ready(ctx, "list checkpoints"); err != nil {
		return nil, err
	}
	return c.store.Checkpoints()
}

// Checkpoint returns the checkpoint whose ID or name is ref; an unknown
// one is an error for which errors.Is(err, ErrNotFound) holds.
func (c *Client) Checkpoint(ctx context.Context, ref string) (lease.Checkpoint, error) {
	if err := c.ready(ctx, "find a checkpoint"); err != nil {
		return lease.Checkpoint{}, err
	}
	return c.store.GetCheckpoint(ref)
}

// readyCheckpoint is the checkpoint ref, refused unless it is ready.
func (c *Client) readyCheckpoint(ref string) (lease.Checkpoint, error) {
	cp, err := c.store.GetCheckpoint(ref)
	if err != nil {
		return cp, err
	}
	if cp.State != lease.CheckpointReady {
		return cp, fmt.Errorf("checkpoint %s is %s, not ready", cp.ID, cp.State)
	}
	return cp, nil
}

// DeleteCheckpoint deletes the checkpoint ref: its archives, or its
// provider artifact and everything billed with it. When the provider
// fails to delete the artifact, the checkpoint stays, marked deleting,
// and deleting it again (or cleanup) tries again.
func (c *Client) DeleteCheckpoint(ctx context.Context, ref string) error {
	if err := c.ready(ctx, "delete a checkpoint"); err != nil {
		return err
	}
	cp, err := c.store.GetCheckpoint(ref)
	if err != nil {
		return err
	}
	if cp.Kind == lease.CheckpointNative {
		cp.State = lease.CheckpointDeleting
		if err := c.store.PutCheckpoint(cp); err != nil {
			return err
		}
		nb, err := c.nativeBackend(cp)
		if err != nil {
			return fmt.Errorf("delete checkpoint %s: %w", cp.ID, err)
		}
		if cp.Artifact != nil {
			err = nb.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: *cp.Artifact})
		} else {
			// A record left creating by a crash has no artifact
			// recorded: find what it made by its label.
			err = lease.DeleteCheckpointArtifacts(ctx, nb, cp.ID)
		}
		if err != nil {
			return fmt.Errorf("delete checkpoint %s (kept, marked deleting: delete it again): %w", cp.ID, err)
		}
	}
	if err := c.store.RemoveCheckpoint(cp.ID); err != nil {
		return err
	}
	c.log.Info("checkpoint deleted", "checkpoint", cp.ID)
	return nil
}

// nativeBackend is the backend that reaches the artifact of the native
// checkpoint cp: its source lease's (its provider's configured as that
// lease was, or its coordinator's).
func (c *Client) nativeBackend(cp lease.Checkpoint) (provider.NativeCheckpointBackend, error) {
	b, err := c.leaseBackend(cp.SourceClaim())
	if err != nil {
		return nil, err
	}
	nb, ok := b.(provider.NativeCheckpointBackend)
	if !ok {
		return nil, fmt.Errorf("the %s provider keeps no native checkpoints", cp.Provider)
	}
	return nb, nil
}

// Fork leases a new box that starts from the checkpoint ref, as Acquire
// does with opts. A native checkpoint is started by its provider (the
// whole box, on the checkpoint's provider); an archive one is restored
// into a new lease of any SSH-lease provider (opts.Provider, or the
// client's). Either way the checkpoint's workdir is the new lease's
// workdir for the same checkout, so a sync from it sends only what
// changed since the checkpoint. A fork that fails half-way releases the
// new lease.
func (c *Client) Fork(ctx context.Context, ref string, opts AcquireOptions) (*Lease, error) {
	if err := c.ready(ctx, "fork a checkpoint"); err != nil {
		return nil, err
	}
	cp, err := c.readyCheckpoint(ref)
	if err != nil {
		return nil, err
	}
	var l *Lease
	if cp.Kind == lease.CheckpointNative {
		if p, err := c.registry.Lookup(cmp.Or(opts.Provider, cp.Provider)); err != nil || p.Spec().Name != cp.Provider {
			return nil, fmt.Errorf("fork checkpoint %s: it is a native %s checkpoint; it cannot start a %s box", cp.ID, cp.Provider, opts.Provider)
		}
		b, err := c.leaseBackend(cp.SourceClaim())
		if err != nil {
			return nil, err
		}
		terms := lease.Terms{Route: cp.Route, Coordinator: cp.Coordinator, Config: maps.Clone(cp.Config), From: cp.Artifact}
		if opts.Labels, err = desktopLabels(b, opts); err != nil {
			return nil, fmt.Errorf("fork checkpoint %s: %w", cp.ID, err)
		}
		if l, err = c.acquireSSH(ctx, b, terms, opts); err != nil {
			return nil, fmt.Errorf("fork checkpoint %s: %w", cp.ID, err)
		}
	} else if l, err = c.Acquire(ctx, opts); err != nil {
		return nil, fmt.Errorf("fork checkpoint %s: %w", cp.ID, err)
	}
	if err := l.restoreFrom(ctx, cp); err != nil {
		return nil, errors.Join(fmt.Errorf("fork checkpoint %s: %w", cp.ID, err), l.Release(context.WithoutCancel(ctx)))
	}
	c.log.Info("lease forked", "lease", l.ID(), "checkpoint", cp.ID, "kind", cp.Kind)
	return l, nil
}

// Restore puts the lease back to the checkpoint ref: a native checkpoint
// by its provider (the whole box, same provider), an archive one by
// replacing the checkpoint's workdir (for the same checkout) and paths on
// the box with the saved ones. The lease keeps its ID, key and expiry.
func (l *Lease) Restore(ctx context.Context, ref string) error {
	if err := l.use(ctx, "restore"); err != nil {
		return err
	}
	if l.delegated != nil {
		return l.errNoSSH("restore")
	}
	l.keep.Used()
	cp, err := l.client.readyCheckpoint(ref)
	if err != nil {
		return err
	}
	if cp.Kind == lease.CheckpointNative {
		if err := l.restoreNative(ctx, cp); err != nil {
			return err
		}
	}
	if err := l.restoreFrom(ctx, cp); err != nil {
		return fmt.Errorf("restore lease %s to checkpoint %s: %w", l.ID(), cp.ID, err)
	}
	l.client.log.Info("lease restored", "lease", l.ID(), "checkpoint", cp.ID, "kind", cp.Kind)
	return nil
}

// restoreNative has the provider put the box back to the native
// checkpoint cp, and forgets the connection to the box it replaced.
func (l *Lease) restoreNative(ctx context.Context, cp lease.Checkpoint) error {
	g := l.snapshot()
	rb, ok := l.backend.(provider.NativeRestoreBackend)
	if !ok || cp.Provider != g.Claim.Provider || !l.backend.Spec().Has(provider.FeatureRestore) {
		return fmt.Errorf("restore lease %s: checkpoint %s is a native %s checkpoint, which only its provider restores, and the %s provider does not",
			g.Claim.ID, cp.ID, cp.Provider, g.Claim.Provider)
	}
	restored, err := l.client.store.Restore(ctx, rb, g, *cp.Artifact)
	if err != nil {
		return err
	}
	l.connMu.Lock()
	defer l.connMu.Unlock()
	l.keep.Replace(restored)
	if l.conn != nil {
		l.conn.Close()
		l.conn = nil
	}
	return nil
}

// restoreFrom finishes a fork or restore from cp on the box: a native
// checkpoint's box holds its source lease's work directories, which move
// to this lease's; an archive checkpoint's workdir and sync state are put
// in place; and so are the paths of either.
func (l *Lease) restoreFrom(ctx context.Context, cp lease.Checkpoint) error {
	conn, err := l.SSH(ctx)
	if err != nil {
		return err
	}
	store, workdir := l.client.store, l.Workdir(cp.Checkout)
	restore := func(n int, fn func(io.Reader) error) error {
		return readPart(store.CheckpointPart(cp.ID, n), fn)
	}
	if cp.Kind == lease.CheckpointNative {
		if err := l.adoptWorkdirs(ctx, conn, cp.SourceLease); err != nil {
			return err
		}
	} else {
		if err := restore(partWorkdir, func(r io.Reader) error { return sync.RestoreTree(ctx, conn, workdir, r) }); err != nil {
			return err
		}
		if err := restore(partState, func(r io.Reader) error { return sync.RestoreState(ctx, conn, workdir, r) }); err != nil {
			return err
		}
	}
	for i, p := range cp.Paths {
		if err := restore(partPaths+i, func(r io.Reader) error { return sync.RestoreTree(ctx, conn, p, r) }); err != nil {
			return err
		}
	}
	return nil
}

// adoptWorkdirs makes the work directories of the lease src, which a
// native checkpoint brought onto this lease's box, this lease's own: its
// directory under the work root becomes a link to src's. A link, not a
// move: on a container's layered filesystem a directory of the image
// cannot be renamed, and mv would copy it whole.
func (l *Lease) adoptWorkdirs(ctx context.Context, conn *ssh.Client, src string) error {
	g := l.snapshot()
	if src == g.Claim.ID {
		return nil
	}
	from, to := path.Join(g.Target.WorkRoot, src), path.Join(g.Target.WorkRoot, g.Claim.ID)
	script := fmt.Sprintf("[ ! -d %[1]s ] || { rm -rf %[2]s && ln -s %[3]s %[2]s; }", remote.Quote(from), remote.Quote(to), remote.Quote(src))
	if _, err := runScript(ctx, conn, script); err != nil {
		return fmt.Errorf("give the checkpoint's work directories %s to lease %s: %w", from, g.Claim.ID, err)
	}
	return nil
}

// runScript runs a short script on the box and returns its output; a
// failure holds what it wrote to stderr.
func runScript(ctx context.Context, conn *ssh.Client, script string) (string, error) {
	sess, err := remote.NewSession(ctx, conn)
	if err != nil {
		return "", err
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	out, err := sess.CombinedOutput(script)
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, out)
	}
	return string(out), nil
}
