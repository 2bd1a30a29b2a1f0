package digitalocean

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/digitalocean/godo"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// A native checkpoint of a DigitalOcean lease is a snapshot of its
// Droplet (a snapshot action), named after the checkpoint and tagged, as
// soon as it exists, with the ownership labels, the checkpoint's ID and
// the source lease (as tags, like the Droplets'). A fork is a new Droplet
// created from the snapshot, in a region that has it, bootstrapped by its
// own user data (cloud-init sees a new instance: the new lease key, a new
// host key). A restore rebuilds the lease's Droplet from the snapshot,
// keeping the Droplet's user data: the box comes back with the lease's
// key and the host key its host_key tag pins, either because cloud-init
// runs that user data again (a snapshot of another Droplet) or because
// the snapshot has them already (one of this Droplet).

// snapshotName is the name of the snapshot of a checkpoint.
func snapshotName(checkpointID string) string { return "crabbox-" + checkpointID }

// CreateCheckpoint snapshots the lease's Droplet, waits for the action,
// and tags the snapshot. If that fails after the snapshot exists it
// deletes the snapshot.
func (b *Backend) CreateCheckpoint(ctx context.Context, req provider.CheckpointRequest) (provider.CheckpointArtifact, error) {
	a, err := b.createCheckpoint(ctx, req)
	if err != nil {
		return provider.CheckpointArtifact{}, fmt.Errorf("checkpoint digitalocean lease %s: %w", req.Lease.LeaseID, err)
	}
	b.rt.Logger.Info("digitalocean checkpoint created", "lease", req.Lease.LeaseID, "checkpoint", req.CheckpointID, "snapshot", a.ID)
	return a, nil
}

func (b *Backend) createCheckpoint(ctx context.Context, req provider.CheckpointRequest) (a provider.CheckpointArtifact, err error) {
	labels, err := cloud.CheckpointLabels(Name, req)
	if err != nil {
		return a, err
	}
	tags, err := b.codec.Tags(labels)
	if err != nil {
		return a, err
	}
	m, err := b.LeaseMachine(ctx, req.Lease)
	if err != nil {
		return a, err
	}
	droplet, err := dropletID(m.ID)
	if err != nil {
		return a, err
	}
	name := snapshotName(req.CheckpointID)
	action, _, err := b.client.DropletActions.Snapshot(ctx, droplet, name)
	if err != nil {
		return a, apiError("snapshot droplet "+m.ID, err)
	}
	if err := b.waitAction(ctx, action); err != nil {
		return a, fmt.Errorf("snapshot droplet %s: %w", m.ID, err)
	}
	img, err := b.findSnapshot(ctx, droplet, name)
	if err != nil {
		return a, err
	}
	defer func() {
		if err != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if derr := b.deleteImage(dctx, img.ID); derr != nil {
				err = errors.Join(err, fmt.Errorf("delete the untagged snapshot %d (left behind): %w", img.ID, derr))
			}
		}
	}()
	res := []godo.Resource{{ID: strconv.Itoa(img.ID), Type: godo.ImageResourceType}}
	for _, t := range tags {
		if _, _, err := b.client.Tags.Create(ctx, &godo.TagCreateRequest{Name: t}); err != nil {
			return a, apiError("create tag "+t, err)
		}
		if _, err := b.client.Tags.TagResources(ctx, t, &godo.TagResourcesRequest{Resources: res}); err != nil {
			return a, apiError(fmt.Sprintf("tag snapshot %d", img.ID), err)
		}
	}
	img, _, err = b.client.Images.GetByID(ctx, img.ID)
	if err != nil {
		return a, apiError("read snapshot", err)
	}
	return b.artifact(img)
}

// waitAction polls action a until it completes; an errored action is an
// error.
func (b *Backend) waitAction(ctx context.Context, a *godo.Action) error {
	if a == nil {
		return errors.New("the API returned no action")
	}
	pace := cloud.NewBackoff(b.cfg.PollInterval)
	for {
		switch a.Status {
		case godo.ActionCompleted:
			return nil
		case "errored":
			return fmt.Errorf("action %d (%s) errored: %w", a.ID, a.Type, provider.ErrTransient)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for action %d (%s): %w", a.ID, a.Type, ctx.Err())
		case <-b.rt.Clock.After(pace.Next()):
		}
		next, _, err := b.client.Actions.Get(ctx, a.ID)
		if err != nil {
			return apiError(fmt.Sprintf("read action %d", a.ID), err)
		}
		a = next
	}
}

