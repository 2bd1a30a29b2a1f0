package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// fakeName is the fake provider's name.
const fakeName = "fake"

// fakeKey is the lease key every benchmark lease sends.
var fakeKey = func() string {
	k, err := lease.NewKey()
	if err != nil {
		panic(err) // crypto/rand failing: nothing to measure
	}
	return k.AuthorizedKey()
}()

// fakeBackend is a provider that creates nothing: it answers at once, so
// the benchmark measures the coordinator and its store.
type fakeBackend struct {
	mu     sync.Mutex
	leases map[string]provider.LeaseTarget
}

func newFakeBackend() *fakeBackend { return &fakeBackend{leases: map[string]provider.LeaseTarget{}} }

func (b *fakeBackend) Spec() provider.Spec {
	return provider.Spec{
		Name: fakeName, Description: "answers at once and creates nothing (benchmark)",
		Kind: provider.KindSSHLease, Targets: []provider.Target{provider.TargetLinux},
		Features: []provider.Feature{provider.FeatureSSH}, Coordinator: provider.CoordinatorSupported,
	}
}

func (b *fakeBackend) Acquire(_ context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	t := provider.LeaseTarget{
		LeaseID: req.LeaseID, Slug: req.Slug, Provider: fakeName, CloudID: "fake-" + req.LeaseID,
		Host: "127.0.0.1", Port: 2222, User: "crabbox", WorkRoot: "/work", State: "active",
		Labels: req.Labels, CreatedAt: req.CreatedAt, ExpiresAt: req.ExpiresAt,
	}
	b.mu.Lock()
	b.leases[req.LeaseID] = t
	b.mu.Unlock()
	return t, nil
}

func (b *fakeBackend) Resolve(_ context.Context, req provider.ResolveRequest) (provider.LeaseTarget, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.leases[req.ID]
	if !ok {
		return t, fmt.Errorf("lease %s: %w", req.ID, provider.ErrNotFound)
	}
	return t, nil
}

func (b *fakeBackend) List(context.Context, provider.ListRequest) ([]provider.LeaseTarget, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]provider.LeaseTarget, 0, len(b.leases))
	for _, t := range b.leases {
		out = append(out, t)
	}
	return out, nil
}

func (b *fakeBackend) Touch(_ context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.leases[req.Lease.LeaseID]
	if !ok {
		return t, fmt.Errorf("lease %s: %w", req.Lease.LeaseID, provider.ErrNotFound)
	}
	t.ExpiresAt = req.ExpiresAt
	b.leases[t.LeaseID] = t
	return t, nil
}

func (b *fakeBackend) ReleaseLease(_ context.Context, req provider.ReleaseRequest) error {
	b.mu.Lock()
	delete(b.leases, req.Lease.LeaseID)
	b.mu.Unlock()
	return nil
}

var _ provider.SSHLeaseBackend = (*fakeBackend)(nil)
