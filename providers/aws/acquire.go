package aws

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

func isLeaseID(s string) bool { return lease.IsID(s) }

// launch is everything RunInstances needs, prepared before anything is
// created.
type launch struct {
	req      provider.AcquireRequest
	region   string
	labels   map[string]string // ownership and caller labels
	hostKey  cloud.HostKey
	userData string
	keyName  string
	// token is RunInstances' first client token: the lease ID, or one of
	// its own for a restore's replacement instance.
	token string
}

// Acquire creates the lease's instance; see the package documentation for
// its steps. On failure, or when ctx ends before it returns, it deletes
// whatever it created.
func (b *Backend) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	return b.acquire(ctx, req, nil)
}

// acquire is Acquire, of a box booted from the image of the checkpoint
// from when it is not nil (a fork).
func (b *Backend) acquire(ctx context.Context, req provider.AcquireRequest, from *provider.CheckpointArtifact) (target provider.LeaseTarget, err error) {
	l, err := b.prepare(req)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	if from != nil {
		if l.region, err = b.artifactRegion(*from); err != nil {
			return provider.LeaseTarget{}, err
		}
	}
	if err := b.authenticate(ctx); err != nil {
		return provider.LeaseTarget{}, err
	}
	ec := b.ec2Client(l.region)
	var img image
	if from != nil {
		img, err = b.checkpointImage(ctx, ec, *from)
	} else {
		img, err = b.findImage(ctx, ec, l.region)
	}
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	vpc, err := defaultVPC(ctx, ec, l.region)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	deadline := b.rt.Clock.Now().Add(b.cfg.BootTimeout)

	rb := cloud.NewRollback(b.rt.Logger, 0)
	defer rb.Finish(ctx, &err)

	if err := b.importKey(ctx, ec, l, rb); err != nil {
		return provider.LeaseTarget{}, cloud.Failed(cloud.StepKey, err)
	}
	group, err := b.securityGroup(ctx, ec, vpc, req.LeaseID, rb)
	if err != nil {
		return provider.LeaseTarget{}, cloud.Failed(stepSecurityGroup, err)
	}
	rb.Add(cloud.StepCreate, "instances of lease "+req.LeaseID, func(ctx context.Context) error {
		_, err := b.terminateLease(ctx, ec, req.LeaseID)
		return err
	})
	id, err := b.run(ctx, ec, l, img, group)
	if err != nil {
		return provider.LeaseTarget{}, cloud.Failed(cloud.StepCreate, err)
	}
	inst, err := b.waitForAddress(ctx, ec, id, deadline)
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
	if _, err := ec.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: toTags(ready)}); err != nil {
		return provider.LeaseTarget{}, cloud.Failed(cloud.StepLabel, portable(err, "tag instance "+id+" ready"))
	}
	tags := fromTags(inst.Tags)
	maps.Copy(tags, ready)
	inst.Tags = toTags(tags)
	target, err = b.target(inst)
	if err != nil {
		return provider.LeaseTarget{}, cloud.Failed(cloud.StepLabel, err)
	}
	b.rt.Logger.Info("aws box ready", "lease", req.LeaseID, "instance", id, "region", l.region, "host", ip, "port", port)
	return target, nil
}

// prepare checks the request and renders the labels and user data, before
// anything is created.
func (b *Backend) prepare(req provider.AcquireRequest) (launch, error) {
	if b.cfg.SSHCIDR == "" {
		return launch{}, errNoCIDR
	}
	for _, k := range ownTags {
		if _, ok := req.Labels[k]; ok {
			return launch{}, fmt.Errorf("aws: lease %s: label %q is reserved for the provider's own tags", req.LeaseID, k)
		}
	}
	hostKey, err := cloud.NewHostKey()
	if err != nil {
		return launch{}, fmt.Errorf("aws: lease %s: host key: %w", req.LeaseID, err)
	}
	labels, err := cloud.NewLabels(req, cloud.LabelOptions{
		Provider: Name, ServerType: b.cfg.InstanceType, Owner: b.cfg.Owner, HostKey: hostKey.PublicKey(),
	})
	if err != nil {
		return launch{}, fmt.Errorf("aws: %w", err)
	}
	userData, err := cloud.Bootstrap{
		AuthorizedKey: req.PublicKey, HostKey: hostKey, SelfDestructAfter: req.TTL,
		Ports: b.cfg.SSHPorts, WorkRoot: b.cfg.WorkRoot,
	}.UserData()
	if err != nil {
		return launch{}, fmt.Errorf("aws: lease %s: %w", req.LeaseID, err)
	}
	return launch{
		req: req, region: b.cfg.Regions[0], labels: labels, hostKey: hostKey,
		userData: userData, keyName: "crabbox-" + req.LeaseID, token: req.LeaseID,
	}, nil
}

// importKey imports the lease key as the lease's key pair. Its rollback
// deletes the exact key pair imported, or, when the answer was lost, the
// key pairs tagged with the lease.
func (b *Backend) importKey(ctx context.Context, ec *ec2.Client, l launch, rb *cloud.Rollback) error {
	var keyID string
	rb.Add(cloud.StepKey, "key pair "+l.keyName, func(ctx context.Context) error {
		if keyID != "" {
			return deleteKey(ctx, ec, keyID)
		}
		return deleteLeaseKeys(ctx, ec, l.req.LeaseID)
	})
	out, err := ec.ImportKeyPair(ctx, &ec2.ImportKeyPairInput{
		KeyName:           awssdk.String(l.keyName),
		PublicKeyMaterial: []byte(l.req.PublicKey),
		TagSpecifications: []types.TagSpecification{tagSpec(types.ResourceTypeKeyPair, l.labels)},
	})
	if err != nil {
		return portable(err, "import key pair "+l.keyName)
	}
	keyID = awssdk.ToString(out.KeyPairId)
	return nil
}

