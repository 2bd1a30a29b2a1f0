package azure

import (
	"context"
	"fmt"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Cleanup decides for every VM with crabbox's tags of this provider
// whether to delete it (cloud.DecideCleanup: only with a claim of the
// caller, expired or failed, kept ones too once expired), and unless
// req.DryRun deletes it: it re-reads the VM and decides again first, so a
// lease touched in the meantime survives, then deletes the VM and its
// companions. NICs and public IPs whose lease has no VM (left by a crash
// during an acquire or a delete) are decided on their own tags the same
// way, NICs first.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	claimed := func(id string) bool { return req.Claimed != nil && req.Claimed(id) }
	decide := func(tags map[string]string) cloud.CleanupDecision {
		return cloud.DecideCleanup(cloud.CleanupInput{
			Labels: tags, Provider: Name, Record: cloud.Record{Found: claimed(tags[cloud.LabelLease])}, Now: req.Now,
		})
	}
	vms, err := b.listVMs(ctx)
	if err != nil {
		return nil, fmt.Errorf("clean up azure: %w", err)
	}
	var out []provider.CleanupDecision
	withVM := map[string]bool{}
	for _, vm := range vms {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		tags := fromTags(vm.Tags)
		leaseID := tags[cloud.LabelLease]
		withVM[leaseID] = true
		d := decide(tags)
		dec := provider.CleanupDecision{LeaseID: leaseID, Slug: tags[cloud.LabelSlug], CloudID: deref(vm.Name), Delete: d.Delete, Reason: d.Reason}
		if d.Delete && !req.DryRun {
			b.deleteDecided(ctx, leaseID, req.Now, claimed, &dec)
		}
		out = append(out, dec)
	}

	// Companions without a VM, listed after the VMs' deletions.
	nics, err := b.listNICs(ctx)
	if err != nil {
		return out, fmt.Errorf("clean up azure: %w", err)
	}
	pips, err := b.listPublicIPs(ctx)
	if err != nil {
		return out, fmt.Errorf("clean up azure: %w", err)
	}
	type orphan struct {
		kind, name string
		tags       map[string]string
		del        func(context.Context, string, string) error
		reread     func(context.Context, string) (map[string]string, bool, error)
	}
	var orphans []orphan
	for _, n := range nics {
		orphans = append(orphans, orphan{"NIC", deref(n.Name), fromTags(n.Tags), b.deleteNIC, b.nicTags})
	}
	for _, p := range pips {
		orphans = append(orphans, orphan{"public IP", deref(p.Name), fromTags(p.Tags), b.deletePublicIP, b.publicIPTags})
	}
	for _, o := range orphans {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		leaseID := o.tags[cloud.LabelLease]
		if withVM[leaseID] {
			continue // goes with its VM
		}
		d := decide(o.tags)
		dec := provider.CleanupDecision{LeaseID: leaseID, Slug: o.tags[cloud.LabelSlug], CloudID: o.kind + " " + o.name,
			Delete: d.Delete, Reason: o.kind + " without a VM: " + d.Reason}
		if d.Delete && !req.DryRun {
			tags, ok, err := o.reread(ctx, o.name)
			switch {
			case err != nil:
				dec.Err = err
			case !ok:
				dec.Deleted, dec.Reason = true, dec.Reason+" (already gone)"
			default:
				if again := decide(tags); !again.Delete || tags[cloud.LabelLease] != leaseID {
					dec.Delete, dec.Reason = false, "changed since listed: "+again.Reason
				} else if err := o.del(ctx, leaseID, o.name); err != nil {
					dec.Err = err
				} else {
					dec.Deleted = true
					b.rt.Logger.Info("azure orphan cleaned up", "kind", o.kind, "name", o.name, "lease", leaseID, "reason", d.Reason)
				}
			}
		}
		out = append(out, dec)
	}
	return out, nil
}

// deleteDecided re-reads the lease's VM, decides again on its fresh tags
// and deletes it and its companions if the decision holds, recording the
// outcome in dec.
func (b *Backend) deleteDecided(ctx context.Context, leaseID string, now time.Time, claimed func(string) bool, dec *provider.CleanupDecision) {
	name := leaseNames(leaseID).VM
	if dec.CloudID != name {
		dec.Delete, dec.Reason = false, fmt.Sprintf("VM %s is not named after its lease (%s): left alone", dec.CloudID, name)
		return
	}
	fresh, err := b.vms.Get(ctx, b.cfg.ResourceGroup, name, nil)
	if notFound(err) {
		// The VM went away in the meantime; finish its companions.
		if err := b.deleteLease(ctx, leaseID, cloud.StateReleased); err != nil {
			dec.Err = err
			return
		}
		dec.Deleted, dec.Reason = true, dec.Reason+" (already gone)"
		return
	}
	if err != nil {
		dec.Err = apiError("re-read VM "+name, err)
		return
	}
	tags := fromTags(fresh.Tags)
	again := cloud.DecideCleanup(cloud.CleanupInput{Labels: tags, Provider: Name, Record: cloud.Record{Found: claimed(tags[cloud.LabelLease])}, Now: now})
	if !again.Delete || tags[cloud.LabelLease] != leaseID {
		dec.Delete, dec.Reason = false, "changed since listed: "+again.Reason
		return
	}
	if err := b.deleteLease(ctx, leaseID, cloud.StateReleased); err != nil {
		dec.Err = err
		return
	}
	dec.Deleted = true
	b.rt.Logger.Info("azure lease cleaned up", "lease", leaseID, "vm", name, "reason", dec.Reason)
}

// nicTags re-reads the NIC's tags; ok is false when it is gone.
func (b *Backend) nicTags(ctx context.Context, name string) (map[string]string, bool, error) {
	nic, err := b.nics.Get(ctx, b.cfg.ResourceGroup, name, nil)
	if notFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, apiError("re-read NIC "+name, err)
	}
	return fromTags(nic.Tags), true, nil
}

// publicIPTags re-reads the public IP's tags; ok is false when it is gone.
func (b *Backend) publicIPTags(ctx context.Context, name string) (map[string]string, bool, error) {
	pip, err := b.pips.Get(ctx, b.cfg.ResourceGroup, name, nil)
	if notFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, apiError("re-read public IP "+name, err)
	}
	return fromTags(pip.Tags), true, nil
}
