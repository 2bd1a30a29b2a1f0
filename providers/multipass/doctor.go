package multipass

import (
	"context"
	"errors"
	"fmt"

	"github.com/crabbox-dev/crabbox/provider"
)

// Doctor checks, without changing anything, that the multipass program
// runs and which version it is, that its daemon answers, and that the
// daemon lists its instances.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	v, err := b.cli.version(ctx)
	if err != nil {
		return []provider.Check{{Name: "multipass", Detail: fmt.Sprintf("cannot run %s: %v (install multipass: https://canonical.com/multipass/install, or point --%s-endpoint at it)", b.cfg.Binary, err, Name)}}, nil
	}
	checks := []provider.Check{{Name: "multipass", OK: true, Detail: b.cfg.Binary + " " + v.Client}}
	if v.Daemon == "" {
		return append(checks, provider.Check{Name: "multipassd", Detail: "the multipass daemon does not answer: is it running?"}), nil
	}
	checks = append(checks, provider.Check{Name: "multipassd", OK: true, Detail: v.Daemon})
	all, err := b.cli.list(ctx)
	if err != nil {
		return append(checks, provider.Check{Name: "instances", Detail: err.Error()}), nil
	}
	return append(checks, provider.Check{Name: "instances", OK: true, Detail: fmt.Sprintf("%d instances", len(all))}), nil
}

// CheckConfig checks that the multipass program runs and its daemon
// answers, so that a machine without them fails before the library
// records a lease (provider.ConfigChecker). It changes nothing.
func (b *Backend) CheckConfig(ctx context.Context) error {
	v, err := b.cli.version(ctx)
	if err != nil {
		if !errors.Is(err, provider.ErrPrecondition) {
			err = fmt.Errorf("%w: %w", err, provider.ErrPrecondition)
		}
		return fmt.Errorf("%s provider (install multipass: https://canonical.com/multipass/install, or point --%s-endpoint at it): %w",
			Name, Name, err)
	}
	if v.Daemon == "" {
		return fmt.Errorf("%s provider: the multipass daemon does not answer: is it running?: %w", Name, provider.ErrPrecondition)
	}
	return nil
}
