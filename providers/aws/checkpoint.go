package aws

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// imageTimeout bounds how long CreateCheckpoint waits for a new AMI.
const imageTimeout = time.Hour

// checkpointFilter selects resources carrying the checkpoint tag.
var checkpointFilter = types.Filter{Name: awssdk.String("tag-key"), Values: []string{provider.LabelCheckpoint}}

var (
	_ provider.NativeCheckpointBackend = (*Backend)(nil)
	_ provider.NativeForkBackend       = (*Backend)(nil)
	_ provider.NativeRestoreBackend    = (*Backend)(nil)
)

// checkpointLabels are the tags of a checkpoint's AMI and snapshot: the
// labels every cloud's checkpoint carries (cloud.CheckpointLabels), and
// the owner.
func (b *Backend) checkpointLabels(req provider.CheckpointRequest) (map[string]string, error) {
	for _, k := range []string{tagName, tagWorkRoot} {
		if _, ok := req.Labels[k]; ok {
			return nil, fmt.Errorf("aws: checkpoint %s: label %q is reserved for crabbox's own tags", req.CheckpointID, k)
		}
	}
	labels, err := cloud.CheckpointLabels(Name, req)
	if err != nil {
		return nil, fmt.Errorf("aws: %w", err)
	}
	if owner := cloud.SanitizeValue(b.cfg.Owner); owner != "" {
		labels[cloud.LabelOwner] = owner
	}
	return labels, nil
}

// CreateCheckpoint makes an AMI of the lease's instance and waits until it
// is available. On error it deletes the AMI and snapshots it made.
func (b *Backend) CreateCheckpoint(ctx context.Context, req provider.CheckpointRequest) (a provider.CheckpointArtifact, err error) {
	labels, err := b.checkpointLabels(req)
	if err != nil {
		return provider.CheckpointArtifact{}, err
	}
	if err := b.authenticate(ctx); err != nil {
		return provider.CheckpointArtifact{}, err
	}
	found, err := b.find(ctx, req.Lease.LeaseID)
	if err != nil {
		return provider.CheckpointArtifact{}, fmt.Errorf("aws: checkpoint %s: %w", req.CheckpointID, err)
	}
	id := awssdk.ToString(found.inst.InstanceId)
	defer func() {
		if err != nil {
			// Whatever was made (the answer may have been lost): found by
			// the checkpoint's tag.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cloud.DefaultRollbackTimeout)
			defer cancel()
			err = errors.Join(err, b.deleteCheckpointID(dctx, found.ec, req.CheckpointID))
		}
	}()
	out, err := found.ec.CreateImage(ctx, &ec2.CreateImageInput{
		InstanceId:  awssdk.String(id),
		Name:        awssdk.String("crabbox-" + req.CheckpointID),
		Description: awssdk.String(fmt.Sprintf("crabbox checkpoint %s of lease %s", req.CheckpointID, req.Lease.LeaseID)),
		NoReboot:    awssdk.Bool(true),
		TagSpecifications: []types.TagSpecification{
			tagSpec(types.ResourceTypeImage, labels),
			tagSpec(types.ResourceTypeSnapshot, labels),
		},
	})
	if err != nil {
		return provider.CheckpointArtifact{}, portable(err, fmt.Sprintf("create image of instance %s for checkpoint %s", id, req.CheckpointID))
	}
	im, err := b.waitImage(ctx, found.ec, awssdk.ToString(out.ImageId))
	if err != nil {
		return provider.CheckpointArtifact{}, err
	}
	a = b.artifact(found.region, im)
	b.rt.Logger.Info("aws checkpoint made", "lease", req.Lease.LeaseID, "checkpoint", req.CheckpointID, "image", a.ID, "region", found.region)
	return a, nil
}

