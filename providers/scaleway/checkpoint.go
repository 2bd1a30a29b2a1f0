package scaleway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/scaleway/scaleway-sdk-go/api/instance/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// A native checkpoint of a Scaleway lease is a snapshot of its server's
// root volume and an image made from that snapshot, both tagged with the
// ownership labels, the checkpoint's ID and the source lease (as
// "key:value" tags, like the servers'). A fork is a new server created from
// the image in its zone, bootstrapped by its own user data (cloud-init sees
// a new instance: the new lease key, a new host key). The instance API has
// no rebuild of a server from an image, so the provider has no restore.
//
// The artifact's ID is "zone/image ID". A tagged snapshot without an image
// (a checkpoint that failed between the two) is listed too, as
// "zone/snapshot/snapshot ID", so that deleting a checkpoint's artifacts
// deletes it as well.

// snapshotKind marks the artifact ID of a bare snapshot.
const snapshotKind = "snapshot"

// CreateCheckpoint snapshots the lease's root volume, makes an image of
// the snapshot and waits until both are available. If that fails it
// deletes what it made.
func (b *Backend) CreateCheckpoint(ctx context.Context, req provider.CheckpointRequest) (provider.CheckpointArtifact, error) {
	a, err := b.createCheckpoint(ctx, req)
	if err != nil {
		return provider.CheckpointArtifact{}, fmt.Errorf("checkpoint scaleway lease %s: %w", req.Lease.LeaseID, err)
	}
	b.rt.Logger.Info("scaleway checkpoint created", "lease", req.Lease.LeaseID, "checkpoint", req.CheckpointID, "image", a.ID)
	return a, nil
}

func (b *Backend) createCheckpoint(ctx context.Context, req provider.CheckpointRequest) (a provider.CheckpointArtifact, err error) {
	labels, err := cloud.CheckpointLabels(Name, req)
	if err != nil {
		return a, err
	}
	tags, err := tagCodec.Tags(labels)
	if err != nil {
		return a, err
	}
	srv, err := b.leaseServer(ctx, req.Lease)
	if err != nil {
		return a, err
	}
	root := srv.Volumes["0"]
	if root == nil {
		return a, fmt.Errorf("server %s has no root volume", srv.ID)
	}
	name := "crabbox-" + req.CheckpointID
	zone := srv.Zone
	snap, err := b.api.CreateSnapshot(&instance.CreateSnapshotRequest{
		Zone: zone, Name: name, VolumeID: scw.StringPtr(root.ID), Tags: &tags, Project: scw.StringPtr(b.cfg.ProjectID),
		VolumeType: instance.SnapshotVolumeTypeLSSD,
	}, scw.WithContext(ctx))
	if err != nil {
		return a, apiError(ctx, "snapshot the root volume of server "+srv.ID, err)
	}
	if snap.Snapshot == nil {
		return a, errors.New("snapshot: the API returned no snapshot")
	}
	snapID := snap.Snapshot.ID
	var imageID string
	defer func() {
		if err != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if derr := b.deleteImageAndSnapshot(dctx, zone, imageID, snapID); derr != nil {
				err = errors.Join(err, fmt.Errorf("delete what the checkpoint made (left for cleanup): %w", derr))
			}
		}
	}()
	if err := b.waitSnapshot(ctx, zone, snapID); err != nil {
		return a, err
	}
	img, err := b.api.CreateImage(&instance.CreateImageRequest{
		Zone: zone, Name: name, RootVolume: snapID, Arch: srv.Arch, Project: scw.StringPtr(b.cfg.ProjectID), Tags: tags,
	}, scw.WithContext(ctx))
	if err != nil {
		return a, apiError(ctx, "make an image of snapshot "+snapID, err)
	}
	if img.Image == nil {
		return a, errors.New("make an image: the API returned no image")
	}
	imageID = img.Image.ID
	image, err := b.waitImage(ctx, zone, imageID)
	if err != nil {
		return a, err
	}
	return imageArtifact(image), nil
}

// waitSnapshot polls snapshot id until it is available.
func (b *Backend) waitSnapshot(ctx context.Context, zone scw.Zone, id string) error {
	pace := cloud.NewBackoff(b.cfg.PollInterval)
	for {
		res, err := b.api.GetSnapshot(&instance.GetSnapshotRequest{Zone: zone, SnapshotID: id}, scw.WithContext(ctx))
		if err != nil {
			return apiError(ctx, "read snapshot "+id, err)
		}
		switch res.Snapshot.State {
		case instance.SnapshotStateAvailable:
			return nil
		case instance.SnapshotStateError, instance.SnapshotStateInvalidData:
			return fmt.Errorf("snapshot %s is %s: %w", id, res.Snapshot.State, provider.ErrTransient)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for snapshot %s: %w", id, ctx.Err())
		case <-b.rt.Clock.After(pace.Next()):
		}
	}
}

