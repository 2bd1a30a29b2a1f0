package gcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/uuid"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

var (
	_ provider.NativeCheckpointBackend = (*Backend)(nil)
	_ provider.NativeForkBackend       = (*Backend)(nil)
	_ provider.NativeRestoreBackend    = (*Backend)(nil)
)

// Machine image statuses of Compute Engine.
const (
	imageReady    = "READY"
	imageCreating = "CREATING"
	imageUpload   = "UPLOADING"
)

// imageTimeout bounds how long CreateCheckpoint waits for a machine image.
const imageTimeout = time.Hour

// machineImageName is the name of a checkpoint's machine image: a valid
// Compute Engine name.
func machineImageName(checkpointID string) string {
	return "crabbox-" + strings.ReplaceAll(checkpointID, "_", "-")
}

// checkpointLabels are the labels of a checkpoint's machine image, in
// their GCP form.
func (b *Backend) checkpointLabels(req provider.CheckpointRequest) (map[string]string, error) {
	if cloud.GCPLabels(map[string]string{"x": req.CheckpointID})["x"] != req.CheckpointID || req.CheckpointID == "" {
		return nil, fmt.Errorf("gcp: checkpoint of lease %s: malformed checkpoint ID %q", req.Lease.LeaseID, req.CheckpointID)
	}
	labels := make(map[string]string, len(req.Labels)+6)
	for k, v := range req.Labels {
		if err := cloud.CheckKey(k); err != nil {
			return nil, fmt.Errorf("gcp: checkpoint %s: %w", req.CheckpointID, err)
		}
		if cloud.IsOwnershipKey(k) || k == provider.LabelCheckpoint || k == provider.LabelSourceLease {
			return nil, fmt.Errorf("gcp: checkpoint %s: label %q is reserved for crabbox's own labels", req.CheckpointID, k)
		}
		labels[k] = v
	}
	maps.Copy(labels, cloud.Ownership(Name, ""))
	labels[cloud.LabelCreatedBy] = "crabbox"
	if b.cfg.Owner != "" {
		labels[cloud.LabelOwner] = b.cfg.Owner
	}
	labels[provider.LabelCheckpoint] = req.CheckpointID
	labels[provider.LabelSourceLease] = req.Lease.LeaseID
	return cloud.GCPLabels(labels), nil
}

// CreateCheckpoint makes a machine image of the lease's instance (which
// keeps running) and waits until it is ready. On error it deletes the
// machine images labelled with the checkpoint.
func (b *Backend) CreateCheckpoint(ctx context.Context, req provider.CheckpointRequest) (a provider.CheckpointArtifact, err error) {
	labels, err := b.checkpointLabels(req)
	if err != nil {
		return provider.CheckpointArtifact{}, err
	}
	api, err := b.clients(ctx)
	if err != nil {
		return provider.CheckpointArtifact{}, err
	}
	if !lease.IsID(req.Lease.LeaseID) {
		return provider.CheckpointArtifact{}, fmt.Errorf("gcp: checkpoint: %q is not a crabbox lease ID", req.Lease.LeaseID)
	}
	z, err := b.find(ctx, api, req.Lease.LeaseID)
	if err != nil {
		return provider.CheckpointArtifact{}, fmt.Errorf("gcp: checkpoint %s: %w", req.CheckpointID, err)
	}
	name := machineImageName(req.CheckpointID)
	defer func() {
		if err != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cloud.DefaultRollbackTimeout)
			defer cancel()
			err = errors.Join(err, b.deleteCheckpointID(dctx, api, req.CheckpointID))
		}
	}()
	what := fmt.Sprintf("create machine image %s of instance %s", name, z.cloudID())
	op, err := api.images.Insert(ctx, &computepb.InsertMachineImageRequest{
		Project:   b.cfg.Project,
		RequestId: proto.String(uuid.NewSHA1(uuid.NameSpaceURL, []byte("crabbox:"+req.CheckpointID)).String()),
		MachineImageResource: &computepb.MachineImage{
			Name:           proto.String(name),
			Description:    proto.String(fmt.Sprintf("crabbox checkpoint %s of lease %s", req.CheckpointID, req.Lease.LeaseID)),
			SourceInstance: proto.String(fmt.Sprintf("projects/%s/zones/%s/instances/%s", b.cfg.Project, z.zone, z.inst.GetName())),
			Labels:         labels,
		},
	})
	if err != nil {
		return provider.CheckpointArtifact{}, apiError(what, err)
	}
	if err := b.wait(ctx, what, op); err != nil {
		return provider.CheckpointArtifact{}, err
	}
	im, err := b.waitImage(ctx, api, name)
	if err != nil {
		return provider.CheckpointArtifact{}, err
	}
	b.rt.Logger.Info("gcp checkpoint made", "lease", req.Lease.LeaseID, "checkpoint", req.CheckpointID, "machine_image", name)
	return b.artifact(im), nil
}

