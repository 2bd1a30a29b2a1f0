package gcp

import (
	"context"
	"fmt"
	"maps"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Metadata keys of a box.
const (
	metaUserData      = "user-data"      // the bootstrap, run by cloud-init
	metaStartup       = "startup-script" // runs the bootstrap where cloud-init does not
	metaSSHKeys       = "ssh-keys"       // the lease key, for the guest agent
	metaOSLogin       = "enable-oslogin"
	metaBlockProjKeys = "block-project-ssh-keys"
	// metaWorkRoot records the box's work root, so that a backend
	// configured with another one still finds the box's work directories.
	metaWorkRoot = "crabbox-work-root"
)

// startupScript runs the user-data bootstrap on images without cloud-init
// (Debian's Compute Engine images have the guest agent only), once per
// instance: not where cloud-init runs it, and not again after the box is
// ready. The ready marker alone is not enough: an instance made from a
// checkpoint's machine image has its source's, so the script also
// records which instance it ran on.
var startupScript = `#!/bin/sh
# crabbox: run the bootstrap from the user-data metadata where cloud-init does not.
command -v cloud-init >/dev/null 2>&1 && exit 0
md='http://metadata.google.internal/computeMetadata/v1/instance'
id=$(curl -fsS -H 'Metadata-Flavor: Google' "$md/id") || exit 1
[ -e ` + cloud.ReadyMarker + ` ] && [ "$(cat ` + instanceRecord + ` 2>/dev/null)" = "$id" ] && exit 0
umask 077
f=$(mktemp) || exit 1
curl -fsS -H 'Metadata-Flavor: Google' "$md/attributes/user-data" >"$f" &&
	sh "$f" && echo "$id" >` + instanceRecord + `
rc=$?
rm -f "$f"
exit $rc
`

// instanceRecord is where the startup script records the ID of the
// instance it bootstrapped.
const instanceRecord = "/var/lib/crabbox/gce-instance"

// launch is everything an instance insert needs, prepared before anything
// is created.
type launch struct {
	req      provider.AcquireRequest
	name     string
	labels   map[string]string // ownership and caller labels, GCP form
	hostKey  cloud.HostKey
	userData string
	// source is the machine image the instance is made from (a fork), as
	// a URL relative to the API; empty for the configured image.
	source string
}

// requestKey names the insert for its request ID: the lease, and for a
// restore's replacement instance its own name too.
func (l launch) requestKey() string {
	if l.name == instanceName(l.req.LeaseID) {
		return l.req.LeaseID
	}
	return l.req.LeaseID + ":" + l.name
}

// placement is one way to create the instance: a zone and a market.
type placement struct {
	zone string
	spot bool
}

func (p placement) String() string {
	if p.spot {
		return "spot in " + p.zone
	}
	return "standard in " + p.zone
}

// placements are tried in order: spot in every zone, then standard in
// every zone (only standard when so configured).
func (b *Backend) placements() []placement {
	var out []placement
	for _, m := range cloud.Markets(b.cfg.Market, MarketStandard) {
		for _, z := range b.cfg.Zones {
			out = append(out, placement{z, m == MarketSpot})
		}
	}
	return out
}

// Acquire creates the lease's instance; see the package documentation for
// its steps. On failure, or when ctx ends before it returns, it deletes
// whatever it created.
func (b *Backend) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	target, err := b.acquire(ctx, req, nil)
	if err != nil {
		// The caller (lease.Store.Acquire) names the provider and the lease.
		return provider.LeaseTarget{}, err
	}
	b.rt.Logger.Info("gcp box ready", "lease", req.LeaseID, "instance", target.CloudID, "host", target.Host, "port", target.Port)
	return target, nil
}

