package tensorlake

import (
	"context"
	"strconv"
	"time"
)

import "github.com/crabbox-dev/crabbox/provider"

// Doctor checks, without changing anything, that the control API accepts
// the API key (by listing sandboxes), and reports this owner's crabbox
// sandboxes, the sandbox settings and the lifetime cap.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	sbs, err := b.mine(ctx)
	if err != nil {
		return []provider.Check{{Name: "tensorlake API", Detail: err.Error()}}, nil
	}
	proxy := b.cfg.ProxyURL
	if proxy == "" {
		proxy = "each sandbox's sandbox_url"
	}
	image := b.cfg.Image
	if image == "" {
		image = "Tensorlake's default"
	}
	return []provider.Check{
		{Name: "tensorlake API", OK: true, Detail: b.cfg.APIURL + ": API key accepted; " + plural(len(sbs), "crabbox sandbox", "crabbox sandboxes") + " of owner " + b.cfg.Owner},
		{Name: "tensorlake sandboxes", OK: true, Detail: "image " + image + ", " + strconv.FormatFloat(b.cfg.CPUs, 'g', -1, 64) + " CPU, " +
			strconv.FormatInt(b.cfg.MemoryMB, 10) + " MB, proxy at " + proxy + ", leases capped at " + b.cfg.MaxLifetime.Round(time.Second).String()},
	}, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
