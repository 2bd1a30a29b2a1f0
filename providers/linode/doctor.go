package linode

import (
	"context"
	"fmt"

	"github.com/crabbox-dev/crabbox/provider"
)

// Doctor checks, without changing anything, that the token is accepted
// and that the image, the types and the regions exist. It stops after a
// rejected token: nothing else can be known then.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	prof, err := b.client.GetProfile(ctx)
	if err != nil {
		return []provider.Check{{Name: "linode API", Detail: apiError(ctx, "read the profile", err).Error()}}, nil
	}
	checks := []provider.Check{{Name: "linode API", OK: true, Detail: "token accepted (user " + prof.Username + ")"}}
	img := provider.Check{Name: "image " + b.cfg.Image}
	if im, err := b.client.GetImage(ctx, b.cfg.Image); err != nil {
		img.Detail = apiError(ctx, "look up the image", err).Error()
	} else {
		img.OK, img.Detail = true, im.Label
	}
	checks = append(checks, img)
	for _, name := range b.cfg.Sizes {
		c := provider.Check{Name: "type " + name}
		if t, err := b.client.GetType(ctx, name); err != nil {
			c.Detail = apiError(ctx, "look up the type", err).Error()
		} else {
			c.OK, c.Detail = true, fmt.Sprintf("%d vCPUs, %d MB", t.VCPUs, t.Memory)
		}
		checks = append(checks, c)
	}
	for _, name := range b.cfg.Regions {
		c := provider.Check{Name: "region " + name}
		if r, err := b.client.GetRegion(ctx, name); err != nil {
			c.Detail = apiError(ctx, "look up the region", err).Error()
		} else {
			c.OK, c.Detail = true, r.Label
		}
		checks = append(checks, c)
	}
	return checks, nil
}
