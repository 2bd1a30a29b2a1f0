package crabbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/local"
	"github.com/crabbox-dev/crabbox/run"
)

// truncateClaim cuts lease id's claim file in half, as a crash of the
// machine might.
func truncateClaim(t *testing.T, c *crabbox.Client, id string) {
	t.Helper()
	path := filepath.Join(crabbox.StoreOf(c).Dir(), "leases", id+".json")
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, body[:len(body)/2], 0o600); err != nil {
		t.Fatal(err)
	}
}

func failedChecks(checks []provider.Check) []provider.Check {
	var out []provider.Check
	for _, ch := range checks {
		if !ch.OK {
			out = append(out, ch)
		}
	}
	return out
}

// One truncated claim breaks nothing about the other leases; doctor reports
// it; stop of its lease finds the box at the client's provider, releases it
// and drops the damaged claim.
func TestDamagedClaim(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, t.TempDir())
	good := acquire(t, c, crabbox.AcquireOptions{})
	bad := acquire(t, c, crabbox.AcquireOptions{})
	truncateClaim(t, c, bad.ID())

	infos, err := c.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(infos) != 1 || infos[0].ID != good.ID() || infos[0].State != "ready" {
		t.Errorf("List = %+v, want only %s, ready", infos, good.ID())
	}
	l, err := c.Resolve(ctx, good.Slug())
	if err != nil {
		t.Fatalf("Resolve of another lease: %v", err)
	}
	if res, err := l.Exec(ctx, run.Command{Shell: "exit 3"}); err != nil || res.ExitCode != 3 {
		t.Errorf("Run on another lease = %d, %v; want exit 3", res.ExitCode, err)
	}
	l.Close()
	if _, err := c.Status(ctx, good.ID()); err != nil {
		t.Errorf("Status of another lease: %v", err)
	}
	if _, err := c.Resolve(ctx, bad.ID()); !errors.Is(err, lease.ErrDamaged) || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("Resolve of the damaged lease: err = %v, want a damaged-claim error", err)
	}

	// Cleanup keeps both live boxes: the damaged claim's is still ours.
	ds, err := c.Cleanup(ctx, crabbox.CleanupOptions{})
	if err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	want := rows([]crabbox.CleanupOutcome{
		{LeaseID: good.ID(), Action: crabbox.CleanupKeep},
		{LeaseID: bad.ID(), Action: crabbox.CleanupKeep},
	})
	if diff := cmp.Diff(want, rows(ds)); diff != "" {
		t.Errorf("cleanup decisions (-want +got):\n%s", diff)
	}

	damaged, err := crabbox.StoreOf(c).Damaged()
	if err != nil || len(damaged) != 1 {
		t.Fatalf("Damaged = %+v, %v; want one", damaged, err)
	}
	failed := failedChecks(c.Doctor(ctx, crabbox.DoctorOptions{}))
	if len(failed) != 1 || !strings.Contains(failed[0].Name, bad.ID()) ||
		!strings.Contains(failed[0].Detail, damaged[0].Path) || !strings.Contains(failed[0].Detail, "crabbox stop "+bad.ID()) {
		t.Errorf("doctor's failed checks = %+v, want one naming %s, %s and what to do", failed, bad.ID(), damaged[0].Path)
	}

	if err := c.Stop(ctx, bad.ID()); err != nil {
		t.Fatalf("Stop of the damaged lease: %v", err)
	}
	b, err := c.Backend(local.Name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.(provider.SSHLeaseBackend).Resolve(ctx, provider.ResolveRequest{ID: bad.ID()}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("box of the damaged lease after Stop: err = %v, want ErrNotFound", err)
	}
	if got := failedChecks(c.Doctor(ctx, crabbox.DoctorOptions{})); len(got) != 0 {
		t.Errorf("doctor after Stop: %+v", got)
	}
	if _, err := crabbox.StoreOf(c).Get(bad.ID()); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("damaged claim after Stop: err = %v, want ErrNotFound", err)
	}
	if _, err := c.Resolve(ctx, good.ID()); err != nil {
		t.Errorf("the other lease after Stop: %v", err)
	}
}

