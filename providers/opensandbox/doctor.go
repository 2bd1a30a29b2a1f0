package opensandbox

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/crabbox-dev/crabbox/provider"
)

// Doctor checks, without changing anything, that the server accepts the
// API key (by listing one page of this owner's crabbox sandboxes), and
// reports how sandboxes are made and how execd is reached.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	filter := url.Values{}
	for k, v := range b.ownership("") {
		filter.Set(k, v)
	}
	var ans listAnswer
	err := b.api.do(ctx, call{op: "list sandboxes", method: http.MethodGet, path: "/sandboxes",
		query: url.Values{"metadata": {filter.Encode()}, "pageSize": {"1"}}, out: &ans, retry5xx: true})
	if err != nil {
		return []provider.Check{{Name: "opensandbox API", Detail: b.cfg.Endpoint + ": " + err.Error()}}, nil
	}
	reach := "at each sandbox's own endpoint"
	if b.cfg.ServerProxy {
		reach = "through the server's proxy"
	}
	return []provider.Check{
		{Name: "opensandbox API", OK: true, Detail: fmt.Sprintf("%s: API key accepted; %d crabbox sandboxes of owner %s", b.cfg.Endpoint, ans.Pagination.TotalItems, b.cfg.Owner)},
		{Name: "opensandbox sandboxes", OK: true, Detail: fmt.Sprintf("image %s (cpu %s, memory %s), at most %s each; execd reached %s",
			b.cfg.Image, b.cfg.CPU, b.cfg.Memory, b.cfg.MaxLifetime, reach)},
	}, nil
}
