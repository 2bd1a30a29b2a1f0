package scaleway

import (
	"context"
	"fmt"

	"github.com/scaleway/scaleway-sdk-go/api/instance/v1"
	"github.com/scaleway/scaleway-sdk-go/api/marketplace/v2"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"github.com/scaleway/scaleway-sdk-go/validation"

	"github.com/crabbox-dev/crabbox/provider"
)

// Doctor checks, without changing anything, that the credentials are
// accepted for the project, that the configured commercial types exist in
// each zone, and that the image label resolves for the first type. It
// stops after a rejected credential: nothing else can be known then.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	var checks []provider.Check
	add := func(name string, err error, detail string) {
		c := provider.Check{Name: name, OK: err == nil, Detail: detail}
		if err != nil {
			c.Detail = err.Error()
		}
		checks = append(checks, c)
	}
	zone := scw.Zone(b.cfg.Zones[0])
	_, err := b.api.ListServers(&instance.ListServersRequest{Zone: zone, Project: scw.StringPtr(b.cfg.ProjectID), PerPage: scw.Uint32Ptr(1)}, scw.WithContext(ctx))
	add("scaleway API", apiError(ctx, "list the project's servers", err), "credentials accepted for project "+b.cfg.ProjectID)
	if err != nil {
		return checks, nil
	}
	for _, z := range b.cfg.Zones {
		res, err := b.api.ListServersTypes(&instance.ListServersTypesRequest{Zone: scw.Zone(z)}, scw.WithContext(ctx), scw.WithAllPages())
		if err != nil {
			add("zone "+z, apiError(ctx, "list the Instance types", err), "")
			continue
		}
		for _, t := range b.cfg.CommercialTypes {
			st := res.Servers[t]
			if st == nil {
				add(fmt.Sprintf("type %s in %s", t, z), fmt.Errorf("no Instance type %q in %s", t, z), "")
				continue
			}
			add(fmt.Sprintf("type %s in %s", t, z), nil, fmt.Sprintf("%d vCPUs, %d GB", st.Ncpus, st.RAM/uint64(scw.GB)))
		}
	}
	if !validation.IsUUID(b.cfg.Image) {
		img, err := marketplace.NewAPI(b.client).GetLocalImageByLabel(&marketplace.GetLocalImageByLabelRequest{
			ImageLabel: b.cfg.Image, Zone: zone, CommercialType: b.cfg.CommercialTypes[0], Type: marketplace.LocalImageTypeInstanceLocal,
		}, scw.WithContext(ctx))
		detail := ""
		if err == nil {
			detail = img.ID
		} else {
			err = fmt.Errorf("look up the image: %w", err)
		}
		add(fmt.Sprintf("image %s (%s in %s)", b.cfg.Image, b.cfg.CommercialTypes[0], zone), err, detail)
	}
	return checks, nil
}
