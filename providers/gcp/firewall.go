package gcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// stepFirewall is the acquire step that finds or creates the firewall rule.
const stepFirewall cloud.Step = "firewall"

// firewallMarker starts the description of every firewall rule crabbox
// creates. Rules have no labels; this marker is how crabbox recognises its
// own and refuses to touch anyone else's.
const firewallMarker = "crabbox:created_by=crabbox"

// FirewallName is the name of crabbox's rule letting sourceRange reach
// ports on network: one rule per network, range and port set, so a rule
// never changes under a running box.
func FirewallName(network, sourceRange string, ports []int) string {
	h := sha256.Sum256([]byte(network + " " + sourceRange + " " + fmt.Sprint(ports)))
	return "crabbox-ssh-" + hex.EncodeToString(h[:4])
}

// ownedFirewall reports whether crabbox created f (by its description).
func ownedFirewall(f *computepb.Firewall) bool {
	return strings.HasPrefix(f.GetDescription(), firewallMarker)
}

// firewallRule is the rule crabbox wants for its configuration.
func (b *Backend) firewallRule(name string) *computepb.Firewall {
	ports := make([]string, len(b.cfg.SSHPorts))
	for i, p := range b.cfg.SSHPorts {
		ports[i] = strconv.Itoa(p)
	}
	return &computepb.Firewall{
		Name:         proto.String(name),
		Description:  proto.String(fmt.Sprintf("%s (SSH ports %s of crabbox boxes from %s)", firewallMarker, strings.Join(ports, ", "), b.cfg.SourceRange)),
		Network:      proto.String(b.cfg.Network),
		Direction:    proto.String(computepb.Firewall_INGRESS.String()),
		Priority:     proto.Int32(1000),
		SourceRanges: []string{b.cfg.SourceRange},
		TargetTags:   []string{NetworkTag},
		Allowed:      []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: ports}},
	}
}

// getFirewall returns the rule named name, or nil when there is none.
func (b *Backend) getFirewall(ctx context.Context, api *clients, name string) (*computepb.Firewall, error) {
	f, err := api.firewalls.Get(ctx, &computepb.GetFirewallRequest{Project: b.cfg.Project, Firewall: name})
	switch {
	case notFound(err):
		return nil, nil
	case err != nil:
		return nil, apiError("read firewall rule "+name, err)
	}
	return f, nil
}

// firewall makes sure crabbox's rule for the configuration exists, creating
// it if needed, and refuses a rule of that name crabbox did not create or
// that lets in something else. When this call creates the rule it pushes its
// deletion onto rb.
func (b *Backend) firewall(ctx context.Context, api *clients, leaseID string, rb *cloud.Rollback) error {
	name := FirewallName(b.cfg.Network, b.cfg.SourceRange, b.cfg.SSHPorts)
	f, err := b.getFirewall(ctx, api, name)
	if err != nil {
		return err
	}
	if f == nil {
		// Pushed before the insert, so an insert whose answer was lost is
		// rolled back too; not when the insert finds the rule made by a
		// concurrent acquire, which is that acquire's to roll back.
		created := true
		rb.Add(stepFirewall, "firewall rule "+name, func(ctx context.Context) error {
			if !created {
				return nil
			}
			return b.deleteCreatedFirewall(ctx, api, name, leaseID)
		})
		want := b.firewallRule(name)
		op, err := api.firewalls.Insert(ctx, &computepb.InsertFirewallRequest{Project: b.cfg.Project, FirewallResource: want})
		if err == nil {
			err = b.wait(ctx, "create firewall rule "+name, op)
		} else {
			err = apiError("create firewall rule "+name, err)
		}
		switch {
		case err == nil:
			b.rt.Logger.Info("gcp firewall rule created", "firewall", name, "source_range", b.cfg.SourceRange)
			return nil
		case !errors.Is(err, provider.ErrConflict): // a concurrent acquire may have made it meanwhile
			return err
		}
		created = false
		if f, err = b.getFirewall(ctx, api, name); err != nil {
			return err
		}
		if f == nil {
			return fmt.Errorf("gcp: firewall rule %s exists and does not: %w", name, provider.ErrTransient)
		}
	}
	if !ownedFirewall(f) {
		return fmt.Errorf("gcp: firewall rule %s was not created by crabbox (its description lacks %q); refusing to use or change it: %w",
			name, firewallMarker, provider.ErrConflict)
	}
	if !b.sameRule(f) {
		return fmt.Errorf("gcp: crabbox's firewall rule %s no longer lets %s reach ports %v of tag %s (was it edited?); delete it to have it made again: %w",
			name, b.cfg.SourceRange, b.cfg.SSHPorts, NetworkTag, provider.ErrConflict)
	}
	return nil
}

// sameRule reports whether f lets the configured range in on every SSH port
// for crabbox's tag.
func (b *Backend) sameRule(f *computepb.Firewall) bool {
	if f.GetDisabled() || f.GetDirection() != computepb.Firewall_INGRESS.String() ||
		!slices.Contains(f.GetSourceRanges(), b.cfg.SourceRange) || !slices.Contains(f.GetTargetTags(), NetworkTag) {
		return false
	}
	for _, p := range b.cfg.SSHPorts {
		if !slices.ContainsFunc(f.GetAllowed(), func(a *computepb.Allowed) bool {
			return a.GetIPProtocol() == "tcp" && slices.Contains(a.GetPorts(), strconv.Itoa(p))
		}) {
			return false
		}
	}
	return true
}

// deleteCreatedFirewall is the rollback of a rule this acquire created (or
// may have created, when the answer was lost). It runs after the lease's
// instances are deleted, and leaves the rule when another crabbox instance
// of the project relies on it.
func (b *Backend) deleteCreatedFirewall(ctx context.Context, api *clients, name, leaseID string) error {
	f, err := b.getFirewall(ctx, api, name)
	if err != nil || f == nil || !ownedFirewall(f) {
		return err
	}
	others, err := b.instances(ctx, api, ownership(""))
	if err != nil {
		return err
	}
	others = slices.DeleteFunc(others, func(in zonal) bool { return in.inst.GetLabels()[cloud.LabelLease] == leaseID })
	if len(others) > 0 {
		b.rt.Logger.Info("gcp firewall rule kept: other crabbox instances use it", "firewall", name, "instances", len(others))
		return nil
	}
	op, err := api.firewalls.Delete(ctx, &computepb.DeleteFirewallRequest{Project: b.cfg.Project, Firewall: name})
	switch {
	case notFound(err):
		return nil
	case err != nil:
		return apiError("delete firewall rule "+name, err)
	}
	if err := b.wait(ctx, "delete firewall rule "+name, op); err != nil && !errors.Is(err, provider.ErrNotFound) {
		return err
	}
	b.rt.Logger.Info("gcp firewall rule deleted", "firewall", name)
	return nil
}
