package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"
	procid "github.com/crabbox-dev/crabbox/internal/proc"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// A native checkpoint of a local box is a copy of its work root (a local
// box's root is this machine, whose installed packages are not the box's
// to save), kept in <Root>/checkpoints/<checkpointID>/ with its record:
//
//	checkpoint.json  the provider.CheckpointArtifact
//	work/            the copy of the work root
//
// Files are cloned (reflinks: FICLONE on Linux, clonefile on macOS) where
// the filesystem allows, so that a checkpoint of a large work root costs
// little, and copied otherwise. Every copy is made under a temporary name
// beside its destination and renamed into place, so a copy that fails or
// is cancelled leaves nothing that looks like a checkpoint or a work root.
const (
	checkpointsDir = "checkpoints"
	checkpointFile = "checkpoint.json"
	// stagingPrefix starts the names of copies in progress (and of
	// checkpoints being deleted); they are never listed.
	stagingPrefix = ".staging-"
)

// Ownership labels of a checkpoint, as crabbox's cloud resources carry
// them.
const (
	labelCrabbox   = "crabbox"    // "true"
	labelCreatedBy = "created_by" // "crabbox"
	labelProvider  = "provider"   // "local"
)

// reservedCheckpointLabels are the labels a checkpoint's caller may not set.
var reservedCheckpointLabels = []string{labelCrabbox, labelCreatedBy, labelProvider, provider.LabelCheckpoint, provider.LabelSourceLease}

func (b *Backend) checkpointRoot() string { return filepath.Join(b.cfg.Root, checkpointsDir) }

// CreateCheckpoint copies the work root of the running box req.Lease to a
// new checkpoint named by req.CheckpointID, which is also the artifact's
// ID. The box keeps running; files it changes during the copy are copied
// as the copy finds them. On error, or when ctx ends, nothing is left.
func (b *Backend) CreateCheckpoint(ctx context.Context, req provider.CheckpointRequest) (provider.CheckpointArtifact, error) {
	a, err := b.createCheckpoint(ctx, req)
	if err != nil {
		return provider.CheckpointArtifact{}, fmt.Errorf("checkpoint local lease %s: %w", req.Lease.LeaseID, err)
	}
	b.rt.Logger.Info("local checkpoint created", "lease", req.Lease.LeaseID, "checkpoint", a.ID, "bytes", a.SizeBytes)
	return a, nil
}