// waitImage polls a new AMI until it is available, for at most
// imageTimeout.
func (b *Backend) waitImage(ctx context.Context, ec *ec2.Client, id string) (types.Image, error) {
	deadline := b.rt.Clock.Now().Add(imageTimeout)
	pace := cloud.NewBackoff(pollInterval)
	for {
		out, err := ec.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{id}})
		switch {
		case err == nil && len(out.Images) == 1:
			switch im := out.Images[0]; im.State {
			case types.ImageStateAvailable:
				return im, nil
			case types.ImageStatePending, "":
			default:
				reason := ""
				if im.StateReason != nil {
					reason = ": " + awssdk.ToString(im.StateReason.Message)
				}
				return types.Image{}, fmt.Errorf("aws: image %s is %s%s", id, im.State, reason)
			}
		case err == nil || notFound(err):
			// EC2 is eventually consistent: a new image may not be visible yet.
		default:
			return types.Image{}, portable(err, "wait for image "+id)
		}
		left := deadline.Sub(b.rt.Clock.Now())
		if left <= 0 {
			return types.Image{}, fmt.Errorf("aws: image %s is not available after %s: %w", id, imageTimeout, provider.ErrTransient)
		}
		select {
		case <-ctx.Done():
			return types.Image{}, fmt.Errorf("aws: wait for image %s: %w", id, ctx.Err())
		case <-b.rt.Clock.After(min(pace.Next(), left)):
		}
	}
}

// artifact describes a checkpoint AMI of region.
func (b *Backend) artifact(region string, im types.Image) provider.CheckpointArtifact {
	tags := fromTags(im.Tags)
	created, err := time.Parse(time.RFC3339, awssdk.ToString(im.CreationDate))
	if err != nil {
		created = b.rt.Clock.Now().UTC()
	}
	var size int64
	for _, m := range im.BlockDeviceMappings {
		if m.Ebs != nil {
			size += int64(awssdk.ToInt32(m.Ebs.VolumeSize)) << 30
		}
	}
	locators := provider.Config{"regions": region}
	if b.cfg.Profile != "" {
		locators["profile"] = b.cfg.Profile
	}
	return provider.CheckpointArtifact{
		ID: awssdk.ToString(im.ImageId), Provider: Name,
		CheckpointID: tags[provider.LabelCheckpoint], SourceLease: tags[provider.LabelSourceLease],
		Locators: locators, SizeBytes: size, CreatedAt: created.UTC(), Labels: tags,
	}
}

// checkpointImages returns the account's checkpoint AMIs of one region
// carrying the tags of more besides the ownership tags.
func checkpointImages(ctx context.Context, ec *ec2.Client, more map[string]string) ([]types.Image, error) {
	tags := ownership("")
	maps.Copy(tags, more)
	pages := ec2.NewDescribeImagesPaginator(ec, &ec2.DescribeImagesInput{
		Owners: []string{"self"}, Filters: tagFilters(tags, checkpointFilter),
	})
	var out []types.Image
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Images...)
	}
	return out, nil
}

// ListCheckpoints returns the checkpoint AMIs of every configured region.
func (b *Backend) ListCheckpoints(ctx context.Context, _ provider.CheckpointListRequest) ([]provider.CheckpointArtifact, error) {
	if err := b.authenticate(ctx); err != nil {
		return nil, err
	}
	var out []provider.CheckpointArtifact
	for _, region := range b.cfg.Regions {
		all, err := checkpointImages(ctx, b.ec2Client(region), nil)
		if err != nil {
			return nil, portable(err, "list crabbox checkpoint images in "+region)
		}
		for _, im := range all {
			out = append(out, b.artifact(region, im))
		}
	}
	return out, nil
}

// DeleteCheckpoint deregisters the checkpoint's AMI and deletes its
// snapshots. An AMI that is already gone is fine; one without crabbox's
// checkpoint tags is never touched.
func (b *Backend) DeleteCheckpoint(ctx context.Context, req provider.CheckpointDeleteRequest) error {
	a := req.Artifact
	if !strings.HasPrefix(a.ID, "ami-") {
		return fmt.Errorf("aws: delete checkpoint %s: %q is not an AMI ID", a.CheckpointID, a.ID)
	}
	region, err := b.artifactRegion(a)
	if err != nil {
		return err
	}
	if err := b.authenticate(ctx); err != nil {
		return err
	}
	ec := b.ec2Client(region)
	checkpoint := a.CheckpointID
	out, err := ec.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{a.ID}})
	switch {
	case err != nil && !notFound(err):
		return portable(err, "find image "+a.ID+" of checkpoint "+checkpoint)
	case err == nil && len(out.Images) == 1:
		tags := fromTags(out.Images[0].Tags)
		if !ownedCheckpoint(tags) || (checkpoint != "" && tags[provider.LabelCheckpoint] != checkpoint) {
			return fmt.Errorf("aws: image %s is not crabbox's image of checkpoint %s: not deleting it: %w", a.ID, checkpoint, provider.ErrPrecondition)
		}
		checkpoint = tags[provider.LabelCheckpoint]
		if _, err := ec.DeregisterImage(ctx, &ec2.DeregisterImageInput{ImageId: awssdk.String(a.ID)}); err != nil && !imageGone(err) {
			return portable(err, "deregister image "+a.ID+" of checkpoint "+checkpoint)
		}
	}
	if checkpoint == "" {
		return nil
	}
	if err := deleteSnapshots(ctx, ec, checkpoint); err != nil {
		return err
	}
	b.rt.Logger.Info("aws checkpoint deleted", "checkpoint", checkpoint, "image", a.ID, "region", region)
	return nil
}

