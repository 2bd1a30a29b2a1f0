package vercel

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/crabbox-dev/crabbox/provider"
)

// Doctor checks, without changing anything, that the token is accepted
// for the team and project: it lists one sandbox of the project.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	var page sandboxPage
	q := url.Values{"project": {b.cfg.Project}, "limit": {"1"}}
	err := b.api.call(ctx, "list sandboxes", http.MethodGet, "/v2/sandboxes", q, nil, &page)
	c := provider.Check{Name: "vercel API", OK: err == nil}
	if err != nil {
		c.Detail = err.Error()
	} else {
		c.Detail = fmt.Sprintf("token accepted for project %s", b.cfg.Project)
		if b.cfg.Team != "" {
			c.Detail += " of team " + b.cfg.Team
		}
	}
	return []provider.Check{c}, nil
}