// waitImage polls image id until it is available.
func (b *Backend) waitImage(ctx context.Context, zone scw.Zone, id string) (*instance.Image, error) {
	pace := cloud.NewBackoff(b.cfg.PollInterval)
	for {
		res, err := b.api.GetImage(&instance.GetImageRequest{Zone: zone, ImageID: id}, scw.WithContext(ctx))
		if err != nil {
			return nil, apiError(ctx, "read image "+id, err)
		}
		switch res.Image.State {
		case instance.ImageStateAvailable:
			return res.Image, nil
		case instance.ImageStateError:
			return nil, fmt.Errorf("image %s is %s: %w", id, res.Image.State, provider.ErrTransient)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for image %s: %w", id, ctx.Err())
		case <-b.rt.Clock.After(pace.Next()):
		}
	}
}

// imageArtifact is the checkpoint artifact of image img.
func imageArtifact(img *instance.Image) provider.CheckpointArtifact {
	var created time.Time
	if img.CreationDate != nil {
		created = *img.CreationDate
	}
	var size int64
	if img.RootVolume != nil {
		size = int64(img.RootVolume.Size)
	}
	a := cloud.Artifact(Name, string(img.Zone)+"/"+img.ID, tagCodec.Labels(img.Tags), created, size)
	a.Locators = provider.Config{"zone": string(img.Zone)}
	return a
}

// snapshotArtifact is the checkpoint artifact of a snapshot without an
// image.
func snapshotArtifact(s *instance.Snapshot) provider.CheckpointArtifact {
	var created time.Time
	if s.CreationDate != nil {
		created = *s.CreationDate
	}
	a := cloud.Artifact(Name, string(s.Zone)+"/"+snapshotKind+"/"+s.ID, tagCodec.Labels(s.Tags), created, int64(s.Size))
	a.Locators = provider.Config{"zone": string(s.Zone)}
	return a
}

// checkpointFilter is the tag filter of crabbox's checkpoint artifacts.
func checkpointFilter() *string {
	own := cloud.CheckpointOwnership(Name)
	return scw.StringPtr(tagCodec.Tag(cloud.LabelCrabbox, own[cloud.LabelCrabbox]) + "," + tagCodec.Tag(cloud.LabelProvider, own[cloud.LabelProvider]))
}

// ListCheckpoints returns the images tagged as crabbox checkpoints of this
// provider in every configured zone, and the tagged snapshots that no such
// image uses.
func (b *Backend) ListCheckpoints(ctx context.Context, _ provider.CheckpointListRequest) ([]provider.CheckpointArtifact, error) {
	out := []provider.CheckpointArtifact{}
	for _, z := range b.cfg.Zones {
		zone := scw.Zone(z)
		imgs, err := b.api.ListImages(&instance.ListImagesRequest{Zone: zone, Project: scw.StringPtr(b.cfg.ProjectID), Public: scw.BoolPtr(false), Tags: checkpointFilter()},
			scw.WithContext(ctx), scw.WithAllPages())
		if err != nil {
			return nil, fmt.Errorf("list scaleway checkpoints: %w", apiError(ctx, "list images in "+z, err))
		}
		used := map[string]bool{}
		for _, img := range imgs.Images {
			if img.RootVolume != nil {
				used[img.RootVolume.ID] = true
			}
			if cloud.IsCheckpoint(Name, tagCodec.Labels(img.Tags)) {
				out = append(out, imageArtifact(img))
			}
		}
		snaps, err := b.api.ListSnapshots(&instance.ListSnapshotsRequest{Zone: zone, Project: scw.StringPtr(b.cfg.ProjectID), Tags: checkpointFilter()},
			scw.WithContext(ctx), scw.WithAllPages())
		if err != nil {
			return nil, fmt.Errorf("list scaleway checkpoints: %w", apiError(ctx, "list snapshots in "+z, err))
		}
		for _, s := range snaps.Snapshots {
			if !used[s.ID] && cloud.IsCheckpoint(Name, tagCodec.Labels(s.Tags)) {
				out = append(out, snapshotArtifact(s))
			}
		}
	}
	return out, nil
}

// artifactRef is where an artifact is: its zone and its image ID, or the
// ID of a bare snapshot.
type artifactRef struct {
	zone            scw.Zone
	image, snapshot string
}

func parseArtifact(a provider.CheckpointArtifact) (artifactRef, error) {
	if a.Provider != "" && a.Provider != Name {
		return artifactRef{}, fmt.Errorf("artifact %s is a %s artifact: %w", a.ID, a.Provider, provider.ErrPrecondition)
	}
	parts := strings.Split(a.ID, "/")
	bad := fmt.Errorf("artifact ID %q is not zone/image ID or zone/snapshot/snapshot ID: %w", a.ID, provider.ErrPrecondition)
	switch {
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		return artifactRef{zone: scw.Zone(parts[0]), image: parts[1]}, nil
	case len(parts) == 3 && parts[0] != "" && parts[1] == snapshotKind && parts[2] != "":
		return artifactRef{zone: scw.Zone(parts[0]), snapshot: parts[2]}, nil
	}
	return artifactRef{}, bad
}

