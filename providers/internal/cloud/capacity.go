package cloud

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/crabbox-dev/crabbox/provider"
)

// FirstWithCapacity calls try with each candidate (server type and
// location, instance type and zone, ...) in order and returns the first
// that succeeds. It moves on only when try's error matches
// provider.ErrCapacity, failing fast on any other error, and never retries
// a candidate. When every candidate lacks capacity the error matches
// provider.ErrCapacity and lists each attempt. log may be nil.
func FirstWithCapacity[T any](ctx context.Context, log *slog.Logger, candidates []T, try func(context.Context, T) error) (T, error) {
	var zero T
	if len(candidates) == 0 {
		return zero, errors.New("no candidates to try")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var errs []error
	for _, c := range candidates {
		if err := ctx.Err(); err != nil {
			return zero, err
		}
		err := try(ctx, c)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, provider.ErrCapacity) {
			return zero, err
		}
		log.Info("no capacity, trying the next candidate", "candidate", fmt.Sprint(c), "err", err)
		errs = append(errs, fmt.Errorf("%v: %w", c, err))
	}
	return zero, fmt.Errorf("every candidate is out of capacity: %w", errors.Join(errs...))
}
