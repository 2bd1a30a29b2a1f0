package docker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/internal/hexid"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	eng "github.com/crabbox-dev/crabbox/providers/docker/internal/engine"
	"github.com/crabbox-dev/crabbox/providers/local"
)

// A checkpoint is the box's container committed to a local image: its
// whole filesystem (the work root, the lease directories, whatever was
// installed), without the agent, which is a mount. The image is named
// checkpointRepo:<checkpoint ID> and carries the ownership labels, the
// checkpoint's (provider.LabelCheckpoint, provider.LabelSourceLease) and
// the caller's. The name is what makes it a live checkpoint: deleting one
// removes the name, and the image with it unless boxes started from it
// still run; such an image, untagged, is removed once its last box goes
// (sweepCheckpoints), or by `docker image prune`.
const checkpointRepo = "crabbox/checkpoint"

// Compile-time checks of the checkpoint interfaces.
var (
	_ provider.NativeForkBackend    = (*Backend)(nil)
	_ provider.NativeRestoreBackend = (*Backend)(nil)
)

// CreateCheckpoint commits the lease's container to a local image,
// pausing it meanwhile. If anything after the commit fails, it removes
// the image.
func (b *Backend) CreateCheckpoint(ctx context.Context, req provider.CheckpointRequest) (provider.CheckpointArtifact, error) {
	id := req.Lease.LeaseID
	if !lease.IsID(id) {
		return provider.CheckpointArtifact{}, fmt.Errorf("checkpoint docker lease: lease ID %q is malformed", id)
	}
	if !lease.IsCheckpointID(req.CheckpointID) {
		return provider.CheckpointArtifact{}, fmt.Errorf("checkpoint docker lease %s: checkpoint ID %q is malformed: want ckp_ and 12 lowercase hex digits", id, req.CheckpointID)
	}
	for k := range req.Labels {
		if err := checkExtraLabel(k); err != nil {
			return provider.CheckpointArtifact{}, fmt.Errorf("checkpoint docker lease %s: %w", id, err)
		}
	}
	x, err := b.find(ctx, id)
	if err != nil {
		return provider.CheckpointArtifact{}, fmt.Errorf("checkpoint: %w", err)
	}
	labels := maps.Clone(req.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[labelCrabbox] = "true"
	labels[labelCreatedBy] = "crabbox"
	labels[labelProvider] = Name
	labels[labelCheckpoint] = req.CheckpointID
	labels[labelSourceLease] = id
	keepDesktop(labels, x.labels)
	imageID, err := b.cli.ContainerCommit(ctx, x.containerID, eng.CommitOptions{
		Repo: checkpointRepo, Tag: req.CheckpointID, Pause: true,
		Comment: fmt.Sprintf("crabbox checkpoint %s of lease %s", req.CheckpointID, id),
		Labels:  maskLabels(labels, x.labels),
	})
	if err != nil {
		return provider.CheckpointArtifact{}, engineErr(fmt.Errorf("checkpoint docker lease %s: %w", id, err))
	}
	img, err := b.cli.ImageInspect(ctx, imageID)
	if err == nil && !isCheckpoint(img.Config.Labels) {
		err = fmt.Errorf("image %s lacks the checkpoint's labels", imageID)
	}
	if err != nil {
		err = engineErr(fmt.Errorf("checkpoint docker lease %s: %w", id, err))
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		if rerr := b.cli.ImageRemove(rctx, imageID, eng.ImageRemoveOptions{Force: true}); rerr != nil && !eng.IsNotFound(rerr) {
			return provider.CheckpointArtifact{}, errors.Join(err, fmt.Errorf("roll back: %w", rerr))
		}
		return provider.CheckpointArtifact{}, err
	}
	a := b.artifact(img.ID, img.Config.Labels, img.Size, img.Created)
	b.rt.Logger.Info("docker checkpoint created", "lease", id, "checkpoint", req.CheckpointID, "image", img.ID, "bytes", img.Size)
	return a, nil
}

// isCheckpoint reports whether labels mark an image as a checkpoint of
// this provider.
func isCheckpoint(labels map[string]string) bool {
	return labels[labelCrabbox] == "true" && labels[labelProvider] == Name && lease.IsCheckpointID(labels[labelCheckpoint])
}

// checkpointTag is the image name of a live checkpoint.
func checkpointTag(checkpointID string) string { return checkpointRepo + ":" + checkpointID }

// artifact describes a checkpoint image.
func (b *Backend) artifact(imageID string, labels map[string]string, size int64, created time.Time) provider.CheckpointArtifact {
	shown := map[string]string{}
	for k, v := range labels {
		if v != "" { // see maskLabels
			shown[k] = v
		}
	}
	a := provider.CheckpointArtifact{
		ID: imageID, Provider: Name, CheckpointID: labels[labelCheckpoint], SourceLease: labels[labelSourceLease],
		SizeBytes: size, CreatedAt: created.UTC(), Labels: shown,
	}
	if b.cfg.Host != "" {
		a.Locators = provider.Config{"host": b.cfg.Host}
	}
	return a
}

// checkpointLabels are the label filters of checkpoint images.
var checkpointLabels = []string{labelCrabbox + "=true", labelProvider + "=" + Name, labelCheckpoint}

// ListCheckpoints lists the engine's checkpoint images (those labelled
// as this provider's checkpoints and named as live ones), by checkpoint
// ID.
func (b *Backend) ListCheckpoints(ctx context.Context, _ provider.CheckpointListRequest) ([]provider.CheckpointArtifact, error) {
	images, err := b.cli.ImageList(ctx, eng.ImageListOptions{Labels: checkpointLabels, Dangling: new(false)})
	if err != nil {
		return nil, engineErr(fmt.Errorf("docker checkpoints: %w", err))
	}
	out := []provider.CheckpointArtifact{}
	for _, img := range images {
		if !isCheckpoint(img.Labels) || !slices.Contains(img.RepoTags, checkpointTag(img.Labels[labelCheckpoint])) {
			continue
		}
		out = append(out, b.artifact(img.ID, img.Labels, img.Size, time.Unix(img.Created, 0)))
	}
	slices.SortFunc(out, func(a, c provider.CheckpointArtifact) int { return strings.Compare(a.CheckpointID, c.CheckpointID) })
	return out, nil
}

// checkImageID checks that id is an image ID as the engine gives them.
func checkImageID(id string) error {
	if !hexid.Valid(id, "sha256:", 64) {
		return fmt.Errorf("checkpoint image ID %q is malformed: want sha256: and 64 lowercase hex digits", id)
	}
	return nil
}

// checkpointImage returns the live checkpoint image of a (ErrNotFound
// when it is gone or was deleted).
func (b *Backend) checkpointImage(ctx context.Context, a provider.CheckpointArtifact) (eng.Image, error) {
	if err := checkImageID(a.ID); err != nil {
		return eng.Image{}, err
	}
	img, err := b.cli.ImageInspect(ctx, a.ID)
	switch {
	case eng.IsNotFound(err):
		return eng.Image{}, fmt.Errorf("checkpoint %s: image %s is not on the docker engine: %w", a.CheckpointID, a.ID, provider.ErrNotFound)
	case err != nil:
		return eng.Image{}, engineErr(err)
	}
	labels := img.Config.Labels
	if !isCheckpoint(labels) || a.CheckpointID != "" && labels[labelCheckpoint] != a.CheckpointID {
		return eng.Image{}, fmt.Errorf("image %s is not the image of docker checkpoint %q (its labels: checkpoint %q, provider %q): left alone",
			a.ID, a.CheckpointID, labels[labelCheckpoint], labels[labelProvider])
	}
	if !slices.Contains(img.RepoTags, checkpointTag(labels[labelCheckpoint])) {
		return eng.Image{}, fmt.Errorf("checkpoint %s was deleted (image %s stays only while boxes started from it run): %w",
			labels[labelCheckpoint], a.ID, provider.ErrNotFound)
	}
	return img, nil
}

// DeleteCheckpoint deletes a checkpoint: it removes the image's
// checkpoint name, and the image unless boxes started from it (or from
// checkpoints of those) still run; then it is removed when the last of
// them goes. A checkpoint already gone is deleted.
func (b *Backend) DeleteCheckpoint(ctx context.Context, req provider.CheckpointDeleteRequest) error {
	a := req.Artifact
	img, err := b.checkpointImage(ctx, a)
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete docker checkpoint %s: %w", a.CheckpointID, err)
	}
	// Force lets the name go while a box uses the image, which the
	// engine then keeps, untagged.
	if err := b.cli.ImageRemove(ctx, checkpointTag(img.Config.Labels[labelCheckpoint]), eng.ImageRemoveOptions{Force: true}); err != nil && !eng.IsNotFound(err) {
		return engineErr(fmt.Errorf("delete docker checkpoint %s: %w", a.CheckpointID, err))
	}
	b.sweepCheckpoints(ctx)
	b.rt.Logger.Info("docker checkpoint deleted", "checkpoint", a.CheckpointID, "image", a.ID)
	return nil
}

