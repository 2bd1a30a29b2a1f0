package hetzner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// A native checkpoint of a Hetzner lease is a snapshot image of its
// server, labelled with the ownership labels, the checkpoint's ID and the
// source lease. A fork is a new server created from the image, bootstrapped
// by its own user data (cloud-init sees a new instance and runs it: the
// new lease key, a new host key). A restore rebuilds the lease's server
// from the image, keeping the server's user data: the box comes back with
// the lease's key and the host key its host_key label pins, either because
// cloud-init runs that user data again (an image of another server) or
// because the image already has them (an image of this server).

// CreateCheckpoint snapshots the lease's server and waits until the image
// is available. If that fails it deletes the image, when it knows it.
func (b *Backend) CreateCheckpoint(ctx context.Context, req provider.CheckpointRequest) (provider.CheckpointArtifact, error) {
	a, err := b.createCheckpoint(ctx, req)
	if err != nil {
		return provider.CheckpointArtifact{}, fmt.Errorf("checkpoint hetzner lease %s: %w", req.Lease.LeaseID, err)
	}
	b.rt.Logger.Info("hetzner checkpoint created", "lease", req.Lease.LeaseID, "checkpoint", req.CheckpointID, "image", a.ID)
	return a, nil
}

func (b *Backend) createCheckpoint(ctx context.Context, req provider.CheckpointRequest) (a provider.CheckpointArtifact, err error) {
	labels, err := cloud.CheckpointLabels(Name, req)
	if err != nil {
		return a, err
	}
	srv, err := b.leaseServer(ctx, req.Lease)
	if err != nil {
		return a, err
	}
	res, _, err := b.client.Server.CreateImage(ctx, srv, &hcloud.ServerCreateImageOpts{
		Type: hcloud.ImageTypeSnapshot, Labels: labels,
		Description: hcloud.Ptr("crabbox checkpoint " + req.CheckpointID + " of lease " + req.Lease.LeaseID),
	})
	if err != nil {
		return a, apiError(fmt.Sprintf("snapshot server %d", srv.ID), err)
	}
	if res.Image == nil {
		return a, fmt.Errorf("snapshot server %d: the API returned no image", srv.ID)
	}
	id := res.Image.ID
	defer func() {
		if err != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if derr := b.deleteImage(dctx, id); derr != nil {
				err = errors.Join(err, fmt.Errorf("delete the unfinished image %d (left for cleanup): %w", id, derr))
			}
		}
	}()
	if res.Action != nil {
		if err := b.client.Action.WaitFor(ctx, res.Action); err != nil {
			return a, fmt.Errorf("snapshot server %d into image %d: %w", srv.ID, id, err)
		}
	}
	img, _, err := b.client.Image.GetByID(ctx, id)
	switch {
	case err != nil:
		return a, apiError(fmt.Sprintf("read image %d", id), err)
	case img == nil:
		return a, fmt.Errorf("image %d disappeared: %w", id, provider.ErrNotFound)
	case img.Status != hcloud.ImageStatusAvailable:
		return a, fmt.Errorf("image %d is %s after its snapshot finished", id, img.Status)
	}
	return artifact(img), nil
}

// artifact is the checkpoint artifact of image img.
func artifact(img *hcloud.Image) provider.CheckpointArtifact {
	// image_size is in GB (10^9 bytes).
	return cloud.Artifact(Name, strconv.FormatInt(img.ID, 10), img.Labels, img.Created, int64(float64(img.ImageSize)*1e9))
}

// ListCheckpoints returns the snapshot images labelled as crabbox
// checkpoints of this provider.
func (b *Backend) ListCheckpoints(ctx context.Context, _ provider.CheckpointListRequest) ([]provider.CheckpointArtifact, error) {
	imgs, err := b.client.Image.AllWithOpts(ctx, hcloud.ImageListOpts{
		Type:     []hcloud.ImageType{hcloud.ImageTypeSnapshot},
		ListOpts: hcloud.ListOpts{LabelSelector: selector(cloud.CheckpointOwnership(Name)) + "," + provider.LabelCheckpoint},
	})
	if err != nil {
		return nil, fmt.Errorf("list hetzner checkpoints: %w", apiError("list images", err))
	}
	out := make([]provider.CheckpointArtifact, 0, len(imgs))
	for _, img := range imgs {
		if cloud.IsCheckpoint(Name, img.Labels) {
			out = append(out, artifact(img))
		}
	}
	return out, nil
}

// DeleteCheckpoint deletes the artifact's image, if it is still there and
// is a crabbox checkpoint.
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
		return fmt.Errorf("delete hetzner checkpoint %s: %w", req.Artifact.CheckpointID, err)
	}
	b.rt.Logger.Info("hetzner checkpoint deleted", "checkpoint", req.Artifact.CheckpointID, "image", id)
	return nil
}

// deleteImage deletes image id; one already gone counts as deleted.
func (b *Backend) deleteImage(ctx context.Context, id int64) error {
	_, err := b.client.Image.Delete(ctx, &hcloud.Image{ID: id})
	if err != nil && !hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		return apiError(fmt.Sprintf("delete image %d", id), err)
	}
	return nil
}

// imageID is the image ID of artifact a.
func imageID(a provider.CheckpointArtifact) (int64, error) {
	if a.Provider != "" && a.Provider != Name {
		return 0, fmt.Errorf("artifact %s is a %s artifact: %w", a.ID, a.Provider, provider.ErrPrecondition)
	}
	id, err := strconv.ParseInt(a.ID, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("artifact ID %q is not a Hetzner image ID: %w", a.ID, provider.ErrPrecondition)
	}
	return id, nil
}

