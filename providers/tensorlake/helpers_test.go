//go:build unix

package tensorlake_test

import (
	"context"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/tensorlake"
)

// newBackend returns a backend that talks to f, with work root
// <f.root>/work, reaching the proxy by its sandbox_url.
func newBackend(t *testing.T, f *fakeTensorlake) *tensorlake.Backend {
	t.Helper()
	return newBackendWith(t, f, func(*tensorlake.Config) {})
}

func newBackendWith(t *testing.T, f *fakeTensorlake, edit func(*tensorlake.Config)) *tensorlake.Backend {
	t.Helper()
	cfg := tensorlake.Config{APIKey: f.key, APIURL: f.api.URL, WorkRoot: f.root + "/work", Owner: "tester"}
	edit(&cfg)
	b, err := tensorlake.New(cfg, provider.Runtime{Clock: f.clock, HTTPClient: f.client()})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// warmupReq is a warmup request with a fresh lease ID and the slug given.
func warmupReq(slug string, ttl time.Duration) provider.WarmupRequest {
	return provider.WarmupRequest{
		LeaseID: lease.NewID(), Slug: slug, TTL: ttl, IdleTimeout: 30 * time.Minute,
		Labels: map[string]string{"team": "crabs"},
	}
}

// warmup makes a lease with a fresh ID, the slug given and a 50m TTL.
func warmup(t *testing.T, ctx context.Context, b *tensorlake.Backend, slug string) provider.LeaseView {
	t.Helper()
	v, err := b.Warmup(ctx, warmupReq(slug, 50*time.Minute))
	if err != nil {
		t.Fatalf("warmup: %v", err)
	}
	return v
}