// sweepRounds bounds sweepCheckpoints: each round can free the parents of
// the images it removed (checkpoints of boxes started from checkpoints).
const sweepRounds = 8

// sweepCheckpoints removes the images of deleted checkpoints that no box
// uses any more. It never fails its caller: what it leaves, a later sweep
// (or `docker image prune`) removes.
func (b *Backend) sweepCheckpoints(ctx context.Context) {
	for range sweepRounds {
		images, err := b.cli.ImageList(ctx, eng.ImageListOptions{Labels: checkpointLabels, Dangling: new(true)})
		if err != nil {
			b.rt.Logger.Debug("docker checkpoint sweep", "err", err)
			return
		}
		removed := false
		for _, img := range images {
			if !isCheckpoint(img.Labels) {
				continue
			}
			err := b.cli.ImageRemove(ctx, img.ID, eng.ImageRemoveOptions{})
			switch {
			case err == nil:
				removed = true
				b.rt.Logger.Debug("docker deleted checkpoint's image removed", "checkpoint", img.Labels[labelCheckpoint], "image", img.ID)
			case eng.IsConflict(err), eng.IsNotFound(err):
				// In use, or already gone.
			default:
				b.rt.Logger.Debug("docker checkpoint sweep", "image", img.ID, "err", err)
			}
		}
		if !removed {
			return
		}
	}
}