// findSnapshot returns the newest snapshot of the droplet called name.
func (b *Backend) findSnapshot(ctx context.Context, droplet int, name string) (*godo.Image, error) {
	var found *godo.Image
	opt := &godo.ListOptions{Page: 1, PerPage: 200}
	for {
		page, resp, err := b.client.Droplets.Snapshots(ctx, droplet, opt)
		if err != nil {
			return nil, apiError("list the snapshots of droplet "+strconv.Itoa(droplet), err)
		}
		for i := range page {
			if page[i].Name == name && (found == nil || page[i].Created > found.Created) {
				found = &page[i]
			}
		}
		if resp == nil || resp.Links == nil || resp.Links.IsLastPage() || len(page) == 0 {
			break
		}
		opt.Page++
	}
	if found == nil {
		return nil, fmt.Errorf("droplet %d has no snapshot %s after its snapshot action", droplet, name)
	}
	return found, nil
}

// artifact is the checkpoint artifact of snapshot img.
func (b *Backend) artifact(img *godo.Image) (provider.CheckpointArtifact, error) {
	created, err := time.Parse(time.RFC3339, img.Created)
	if err != nil {
		return provider.CheckpointArtifact{}, fmt.Errorf("snapshot %d: creation time %q: %w", img.ID, img.Created, err)
	}
	return cloud.Artifact(Name, strconv.Itoa(img.ID), b.codec.Labels(img.Tags), created, int64(img.SizeGigaBytes*1e9)), nil
}

// ListCheckpoints returns the snapshots tagged as crabbox checkpoints of
// this provider.
func (b *Backend) ListCheckpoints(ctx context.Context, _ provider.CheckpointListRequest) ([]provider.CheckpointArtifact, error) {
	out := []provider.CheckpointArtifact{}
	tag := b.codec.Tag(cloud.LabelProvider, Name)
	opt := &godo.ListOptions{Page: 1, PerPage: 200}
	for {
		page, resp, err := b.client.Images.ListByTag(ctx, tag, opt)
		if err != nil {
			return nil, fmt.Errorf("list digitalocean checkpoints: %w", apiError("list images tagged "+tag, err))
		}
		for i := range page {
			if page[i].Type != "snapshot" || !cloud.IsCheckpoint(Name, b.codec.Labels(page[i].Tags)) {
				continue
			}
			a, err := b.artifact(&page[i])
			if err != nil {
				b.rt.Logger.Warn("digitalocean checkpoint with an unreadable creation time", "snapshot", page[i].ID, "err", err)
				continue
			}
			out = append(out, a)
		}
		if resp == nil || resp.Links == nil || resp.Links.IsLastPage() || len(page) == 0 {
			return out, nil
		}
		opt.Page++
	}
}

// DeleteCheckpoint deletes the artifact's snapshot, if it is still there
// and is a crabbox checkpoint.
func (b *Backend) DeleteCheckpoint(ctx context.Context, req provider.CheckpointDeleteRequest) error {
	id, err := imageID(req.Artifact)
	if err == nil {
		_, err = b.checkpointImage(ctx, id)
		if errors.Is(err, provider.ErrNotFound) {
			return nil
		}
	}
	if err == nil {
		err = b.deleteImage(ctx, id)
	}
	if err != nil {
		return fmt.Errorf("delete digitalocean checkpoint %s: %w", req.Artifact.CheckpointID, err)
	}
	b.rt.Logger.Info("digitalocean checkpoint deleted", "checkpoint", req.Artifact.CheckpointID, "snapshot", id)
	return nil
}

// deleteImage deletes snapshot id; one already gone counts as deleted.
func (b *Backend) deleteImage(ctx context.Context, id int) error {
	if _, err := b.client.Images.Delete(ctx, id); err != nil && !isNotFound(err) {
		return apiError(fmt.Sprintf("delete snapshot %d", id), err)
	}
	return nil
}