func (b *Backend) createCheckpoint(ctx context.Context, req provider.CheckpointRequest) (provider.CheckpointArtifact, error) {
	id := req.Lease.LeaseID
	if err := checkLeaseID(id); err != nil {
		return provider.CheckpointArtifact{}, err
	}
	if !lease.IsCheckpointID(req.CheckpointID) {
		return provider.CheckpointArtifact{}, fmt.Errorf("checkpoint ID %q is malformed: want ckp_ and 12 lowercase hex digits", req.CheckpointID)
	}
	for _, k := range reservedCheckpointLabels {
		if _, ok := req.Labels[k]; ok {
			return provider.CheckpointArtifact{}, fmt.Errorf("label %q is reserved for crabbox's own checkpoint labels", k)
		}
	}
	if _, err := b.liveRecord(ctx, id); err != nil {
		return provider.CheckpointArtifact{}, err
	}
	final := filepath.Join(b.checkpointRoot(), req.CheckpointID)
	if _, err := os.Lstat(final); err == nil {
		return provider.CheckpointArtifact{}, fmt.Errorf("checkpoint %s already exists: %w", req.CheckpointID, provider.ErrConflict)
	}
	labels := maps.Clone(req.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[labelCrabbox], labels[labelCreatedBy], labels[labelProvider] = "true", "crabbox", Name
	labels[provider.LabelCheckpoint], labels[provider.LabelSourceLease] = req.CheckpointID, id
	a := provider.CheckpointArtifact{
		ID: req.CheckpointID, Provider: Name, CheckpointID: req.CheckpointID, SourceLease: id,
		Locators: provider.Config{"root": b.cfg.Root}, CreatedAt: b.rt.Clock.Now().UTC(), Labels: labels,
	}
	if err := os.MkdirAll(b.checkpointRoot(), 0o700); err != nil {
		return provider.CheckpointArtifact{}, fmt.Errorf("create checkpoint directory: %w", err)
	}
	staging, err := newStaging(b.checkpointRoot(), req.CheckpointID)
	if err != nil {
		return provider.CheckpointArtifact{}, fmt.Errorf("create checkpoint directory: %w", err)
	}
	err = func() error {
		c := &copier{clone: b.clone, live: true}
		if err := c.copyTree(ctx, filepath.Join(b.leaseDir(id), workDir), filepath.Join(staging, workDir)); err != nil {
			return fmt.Errorf("copy the work root: %w", err)
		}
		a.SizeBytes = c.size
		body, err := json.MarshalIndent(a, "", "  ")
		if err != nil {
			return err
		}
		if err := atomicfile.Write(filepath.Join(staging, checkpointFile), append(body, '\n')); err != nil {
			return fmt.Errorf("write %s: %w", checkpointFile, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := os.Remove(filepath.Join(staging, stagingOwnerFile)); err != nil {
			return err
		}
		if err := os.Rename(staging, final); err != nil {
			if exists(final) {
				return fmt.Errorf("checkpoint %s already exists: %w", req.CheckpointID, provider.ErrConflict)
			}
			return err
		}
		return nil
	}()
	if err != nil {
		if rmErr := removeTree(staging); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("remove the partial copy: %w", rmErr))
		}
		return provider.CheckpointArtifact{}, err
	}
	return a, nil
}

// liveRecord returns the record of lease id, whose box must be serving.
func (b *Backend) liveRecord(ctx context.Context, id string) (record, error) {
	rec, err := readRecord(b.leaseDir(id))
	switch {
	case errors.Is(err, fs.ErrNotExist) || (err == nil && !live(ctx, rec)):
		return record{}, fmt.Errorf("box is not running: %w", provider.ErrNotFound)
	case err != nil:
		return record{}, err
	}
	return rec, nil
}

// ListCheckpoints returns the checkpoints under the root, in ID order.
// Unreadable records are logged and left out.
func (b *Backend) ListCheckpoints(ctx context.Context, _ provider.CheckpointListRequest) ([]provider.CheckpointArtifact, error) {
	des, err := os.ReadDir(b.checkpointRoot())
	if errors.Is(err, fs.ErrNotExist) {
		return []provider.CheckpointArtifact{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list local checkpoints: %w", err)
	}
	out := []provider.CheckpointArtifact{}
	for _, de := range des {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !de.IsDir() || !lease.IsCheckpointID(de.Name()) {
			continue
		}
		a, err := b.readCheckpoint(de.Name())
		if err != nil {
			b.rt.Logger.Warn("read local checkpoint record", "checkpoint", de.Name(), "err", err)
			continue
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(x, y provider.CheckpointArtifact) int { return strings.Compare(x.ID, y.ID) })
	return out, nil
}

// readCheckpoint reads the record of checkpoint id (a valid ID).
func (b *Backend) readCheckpoint(id string) (provider.CheckpointArtifact, error) {
	file := filepath.Join(b.checkpointRoot(), id, checkpointFile)
	body, err := os.ReadFile(file)
	if err != nil {
		return provider.CheckpointArtifact{}, err
	}
	var a provider.CheckpointArtifact
	if err := json.Unmarshal(body, &a); err != nil {
		return provider.CheckpointArtifact{}, fmt.Errorf("parse %s: %w", file, err)
	}
	if a.ID != id {
		return provider.CheckpointArtifact{}, fmt.Errorf("%s describes checkpoint %q, not %q", file, a.ID, id)
	}
	return a, nil
}

// checkArtifact refuses an artifact that is not one of this backend's
// before its ID becomes a path.
func (b *Backend) checkArtifact(a provider.CheckpointArtifact) error {
	switch {
	case !lease.IsCheckpointID(a.ID):
		return fmt.Errorf("artifact ID %q is malformed: a local checkpoint's is its checkpoint ID, ckp_ and 12 lowercase hex digits", a.ID)
	case a.Provider != "" && a.Provider != Name:
		return fmt.Errorf("artifact %s belongs to provider %q, not %q", a.ID, a.Provider, Name)
	case a.Locators["root"] != "" && filepath.Clean(a.Locators["root"]) != b.cfg.Root:
		return fmt.Errorf("artifact %s is kept under root %s, not this provider's root %s: %w", a.ID, a.Locators["root"], b.cfg.Root, provider.ErrPrecondition)
	}
	return nil
}

// findCheckpoint returns the record of artifact a and the directory of
// its copy of the work root; a checkpoint that is gone is ErrNotFound.
func (b *Backend) findCheckpoint(a provider.CheckpointArtifact) (provider.CheckpointArtifact, string, error) {
	if err := b.checkArtifact(a); err != nil {
		return provider.CheckpointArtifact{}, "", err
	}
	rec, err := b.readCheckpoint(a.ID)
	if errors.Is(err, fs.ErrNotExist) {
		return provider.CheckpointArtifact{}, "", fmt.Errorf("checkpoint %s: %w", a.ID, provider.ErrNotFound)
	}
	if err != nil {
		return provider.CheckpointArtifact{}, "", err
	}
	return rec, filepath.Join(b.checkpointRoot(), a.ID, workDir), nil
}

// DeleteCheckpoint removes the checkpoint. It is first renamed out of
// sight, so that it is never listed half deleted; one that is gone
// already is deleted.
func (b *Backend) DeleteCheckpoint(_ context.Context, req provider.CheckpointDeleteRequest) error {
	a := req.Artifact
	if err := b.checkArtifact(a); err != nil {
		return fmt.Errorf("delete local checkpoint: %w", err)
	}
	dir := filepath.Join(b.checkpointRoot(), a.ID)
	trash, err := newStaging(b.checkpointRoot(), a.ID)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no checkpoints at all
	}
	if err != nil {
		return fmt.Errorf("delete local checkpoint %s: %w", a.ID, err)
	}
	err = os.Rename(dir, filepath.Join(trash, a.ID))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("delete local checkpoint %s: %w", a.ID, err)
	} else {
		err = nil
	}
	if rmErr := removeTree(trash); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("delete local checkpoint %s: %w", a.ID, rmErr))
	}
	if err == nil {
		b.rt.Logger.Info("local checkpoint deleted", "checkpoint", a.ID)
	}
	return err
}

