package coordinator

import (
	"fmt"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

func TestLoginCacheIsBounded(t *testing.T) {
	now := time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)
	var c loginCache
	at := func(d time.Duration) provider.SSHLogin {
		return provider.SSHLogin{Host: "127.0.0.1", Port: 22, User: "token", ExpiresAt: now.Add(d)}
	}
	c.put("near", at(loginRefreshMargin), now)
	if c.len() != 0 {
		t.Fatalf("a login already near its expiry was cached")
	}
	c.put("stale-soon", at(loginRefreshMargin+time.Minute), now)
	for i := range maxCachedLogins - 1 {
		c.put(fmt.Sprint(i), at(time.Hour+time.Duration(i)*time.Second), now)
	}
	if c.len() != maxCachedLogins {
		t.Fatalf("%d logins cached, want %d", c.len(), maxCachedLogins)
	}
	// Full: the one expiring first goes.
	c.put("new", at(2*time.Hour), now)
	if c.len() != maxCachedLogins {
		t.Errorf("%d logins cached after one more, want %d", c.len(), maxCachedLogins)
	}
	if _, ok := c.get("stale-soon", now); ok {
		t.Errorf("the login expiring first was kept")
	}
	if _, ok := c.get("new", now); !ok {
		t.Errorf("the new login was not cached")
	}
	// Later, stale logins are dropped before anything fresh.
	later := now.Add(time.Hour - loginRefreshMargin + 10*time.Second)
	c.put("later", at(3*time.Hour), later)
	if _, ok := c.get("20", later); !ok {
		t.Errorf("a fresh login was evicted while stale ones were cached")
	}
	if _, ok := c.get("0", later); ok {
		t.Errorf("a login near its expiry was handed out")
	}
	c.drop("later")
	if _, ok := c.get("later", later); ok {
		t.Errorf("a dropped login was handed out")
	}
}
