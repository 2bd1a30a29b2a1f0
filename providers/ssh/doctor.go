package ssh

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// DialTimeout bounds Doctor's TCP connect to the configured host.
const DialTimeout = 3 * time.Second

var _ provider.DoctorBackend = (*Backend)(nil)

// Doctor checks, without changing anything, what acquiring a lease needs:
// the host is set and answers on its SSH port (one TCP connect, no login,
// so no host key is pinned), and the key file is set, readable and
// unencrypted (the provider logs in with that file only; it does not use an
// SSH agent). A missing setting's check names its flag and environment
// variable.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	host := provider.Check{Name: "host"}
	reach := provider.Check{Name: "host reachable"}
	if b.cfg.Host == "" {
		host.Detail = "not set: set it with --ssh-host, CRABBOX_SSH_HOST or ssh-host in the config file"
		reach.Detail = "not checked: no host"
	} else {
		host.OK, host.Detail = true, fmt.Sprintf("%s as %s", b.addr(), b.cfg.User)
		reach.OK, reach.Detail = dial(ctx, b.addr())
	}
	key := provider.Check{Name: "key file"}
	if b.cfg.KeyFile == "" {
		key.Detail = "not set: set --ssh-key, CRABBOX_SSH_KEY or ssh-key in the config file to an unencrypted private key file your host accepts"
	} else if _, err := lease.LoadKeyFile(b.cfg.KeyFile); err != nil {
		key.Detail = err.Error() + " (--ssh-key, CRABBOX_SSH_KEY)"
	} else {
		key.OK, key.Detail = true, b.cfg.KeyFile
	}
	return []provider.Check{host, key, reach}, nil
}

// dial reports whether a TCP connection to addr opens within DialTimeout.
func dial(ctx context.Context, addr string) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, fmt.Sprintf("cannot connect to %s: %v", addr, err)
	}
	c.Close()
	return true, addr + " accepts connections"
}
