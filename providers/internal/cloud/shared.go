package cloud

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// List splits a comma-separated option (server types, regions, ...) into
// its trimmed, non-empty fields.
func List(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// MissingCredential is Configure's error when the environment variable env
// that holds providerName's credential is empty; how tells the user how to
// get one ("create an API key in ... and export it").
func MissingCredential(providerName, env, how string) error {
	return fmt.Errorf("%s provider: %s is not set: %s: %w", providerName, env, how, provider.ErrUnauthenticated)
}

// ParseBootOptions reads the "prepared" and "boot-timeout" options every
// VM cloud has, naming providerName and the option in its error.
func ParseBootOptions(providerName string, cfg provider.Config) (prepared bool, bootTimeout time.Duration, err error) {
	if prepared, err = cfg.Bool("prepared"); err != nil {
		return false, 0, fmt.Errorf("%s provider: %w", providerName, err)
	}
	if bootTimeout, err = cfg.Duration("boot-timeout"); err != nil {
		return false, 0, fmt.Errorf("%s provider: %w", providerName, err)
	}
	return prepared, bootTimeout, nil
}

// Targets returns the lease target of each resource in all, in order. A
// resource whose target cannot be read is logged at warn level (msg, its id
// under idKey, and the error) and left out.
func Targets[R any](log *slog.Logger, all []R, target func(R) (provider.LeaseTarget, error), msg, idKey string, id func(R) any) []provider.LeaseTarget {
	out := make([]provider.LeaseTarget, 0, len(all))
	for _, r := range all {
		t, err := target(r)
		if err != nil {
			log.Warn(msg, idKey, id(r), "err", err)
			continue
		}
		out = append(out, t)
	}
	return out
}

// CheckTouch checks what every cloud's Touch needs of its request: a time
// and an expiry.
func CheckTouch(req provider.TouchRequest) error {
	if req.ExpiresAt.IsZero() || req.Now.IsZero() {
		return errors.New("no time or expiry given")
	}
	return nil
}

// BoxDefaults fills in the box settings every VM cloud's Config has, where
// they are zero: the default work root, the current user as owner, the
// default ports, bootTimeout as the boot timeout, a 2 s poll interval, and
// addresses used as the cloud reports them.
func BoxDefaults(workRoot, owner *string, ports *[]int, boot *time.Duration, bootTimeout time.Duration, poll *time.Duration,
	mapAddress *func(host string, port int) (string, int)) {
	if *workRoot == "" {
		*workRoot = DefaultWorkRoot
	}
	if *owner == "" {
		*owner = CurrentUser()
	}
	if len(*ports) == 0 {
		*ports = DefaultPorts()
	}
	if *boot == 0 {
		*boot = bootTimeout
	}
	if *poll == 0 {
		*poll = 2 * time.Second
	}
	if *mapAddress == nil {
		*mapAddress = func(h string, p int) (string, int) { return h, p }
	}
}

// ResolveLive finds the one live resource of a lease by ref, its lease ID
// or slug. find lists resources by lease ID (slug empty) or by slug
// (leaseID empty); live says which are running boxes of a ready lease;
// noun ("server") and id name them in the errors: ErrNotFound when none is
// live, ErrConflict when more than one is.
func ResolveLive[R any](ctx context.Context, ref string, find func(ctx context.Context, leaseID, slug string) ([]R, error),
	live func(R) bool, noun string, id func(R) any) (R, error) {
	var zero R
	var found []R
	var err error
	switch {
	case lease.IsID(ref):
		found, err = find(ctx, ref, "")
	case lease.ValidSlug(ref):
		found, err = find(ctx, "", ref)
	default:
		return zero, fmt.Errorf("%q is neither a lease ID nor a slug: %w", ref, provider.ErrNotFound)
	}
	if err != nil {
		return zero, err
	}
	found = slices.DeleteFunc(found, func(r R) bool { return !live(r) })
	switch len(found) {
	case 0:
		return zero, fmt.Errorf("no running %s: %w", noun, provider.ErrNotFound)
	case 1:
		return found[0], nil
	default:
		return zero, fmt.Errorf("%d running %ss (%v, %v, ...): %w", len(found), noun, id(found[0]), id(found[1]), provider.ErrConflict)
	}
}
