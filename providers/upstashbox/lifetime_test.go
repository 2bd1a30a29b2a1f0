//go:build unix

package upstashbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/internal/clitest"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/upstashbox"
)

// The max-lifetime option takes "ephemeral" (72h, the default) or a
// duration no longer than that; anything else is refused.
func TestMaxLifetimeOption(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  time.Duration
	}{
		{"", 72 * time.Hour}, {"ephemeral", 72 * time.Hour}, {"Ephemeral", 72 * time.Hour}, {"3h", 3 * time.Hour},
	} {
		cfg, err := upstashbox.ParseConfig(provider.Config{"max-lifetime": tc.value})
		if err != nil || cfg.MaxLifetime != tc.want {
			t.Errorf("max-lifetime %q: %v, %v; want %v", tc.value, cfg.MaxLifetime, err, tc.want)
		}
	}
	if _, err := upstashbox.ParseConfig(provider.Config{"max-lifetime": "forever"}); err == nil || !strings.Contains(err.Error(), "ephemeral") {
		t.Errorf("max-lifetime forever: %v, want an error naming ephemeral", err)
	}
}

// lifetimeClient is a library client on the fake with its fake clock.
func lifetimeClient(t *testing.T, e *env, b *upstashbox.Backend) *crabbox.Client {
	t.Helper()
	c, err := crabbox.New(crabbox.WithBackend(b), crabbox.WithStateDir(t.TempDir()), crabbox.WithRuntime(provider.Runtime{Clock: e.clock}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// notices collects the one-line notices given to Warn.
type notices struct {
	mu    sync.Mutex
	lines []string
}

func (n *notices) warn(s string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lines = append(n.lines, s)
}

func (n *notices) get() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lines
}

// A TTL beyond the maximum lifetime is capped to it, with one line saying
// so, and the box gets the capped TTL; the default TTL fits.
func TestAcquireCapsTTL(t *testing.T) {
	e := newEnv(t)
	c := lifetimeClient(t, e, e.backend(upstashbox.Config{MaxLifetime: 2 * time.Hour}))
	ctx := context.Background()
	var n notices
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{TTL: 3 * time.Hour, Warn: n.warn})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if diff := cmp.Diff([]string{"upstash-box grants at most 2h; the lease's TTL is 2h, not 3h"}, n.get()); diff != "" {
		t.Errorf("notices (-want +got):\n%s", diff)
	}
	if got := l.Claim().TTL(); got != 2*time.Hour {
		t.Errorf("lease TTL = %v, want 2h", got)
	}
	box := e.fake.box(l.Claim().View.CloudID)
	if got := box.ExpiresAt.Sub(box.CreatedAt); got != 2*time.Hour {
		t.Errorf("box TTL = %v, want 2h", got)
	}

	var quiet notices
	d, err := c.Acquire(ctx, crabbox.AcquireOptions{Warn: quiet.warn})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Release(ctx)
	box = e.fake.box(d.Claim().View.CloudID)
	if got := box.ExpiresAt.Sub(box.CreatedAt); got != 90*time.Minute || len(quiet.get()) != 0 {
		t.Errorf("default TTL: box TTL %v with notices %q; want 90m and none", got, quiet.get())
	}
}

// A command still running when Upstash deletes the box at its TTL ends
// with an error that says the lease reached the maximum lifetime, not
// with the broken stream's.
func TestRunPastMaxLifetime(t *testing.T) {
	e := newEnv(t)
	c := lifetimeClient(t, e, e.backend(upstashbox.Config{MaxLifetime: time.Hour}))
	ctx := context.Background()
	repo := clitest.GitRepo(t)
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	started := make(chan struct{})
	var once sync.Once
	out := &watch{marker: "started\n", fn: func() { once.Do(func() { close(started) }) }}
	done := make(chan error, 1)
	go func() {
		_, err := l.Run(ctx, crabbox.RunRequest{
			Root: repo, Command: []string{"sh", "-c", "echo started; exec sleep 600"}, Stdout: out,
			SyncProgress: func(int, int64) {}, SyncWarn: func(string) {},
		})
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("run ended before the command started: %v", err)
	}
	for range 3 { // the lease is kept alive as it runs
		e.clock.Advance(20 * time.Minute)
		if err := l.Touch(ctx); err != nil && e.clock.Since(l.Claim().CreatedAt) < time.Hour {
			t.Fatal(err)
		}
	}
	e.fake.IDs() // Upstash deletes the box at its TTL
	err = <-done
	const want = "reached its provider's maximum lifetime (1h)"
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, crabbox.ErrMaxLifetime) {
		t.Errorf("run past the maximum lifetime: %v; want an error saying %q", err, want)
	}
}

// A box Upstash deleted while its lease's claim says it lives is gone for
// status, list and cleanup, which drops the claim.
func TestGoneBox(t *testing.T) {
	e := newEnv(t)
	c := lifetimeClient(t, e, e.b)
	ctx := context.Background()
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	id := l.ID()
	l.Close()
	e.fake.setStatus(l.Claim().View.CloudID, "deleted")

	if info, err := c.Status(ctx, id); err != nil || info.State != crabbox.StateGone {
		t.Errorf("status: %+v, %v; want gone", info, err)
	}
	if infos, err := c.List(ctx); err != nil || len(infos) != 1 || infos[0].State != crabbox.StateGone {
		t.Errorf("list: %+v, %v; want the lease, gone", infos, err)
	}
	ds, err := c.Cleanup(ctx, crabbox.CleanupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ignore := cmpopts.IgnoreFields(crabbox.CleanupOutcome{}, "Slug", "Reason", "Result")
	want := []crabbox.CleanupOutcome{{LeaseID: id, Provider: upstashbox.Name, Action: crabbox.CleanupDelete}}
	if diff := cmp.Diff(want, ds, ignore); diff != "" {
		t.Errorf("cleanup (-want +got):\n%s", diff)
	}
	if _, err := c.Status(ctx, id); !errors.Is(err, crabbox.ErrNotFound) {
		t.Errorf("status after cleanup: %v, want ErrNotFound (the claim is dropped)", err)
	}
}

// watch collects output and calls fn once it contains marker.
type watch struct {
	mu     sync.Mutex
	buf    strings.Builder
	marker string
	fn     func()
}

func (w *watch) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	fire := strings.Contains(w.buf.String(), w.marker)
	w.mu.Unlock()
	if fire {
		w.fn()
	}
	return len(p), nil
}
