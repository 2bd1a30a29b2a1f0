package cloud

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

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
