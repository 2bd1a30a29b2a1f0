//go:build unix

package azuredynamicsessions_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/azuredynamicsessions"
)

// The library's workflow on the fake: warmup, run --id twice (the
// checkout synced through the file API, the second run sending only what
// changed), status, stop.
func TestEndToEnd(t *testing.T) {
	f := newFake(t, clockwork.NewRealClock(), time.Hour)
	b := newBackend(t, f, azuredynamicsessions.Config{}, provider.Runtime{})
	c, err := crabbox.New(crabbox.WithStateDir(t.TempDir()), crabbox.WithBackend(b))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	repo := t.TempDir()
	for name, body := range map[string]string{"hello.txt": "hello\n", "other.txt": "other\n"} {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"-c", "user.name=t", "-c", "user.email=t@example.test", "commit", "-q", "-m", "init"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Slug: "e2e-crab"})
	if err != nil {
		t.Fatalf("warmup: %v", err)
	}
	id := l.ID()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	run := func(want string) crabbox.RunResult {
		t.Helper()
		var out, errOut bytes.Buffer
		res, err := c.Run(ctx, crabbox.RunRequest{Lease: id, Root: repo, Command: []string{"sh", "-c", "cat *.txt; exit 5"}, Stdout: &out, Stderr: &errOut})
		if err != nil || res.ExitCode != 5 || out.String() != want {
			t.Fatalf("run --id %s = exit %d, %v, stdout %q (stderr %q); want exit 5, %q", id, res.ExitCode, err, out.String(), errOut.String(), want)
		}
		return res
	}
	first := run("hello\nother\n")
	if first.Sync.Sent != 2 {
		t.Errorf("first run sent %d files, want 2", first.Sync.Sent)
	}
	if err := os.WriteFile(filepath.Join(repo, "hello.txt"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if second := run("changed\nother\n"); second.Sync.Sent != 1 {
		t.Errorf("second run sent %d files, want only the changed one", second.Sync.Sent)
	}
	if info, err := c.Status(ctx, id); err != nil || info.State != crabbox.StateReady {
		t.Errorf("status = %+v, %v; want ready", info, err)
	}
	if err := c.Stop(ctx, id); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if ids := f.identifiers(); len(ids) != 0 {
		t.Errorf("left behind after stop: %v", ids)
	}
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
