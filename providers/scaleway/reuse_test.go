package scaleway_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/providers/scaleway"
)

// TestReuseMovesExpiryLabels: running on a warm lease is activity, so the
// box's last_touched_at and expires_at labels move with each reuse, and
// cleanup (which reads the labels) leaves the box alone.
func TestReuseMovesExpiryLabels(t *testing.T) {
	e := newEnv(t)
	clock := clockwork.NewFakeClockAt(time.Now().Truncate(time.Second))
	e.rt.Clock = clock
	c := newClient(t, e, clock)
	ctx := context.Background()
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true, IdleTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	id := l.ID()
	l.Close()
	defer c.Stop(ctx, id)

	for i := range 3 {
		clock.Advance(8 * time.Minute) // 24 minutes in all: past the idle timeout twice
		res, err := c.Run(ctx, crabbox.RunRequest{Lease: id, Command: []string{"true"}, NoSync: true})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("run %d: exit %d, %v", i+1, res.ExitCode, err)
		}
		labels := labelsOf(e.api.serverList()[0])
		now := clock.Now()
		if labels["last_touched_at"] != strconv.FormatInt(now.Unix(), 10) || labels["expires_at"] != strconv.FormatInt(now.Add(10*time.Minute).Unix(), 10) {
			t.Errorf("run %d at %d: labels last_touched_at=%s expires_at=%s; want %d and %d", i+1, now.Unix(),
				labels["last_touched_at"], labels["expires_at"], now.Unix(), now.Add(10*time.Minute).Unix())
		}
	}
	ds, err := c.Cleanup(ctx, crabbox.CleanupOptions{Provider: scaleway.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Action == crabbox.CleanupDelete {
			t.Errorf("cleanup after reuse: %+v, want the box kept", d)
		}
	}
}
