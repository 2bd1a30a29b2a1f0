package azuredynamicsessions

import (
	"context"
	"fmt"

	"github.com/crabbox-dev/crabbox/provider"
)

// Doctor checks, without changing anything, that a token is given for
// the data-plane scope and that the pool accepts it: it lists the pool's
// sessions (which also counts crabbox's of this owner).
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	tc := provider.Check{Name: "azure dynamic sessions token", OK: true, Detail: "token for " + Scope}
	if _, err := b.api.token(ctx); err != nil {
		tc.OK, tc.Detail = false, err.Error()
		return []provider.Check{tc}, nil
	}
	pc := provider.Check{Name: "azure dynamic sessions pool"}
	sessions, _, err := b.mine(ctx)
	if err != nil {
		pc.Detail = err.Error() + " (the caller needs the Azure ContainerApps Session Executor role on the pool)"
	} else {
		pc.OK = true
		pc.Detail = fmt.Sprintf("pool %s answers; %d crabbox sessions of owner %s", b.cfg.Endpoint, len(sessions), b.cfg.Owner)
	}
	return []provider.Check{tc, pc}, nil
}
