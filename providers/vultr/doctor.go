package vultr

import (
	"context"
	"fmt"
	"slices"

	"github.com/vultr/govultr/v3"

	"github.com/crabbox-dev/crabbox/provider"
)

// Doctor checks, without changing anything, that the API key is accepted,
// which configured plans each configured region offers now, and that the
// operating system exists. It stops after a rejected key: nothing else
// can be known then.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	var checks []provider.Check
	add := func(name string, err error, detail string) {
		c := provider.Check{Name: name, OK: err == nil, Detail: detail}
		if err != nil {
			c.Detail = err.Error()
		}
		checks = append(checks, c)
	}
	err := b.call(ctx, "read the account", func(ctx context.Context) error {
		_, _, err := b.client.Account.Get(ctx)
		return err
	})
	add("vultr API", err, "API key accepted")
	if err != nil {
		return checks, nil
	}
	for _, region := range b.cfg.Regions {
		var avail *govultr.PlanAvailability
		err := b.call(ctx, "look up the region's plans", func(ctx context.Context) (err error) {
			avail, _, err = b.client.Region.Availability(ctx, region, "")
			return err
		})
		if err != nil {
			add("region "+region, err, "")
			continue
		}
		for _, plan := range b.cfg.Plans {
			var perr error
			if avail == nil || !slices.Contains(avail.AvailablePlans, plan) {
				perr = fmt.Errorf("plan %s is not available in %s now", plan, region)
			}
			add(fmt.Sprintf("plan %s in %s", plan, region), perr, "available")
		}
	}
	add(fmt.Sprintf("os %d", b.cfg.OSID), b.findOS(ctx), "")
	return checks, nil
}

// findOS looks the configured operating system up in Vultr's list.
func (b *Backend) findOS(ctx context.Context) error {
	opts := &govultr.ListOptions{PerPage: 500}
	for {
		var page []govultr.OS
		var meta *govultr.Meta
		err := b.call(ctx, "list operating systems", func(ctx context.Context) (err error) {
			page, meta, _, err = b.client.OS.List(ctx, opts)
			return err
		})
		if err != nil {
			return err
		}
		if slices.ContainsFunc(page, func(o govultr.OS) bool { return o.ID == b.cfg.OSID }) {
			return nil
		}
		if meta == nil || meta.Links == nil || meta.Links.Next == "" {
			return fmt.Errorf("no operating system with ID %d", b.cfg.OSID)
		}
		opts.Cursor = meta.Links.Next
	}
}