// waitImage polls a machine image until it is ready, for at most
// imageTimeout.
func (b *Backend) waitImage(ctx context.Context, api *clients, name string) (*computepb.MachineImage, error) {
	clock := b.rt.Clock
	deadline := clock.Now().Add(imageTimeout)
	pace := cloud.NewBackoff(b.cfg.PollInterval)
	for {
		im, err := api.images.Get(ctx, &computepb.GetMachineImageRequest{Project: b.cfg.Project, MachineImage: name})
		if err != nil {
			return nil, apiError("read machine image "+name, err)
		}
		switch s := im.GetStatus(); s {
		case imageReady:
			return im, nil
		case imageCreating, imageUpload, "":
		default:
			return nil, fmt.Errorf("gcp: machine image %s is %s", name, s)
		}
		left := deadline.Sub(clock.Now())
		if left <= 0 {
			return nil, fmt.Errorf("gcp: machine image %s is not ready after %s: %w", name, imageTimeout, provider.ErrTransient)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("gcp: wait for machine image %s: %w", name, ctx.Err())
		case <-clock.After(min(pace.Next(), left)):
		}
	}
}

// artifact describes a checkpoint's machine image.
func (b *Backend) artifact(im *computepb.MachineImage) provider.CheckpointArtifact {
	labels := maps.Clone(im.GetLabels())
	created, err := time.Parse(time.RFC3339, im.GetCreationTimestamp())
	if err != nil {
		created = b.rt.Clock.Now()
	}
	return provider.CheckpointArtifact{
		ID: im.GetName(), Provider: Name,
		CheckpointID: labels[provider.LabelCheckpoint], SourceLease: labels[provider.LabelSourceLease],
		Locators:  provider.Config{"project": b.cfg.Project},
		SizeBytes: im.GetTotalStorageBytes(), CreatedAt: created.UTC(), Labels: labels,
	}
}

// checkpointImages lists the project's crabbox checkpoint machine images
// carrying the labels of more besides the ownership labels.
func (b *Backend) checkpointImages(ctx context.Context, api *clients, more map[string]string) ([]*computepb.MachineImage, error) {
	want := ownership("")
	maps.Copy(want, cloud.GCPLabels(more))
	it := api.images.List(ctx, &computepb.ListMachineImagesRequest{Project: b.cfg.Project, Filter: ptr(filter(want))})
	var out []*computepb.MachineImage
	for {
		im, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return out, nil
		}
		if err != nil {
			return nil, apiError("list crabbox machine images", err)
		}
		if hasLabels(im.GetLabels(), want) && im.GetLabels()[provider.LabelCheckpoint] != "" {
			out = append(out, im)
		}
	}
}

// ListCheckpoints returns the project's checkpoint machine images.
func (b *Backend) ListCheckpoints(ctx context.Context, _ provider.CheckpointListRequest) ([]provider.CheckpointArtifact, error) {
	api, err := b.clients(ctx)
	if err != nil {
		return nil, err
	}
	all, err := b.checkpointImages(ctx, api, nil)
	if err != nil {
		return nil, err
	}
	out := make([]provider.CheckpointArtifact, 0, len(all))
	for _, im := range all {
		out = append(out, b.artifact(im))
	}
	return out, nil
}

// DeleteCheckpoint deletes the checkpoint's machine image (and with it the
// disk data it holds). One already gone is fine; one without crabbox's
// checkpoint labels is never touched.
func (b *Backend) DeleteCheckpoint(ctx context.Context, req provider.CheckpointDeleteRequest) error {
	a := req.Artifact
	if a.ID == "" || strings.Contains(a.ID, "/") {
		return fmt.Errorf("gcp: delete checkpoint %s: %q is not a machine image name", a.CheckpointID, a.ID)
	}
	if err := b.checkProject(a); err != nil {
		return err
	}
	api, err := b.clients(ctx)
	if err != nil {
		return err
	}
	im, err := api.images.Get(ctx, &computepb.GetMachineImageRequest{Project: b.cfg.Project, MachineImage: a.ID})
	switch {
	case notFound(err):
		return nil
	case err != nil:
		return apiError("read machine image "+a.ID, err)
	case !ownedCheckpoint(im.GetLabels()) || (a.CheckpointID != "" && im.GetLabels()[provider.LabelCheckpoint] != a.CheckpointID):
		return fmt.Errorf("gcp: machine image %s is not crabbox's image of checkpoint %s: not deleting it: %w", a.ID, a.CheckpointID, provider.ErrPrecondition)
	}
	if err := b.deleteImage(ctx, api, a.ID); err != nil {
		return err
	}
	b.rt.Logger.Info("gcp checkpoint deleted", "checkpoint", a.CheckpointID, "machine_image", a.ID)
	return nil
}

