//go:build unix

package azuredynamicsessions_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/internal/delegatedtest"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/azuredynamicsessions"
)

// The library's whole delegated workflow on the fake: a one-shot run, then
// a warm lease reused twice (the second run sends only what changed),
// status and stop; no sandbox is left.
func TestEndToEnd(t *testing.T) {
	f := newFake(t, clockwork.NewRealClock(), time.Hour) // the library's expiries are real times
	delegatedtest.LibraryWorkflow(t, newBackend(t, f, azuredynamicsessions.Config{}, provider.Runtime{}), f.identifiers)
}

// Through the library, a lease whose idle timeout outlives the pool's
// cooldown is refused with the provider's words, and leaves no claim and
// no session.
func TestAcquireRefusesIdleBeyondCooldown(t *testing.T) {
	f := newFake(t, clockwork.NewRealClock(), 5*time.Minute)
	b := newBackend(t, f, azuredynamicsessions.Config{}, provider.Runtime{})
	c, err := crabbox.New(crabbox.WithStateDir(t.TempDir()), crabbox.WithBackend(b))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	_, err = c.Acquire(ctx, crabbox.AcquireOptions{IdleTimeout: 30 * time.Minute})
	if !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), "cooldown") {
		t.Errorf("acquire with idle 30m on a 5m pool: %v, want the cooldown refusal", err)
	}
	if infos, err := c.List(ctx); err != nil || len(infos) != 0 {
		t.Errorf("leases after the refusal: %+v, %v", infos, err)
	}
	if ids := f.identifiers(); len(ids) != 0 {
		t.Errorf("sessions after the refusal: %v", ids)
	}
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{IdleTimeout: 5 * time.Minute})
	if err != nil {
		t.Fatalf("acquire with idle 5m: %v", err)
	}
	defer l.Release(ctx)
}