// Fork is Acquire of a box whose container is made from the checkpoint's
// image. The box accepts only req.PublicKey and has a host key of its own;
// the lease directories the image holds are replaced.
func (b *Backend) Fork(ctx context.Context, req provider.ForkRequest) (provider.LeaseTarget, error) {
	if err := b.checkRequest(req.AcquireRequest); err != nil {
		return provider.LeaseTarget{}, err
	}
	img, err := b.checkpointImage(ctx, req.Artifact)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	if provider.WantsDesktop(req.Labels) && img.Config.Labels[labelDesktopImage] != "true" {
		return provider.LeaseTarget{}, fmt.Errorf("checkpoint %s was not made of a desktop box: it cannot start one: %w", img.Config.Labels[labelCheckpoint], provider.ErrPrecondition)
	}
	unlock, err := b.lockAcquire(req.LeaseID)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	defer func() {
		if err := unlock(); err != nil {
			b.rt.Logger.Warn("docker acquire lock not removed", "lease", req.LeaseID, "err", err)
		}
	}()
	ckp := img.Config.Labels[labelCheckpoint]
	labels := boxLabels(b.cfg.Labels, req.Labels, req.LeaseID, req.Slug,
		req.CreatedAt, req.ExpiresAt, req.TTL, req.IdleTimeout, req.Keep)
	labels[labelCheckpoint] = ckp
	labels[labelSourceLease] = img.Config.Labels[labelSourceLease]
	keepDesktop(labels, img.Config.Labels)
	target, err := b.makeBox(ctx, boxSpec{
		name: containerName(req.Slug, req.LeaseID), image: img.ID, labels: maskLabels(labels, img.Config.Labels),
		record: local.AgentLease{
			ID: req.LeaseID, Slug: req.Slug, CreatedAt: req.CreatedAt.UTC(), ExpiresAt: req.ExpiresAt.UTC(),
			Labels: req.Labels, AuthorizedKey: req.PublicKey,
		},
		checkpoint: ckp,
	})
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	b.rt.Logger.Info("docker lease forked", "lease", req.LeaseID, "checkpoint", ckp, "container", target.CloudID, "port", target.Port)
	return target, nil
}