// acquire is Acquire, of an instance made from the machine image of the
// checkpoint from when it is not nil (a fork).
func (b *Backend) acquire(ctx context.Context, req provider.AcquireRequest, from *provider.CheckpointArtifact) (target provider.LeaseTarget, err error) {
	l, err := b.prepare(req)
	if err != nil {
		return target, err
	}
	api, err := b.clients(ctx)
	if err != nil {
		return target, err
	}
	if from != nil {
		if l.source, err = b.checkpointImage(ctx, api, *from); err != nil {
			return target, err
		}
	}
	clock := b.rt.Clock
	deadline := clock.Now().Add(b.cfg.BootTimeout)

	rb := cloud.NewRollback(b.rt.Logger.With("lease", req.LeaseID), 0)
	defer rb.Finish(ctx, &err)

	if err := b.firewall(ctx, api, req.LeaseID, rb); err != nil {
		return target, cloud.Failed(stepFirewall, err)
	}

	// The deletion is pushed before the insert and finds the instance by
	// the lease label, so an insert whose answer was lost is rolled back too.
	rb.Add(cloud.StepCreate, "instances of lease "+req.LeaseID, func(ctx context.Context) error {
		return b.deleteLease(ctx, api, req.LeaseID, cloud.StateFailed)
	})
	p, err := cloud.FirstWithCapacity(ctx, b.rt.Logger, b.placements(), func(ctx context.Context, p placement) error {
		return b.insert(ctx, api, l, p)
	})
	if err != nil {
		return target, cloud.Failed(cloud.StepCreate, err)
	}

	z, ip, err := b.waitAddress(ctx, api, p.zone, l.name, deadline)
	if err != nil {
		return target, cloud.Failed(cloud.StepAddress, err)
	}

	port, err := cloud.WaitForSSH(ctx, cloud.SSHWait{
		Host: ip, Ports: b.cfg.SSHPorts, HostKey: l.hostKey.PublicKey(), Clock: clock,
		Interval: b.cfg.PollInterval, Timeout: max(deadline.Sub(clock.Now()), time.Nanosecond),
		Dial: cloud.MappedDial(b.mapAddress), Log: b.rt.Logger,
	})
	if err != nil {
		return target, cloud.Failed(cloud.StepSSH, err)
	}

	ready := cloud.WithSSHPort(cloud.WithState(z.inst.GetLabels(), cloud.StateReady), port)
	if err := b.setLabels(ctx, api, z, ready); err != nil {
		return target, cloud.Failed(cloud.StepLabel, err)
	}
	z.inst.Labels = cloud.GCPLabels(ready)
	target, err = b.target(z)
	if err != nil {
		return target, cloud.Failed(cloud.StepLabel, err)
	}
	return target, nil
}

// prepare checks the request and renders the labels and user data, before
// anything is created.
func (b *Backend) prepare(req provider.AcquireRequest) (launch, error) {
	if b.cfg.SourceRange == "" {
		return launch{}, errNoSourceRange
	}
	if err := cloud.CheckAcquire(req, b.rt.Clock.Now()); err != nil {
		return launch{}, err
	}
	if req.TTL < time.Minute {
		return launch{}, fmt.Errorf("TTL %s is shorter than a minute", req.TTL)
	}
	hostKey, err := cloud.NewHostKey()
	if err != nil {
		return launch{}, err
	}
	labels, err := cloud.NewLabels(req, cloud.LabelOptions{
		Provider: Name, ServerType: b.cfg.MachineType, Owner: b.cfg.Owner, HostKey: hostKey.PublicKey(),
	})
	if err != nil {
		return launch{}, err
	}
	userData, err := cloud.Bootstrap{
		AuthorizedKey: req.PublicKey, HostKey: hostKey, SelfDestructAfter: req.TTL,
		Ports: b.cfg.SSHPorts, WorkRoot: b.cfg.WorkRoot,
	}.UserData()
	if err != nil {
		return launch{}, err
	}
	return launch{req: req, name: instanceName(req.LeaseID), labels: cloud.GCPLabels(labels), hostKey: hostKey, userData: userData}, nil
}

// insert creates the instance in placement p and waits for the insert
// operation to finish.
func (b *Backend) insert(ctx context.Context, api *clients, l launch, p placement) error {
	what := fmt.Sprintf("create %s instance %s", p, l.name)
	req := &computepb.InsertInstanceRequest{
		Project: b.cfg.Project, Zone: p.zone,
		// The same request ID for the same lease and placement: a retried
		// insert is the same insert.
		RequestId:        proto.String(uuid.NewSHA1(uuid.NameSpaceURL, []byte("crabbox:"+l.requestKey()+":"+p.String())).String()),
		InstanceResource: b.instance(l, p),
	}
	if l.source != "" {
		req.SourceMachineImage = proto.String(l.source)
	}
	op, err := api.instances.Insert(ctx, req)
	if err != nil {
		return apiError(what, err)
	}
	if err := b.wait(ctx, what, op); err != nil {
		return err
	}
	b.rt.Logger.Info("gcp instance created", "lease", l.req.LeaseID, "instance", p.zone+"/"+l.name, "placement", p.String())
	return nil
}

