package e2b

import (
	"context"
	"strconv"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Doctor checks, without changing anything, that the control API accepts
// the API key (by listing crabbox's sandboxes), and reports the template
// and where envd is reached.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	sbs, err := b.api.list(ctx, cloud.Ownership(Name, ""))
	if err != nil {
		return []provider.Check{{Name: "e2b API", Detail: err.Error()}}, nil
	}
	envd := b.cfg.SandboxURL
	if envd == "" {
		envd = "https://49983-<sandbox>." + b.cfg.Domain
	}
	return []provider.Check{
		{Name: "e2b API", OK: true, Detail: b.cfg.APIURL + ": API key accepted; " + plural(len(sbs), "crabbox sandbox", "crabbox sandboxes")},
		{Name: "e2b sandboxes", OK: true, Detail: "template " + b.cfg.Template + ", envd at " + envd},
	}, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