// deleteCheckpointID deregisters every checkpoint AMI of one region tagged
// with the checkpoint and deletes its snapshots.
func (b *Backend) deleteCheckpointID(ctx context.Context, ec *ec2.Client, checkpoint string) error {
	all, err := checkpointImages(ctx, ec, map[string]string{provider.LabelCheckpoint: checkpoint})
	if err != nil {
		return portable(err, "find the images of checkpoint "+checkpoint+" to delete")
	}
	var errs []error
	for _, im := range all {
		if _, err := ec.DeregisterImage(ctx, &ec2.DeregisterImageInput{ImageId: im.ImageId}); err != nil && !imageGone(err) {
			errs = append(errs, portable(err, "deregister image "+awssdk.ToString(im.ImageId)+" of checkpoint "+checkpoint))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return deleteSnapshots(ctx, ec, checkpoint)
}

// deleteSnapshots deletes the account's snapshots tagged as crabbox's of
// the checkpoint; ones already gone are fine.
func deleteSnapshots(ctx context.Context, ec *ec2.Client, checkpoint string) error {
	tags := ownership("")
	tags[provider.LabelCheckpoint] = checkpoint
	pages := ec2.NewDescribeSnapshotsPaginator(ec, &ec2.DescribeSnapshotsInput{OwnerIds: []string{"self"}, Filters: tagFilters(tags)})
	var errs []error
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return portable(err, "find the snapshots of checkpoint "+checkpoint)
		}
		for _, s := range page.Snapshots {
			if _, err := ec.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: s.SnapshotId}); err != nil && !notFound(err) {
				errs = append(errs, portable(err, "delete snapshot "+awssdk.ToString(s.SnapshotId)+" of checkpoint "+checkpoint))
			}
		}
	}
	return errors.Join(errs...)
}

// ownedCheckpoint reports whether tags are those of a crabbox checkpoint
// artifact of this provider.
func ownedCheckpoint(tags map[string]string) bool {
	for k, v := range ownership("") {
		if tags[k] != v {
			return false
		}
	}
	return tags[provider.LabelCheckpoint] != ""
}

// imageGone reports whether err is EC2's answer for an AMI that does not
// exist (any more).
func imageGone(err error) bool {
	return notFound(err) || apiCode(err) == "InvalidAMIID.Unavailable"
}

// artifactRegion is the configured region an artifact lives in.
func (b *Backend) artifactRegion(a provider.CheckpointArtifact) (string, error) {
	region, _, _ := strings.Cut(a.Locators["regions"], ",")
	region = strings.TrimSpace(region)
	if region == "" {
		return b.cfg.Regions[0], nil
	}
	for _, r := range b.cfg.Regions {
		if r == region {
			return region, nil
		}
	}
	return "", fmt.Errorf("aws: checkpoint %s is in region %s, which is not one of the configured regions %v: %w", a.CheckpointID, region, b.cfg.Regions, provider.ErrPrecondition)
}

