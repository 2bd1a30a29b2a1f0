package gcp

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Instance statuses of Compute Engine.
const (
	statusRunning    = "RUNNING"
	statusStopping   = "STOPPING"
	statusTerminated = "TERMINATED"
)

// zonal is an instance and its zone.
type zonal struct {
	zone string
	inst *computepb.Instance
}

// cloudID is the provider's ID of an instance: zone/name.
func (z zonal) cloudID() string { return z.zone + "/" + z.inst.GetName() }

// instanceName is the name of a lease's instance: a valid Compute Engine
// name (lowercase letters, digits and '-').
func instanceName(leaseID string) string { return "crabbox-" + strings.ReplaceAll(leaseID, "_", "-") }

// instances lists the instances carrying every label of labels (in their
// GCP form) in every configured zone.
func (b *Backend) instances(ctx context.Context, api *clients, labels map[string]string) ([]zonal, error) {
	var out []zonal
	for _, zone := range b.cfg.Zones {
		it := api.instances.List(ctx, &computepb.ListInstancesRequest{Project: b.cfg.Project, Zone: zone, Filter: ptr(filter(labels))})
		for {
			in, err := it.Next()
			if errors.Is(err, iterator.Done) {
				break
			}
			if err != nil {
				return nil, apiError("list crabbox instances in "+zone, err)
			}
			// The filter is the server's; check the labels here too, so a
			// filter the server ignored can never select someone else's.
			if hasLabels(in.GetLabels(), labels) {
				out = append(out, zonal{zone, in})
			}
		}
	}
	return out, nil
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// get re-reads one instance.
func (b *Backend) get(ctx context.Context, api *clients, zone, name string) (*computepb.Instance, error) {
	in, err := api.instances.Get(ctx, &computepb.GetInstanceRequest{Project: b.cfg.Project, Zone: zone, Instance: name})
	if err != nil {
		return nil, apiError("read instance "+zone+"/"+name, err)
	}
	return in, nil
}

// deleteInstance deletes one instance and waits for the deletion; one
// already gone counts as deleted.
func (b *Backend) deleteInstance(ctx context.Context, api *clients, zone, name string) error {
	op, err := api.instances.Delete(ctx, &computepb.DeleteInstanceRequest{Project: b.cfg.Project, Zone: zone, Instance: name})
	switch {
	case notFound(err):
		return nil
	case err != nil:
		return apiError("delete instance "+zone+"/"+name, err)
	}
	if err := b.wait(ctx, "delete instance "+zone+"/"+name, op); err != nil && !errors.Is(err, provider.ErrNotFound) {
		return err
	}
	return nil
}

// deleteLease deletes every instance labelled with the lease, in every
// zone. An instance it cannot delete it tries to label with state orphan
// (failed or released), so that cleanup deletes it as soon as it sees it.
func (b *Backend) deleteLease(ctx context.Context, api *clients, leaseID, orphan string) error {
	all, err := b.instances(ctx, api, ownership(leaseID))
	if err != nil {
		return err
	}
	var errs []error
	for _, z := range all {
		err := b.deleteInstance(ctx, api, z.zone, z.inst.GetName())
		if err == nil {
			b.rt.Logger.Info("gcp instance deleted", "lease", leaseID, "instance", z.cloudID())
			continue
		}
		errs = append(errs, err)
		if lerr := b.setLabels(ctx, api, z, cloud.WithState(z.inst.GetLabels(), orphan)); lerr != nil {
			b.rt.Logger.Warn("gcp instance left behind, unlabelled", "instance", z.cloudID(), "lease", leaseID, "err", lerr)
		} else {
			b.rt.Logger.Warn("gcp instance left behind for cleanup", "instance", z.cloudID(), "lease", leaseID, "state", orphan)
		}
	}
	return errors.Join(errs...)
}

// setLabels replaces the labels of instance z, guarded by the label
// fingerprint z was read with: a concurrent change makes it fail with
// ErrConflict instead of being overwritten.
func (b *Backend) setLabels(ctx context.Context, api *clients, z zonal, labels map[string]string) error {
	what := "label instance " + z.cloudID()
	op, err := api.instances.SetLabels(ctx, &computepb.SetLabelsInstanceRequest{
		Project: b.cfg.Project, Zone: z.zone, Instance: z.inst.GetName(),
		InstancesSetLabelsRequestResource: &computepb.InstancesSetLabelsRequest{
			Labels: cloud.GCPLabels(labels), LabelFingerprint: z.inst.LabelFingerprint,
		},
	})
	if err != nil {
		return apiError(what, err)
	}
	return b.wait(ctx, what, op)
}

// live reports whether in is a running box of a lease that is ready.
func live(in *computepb.Instance) bool {
	st := in.GetLabels()[cloud.LabelState]
	return in.GetStatus() == statusRunning && (st == cloud.StateReady || st == cloud.StateRunning)
}

// find returns the live instance of the lease ref (a lease ID or a slug)
// in any configured zone.
func (b *Backend) find(ctx context.Context, api *clients, ref string) (zonal, error) {
	labels := ownership("")
	switch {
	case lease.IsID(ref):
		labels[cloud.LabelLease] = ref
	case lease.ValidSlug(ref):
		labels[cloud.LabelSlug] = ref
	default:
		return zonal{}, fmt.Errorf("gcp: %q is neither a lease ID nor a slug: %w", ref, provider.ErrNotFound)
	}
	all, err := b.instances(ctx, api, labels)
	if err != nil {
		return zonal{}, err
	}
	var found []zonal
	for _, z := range all {
		if live(z.inst) {
			found = append(found, z)
		}
	}
	switch len(found) {
	case 0:
		return zonal{}, fmt.Errorf("gcp: lease %s: no running instance: %w", ref, provider.ErrNotFound)
	case 1:
		return found[0], nil
	}
	return zonal{}, fmt.Errorf("gcp: lease %s matches %d running instances (%s, %s, ...): %w", ref, len(found), found[0].cloudID(), found[1].cloudID(), provider.ErrConflict)
}

// publicIP is the instance's external IPv4 address, or "".
func publicIP(in *computepb.Instance) string {
	for _, ni := range in.GetNetworkInterfaces() {
		for _, ac := range ni.GetAccessConfigs() {
			if ip := ac.GetNatIP(); ip != "" {
				return ip
			}
		}
	}
	return ""
}

// target describes a crabbox instance as a lease target.
func (b *Backend) target(z zonal) (provider.LeaseTarget, error) {
	info, err := cloud.ParseLabels(z.inst.GetLabels())
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("gcp: instance %s: %w", z.cloudID(), err)
	}
	t := provider.LeaseTarget{CloudID: z.cloudID(), User: cloud.DefaultUser, WorkRoot: metadataValue(z.inst, metaWorkRoot)}
	if t.WorkRoot == "" {
		t.WorkRoot = b.cfg.WorkRoot
	}
	info.Apply(&t) // host key and, once ready, the SSH port that answered
	if t.Port == 0 {
		t.Port = b.cfg.SSHPorts[0]
	}
	if ip := publicIP(z.inst); ip != "" {
		t.Host, t.Port = b.mapAddress(ip, t.Port)
	}
	if s := z.inst.GetStatus(); s != statusRunning {
		t.State = strings.ToLower(s)
	}
	return t, nil
}

func (b *Backend) mapAddress(host string, port int) (string, int) {
	if b.cfg.MapAddress == nil {
		return host, port
	}
	return b.cfg.MapAddress(host, port)
}

func ptr[T any](v T) *T { return &v }

// metadataValue is the value of an instance's metadata item key, or "".
func metadataValue(in *computepb.Instance, key string) string {
	for _, it := range in.GetMetadata().GetItems() {
		if it.GetKey() == key {
			return it.GetValue()
		}
	}
	return ""
}