// market is one way of buying the instance.
type market struct {
	spot  bool
	token string // RunInstances' idempotency token
}

func (m market) String() string {
	if m.spot {
		return MarketSpot
	}
	return MarketOnDemand
}

// run launches the instance, as spot first when so configured and
// on-demand when EC2 has no spot capacity, and returns its ID. The first
// attempt's client token is l.token (the lease ID); the on-demand
// fallback uses "<token>-on-demand", since a token names one set of
// parameters.
func (b *Backend) run(ctx context.Context, ec *ec2.Client, l launch, img image, group string) (string, error) {
	var markets []market
	for i, m := range cloud.Markets(b.cfg.Market, MarketOnDemand) {
		token := l.token
		if i > 0 {
			token += "-" + m
		}
		markets = append(markets, market{spot: m == MarketSpot, token: token})
	}
	var id string
	_, err := cloud.FirstWithCapacity(ctx, b.rt.Logger, markets, func(ctx context.Context, m market) error {
		out, err := ec.RunInstances(ctx, b.runInput(l, img, group, m))
		if err != nil {
			return portable(err, fmt.Sprintf("run %s %s instance", m, b.cfg.InstanceType))
		}
		if len(out.Instances) != 1 || awssdk.ToString(out.Instances[0].InstanceId) == "" {
			return fmt.Errorf("aws: RunInstances returned %d instances, want 1", len(out.Instances))
		}
		id = awssdk.ToString(out.Instances[0].InstanceId)
		return nil
	})
	return id, err
}

// instanceTags are the tags of the instance: the labels and the
// provider's own tags.
func (l launch) instanceTags(workRoot string) map[string]string {
	tags := maps.Clone(l.labels)
	tags[tagName] = "crabbox-" + l.req.Slug
	if l.req.Slug == "" {
		tags[tagName] = "crabbox-" + l.req.LeaseID
	}
	tags[tagWorkRoot] = workRoot
	return tags
}

func (b *Backend) runInput(l launch, img image, group string, m market) *ec2.RunInstancesInput {
	specs := []types.TagSpecification{
		tagSpec(types.ResourceTypeInstance, l.instanceTags(b.cfg.WorkRoot)),
		tagSpec(types.ResourceTypeVolume, l.labels),
	}
	in := &ec2.RunInstancesInput{
		ImageId:                           awssdk.String(img.ID),
		InstanceType:                      types.InstanceType(b.cfg.InstanceType),
		MinCount:                          awssdk.Int32(1),
		MaxCount:                          awssdk.Int32(1),
		ClientToken:                       awssdk.String(m.token),
		KeyName:                           awssdk.String(l.keyName),
		SecurityGroupIds:                  []string{group},
		UserData:                          awssdk.String(base64.StdEncoding.EncodeToString([]byte(l.userData))),
		InstanceInitiatedShutdownBehavior: types.ShutdownBehaviorTerminate,
		MetadataOptions:                   &types.InstanceMetadataOptionsRequest{HttpTokens: types.HttpTokensStateRequired},
		BlockDeviceMappings: []types.BlockDeviceMapping{{
			DeviceName: awssdk.String(img.RootDevice),
			Ebs: &types.EbsBlockDevice{
				VolumeSize: awssdk.Int32(int32(b.cfg.DiskGB)), VolumeType: types.VolumeTypeGp3,
				DeleteOnTermination: awssdk.Bool(true), Encrypted: awssdk.Bool(true),
			},
		}},
		TagSpecifications: specs,
	}
	if m.spot {
		in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{
			MarketType: types.MarketTypeSpot,
			SpotOptions: &types.SpotMarketOptions{
				SpotInstanceType:             types.SpotInstanceTypeOneTime,
				InstanceInterruptionBehavior: types.InstanceInterruptionBehaviorTerminate,
			},
		}
		in.TagSpecifications = append(in.TagSpecifications, tagSpec(types.ResourceTypeSpotInstancesRequest, l.labels))
	}
	return in
}

// errGone is waitForAddress's error for an instance that stopped before
// it ran (a spot instance reclaimed, a bad image).
var errGone = errors.New("instance stopped before it ran")

// waitForAddress polls the instance until it runs with a public address,
// until deadline.
func (b *Backend) waitForAddress(ctx context.Context, ec *ec2.Client, id string, deadline time.Time) (types.Instance, error) {
	pace := cloud.NewBackoff(pollInterval)
	for {
		inst, err := instance(ctx, ec, id)
		switch {
		case err == nil:
			switch state := stateOf(inst); {
			case state == types.InstanceStateNameRunning && awssdk.ToString(inst.PublicIpAddress) != "":
				return inst, nil
			case state != types.InstanceStateNamePending && state != types.InstanceStateNameRunning:
				reason := ""
				if inst.StateReason != nil {
					reason = ": " + awssdk.ToString(inst.StateReason.Message)
				}
				return inst, fmt.Errorf("aws: instance %s is %s%s: %w", id, state, reason, errGone)
			}
		case errors.Is(err, provider.ErrNotFound) || notFound(err):
			// EC2 is eventually consistent: a new instance may not be visible yet.
		default:
			return inst, portable(err, "wait for the address of instance "+id)
		}
		left := deadline.Sub(b.rt.Clock.Now())
		if left <= 0 {
			return inst, fmt.Errorf("aws: instance %s has no public address after %s: %w", id, b.cfg.BootTimeout, provider.ErrTransient)
		}
		select {
		case <-ctx.Done():
			return inst, fmt.Errorf("aws: wait for the address of instance %s: %w", id, ctx.Err())
		case <-b.rt.Clock.After(min(pace.Next(), left)):
		}
	}
}
