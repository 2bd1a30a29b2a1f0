package proxmox

import (
	"context"
	"fmt"
	"slices"

	"github.com/crabbox-dev/crabbox/provider"
)

// Doctor checks, without changing anything, that the token is accepted,
// that the template exists and is a template, and that the nodes are
// online. It stops after a rejected token: nothing else can be known then.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	var ver struct {
		Version string `json:"version"`
		Release string `json:"release"`
	}
	if err := b.vms.c.Get(ctx, "/version", &ver); err != nil {
		return []provider.Check{{Name: "proxmox API", Detail: apiError(ctx, "read the version", err).Error()}}, nil
	}
	checks := []provider.Check{{Name: "proxmox API", OK: true, Detail: "token accepted (Proxmox VE " + ver.Version + ")"}}
	tmpl := provider.Check{Name: "template " + b.cfg.Image}
	if rs, err := b.vms.resources(ctx); err != nil {
		tmpl.Detail = err.Error()
	} else if i := slices.IndexFunc(rs, func(r resource) bool { return fmt.Sprint(r.VMID) == b.cfg.Image }); i < 0 {
		tmpl.Detail = "no VM with this ID is visible to the token"
	} else if !bool(rs[i].Template) {
		tmpl.Detail = "VM " + b.cfg.Image + " (" + rs[i].Name + ") is not a template: convert it (qm template " + b.cfg.Image + ")"
	} else {
		tmpl.OK, tmpl.Detail = true, rs[i].Name+" on node "+rs[i].Node
	}
	checks = append(checks, tmpl)
	var nodes []nodeStatus
	if err := b.vms.c.Get(ctx, "/nodes", &nodes); err != nil {
		return append(checks, provider.Check{Name: "nodes", Detail: apiError(ctx, "list the nodes", err).Error()}), nil
	}
	for _, name := range b.cfg.Regions {
		c := provider.Check{Name: "node " + name, Detail: "not a node of the cluster"}
		if i := slices.IndexFunc(nodes, func(n nodeStatus) bool { return n.Node == name }); i >= 0 {
			c.OK, c.Detail = nodes[i].Status == "online", nodes[i].Status
		}
		checks = append(checks, c)
	}
	return checks, nil
}

// nodeStatus is a node as /nodes lists it.
type nodeStatus struct {
	Node   string `json:"node"`
	Status string `json:"status"`
}