// DeleteCheckpoint deletes the artifact's image and its snapshot (or the
// bare snapshot), if they are still there and are crabbox checkpoints.
func (b *Backend) DeleteCheckpoint(ctx context.Context, req provider.CheckpointDeleteRequest) error {
	if err := b.deleteCheckpoint(ctx, req.Artifact); err != nil {
		return fmt.Errorf("delete scaleway checkpoint %s: %w", req.Artifact.CheckpointID, err)
	}
	b.rt.Logger.Info("scaleway checkpoint deleted", "checkpoint", req.Artifact.CheckpointID, "artifact", req.Artifact.ID)
	return nil
}

func (b *Backend) deleteCheckpoint(ctx context.Context, a provider.CheckpointArtifact) error {
	ref, err := parseArtifact(a)
	if err != nil {
		return err
	}
	snapID := ref.snapshot
	if ref.image != "" {
		img, err := b.checkpointImage(ctx, ref.zone, ref.image)
		if errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if img.RootVolume != nil {
			snapID = img.RootVolume.ID
		}
	} else {
		res, err := b.api.GetSnapshot(&instance.GetSnapshotRequest{Zone: ref.zone, SnapshotID: snapID}, scw.WithContext(ctx))
		if err = apiError(ctx, "read snapshot "+snapID, err); errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if !cloud.IsCheckpoint(Name, tagCodec.Labels(res.Snapshot.Tags)) {
			return fmt.Errorf("snapshot %s is not a crabbox checkpoint of this provider: %w", snapID, provider.ErrPrecondition)
		}
	}
	return b.deleteImageAndSnapshot(ctx, ref.zone, ref.image, snapID)
}

// deleteImageAndSnapshot deletes the image (if id is set), then the
// snapshot (if set); ones already gone count as deleted.
func (b *Backend) deleteImageAndSnapshot(ctx context.Context, zone scw.Zone, image, snapshot string) error {
	if image != "" {
		err := b.api.DeleteImage(&instance.DeleteImageRequest{Zone: zone, ImageID: image}, scw.WithContext(ctx))
		if err = apiError(ctx, "delete image "+image, err); err != nil && !errors.Is(err, provider.ErrNotFound) {
			return err
		}
	}
	if snapshot != "" {
		err := b.api.DeleteSnapshot(&instance.DeleteSnapshotRequest{Zone: zone, SnapshotID: snapshot}, scw.WithContext(ctx))
		if err = apiError(ctx, "delete snapshot "+snapshot, err); err != nil && !errors.Is(err, provider.ErrNotFound) {
			return err
		}
	}
	return nil
}

// checkpointImage reads image id and checks that it is an available
// crabbox checkpoint of this provider; a missing one is ErrNotFound.
func (b *Backend) checkpointImage(ctx context.Context, zone scw.Zone, id string) (*instance.Image, error) {
	res, err := b.api.GetImage(&instance.GetImageRequest{Zone: zone, ImageID: id}, scw.WithContext(ctx))
	if err != nil {
		return nil, apiError(ctx, "read image "+id, err)
	}
	img := res.Image
	switch {
	case img == nil:
		return nil, fmt.Errorf("image %s: %w", id, provider.ErrNotFound)
	case !cloud.IsCheckpoint(Name, tagCodec.Labels(img.Tags)):
		return nil, fmt.Errorf("image %s is not a crabbox checkpoint of this provider: %w", id, provider.ErrPrecondition)
	case img.State != instance.ImageStateAvailable:
		return nil, fmt.Errorf("image %s is %s, not available: %w", id, img.State, provider.ErrPrecondition)
	}
	return img, nil
}

// Fork acquires a lease whose server is created from the artifact's image
// in its zone, with all of Acquire's duties.
func (b *Backend) Fork(ctx context.Context, req provider.ForkRequest) (provider.LeaseTarget, error) {
	target, err := b.fork(ctx, req)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("fork scaleway checkpoint %s: %w", req.Artifact.CheckpointID, err)
	}
	b.rt.Logger.Info("scaleway lease forked", "lease", req.LeaseID, "checkpoint", req.Artifact.CheckpointID,
		"image", req.Artifact.ID, "server", target.CloudID)
	return target, nil
}

func (b *Backend) fork(ctx context.Context, req provider.ForkRequest) (provider.LeaseTarget, error) {
	ref, err := parseArtifact(req.Artifact)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	if ref.image == "" {
		return provider.LeaseTarget{}, fmt.Errorf("artifact %s is a snapshot without an image (a failed checkpoint): %w", req.Artifact.ID, provider.ErrPrecondition)
	}
	img, err := b.checkpointImage(ctx, ref.zone, ref.image)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	return b.acquire(ctx, req.AcquireRequest, &source{zone: ref.zone, image: img.ID})
}