// checkpointImage reads image id and checks that it is an available
// crabbox checkpoint of this provider; a missing image is ErrNotFound.
func (b *Backend) checkpointImage(ctx context.Context, id int64) (*hcloud.Image, error) {
	img, _, err := b.client.Image.GetByID(ctx, id)
	switch {
	case err != nil:
		return nil, apiError(fmt.Sprintf("read image %d", id), err)
	case img == nil:
		return nil, fmt.Errorf("image %d: %w", id, provider.ErrNotFound)
	case img.Type != hcloud.ImageTypeSnapshot || !cloud.IsCheckpoint(Name, img.Labels):
		return nil, fmt.Errorf("image %d is not a crabbox checkpoint of this provider: %w", id, provider.ErrPrecondition)
	case img.Status != hcloud.ImageStatusAvailable:
		return nil, fmt.Errorf("image %d is %s, not available: %w", id, img.Status, provider.ErrPrecondition)
	}
	return img, nil
}

// Fork acquires a lease whose server is created from the artifact's image,
// with all of Acquire's duties.
func (b *Backend) Fork(ctx context.Context, req provider.ForkRequest) (provider.LeaseTarget, error) {
	target, err := b.fork(ctx, req)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("fork hetzner checkpoint %s: %w", req.Artifact.CheckpointID, err)
	}
	b.rt.Logger.Info("hetzner lease forked", "lease", req.LeaseID, "checkpoint", req.Artifact.CheckpointID,
		"image", req.Artifact.ID, "server", target.CloudID, "host", target.Host, "port", target.Port)
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
	return b.acquire(ctx, req.AcquireRequest, img)
}

// Restore rebuilds the lease's server from the artifact's image, keeping
// its user data, and waits until it answers SSH with the host key its
// host_key label pins. req.PublicKey must be the lease's key (the one its
// user data installs): a rebuild cannot install another.
func (b *Backend) Restore(ctx context.Context, req provider.RestoreRequest) (provider.LeaseTarget, error) {
	target, err := b.restore(ctx, req)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("restore hetzner lease %s from checkpoint %s: %w", req.Lease.LeaseID, req.Artifact.CheckpointID, err)
	}
	b.rt.Logger.Info("hetzner lease restored", "lease", req.Lease.LeaseID, "checkpoint", req.Artifact.CheckpointID,
		"image", req.Artifact.ID, "server", target.CloudID)
	return target, nil
}

func (b *Backend) restore(ctx context.Context, req provider.RestoreRequest) (provider.LeaseTarget, error) {
	clock, log := b.rt.Clock, b.rt.Logger.With("lease", req.Lease.LeaseID)
	deadline := clock.Now().Add(b.cfg.BootTimeout)
	pub, err := lease.ParsePublicKey(req.PublicKey)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("public key: %w", err)
	}
	id, err := imageID(req.Artifact)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	srv, err := b.leaseServer(ctx, req.Lease)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	hostKey, err := cloud.ParseHostKeyLabel(srv.Labels[cloud.LabelHostKey])
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("server %d: %w", srv.ID, err)
	}
	if err := b.checkLeaseKey(ctx, req.Lease.LeaseID, pub.Marshal()); err != nil {
		return provider.LeaseTarget{}, err
	}
	img, err := b.checkpointImage(ctx, id)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	res, _, err := b.client.Server.RebuildWithResult(ctx, srv, hcloud.ServerRebuildOpts{Image: &hcloud.Image{ID: img.ID}})
	if err != nil {
		return provider.LeaseTarget{}, apiError(fmt.Sprintf("rebuild server %d from image %d", srv.ID, img.ID), err)
	}
	if res.Action != nil {
		if err := b.client.Action.WaitFor(ctx, res.Action); err != nil {
			return provider.LeaseTarget{}, fmt.Errorf("rebuild server %d from image %d: %w", srv.ID, img.ID, err)
		}
	}
	srv, ip, err := b.waitAddress(ctx, srv.ID, deadline)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	port, err := cloud.WaitForSSH(ctx, cloud.SSHWait{
		Host: ip, Ports: b.cfg.Ports, HostKey: hostKey, Clock: clock,
		Interval: b.cfg.PollInterval, Timeout: max(deadline.Sub(clock.Now()), time.Nanosecond), Dial: cloud.MappedDial(b.cfg.MapAddress), Log: log,
	})
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	if srv.Labels[cloud.LabelSSHPort] != strconv.Itoa(port) {
		updated, _, err := b.client.Server.Update(ctx, srv, hcloud.ServerUpdateOpts{Labels: cloud.WithSSHPort(srv.Labels, port)})
		if err == nil && updated == nil {
			err = fmt.Errorf("server %d is gone: %w", srv.ID, provider.ErrNotFound)
		}
		if err != nil {
			return provider.LeaseTarget{}, apiError("label the server's SSH port", err)
		}
		srv = updated
	}
	return b.target(srv)
}

// checkLeaseKey checks that the lease's uploaded SSH key (which its user
// data installs) is the key pub (in SSH wire form).
func (b *Backend) checkLeaseKey(ctx context.Context, leaseID string, pub []byte) error {
	keys, err := b.client.SSHKey.AllWithOpts(ctx, hcloud.SSHKeyListOpts{
		ListOpts: hcloud.ListOpts{LabelSelector: selector(cloud.Ownership(Name, leaseID))},
	})
	if err != nil {
		return apiError("list SSH keys", err)
	}
	for _, k := range keys {
		if have, err := lease.ParsePublicKey(k.PublicKey); err == nil && bytes.Equal(have.Marshal(), pub) {
			return nil
		}
	}
	return fmt.Errorf("the key to restore with is not the lease's key, which the server's user data installs: %w", provider.ErrPrecondition)
}
