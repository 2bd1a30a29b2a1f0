package cloud

import (
	"fmt"
	"net/url"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// CheckEndpoint reports whether s can be a cloud API endpoint: an
// absolute http or https URL.
func CheckEndpoint(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("endpoint %q is not an http or https URL", s)
	}
	return nil
}

// CheckBootstrap renders a bootstrap with the provider's work root, ports
// and prepared setting once, so a provider fails at configuration time
// rather than at its first acquire.
func CheckBootstrap(workRoot string, ports []int, prepared bool) error {
	probe, err := NewHostKey()
	if err != nil {
		return err
	}
	_, err = Bootstrap{
		AuthorizedKey: probe.AuthorizedKey(), HostKey: probe, SelfDestructAfter: time.Hour,
		WorkRoot: workRoot, Ports: ports, Prepared: prepared,
	}.Script()
	return err
}

// CheckRequest checks what every cloud acquire needs of its request: a
// crabbox lease ID, one valid lease public key and an expiry after now.
func CheckRequest(req provider.AcquireRequest, now time.Time) error {
	if !lease.IsID(req.LeaseID) {
		return fmt.Errorf("lease ID %q is not a crabbox lease ID", req.LeaseID)
	}
	if _, err := lease.ParsePublicKey(req.PublicKey); err != nil {
		return fmt.Errorf("lease public key: %w", err)
	}
	if !req.ExpiresAt.After(now) {
		return fmt.Errorf("expiry %s is not after now (%s)", req.ExpiresAt.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	return nil
}