// instance is the instance resource of a lease in placement p.
func (b *Backend) instance(l launch, p placement) *computepb.Instance {
	labels := maps.Clone(l.labels)
	model := computepb.Scheduling_STANDARD.String()
	if p.spot {
		model = computepb.Scheduling_SPOT.String()
	}
	meta := []*computepb.Items{
		{Key: proto.String(metaUserData), Value: proto.String(l.userData)},
		{Key: proto.String(metaStartup), Value: proto.String(startupScript)},
		{Key: proto.String(metaSSHKeys), Value: proto.String(cloud.DefaultUser + ":" + l.req.PublicKey)},
		{Key: proto.String(metaOSLogin), Value: proto.String("FALSE")},
		{Key: proto.String(metaBlockProjKeys), Value: proto.String("TRUE")},
		{Key: proto.String(metaWorkRoot), Value: proto.String(b.cfg.WorkRoot)},
	}
	// An instance made from a machine image gets its disks from it.
	disks := []*computepb.AttachedDisk{{
		Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
		InitializeParams: &computepb.AttachedDiskInitializeParams{
			SourceImage: proto.String(b.cfg.Image), DiskSizeGb: proto.Int64(int64(b.cfg.DiskGB)),
			Labels: maps.Clone(l.labels),
		},
	}}
	if l.source != "" {
		disks = nil
	}
	return &computepb.Instance{
		Name:        proto.String(l.name),
		Description: proto.String("crabbox lease " + l.req.LeaseID),
		MachineType: proto.String("zones/" + p.zone + "/machineTypes/" + b.cfg.MachineType),
		Labels:      labels,
		Tags:        &computepb.Tags{Items: []string{NetworkTag}},
		Metadata:    &computepb.Metadata{Items: meta},
		Disks:       disks,
		NetworkInterfaces: []*computepb.NetworkInterface{{
			Network: proto.String(b.cfg.Network),
			AccessConfigs: []*computepb.AccessConfig{{
				Name: proto.String("External NAT"), Type: proto.String(computepb.AccessConfig_ONE_TO_ONE_NAT.String()),
			}},
		}},
		Scheduling: &computepb.Scheduling{
			ProvisioningModel: proto.String(model),
			// Compute Engine deletes the box at its TTL, whoever forgets it.
			MaxRunDuration:            &computepb.Duration{Seconds: proto.Int64(int64(l.req.TTL / time.Second))},
			InstanceTerminationAction: proto.String(computepb.Scheduling_DELETE.String()),
			AutomaticRestart:          proto.Bool(false),
			OnHostMaintenance:         proto.String(computepb.Scheduling_TERMINATE.String()),
		},
	}
}

// waitAddress polls the instance until it runs with an external address,
// until deadline.
func (b *Backend) waitAddress(ctx context.Context, api *clients, zone, name string, deadline time.Time) (zonal, string, error) {
	clock := b.rt.Clock
	pace := cloud.NewBackoff(b.cfg.PollInterval)
	for {
		in, err := b.get(ctx, api, zone, name)
		if err != nil {
			return zonal{}, "", err
		}
		ip := publicIP(in)
		switch s := in.GetStatus(); {
		case s == statusRunning && ip != "":
			return zonal{zone, in}, ip, nil
		case s == statusStopping || s == statusTerminated:
			return zonal{}, "", fmt.Errorf("gcp: instance %s/%s is %s before it ran (spot capacity reclaimed?): %w", zone, name, s, provider.ErrCapacity)
		}
		left := deadline.Sub(clock.Now())
		if left <= 0 {
			return zonal{}, "", fmt.Errorf("gcp: instance %s/%s is %s with address %q after %s: %w", zone, name, in.GetStatus(), ip, b.cfg.BootTimeout, provider.ErrTransient)
		}
		select {
		case <-ctx.Done():
			return zonal{}, "", fmt.Errorf("gcp: wait for the address of instance %s/%s: %w", zone, name, ctx.Err())
		case <-clock.After(min(pace.Next(), left)):
		}
	}
}