// deleteImage deletes one machine image and waits for the deletion; one
// already gone counts as deleted.
func (b *Backend) deleteImage(ctx context.Context, api *clients, name string) error {
	what := "delete machine image " + name
	op, err := api.images.Delete(ctx, &computepb.DeleteMachineImageRequest{Project: b.cfg.Project, MachineImage: name})
	switch {
	case notFound(err):
		return nil
	case err != nil:
		return apiError(what, err)
	}
	if err := b.wait(ctx, what, op); err != nil && !errors.Is(err, provider.ErrNotFound) {
		return err
	}
	return nil
}

// deleteCheckpointID deletes every machine image labelled with the
// checkpoint.
func (b *Backend) deleteCheckpointID(ctx context.Context, api *clients, checkpoint string) error {
	all, err := b.checkpointImages(ctx, api, map[string]string{provider.LabelCheckpoint: checkpoint})
	if err != nil {
		return err
	}
	var errs []error
	for _, im := range all {
		errs = append(errs, b.deleteImage(ctx, api, im.GetName()))
	}
	return errors.Join(errs...)
}

// ownedCheckpoint reports whether labels are those of a crabbox checkpoint
// of this provider.
func ownedCheckpoint(labels map[string]string) bool {
	return hasLabels(labels, ownership("")) && labels[provider.LabelCheckpoint] != ""
}

// checkProject fails for an artifact of another project.
func (b *Backend) checkProject(a provider.CheckpointArtifact) error {
	if p := a.Locators["project"]; p != "" && p != b.cfg.Project {
		return fmt.Errorf("gcp: checkpoint %s is in project %s, not the configured %s: %w", a.CheckpointID, p, b.cfg.Project, provider.ErrPrecondition)
	}
	return nil
}

// checkpointImage returns the URL of the ready machine image of a, or an
// error matching provider.ErrNotFound when it is gone.
func (b *Backend) checkpointImage(ctx context.Context, api *clients, a provider.CheckpointArtifact) (string, error) {
	if a.ID == "" || strings.Contains(a.ID, "/") {
		return "", fmt.Errorf("gcp: checkpoint %s: %q is not a machine image name", a.CheckpointID, a.ID)
	}
	if err := b.checkProject(a); err != nil {
		return "", err
	}
	im, err := api.images.Get(ctx, &computepb.GetMachineImageRequest{Project: b.cfg.Project, MachineImage: a.ID})
	switch {
	case err != nil:
		return "", apiError(fmt.Sprintf("read machine image %s of checkpoint %s", a.ID, a.CheckpointID), err)
	case !ownedCheckpoint(im.GetLabels()):
		return "", fmt.Errorf("gcp: machine image %s is not a crabbox checkpoint: %w", a.ID, provider.ErrPrecondition)
	case im.GetStatus() != imageReady:
		return "", fmt.Errorf("gcp: machine image %s of checkpoint %s is %s, not ready: %w", a.ID, a.CheckpointID, im.GetStatus(), provider.ErrPrecondition)
	}
	return fmt.Sprintf("projects/%s/global/machineImages/%s", b.cfg.Project, a.ID), nil
}

// Fork acquires a new lease whose instance is made from the checkpoint's
// machine image; see Acquire.
func (b *Backend) Fork(ctx context.Context, req provider.ForkRequest) (provider.LeaseTarget, error) {
	if req.Artifact.Provider != "" && req.Artifact.Provider != Name {
		return provider.LeaseTarget{}, fmt.Errorf("gcp: fork: checkpoint %s is a %s artifact", req.Artifact.CheckpointID, req.Artifact.Provider)
	}
	target, err := b.acquire(ctx, req.AcquireRequest, &req.Artifact)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	b.rt.Logger.Info("gcp box forked", "lease", req.LeaseID, "checkpoint", req.Artifact.CheckpointID, "instance", target.CloudID)
	return target, nil
}

