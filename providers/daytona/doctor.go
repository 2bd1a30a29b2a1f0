package daytona

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/crabbox-dev/crabbox/provider"
)

// Doctor checks, without changing anything, that the API answers and
// accepts the key (by listing this provider's sandboxes, one page) and,
// when a snapshot is configured, that it exists.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	q := url.Values{"labels": {`{"crabbox":"true","provider":"daytona"}`}, "limit": {"1"}}
	var page listSandboxes
	err := b.api.json(ctx, "list sandboxes", request{method: http.MethodGet, url: withQuery(b.api.api("sandbox"), q)}, &page)
	checks := []provider.Check{check("daytona API "+b.cfg.APIURL, err, "key accepted")}
	if err != nil {
		return checks, nil
	}
	if b.cfg.Snapshot != "" {
		var snap struct {
			Name  string `json:"name"`
			State string `json:"state"`
		}
		err := b.api.json(ctx, "look up the snapshot", request{method: http.MethodGet, url: b.api.api("snapshots", b.cfg.Snapshot)}, &snap)
		checks = append(checks, check("snapshot "+b.cfg.Snapshot, err, fmt.Sprintf("state %s", snap.State)))
	}
	return checks, nil
}

func check(name string, err error, detail string) provider.Check {
	if err != nil {
		return provider.Check{Name: name, Detail: err.Error()}
	}
	return provider.Check{Name: name, OK: true, Detail: detail}
}
