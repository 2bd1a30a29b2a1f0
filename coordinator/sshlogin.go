package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/provider"
)

// Logins of providers whose SSH login is itself a short-lived credential
// (a provider.SSHLoginBackend, such as a gateway that takes an access
// token as the SSH user) are asked for when a lease's owner is answered
// with the lease to connect to, kept in this process's memory only, and
// never stored: the lease record keeps the neutral user the provider's
// Acquire returned.
const (
	// loginRefreshMargin: a cached login this close to its expiry is not
	// handed out again; the next answer asks the provider for a new one.
	loginRefreshMargin = 5 * time.Minute
	// minLoginValidity is the shortest validity asked for, so a lease
	// about to expire (or be extended) still gets a usable login.
	minLoginValidity = 3 * loginRefreshMargin
	// maxCachedLogins bounds the login cache.
	maxCachedLogins = 10000
	// loginTimeout bounds one provider SSHLogin call.
	loginTimeout = 30 * time.Second
)

// loginCache holds at most one SSH login per lease, by lease ID, until it
// comes within loginRefreshMargin of its expiry or the lease ends. It
// lives in memory only: a login lost with the process is asked for again.
type loginCache struct {
	mu     sync.Mutex
	logins map[string]provider.SSHLogin // ExpiresAt is always set
}

// get returns the cached login of a lease, if it is still good at now.
func (c *loginCache) get(id string, now time.Time) (provider.SSHLogin, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.logins[id]
	if !ok {
		return provider.SSHLogin{}, false
	}
	if !fresh(l, now) {
		delete(c.logins, id)
		return provider.SSHLogin{}, false
	}
	return l, true
}

// put caches a lease's login, unless it is already too close to its
// expiry to be handed out again. When the cache is full it drops the
// stale logins, then the one expiring first.
func (c *loginCache) put(id string, l provider.SSHLogin, now time.Time) {
	if !fresh(l, now) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logins == nil {
		c.logins = map[string]provider.SSHLogin{}
	}
	if _, ok := c.logins[id]; !ok && len(c.logins) >= maxCachedLogins {
		c.pruneLocked(now)
		if len(c.logins) >= maxCachedLogins {
			first := ""
			for k, v := range c.logins {
				if first == "" || v.ExpiresAt.Before(c.logins[first].ExpiresAt) {
					first = k
				}
			}
			delete(c.logins, first)
		}
	}
	c.logins[id] = l
}

// drop forgets the login of a lease that ended.
func (c *loginCache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.logins, id)
}

// prune forgets the logins too close to their expiry to be handed out.
func (c *loginCache) prune(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pruneLocked(now)
}

func (c *loginCache) pruneLocked(now time.Time) {
	for id, l := range c.logins {
		if !fresh(l, now) {
			delete(c.logins, id)
		}
	}
}

// len is how many logins are cached.
func (c *loginCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.logins)
}

// fresh reports whether a login may still be handed out at now.
func fresh(l provider.SSHLogin, now time.Time) bool {
	return now.Before(l.ExpiresAt.Add(-loginRefreshMargin))
}

// errNoLogin is sshLogin's answer for a lease whose provider needs no
// login at connect time.
var errNoLogin = errors.New("the lease's provider needs no SSH login")

// sshLogin returns a login to an active managed lease whose provider's
// backend is an SSHLoginBackend: the cached one while it is fresh, else
// a new one from the provider, valid until the lease's expiry (at least
// minLoginValidity). For any other lease it returns errNoLogin.
func (s *Server) sshLogin(ctx context.Context, l store.Lease) (provider.SSHLogin, error) {
	if l.Lifecycle != store.LifecycleManaged || l.State != store.StateActive {
		return provider.SSHLogin{}, errNoLogin
	}
	if _, ok := s.providers[l.Provider].(provider.SSHLoginBackend); !ok {
		return provider.SSHLogin{}, errNoLogin
	}
	now := s.clock.Now()
	if login, ok := s.logins.get(l.ID, now); ok {
		return login, nil
	}
	b, err := s.leaseBackend(l)
	if err != nil {
		return provider.SSHLogin{}, err
	}
	lb, ok := b.(provider.SSHLoginBackend)
	if !ok {
		return provider.SSHLogin{}, fmt.Errorf("the backend for the size of lease %s does not issue SSH logins", l.ID)
	}
	validFor := max(l.ExpiresAt.Sub(now), minLoginValidity)
	ctx, cancel := context.WithTimeout(ctx, loginTimeout)
	defer cancel()
	login, err := lb.SSHLogin(ctx, provider.SSHLoginRequest{Lease: target(l), ValidFor: validFor})
	if err != nil {
		return provider.SSHLogin{}, err
	}
	if login.User == "" {
		return provider.SSHLogin{}, errors.New("the provider returned a login without a user")
	}
	if login.Port < 0 || login.Port > 65535 {
		return provider.SSHLogin{}, fmt.Errorf("the provider returned SSH port %d", login.Port)
	}
	if login.ExpiresAt.IsZero() {
		// Unknown: the provider was asked for validFor.
		login.ExpiresAt = now.Add(validFor)
	}
	s.metrics.sshLogins.WithLabelValues(l.Provider).Inc()
	s.logins.put(l.ID, login, now)
	return login, nil
}

// connectLease is the lease answer a client connects with (see
// leaseView). For the lease's owner and those it is shared with to use
// (or manage), when its provider's logins are credentials (see
// sshLogin), host, sshUser and sshPort are such a login (and
// sshLoginExpiresAt when it expires); everyone else, and every other
// lease, gets the record as stored. A login the provider could not issue
// is a 503 unavailable; the provider's error goes to the log only.
func (s *Server) connectLease(r *http.Request, id auth.Identity, l store.Lease) (api.Lease, *apiError) {
	role := roleFor(l, id)
	out := s.leaseView(l, id, role)
	if !l.State.Live() {
		s.logins.drop(l.ID)
	}
	// The login goes to the lease's owner and to those it is shared
	// with to use: never to a reader, and not to an admin answered
	// with someone else's lease.
	if !ownLease(l, id) && (role < roleUse || role == roleOwner) {
		return out, nil
	}
	login, err := s.sshLogin(r.Context(), l)
	switch {
	case errors.Is(err, errNoLogin):
		return out, nil
	case err != nil:
		s.metrics.sshLoginFailures.WithLabelValues(l.Provider).Inc()
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "ssh login failed",
			slog.String("lease", l.ID), slog.String("provider", l.Provider), slog.String("error", err.Error()))
		return out, errorf(http.StatusServiceUnavailable, api.CodeUnavailable,
			"provider %q could not issue an SSH login for lease %s; try again later", l.Provider, l.ID)
	}
	applyLogin(&out, login)
	return out, nil
}

// applyLogin puts a login into a lease answer. A login on another port
// drops the stored fallback ports, which belong to the stored port.
func applyLogin(out *api.Lease, login provider.SSHLogin) {
	if login.Host != "" {
		out.Host = login.Host
	}
	if login.Port != 0 {
		port := strconv.Itoa(login.Port)
		if port != out.SSHPort {
			out.SSHFallbackPorts = nil
		}
		out.SSHPort = port
	}
	out.SSHUser = login.User
	out.SSHLoginExpiresAt = login.ExpiresAt.UTC()
}
