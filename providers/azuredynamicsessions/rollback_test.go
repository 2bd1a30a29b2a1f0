//go:build unix

package azuredynamicsessions_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// A warmup that fails after its session exists (the session cannot be
// read: 500s until the tries run out) deletes the session; one refused
// outright (403) leaves nothing either.
func TestWarmupRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		path   string
		n      int
		status int
	}{
		{"session unreadable", "/session", 5, http.StatusInternalServerError},
		{"upload refused", "/files", 1, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, time.Hour)
			e.fake.fail(tc.path, tc.n, tc.status, "0")
			now := e.clock.Now()
			done := make(chan error, 1)
			go func() {
				_, err := e.b.Warmup(context.Background(), provider.WarmupRequest{LeaseID: lease.NewID(), TTL: time.Hour,
					IdleTimeout: 30 * time.Minute, ExpiresAt: now.Add(30 * time.Minute)})
				done <- err
			}()
			if err := <-done; err == nil || errors.Is(err, provider.ErrPrecondition) {
				t.Fatalf("Warmup with %d×%d on %s: %v, want it to fail", tc.n, tc.status, tc.path, err)
			}
			if ids := e.fake.identifiers(); len(ids) != 0 {
				t.Errorf("sessions left by the failed warmup: %v", ids)
			}
		})
	}
}
