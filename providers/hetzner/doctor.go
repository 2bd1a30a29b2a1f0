package hetzner

import (
	"context"
	"fmt"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/crabbox-dev/crabbox/provider"
)

// Doctor checks, without changing anything, that the token is accepted
// and that the configured server types, image and locations exist. It
// stops after a failed API check: with a rejected token nothing else can
// be known.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	var checks []provider.Check
	add := func(name string, err error, detail string) bool {
		c := provider.Check{Name: name, OK: err == nil, Detail: detail}
		if err != nil {
			c.Detail = err.Error()
		}
		checks = append(checks, c)
		return err == nil
	}
	archs := map[hcloud.Architecture]bool{}
	for i, name := range b.cfg.ServerTypes {
		st, _, err := b.client.ServerType.GetByName(ctx, name)
		if err != nil {
			err = apiError("look up the server type", err)
			if i == 0 {
				add("hetzner API", err, "")
				return checks, nil
			}
		} else if i == 0 {
			add("hetzner API", nil, "token accepted")
		}
		if err == nil && st == nil {
			err = fmt.Errorf("no server type %q", name)
		}
		detail := ""
		if st != nil {
			archs[st.Architecture] = true
			detail = fmt.Sprintf("%d cores, %.0f GB, %s", st.Cores, st.Memory, st.Architecture)
		}
		add("server type "+name, err, detail)
	}
	for arch := range archs {
		img, _, err := b.client.Image.GetByNameAndArchitecture(ctx, b.cfg.Image, arch)
		if err != nil {
			err = apiError("look up the image", err)
		} else if img == nil {
			err = fmt.Errorf("no image %q for %s", b.cfg.Image, arch)
		}
		add(fmt.Sprintf("image %s (%s)", b.cfg.Image, arch), err, "")
	}
	for _, name := range b.cfg.Locations {
		loc, _, err := b.client.Location.GetByName(ctx, name)
		detail := ""
		if err != nil {
			err = apiError("look up the location", err)
		} else if loc == nil {
			err = fmt.Errorf("no location %q", name)
		} else {
			detail = loc.City
		}
		add("location "+name, err, detail)
	}
	return checks, nil
}