// imageID is the snapshot ID of artifact a.
func imageID(a provider.CheckpointArtifact) (int, error) {
	if a.Provider != "" && a.Provider != Name {
		return 0, fmt.Errorf("artifact %s is a %s artifact: %w", a.ID, a.Provider, provider.ErrPrecondition)
	}
	id, err := strconv.Atoi(a.ID)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("artifact ID %q is not a DigitalOcean snapshot ID: %w", a.ID, provider.ErrPrecondition)
	}
	return id, nil
}

// checkpointImage reads snapshot id and checks that it is a crabbox
// checkpoint of this provider; a missing one is ErrNotFound.
func (b *Backend) checkpointImage(ctx context.Context, id int) (*godo.Image, error) {
	img, _, err := b.client.Images.GetByID(ctx, id)
	switch {
	case err != nil:
		return nil, apiError(fmt.Sprintf("read snapshot %d", id), err)
	case img == nil:
		return nil, fmt.Errorf("snapshot %d: %w", id, provider.ErrNotFound)
	case img.Type != "snapshot" || !cloud.IsCheckpoint(Name, b.codec.Labels(img.Tags)):
		return nil, fmt.Errorf("image %d is not a crabbox checkpoint of this provider: %w", id, provider.ErrPrecondition)
	}
	return img, nil
}

// Fork acquires a lease whose Droplet is created from the artifact's
// snapshot, in the first configured region that has it, with all of
// Acquire's duties.
func (b *Backend) Fork(ctx context.Context, req provider.ForkRequest) (provider.LeaseTarget, error) {
	target, err := b.fork(ctx, req)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("fork digitalocean checkpoint %s: %w", req.Artifact.CheckpointID, err)
	}
	return target, nil
}

func (b *Backend) fork(ctx context.Context, req provider.ForkRequest) (provider.LeaseTarget, error) {
	id, err := imageID(req.Artifact)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	img, err := b.checkpointImage(ctx, id)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	return b.AcquireFrom(ctx, req.AcquireRequest, tagcloud.Source{Image: strconv.Itoa(img.ID), Regions: slices.Clone(img.Regions)})
}

// Restore rebuilds the lease's Droplet from the artifact's snapshot,
// keeping its user data, and waits until it answers SSH with the host key
// its host_key tag pins. req.PublicKey must be the lease's key (the one
// its user data installs): a rebuild cannot install another.
func (b *Backend) Restore(ctx context.Context, req provider.RestoreRequest) (provider.LeaseTarget, error) {
	target, err := b.restore(ctx, req)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("restore digitalocean lease %s from checkpoint %s: %w", req.Lease.LeaseID, req.Artifact.CheckpointID, err)
	}
	b.rt.Logger.Info("digitalocean lease restored", "lease", req.Lease.LeaseID, "checkpoint", req.Artifact.CheckpointID,
		"snapshot", req.Artifact.ID, "droplet", target.CloudID)
	return target, nil
}

func (b *Backend) restore(ctx context.Context, req provider.RestoreRequest) (provider.LeaseTarget, error) {
	if _, err := lease.ParsePublicKey(req.PublicKey); err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("public key: %w", err)
	}
	id, err := imageID(req.Artifact)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	m, err := b.LeaseMachine(ctx, req.Lease)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	if _, err := cloud.ParseHostKeyLabel(b.Labels(m)[cloud.LabelHostKey]); err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("droplet %s: %w", m.ID, err)
	}
	droplet, err := dropletID(m.ID)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	img, err := b.checkpointImage(ctx, id)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	action, _, err := b.client.DropletActions.RebuildByImageID(ctx, droplet, img.ID)
	if err != nil {
		return provider.LeaseTarget{}, apiError(fmt.Sprintf("rebuild droplet %s from snapshot %d", m.ID, img.ID), err)
	}
	if err := b.waitAction(ctx, action); err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("rebuild droplet %s from snapshot %d: %w", m.ID, img.ID, err)
	}
	return b.Rebuilt(ctx, m.ID)
}