// Restore replaces the lease's container by one made from the
// checkpoint's image, with the lease's labels, record (its expiry, as
// Touch last moved it) and key req.PublicKey, and a new host key. The new
// container is made and serving before the old one is removed, so a
// restore that fails leaves the box as it was.
func (b *Backend) Restore(ctx context.Context, req provider.RestoreRequest) (provider.LeaseTarget, error) {
	id := req.Lease.LeaseID
	if !lease.IsID(id) {
		return provider.LeaseTarget{}, fmt.Errorf("restore docker lease: lease ID %q is malformed", id)
	}
	img, err := b.checkpointImage(ctx, req.Artifact)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("restore docker lease %s: %w", id, err)
	}
	old, err := b.find(ctx, id)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("restore: %w", err)
	}
	if !old.running() {
		return provider.LeaseTarget{}, fmt.Errorf("restore docker lease %s: container %s is %s: %w", id, old.name, old.state, provider.ErrNotFound)
	}
	rec, err := b.record(ctx, old)
	if err != nil {
		return provider.LeaseTarget{}, engineErr(fmt.Errorf("restore docker lease %s: read its lease record: %w", id, err))
	}
	ckp := img.Config.Labels[labelCheckpoint]
	labels := maps.Clone(old.labels)
	labels[labelCheckpoint] = ckp
	labels[labelSourceLease] = img.Config.Labels[labelSourceLease]
	keepDesktop(labels, img.Config.Labels)
	target, err := b.makeBox(ctx, boxSpec{
		// The lease's name is the old container's until it is removed.
		name: containerName(rec.Slug, id) + "-" + ckp, image: img.ID, labels: maskLabels(labels, img.Config.Labels),
		record: local.AgentLease{
			ID: id, Slug: rec.Slug, CreatedAt: rec.CreatedAt, ExpiresAt: rec.ExpiresAt,
			Labels: rec.Labels, AuthorizedKey: req.PublicKey,
		},
		checkpoint: ckp,
	})
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("restore docker lease %s: %w", id, err)
	}
	if err := b.remove(ctx, old.containerID); err != nil {
		err = fmt.Errorf("restore docker lease %s: remove its old container %s: %w", id, old.name, err)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		if rerr := b.remove(rctx, target.CloudID); rerr != nil {
			err = errors.Join(err, fmt.Errorf("roll back: %w", rerr))
		}
		return provider.LeaseTarget{}, err
	}
	if name := containerName(rec.Slug, id); b.cli.ContainerRename(ctx, target.CloudID, name) == nil {
		target.CloudID = name
	} else {
		b.rt.Logger.Warn("docker restored container keeps its temporary name", "lease", id, "container", target.CloudID)
	}
	if old.labels[labelCheckpoint] != "" {
		b.sweepCheckpoints(ctx)
	}
	b.rt.Logger.Info("docker lease restored", "lease", id, "checkpoint", ckp, "container", target.CloudID, "port", target.Port)
	return target, nil
}