// Fork acquires a new box, as Acquire does, whose work root is a copy of
// the checkpoint's: the source lease's work directories under it, as they
// were. A checkpoint that is gone fails with ErrNotFound before anything
// is made.
func (b *Backend) Fork(ctx context.Context, req provider.ForkRequest) (provider.LeaseTarget, error) {
	_, from, err := b.findCheckpoint(req.Artifact)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("fork local checkpoint: %w", err)
	}
	target, err := b.acquireFrom(ctx, req.AcquireRequest, from)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	b.rt.Logger.Info("local lease forked", "lease", req.LeaseID, "checkpoint", req.Artifact.ID, "port", target.Port, "expires", target.ExpiresAt)
	return target, nil
}

// Restore replaces the work root of the running box req.Lease with a copy
// of the checkpoint's; the box keeps its key, record and serving process.
// The copy is made beside the work root and swapped in by renames, so a
// restore that fails (a checkpoint that is gone fails with ErrNotFound)
// leaves the work root as it was.
func (b *Backend) Restore(ctx context.Context, req provider.RestoreRequest) (provider.LeaseTarget, error) {
	target, err := b.restore(ctx, req)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("restore local lease %s: %w", req.Lease.LeaseID, err)
	}
	b.rt.Logger.Info("local lease restored", "lease", req.Lease.LeaseID, "checkpoint", req.Artifact.ID)
	return target, nil
}

