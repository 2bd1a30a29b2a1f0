package crabbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/local"
)

// renamed is the local backend under another provider name.
type renamed struct {
	*local.Backend
	name string
}

func (r renamed) Spec() provider.Spec {
	spec := r.Backend.Spec()
	spec.Name = r.name
	return spec
}

// newLocalBackend is a local backend of the test's own, closed when the
// test ends (after the clients, whose cleanups run first).
func newLocalBackend(t *testing.T) *local.Backend {
	t.Helper()
	b, err := local.New(local.Config{Root: t.TempDir()}, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

func listed(t *testing.T, b provider.SSHLeaseBackend) []string {
	t.Helper()
	all, err := b.List(context.Background(), provider.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range all {
		ids = append(ids, l.LeaseID)
	}
	return ids
}

// TestWithBackend: a backend handed to the client becomes its provider;
// leases are acquired, resolved and released through it, and closing the
// client leaves it open.
func TestWithBackend(t *testing.T) {
	for _, name := range []string{"local", "mine"} { // shadowing a registered provider, or a new name
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			lb := newLocalBackend(t)
			var b provider.SSHLeaseBackend = lb
			if name != "local" {
				b = renamed{lb, name}
			}
			c, err := crabbox.New(crabbox.WithStateDir(t.TempDir()), crabbox.WithBackend(b))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()

			if got, err := c.Backend(""); err != nil || got != provider.Backend(b) {
				t.Errorf("Backend(\"\") = %v, %v; want the handed backend", got, err)
			}
			if _, err := crabbox.RegistryOf(c).Lookup("local"); err != nil {
				t.Errorf("the registry's other providers are gone: %v", err)
			}
			box, err := c.Acquire(ctx, crabbox.AcquireOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if box.Provider() != name {
				t.Errorf("lease provider = %q, want %q", box.Provider(), name)
			}
			if ids := listed(t, b); !slices.Contains(ids, box.ID()) {
				t.Errorf("the handed backend lists %v, not the lease %s", ids, box.ID())
			}
			again, err := c.Resolve(ctx, box.ID())
			if err != nil {
				t.Fatalf("Resolve %s: %v", box.ID(), err)
			}
			if again.Target().Port != box.Target().Port {
				t.Errorf("Resolve reached port %d, want the handed backend's box on %d", again.Target().Port, box.Target().Port)
			}
			if err := again.Close(); err != nil {
				t.Fatal(err)
			}
			if err := box.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if ids := listed(t, b); len(ids) != 0 {
				t.Errorf("leases left after release: %v", ids)
			}

			// The client does not close what it did not configure: an
			// in-process box of the handed backend survives Client.Close.
			kept, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if ids := listed(t, b); !slices.Contains(ids, kept.ID()) {
				t.Errorf("Client.Close ended the handed backend's box %s (listed %v)", kept.ID(), ids)
			}
			if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: kept.Target()}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestWithBackendTakesNoSettings(t *testing.T) {
	_, err := crabbox.New(crabbox.WithStateDir(t.TempDir()), crabbox.WithBackend(newLocalBackend(t)),
		crabbox.WithProviderConfig("local", provider.Config{"root": t.TempDir()}))
	if err == nil || !strings.Contains(err.Error(), "WithBackend") {
		t.Errorf("New = %v, want an error saying the WithBackend backend takes no settings", err)
	}
	if _, err := crabbox.New(crabbox.WithStateDir(t.TempDir()), crabbox.WithBackend(nil)); err == nil {
		t.Error("New with WithBackend(nil) succeeded")
	}
}

// other is a provider that is not local.
type other struct{}

func (other) Spec() provider.Spec { return provider.Spec{Name: "other", Kind: provider.KindSSHLease} }
func (other) Configure(provider.Config, provider.Runtime) (provider.Backend, error) {
	return nil, errors.New("not for this test")
}

// TestRegistryWithoutLocal: with a registry that lacks the default
// provider, acquiring says so, names the registry's providers and
// WithProvider.
func TestRegistryWithoutLocal(t *testing.T) {
	r := provider.NewRegistry()
	r.Register(other{})
	c := newClient(t, t.TempDir(), crabbox.WithRegistry(r))
	_, err := c.Acquire(context.Background(), crabbox.AcquireOptions{})
	if !errors.Is(err, crabbox.ErrNotFound) {
		t.Fatalf("Acquire: err = %v, want one matching ErrNotFound", err)
	}
	for _, want := range []string{`"local" is the default provider`, "other", "WithProvider"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Acquire: err = %v, want it to say %q", err, want)
		}
	}
}
