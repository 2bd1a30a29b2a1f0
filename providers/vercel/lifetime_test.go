//go:build unix

package vercel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/vercel"
	"github.com/crabbox-dev/crabbox/run"
)

// The plans' maximum session durations, and a duration, set max-lifetime;
// a value that is neither is refused, naming the plans.
func TestMaxLifetimeOption(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  time.Duration
	}{
		{"", 45 * time.Minute}, {"hobby", 45 * time.Minute}, {"Pro", 24 * time.Hour}, {"enterprise", 24 * time.Hour}, {"5h", 5 * time.Hour},
	} {
		cfg, err := vercel.ParseConfig(provider.Config{"max-lifetime": tc.value})
		if err != nil || cfg.MaxLifetime != tc.want {
			t.Errorf("max-lifetime %q: %v, %v; want %v", tc.value, cfg.MaxLifetime, err, tc.want)
		}
	}
	if _, err := vercel.ParseConfig(provider.Config{"max-lifetime": "-1h"}); err == nil || !strings.Contains(err.Error(), "enterprise, hobby, pro") {
		t.Errorf("max-lifetime -1h: %v, want an error naming the plans", err)
	}
	if got := newEnv(t).b.MaxLifetime(); got != 45*time.Minute {
		t.Errorf("default MaxLifetime = %v, want 45m (Hobby)", got)
	}
}

// Vercel refuses to extend a session past the plan's maximum: Touch
// extends it up to the maximum and reports that end, and does not fail.
func TestTouchUpToMaxLifetime(t *testing.T) {
	e := newEnv(t)
	start := e.clock.Now()
	v := e.warmup("", nil)
	got, err := e.b.Touch(context.Background(), provider.DelegatedTouchRequest{ID: v.ID, Now: start, ExpiresAt: start.Add(2 * time.Hour)})
	if want := start.Add(45 * time.Minute); err != nil || !got.ExpiresAt.Equal(want) {
		t.Errorf("Touch past the plan's maximum = %v, %v; want expiry %v", got.ExpiresAt, err, want)
	}
	// At the maximum already: nothing to extend, the end stays.
	e.clock.Advance(10 * time.Minute)
	got, err = e.b.Touch(context.Background(), provider.DelegatedTouchRequest{ID: v.ID, Now: e.clock.Now(), ExpiresAt: e.clock.Now().Add(time.Hour)})
	if want := start.Add(45 * time.Minute); err != nil || !got.ExpiresAt.Equal(want) {
		t.Errorf("Touch at the maximum = %v, %v; want expiry %v", got.ExpiresAt, err, want)
	}
}

// lifetimeClient is a library client on the fake Vercel with its clock.
func lifetimeClient(t *testing.T, e *env) *crabbox.Client {
	t.Helper()
	c, err := crabbox.New(crabbox.WithBackend(e.b), crabbox.WithStateDir(t.TempDir()),
		crabbox.WithRuntime(provider.Runtime{Clock: e.clock}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A TTL beyond the plan's maximum is capped to it, with one line saying
// so, and the lease's keepalive never asks Vercel for more.
func TestAcquireCapsTTL(t *testing.T) {
	e := newEnv(t)
	c := lifetimeClient(t, e)
	ctx := context.Background()
	var mu sync.Mutex
	var notices []string
	start := e.clock.Now()
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{TTL: 2 * time.Hour, IdleTimeout: 30 * time.Minute, Warn: func(s string) {
		mu.Lock()
		defer mu.Unlock()
		notices = append(notices, s)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	mu.Lock()
	if diff := cmp.Diff([]string{"vercel grants at most 45m; the lease's TTL is 45m, not 2h"}, notices); diff != "" {
		t.Errorf("notices (-want +got):\n%s", diff)
	}
	mu.Unlock()
	if got := l.Claim().TTL(); got != 45*time.Minute {
		t.Errorf("lease TTL = %v, want 45m", got)
	}
	e.clock.Advance(20 * time.Minute)
	if err := l.Touch(ctx); err != nil {
		t.Fatalf("touch 20m in: %v", err)
	}
	if want := start.Add(45 * time.Minute); !l.ExpiresAt().Equal(want) {
		t.Errorf("lease expires %v, want %v (the plan's maximum)", l.ExpiresAt(), want)
	}
}

// A sandbox whose session Vercel stopped while its lease's claim says it
// lives is gone for status, list and cleanup, which drops the claim.
func TestGoneSandbox(t *testing.T) {
	e := newEnv(t)
	c := lifetimeClient(t, e)
	ctx := context.Background()
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	id := l.ID()
	l.Close()
	e.fake.setTimeout(vercel.SandboxName(id), 0) // Vercel stopped the session

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
	var mine []crabbox.CleanupOutcome
	for _, d := range ds {
		if d.LeaseID == id {
			mine = append(mine, d)
		}
	}
	want := []crabbox.CleanupOutcome{{LeaseID: id, Provider: "vercel", Action: crabbox.CleanupDelete, Reason: "sandbox is gone: dropping the claim", Result: "claim dropped"}}
	if diff := cmp.Diff(want, mine, cmpopts.IgnoreFields(crabbox.CleanupOutcome{}, "Slug")); diff != "" {
		t.Errorf("cleanup (-want +got):\n%s", diff)
	}
	if _, err := c.Status(ctx, id); !errors.Is(err, crabbox.ErrNotFound) {
		t.Errorf("status after cleanup: %v, want ErrNotFound (the claim is dropped)", err)
	}
}

// A command still running when Vercel stops the session at the plan's
// maximum ends with an error that says so, not with the exit status of
// the kill.
func TestRunPastMaxLifetime(t *testing.T) {
	e := newEnv(t)
	c := lifetimeClient(t, e)
	ctx := context.Background()
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	out := newSignalWriter("started\n")
	done := make(chan error, 1)
	go func() {
		res, err := l.Exec(ctx, run.Command{Shell: "echo started; exec sleep 600", Dir: l.Workdir(t.TempDir()), Stdout: out})
		if err == nil {
			err = fmt.Errorf("exit %d", res.ExitCode)
		}
		done <- err
	}()
	select {
	case <-out.seen:
	case err := <-done:
		t.Fatalf("run ended before the command started: %v", err)
	}
	for range 2 { // the lease is kept alive as it runs
		e.clock.Advance(20 * time.Minute)
		if err := l.Touch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Advance(5 * time.Minute)
	if _, err := e.b.Status(ctx, provider.StatusRequest{ID: l.ID()}); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("status at the plan's maximum: %v, want the session stopped", err)
	}
	err = <-done
	const want = "sandbox reached its provider's maximum lifetime (45m)"
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, crabbox.ErrMaxLifetime) {
		t.Errorf("run past the maximum lifetime: %v; want an error saying %q", err, want)
	}
}