func (b *Backend) restore(ctx context.Context, req provider.RestoreRequest) (provider.LeaseTarget, error) {
	id := req.Lease.LeaseID
	if err := checkLeaseID(id); err != nil {
		return provider.LeaseTarget{}, err
	}
	_, from, err := b.findCheckpoint(req.Artifact)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	rec, err := b.liveRecord(ctx, id)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	if req.PublicKey != "" {
		want, err := parsePublicKey(req.PublicKey)
		if err != nil {
			return provider.LeaseTarget{}, fmt.Errorf("lease public key: %w", err)
		}
		have, err := parsePublicKey(rec.AuthorizedKey)
		if err != nil || formatPublicKey(have) != formatPublicKey(want) {
			return provider.LeaseTarget{}, fmt.Errorf("the box accepts only its lease's key, which is not the key given: %w", provider.ErrPrecondition)
		}
	}
	dir := b.leaseDir(id)
	staging, err := os.MkdirTemp(dir, stagingPrefix)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	keep := false // the old work root is in staging and could not be put back
	defer func() {
		if !keep {
			_ = removeTree(staging)
		}
	}()
	c := &copier{clone: b.clone}
	fresh, old, work := filepath.Join(staging, "new"), filepath.Join(staging, "old"), filepath.Join(dir, workDir)
	if err := c.copyTree(ctx, from, fresh); err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("copy checkpoint %s: %w", req.Artifact.ID, notFoundIfGone(err))
	}
	if err := ctx.Err(); err != nil {
		return provider.LeaseTarget{}, err
	}
	if err := os.Rename(work, old); err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("move the work root aside: %w", err)
	}
	if err := os.Rename(fresh, work); err != nil {
		err = fmt.Errorf("move the restored work root into place: %w", err)
		if rerr := os.Rename(old, work); rerr != nil {
			keep = true
			err = errors.Join(err, fmt.Errorf("put the old work root back (it is %s): %w", old, rerr))
		}
		return provider.LeaseTarget{}, err
	}
	return rec.target(dir), nil
}

// notFoundIfGone marks a copy that failed because its source is gone (a
// checkpoint deleted meanwhile) as ErrNotFound.
func notFoundIfGone(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (%w)", provider.ErrNotFound, err)
	}
	return err
}

// stagingOwnerFile, in a staging directory under the checkpoints
// directory, names the process that made it, so that cleanup removes the
// staging directories of processes that died (SIGKILL) half-way.
const stagingOwnerFile = "owner.json"

// stagingOwner is the content of stagingOwnerFile (see internal/proc).
type stagingOwner struct {
	PID   int    `json:"pid"`
	Start string `json:"start,omitempty"`
}

// newStaging makes a staging directory for checkpoint id under parent,
// owned by this process.
func newStaging(parent, id string) (string, error) {
	dir, err := os.MkdirTemp(parent, stagingPrefix+id+"-")
	if err != nil {
		return "", err
	}
	var o stagingOwner
	o.PID, o.Start = procid.Self()
	body, err := json.Marshal(o)
	if err == nil {
		err = atomicfile.Write(filepath.Join(dir, stagingOwnerFile), body)
	}
	if err != nil {
		return "", errors.Join(err, removeTree(dir))
	}
	return dir, nil
}

// sweepStaging removes (unless dryRun) the staging directories under the
// checkpoints directory whose process is gone, or, without an owner, that
// are older than startGrace at now: the partial copies and half-deleted
// checkpoints of a process that was killed. They are no checkpoints, so
// they are logged rather than reported as cleanup decisions.
func (b *Backend) sweepStaging(ctx context.Context, now time.Time, dryRun bool) {
	des, err := os.ReadDir(b.checkpointRoot())
	if err != nil {
		return
	}
	for _, de := range des {
		if ctx.Err() != nil || !de.IsDir() || !strings.HasPrefix(de.Name(), stagingPrefix) {
			continue
		}
		dir := filepath.Join(b.checkpointRoot(), de.Name())
		var o stagingOwner
		body, err := os.ReadFile(filepath.Join(dir, stagingOwnerFile))
		if err == nil {
			err = json.Unmarshal(body, &o)
		}
		var why string
		switch info, ierr := de.Info(); {
		case err == nil && procid.Gone(o.PID, o.Start):
			why = fmt.Sprintf("its process (pid %d) is gone", o.PID)
		case err != nil && ierr == nil && now.After(info.ModTime().Add(startGrace)):
			why = "it names no process and is older than " + startGrace.String()
		default:
			continue
		}
		if dryRun {
			b.rt.Logger.Info("local checkpoint leftovers would be removed", "dir", dir, "reason", why)
			continue
		}
		if err := removeTree(dir); err != nil {
			b.rt.Logger.Warn("remove local checkpoint leftovers", "dir", dir, "err", err)
			continue
		}
		b.rt.Logger.Info("local checkpoint leftovers removed", "dir", dir, "reason", why)
	}
}