// Restore rebuilds the lease's box from the checkpoint's machine image: it
// makes a replacement instance of the lease from the image with a fresh
// bootstrap (the request's key, a new host key, Compute Engine's deletion
// at what is left of the lease's TTL), waits for its SSH, labels it ready
// and deletes the old instance. If anything fails, the replacement is
// deleted and the old instance stays as it was. A checkpoint that is gone
// fails with provider.ErrNotFound before anything changes.
func (b *Backend) Restore(ctx context.Context, req provider.RestoreRequest) (target provider.LeaseTarget, err error) {
	id := req.Lease.LeaseID
	if !lease.IsID(id) {
		return provider.LeaseTarget{}, fmt.Errorf("gcp: restore: %q is not a crabbox lease ID", id)
	}
	if _, err := lease.ParsePublicKey(req.PublicKey); err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("gcp: restore lease %s: %w", id, err)
	}
	api, err := b.clients(ctx)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	old, err := b.find(ctx, api, id)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("gcp: restore: %w", err)
	}
	source, err := b.checkpointImage(ctx, api, req.Artifact)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	l, err := b.rebuild(old, req.PublicKey)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	l.source = source
	clock := b.rt.Clock
	deadline := clock.Now().Add(b.cfg.BootTimeout)

	rb := cloud.NewRollback(b.rt.Logger.With("lease", id), 0)
	defer rb.Finish(ctx, &err)
	rb.Add(cloud.StepCreate, "replacement instance "+l.name, func(ctx context.Context) error {
		var errs []error
		for _, zone := range b.cfg.Zones {
			errs = append(errs, b.deleteInstance(ctx, api, zone, l.name))
		}
		return errors.Join(errs...)
	})
	p, err := cloud.FirstWithCapacity(ctx, b.rt.Logger, b.placements(), func(ctx context.Context, p placement) error {
		return b.insert(ctx, api, l, p)
	})
	if err != nil {
		return provider.LeaseTarget{}, cloud.Failed(cloud.StepCreate, err)
	}
	z, ip, err := b.waitAddress(ctx, api, p.zone, l.name, deadline)
	if err != nil {
		return provider.LeaseTarget{}, cloud.Failed(cloud.StepAddress, err)
	}
	port, err := cloud.WaitForSSH(ctx, cloud.SSHWait{
		Host: ip, Ports: b.cfg.SSHPorts, HostKey: l.hostKey.PublicKey(), Clock: clock,
		Interval: b.cfg.PollInterval, Timeout: max(deadline.Sub(clock.Now()), time.Nanosecond),
		Dial: cloud.MappedDial(b.mapAddress), Log: b.rt.Logger,
	})
	if err != nil {
		return provider.LeaseTarget{}, cloud.Failed(cloud.StepSSH, err)
	}
	ready := cloud.WithSSHPort(cloud.WithState(z.inst.GetLabels(), cloud.StateReady), port)
	if err := b.setLabels(ctx, api, z, ready); err != nil {
		return provider.LeaseTarget{}, cloud.Failed(cloud.StepLabel, err)
	}
	if err := b.deleteInstance(ctx, api, old.zone, old.inst.GetName()); err != nil {
		return provider.LeaseTarget{}, cloud.Failed(cloud.StepLabel, fmt.Errorf("replace instance %s: %w", old.cloudID(), err))
	}
	z.inst.Labels = cloud.GCPLabels(ready)
	if target, err = b.target(z); err != nil {
		return provider.LeaseTarget{}, err
	}
	b.rt.Logger.Info("gcp box restored", "lease", id, "checkpoint", req.Artifact.CheckpointID, "instance", z.cloudID(), "replaced", old.cloudID())
	return target, nil
}

// rebuild prepares the launch of a replacement instance for the lease of
// old: its labels with a new host key, and a bootstrap for publicKey whose
// box Compute Engine deletes when the lease's TTL ends.
func (b *Backend) rebuild(old zonal, publicKey string) (launch, error) {
	labels := maps.Clone(old.inst.GetLabels())
	info, err := cloud.ParseLabels(labels)
	if err != nil {
		return launch{}, fmt.Errorf("gcp: instance %s: %w", old.cloudID(), err)
	}
	left := info.CreatedAt.Add(info.TTL).Sub(b.rt.Clock.Now()).Truncate(time.Second)
	if info.CreatedAt.IsZero() || info.TTL <= 0 || left < time.Minute {
		return launch{}, fmt.Errorf("gcp: restore lease %s: its TTL ends in %s, too soon to rebuild its box: %w", info.LeaseID, left, provider.ErrPrecondition)
	}
	hostKey, err := cloud.NewHostKey()
	if err != nil {
		return launch{}, err
	}
	hk, err := cloud.HostKeyLabel(hostKey.PublicKey())
	if err != nil {
		return launch{}, err
	}
	labels[cloud.LabelHostKey] = hk
	labels[cloud.LabelState] = cloud.StateProvisioning
	delete(labels, cloud.LabelSSHPort)
	userData, err := cloud.Bootstrap{
		AuthorizedKey: publicKey, HostKey: hostKey, SelfDestructAfter: left,
		Ports: b.cfg.SSHPorts, WorkRoot: b.cfg.WorkRoot,
	}.UserData()
	if err != nil {
		return launch{}, err
	}
	suffix := strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
	return launch{
		req:  provider.AcquireRequest{LeaseID: info.LeaseID, Slug: info.Slug, PublicKey: publicKey, TTL: left},
		name: instanceName(info.LeaseID) + "-r" + suffix, labels: cloud.GCPLabels(labels), hostKey: hostKey, userData: userData,
	}, nil
}