// checkpointImage returns the available checkpoint AMI of a, or an error
// matching provider.ErrNotFound when it is gone.
func (b *Backend) checkpointImage(ctx context.Context, ec *ec2.Client, a provider.CheckpointArtifact) (image, error) {
	if !strings.HasPrefix(a.ID, "ami-") {
		return image{}, fmt.Errorf("aws: checkpoint %s: %q is not an AMI ID", a.CheckpointID, a.ID)
	}
	out, err := ec.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{a.ID}})
	if err != nil {
		return image{}, portable(err, fmt.Sprintf("find image %s of checkpoint %s", a.ID, a.CheckpointID))
	}
	if len(out.Images) != 1 {
		return image{}, fmt.Errorf("aws: image %s of checkpoint %s: %w", a.ID, a.CheckpointID, provider.ErrNotFound)
	}
	im := out.Images[0]
	switch tags := fromTags(im.Tags); {
	case !ownedCheckpoint(tags):
		return image{}, fmt.Errorf("aws: image %s is not a crabbox checkpoint: %w", a.ID, provider.ErrPrecondition)
	case im.State == types.ImageStateDeregistered:
		return image{}, fmt.Errorf("aws: image %s of checkpoint %s is deregistered: %w", a.ID, a.CheckpointID, provider.ErrNotFound)
	case im.State != types.ImageStateAvailable:
		return image{}, fmt.Errorf("aws: image %s of checkpoint %s is %s, not available: %w", a.ID, a.CheckpointID, im.State, provider.ErrPrecondition)
	}
	root := awssdk.ToString(im.RootDeviceName)
	if root == "" {
		root = "/dev/sda1"
	}
	return image{ID: a.ID, RootDevice: root}, nil
}

// Fork acquires a new lease whose box boots the checkpoint's AMI; see
// Acquire.
func (b *Backend) Fork(ctx context.Context, req provider.ForkRequest) (provider.LeaseTarget, error) {
	if req.Artifact.Provider != "" && req.Artifact.Provider != Name {
		return provider.LeaseTarget{}, fmt.Errorf("aws: fork: checkpoint %s is a %s artifact", req.Artifact.CheckpointID, req.Artifact.Provider)
	}
	return b.acquire(ctx, req.AcquireRequest, &req.Artifact)
}

// Restore rebuilds the lease's box from the checkpoint's AMI (see the
// checkpoint notes above). A checkpoint that is gone fails with
// provider.ErrNotFound before anything changes.
func (b *Backend) Restore(ctx context.Context, req provider.RestoreRequest) (target provider.LeaseTarget, err error) {
	id := req.Lease.LeaseID
	if !isLeaseID(id) {
		return provider.LeaseTarget{}, fmt.Errorf("aws: restore: %q is not a crabbox lease ID", id)
	}
	if _, err := lease.ParsePublicKey(req.PublicKey); err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("aws: restore lease %s: %w", id, err)
	}
	region, err := b.artifactRegion(req.Artifact)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	if err := b.authenticate(ctx); err != nil {
		return provider.LeaseTarget{}, err
	}
	old, err := b.find(ctx, id)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("aws: restore: %w", err)
	}
	if old.region != region {
		return provider.LeaseTarget{}, fmt.Errorf("aws: restore lease %s (in %s) from checkpoint %s of region %s: an AMI boots only in its region: %w", id, old.region, req.Artifact.CheckpointID, region, provider.ErrPrecondition)
	}
	img, err := b.checkpointImage(ctx, old.ec, req.Artifact)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	l, group, err := b.rebuild(old, req.PublicKey)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	oldID := awssdk.ToString(old.inst.InstanceId)
	deadline := b.rt.Clock.Now().Add(b.cfg.BootTimeout)

	rb := cloud.NewRollback(b.rt.Logger, 0)
	defer rb.Finish(ctx, &err)
	var newID string
	rb.Add(cloud.StepCreate, "replacement instance of lease "+id, func(ctx context.Context) error {
		if newID != "" {
			return terminate(ctx, old.ec, newID)
		}
		// The answer was lost: the instances launched with the restore's
		// client tokens.
		all, err := describe(ctx, old.ec, &ec2.DescribeInstancesInput{Filters: tagFilters(ownership(id),
			types.Filter{Name: awssdk.String("client-token"), Values: []string{l.token, l.token + "-" + MarketOnDemand}})})
		if err != nil {
			return portable(err, "find the replacement instances of lease "+id)
		}
		var ids []string
		for _, in := range all {
			if got := awssdk.ToString(in.InstanceId); got != oldID {
				ids = append(ids, got)
			}
		}
		return terminate(ctx, old.ec, ids...)
	})
	if newID, err = b.run(ctx, old.ec, l, img, group); err != nil {
		return provider.LeaseTarget{}, cloud.Failed(cloud.StepCreate, err)
	}
	inst, err := b.waitForAddress(ctx, old.ec, newID, deadline)
	if err != nil {
		return provider.LeaseTarget{}, cloud.Failed(cloud.StepAddress, err)
	}
	ip := awssdk.ToString(inst.PublicIpAddress)
	port, err := cloud.WaitForSSH(ctx, cloud.SSHWait{
		Host: ip, Ports: b.cfg.SSHPorts, HostKey: l.hostKey.PublicKey(),
		Clock: b.rt.Clock, Timeout: max(deadline.Sub(b.rt.Clock.Now()), 1), Dial: cloud.MappedDial(b.mapAddress), Log: b.rt.Logger,
	})
	if err != nil {
		return provider.LeaseTarget{}, cloud.Failed(cloud.StepSSH, err)
	}
	ready := cloud.WithSSHPort(cloud.WithState(nil, cloud.StateReady), port)
	if _, err := old.ec.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{newID}, Tags: toTags(ready)}); err != nil {
		return provider.LeaseTarget{}, cloud.Failed(cloud.StepLabel, portable(err, "tag instance "+newID+" ready"))
	}
	if err := terminate(ctx, old.ec, oldID); err != nil {
		return provider.LeaseTarget{}, cloud.Failed(cloud.StepLabel, fmt.Errorf("replace instance %s: %w", oldID, err))
	}
	tags := fromTags(inst.Tags)
	maps.Copy(tags, ready)
	inst.Tags = toTags(tags)
	if target, err = b.target(inst); err != nil {
		return provider.LeaseTarget{}, err
	}
	b.rt.Logger.Info("aws box restored", "lease", id, "checkpoint", req.Artifact.CheckpointID, "image", img.ID, "instance", newID, "replaced", oldID)
	return target, nil
}