// Stop of a damaged claim's lease whose box the client's provider does not
// have says so, names --provider, and keeps the damaged claim.
func TestStopDamagedClaimElsewhere(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, t.TempDir())
	id := lease.NewID()
	path := filepath.Join(crabbox.StoreOf(c).Dir(), "leases", id+".json")
	if err := os.WriteFile(path, []byte(`{"id": "`+id+`", "provider": "aw`), 0o600); err != nil {
		t.Fatal(err)
	}
	err := c.Stop(ctx, id)
	if !errors.Is(err, crabbox.ErrNotFound) || !strings.Contains(err.Error(), "--provider") || !strings.Contains(err.Error(), `provider "local" has no box`) {
		t.Errorf("Stop = %v, want not found at local, naming --provider", err)
	}
	if damaged, err := crabbox.StoreOf(c).Damaged(); err != nil || len(damaged) != 1 || damaged[0].ID != id {
		t.Errorf("damaged claims after a failed Stop = %+v, %v; want it kept", damaged, err)
	}
}

// realClockLocal is the local provider with boxes on the real clock, so
// that a client on a fake clock can see their expiry pass while they keep
// serving.
type realClockLocal struct{ local.Provider }

func (p realClockLocal) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	rt.Clock = clockwork.NewRealClock()
	return p.Provider.Configure(cfg, rt)
}

// Cleanup finds the boxes of damaged claims through the provider: an
// expired one is deleted and its damaged claim dropped, a live one kept.
func TestCleanupDamagedClaims(t *testing.T) {
	ctx := context.Background()
	reg := provider.NewRegistry()
	reg.Register(realClockLocal{})
	clock := clockwork.NewFakeClockAt(time.Now())
	c := newClient(t, t.TempDir(), crabbox.WithRegistry(reg), crabbox.WithRuntime(provider.Runtime{Clock: clock}))
	expired := acquire(t, c, crabbox.AcquireOptions{TTL: time.Hour, IdleTimeout: time.Hour})
	live := acquire(t, c, crabbox.AcquireOptions{TTL: 10 * time.Hour, IdleTimeout: 10 * time.Hour})
	truncateClaim(t, c, expired.ID())
	truncateClaim(t, c, live.ID())
	if _, err := c.List(ctx); err != nil { // sets both aside
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)

	ds, err := c.Cleanup(ctx, crabbox.CleanupOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	want := func(result string) []row {
		return rows([]crabbox.CleanupOutcome{
			{LeaseID: expired.ID(), Action: crabbox.CleanupDelete, Result: result},
			{LeaseID: live.ID(), Action: crabbox.CleanupKeep},
		})
	}
	if diff := cmp.Diff(want("dry run"), rows(ds)); diff != "" {
		t.Errorf("dry run decisions (-want +got):\n%s", diff)
	}
	ds, err = c.Cleanup(ctx, crabbox.CleanupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want("deleted"), rows(ds)); diff != "" {
		t.Errorf("decisions (-want +got):\n%s", diff)
	}
	b, err := c.Backend(local.Name)
	if err != nil {
		t.Fatal(err)
	}
	sb := b.(provider.SSHLeaseBackend)
	if _, err := sb.Resolve(ctx, provider.ResolveRequest{ID: expired.ID()}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("expired box after cleanup: err = %v, want ErrNotFound", err)
	}
	if _, err := sb.Resolve(ctx, provider.ResolveRequest{ID: live.ID()}); err != nil {
		t.Errorf("live box after cleanup: %v", err)
	}
	damaged, err := crabbox.StoreOf(c).Damaged()
	if err != nil || len(damaged) != 1 || damaged[0].ID != live.ID() {
		t.Errorf("damaged claims after cleanup = %+v, %v; want only the live lease's", damaged, err)
	}
}
