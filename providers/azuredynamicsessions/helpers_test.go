//go:build unix

package azuredynamicsessions_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/azuredynamicsessions"
)

// fakeCredential hands out the fake pool's token, or fails with err
// (whose text must never reach an error of the backend).
type fakeCredential struct {
	token string
	err   error
}

func (c fakeCredential) GetToken(_ context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	if c.err != nil {
		return azcore.AccessToken{}, c.err
	}
	if len(opts.Scopes) != 1 || opts.Scopes[0] != azuredynamicsessions.Scope {
		return azcore.AccessToken{}, errors.New("wrong scopes")
	}
	return azcore.AccessToken{Token: c.token, ExpiresOn: time.Now().Add(time.Hour)}, nil
}

// newBackend is a backend on f with cfg's other settings.
func newBackend(t *testing.T, f *fakePool, cfg azuredynamicsessions.Config, rt provider.Runtime) *azuredynamicsessions.Backend {
	t.Helper()
	cfg.Endpoint = f.URL()
	if cfg.Credential == nil {
		cfg.Credential = fakeCredential{token: fakeToken}
	}
	if cfg.Owner == "" {
		cfg.Owner = "tester"
	}
	if rt.Clock == nil {
		rt.Clock = f.clock
	}
	b, err := azuredynamicsessions.New(cfg, rt)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// env is a fake pool on a fake clock and a backend on it.
type env struct {
	fake  *fakePool
	clock *clockwork.FakeClock
	b     *azuredynamicsessions.Backend
}

func newEnv(t *testing.T, cooldown time.Duration) *env {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	f := newFake(t, clock, cooldown)
	return &env{fake: f, clock: clock, b: newBackend(t, f, azuredynamicsessions.Config{KillGrace: time.Second}, provider.Runtime{})}
}

// warmup makes a lease with idle timeout idle that the test stops at
// its end.
func (e *env) warmup(t *testing.T, slug string, idle time.Duration) provider.LeaseView {
	t.Helper()
	now := e.clock.Now()
	req := provider.WarmupRequest{LeaseID: lease.NewID(), Slug: slug, TTL: time.Hour, IdleTimeout: idle,
		ExpiresAt: lease.ExpiresAt(now, now, time.Hour, idle), Labels: map[string]string{"suite": "unit"}}
	v, err := e.b.Warmup(context.Background(), req)
	if err != nil {
		t.Fatalf("Warmup: %v", err)
	}
	t.Cleanup(func() { _ = e.b.Stop(context.Background(), provider.StopRequest{ID: v.ID}) })
	return v
}
