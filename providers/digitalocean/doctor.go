package digitalocean

import (
	"context"
	"fmt"

	"github.com/crabbox-dev/crabbox/provider"
)

// Doctor checks, without changing anything, that the token is accepted,
// that the image exists and which configured sizes DigitalOcean offers in
// the configured regions. It stops after a rejected token: nothing else
// can be known then.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	acct, _, err := b.client.Account.Get(ctx)
	if err != nil {
		return []provider.Check{{Name: "digitalocean API", Detail: apiError("read the account", err).Error()}}, nil
	}
	checks := []provider.Check{{Name: "digitalocean API", OK: true, Detail: fmt.Sprintf("token accepted (droplet limit %d)", acct.DropletLimit)}}
	img := provider.Check{Name: "image " + b.cfg.Image}
	if im, _, err := b.client.Images.GetBySlug(ctx, b.cfg.Image); err != nil {
		img.Detail = apiError("look up the image", err).Error()
	} else {
		img.OK, img.Detail = true, im.Distribution+" "+im.Name
	}
	checks = append(checks, img)
	sizes, _, err := b.client.Sizes.List(ctx, nil)
	if err != nil {
		return append(checks, provider.Check{Name: "sizes", Detail: apiError("list sizes", err).Error()}), nil
	}
	for _, name := range b.cfg.Sizes {
		c := provider.Check{Name: "size " + name, Detail: "not offered"}
		for _, s := range sizes {
			if s.Slug == name {
				c.OK, c.Detail = s.Available, fmt.Sprintf("%d vCPUs, %d MB, regions %v", s.Vcpus, s.Memory, s.Regions)
			}
		}
		checks = append(checks, c)
	}
	return checks, nil
}