// rebuild prepares the launch of a replacement instance for the lease of
// old: its tags with a new host key, and a bootstrap for publicKey whose
// self-destruct timer fires when the lease's TTL ends. It returns the
// launch and the security group of old.
func (b *Backend) rebuild(old located, publicKey string) (launch, string, error) {
	oldID := awssdk.ToString(old.inst.InstanceId)
	tags := fromTags(old.inst.Tags)
	labels := leaseLabels(tags)
	info, err := cloud.ParseLabels(labels)
	if err != nil {
		return launch{}, "", fmt.Errorf("aws: instance %s: %w", oldID, err)
	}
	left := info.CreatedAt.Add(info.TTL).Sub(b.rt.Clock.Now())
	if info.CreatedAt.IsZero() || info.TTL <= 0 || left < time.Minute {
		return launch{}, "", fmt.Errorf("aws: restore lease %s: its TTL ends in %s, too soon to rebuild its box: %w", info.LeaseID, left.Truncate(time.Second), provider.ErrPrecondition)
	}
	if len(old.inst.SecurityGroups) == 0 {
		return launch{}, "", fmt.Errorf("aws: restore lease %s: instance %s has no security group", info.LeaseID, oldID)
	}
	hostKey, err := cloud.NewHostKey()
	if err != nil {
		return launch{}, "", fmt.Errorf("aws: restore lease %s: host key: %w", info.LeaseID, err)
	}
	if labels[cloud.LabelHostKey], err = cloud.HostKeyLabel(hostKey.PublicKey()); err != nil {
		return launch{}, "", err
	}
	delete(labels, cloud.LabelSSHPort)
	labels[cloud.LabelState] = cloud.StateProvisioning
	userData, err := cloud.Bootstrap{
		AuthorizedKey: publicKey, HostKey: hostKey, SelfDestructAfter: left,
		Ports: b.cfg.SSHPorts, WorkRoot: b.cfg.WorkRoot,
	}.UserData()
	if err != nil {
		return launch{}, "", fmt.Errorf("aws: restore lease %s: %w", info.LeaseID, err)
	}
	keyName := awssdk.ToString(old.inst.KeyName)
	if keyName == "" {
		keyName = "crabbox-" + info.LeaseID
	}
	nonce := make([]byte, 8)
	if _, err := rand.Read(nonce); err != nil {
		return launch{}, "", err
	}
	return launch{
		req:    provider.AcquireRequest{LeaseID: info.LeaseID, Slug: info.Slug, PublicKey: publicKey},
		region: old.region, labels: labels, hostKey: hostKey, userData: userData, keyName: keyName,
		token: info.LeaseID + "-restore-" + hex.EncodeToString(nonce),
	}, awssdk.ToString(old.inst.SecurityGroups[0].GroupId), nil
}
