package upstashbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/crabbox-dev/crabbox/provider"
)

// Doctor checks, without changing anything, that the API key is accepted:
// it lists the boxes labelled crabbox.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	all, err := b.api.listBoxes(ctx, LabelCrabbox)
	c := provider.Check{Name: "upstash box API", OK: err == nil}
	switch {
	case errors.Is(err, provider.ErrUnauthenticated):
		c.Detail = fmt.Sprintf("%s at %s: the API key (%s) is refused", err, b.cfg.BaseURL, APIKeyEnv)
	case err != nil:
		c.Detail = fmt.Sprintf("%s at %s", err, b.cfg.BaseURL)
	default:
		n := 0
		for _, bx := range all {
			if _, _, ok := owner(bx); ok {
				n++
			}
		}
		c.Detail = fmt.Sprintf("API key accepted at %s; %d crabbox boxes", b.cfg.BaseURL, n)
	}
	return []provider.Check{c}, nil
}
