package docker

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
)

// A ready pool of docker boxes: run with AcquireOptions.Pool (what
// crabbox run --pool does) takes a container made ahead, fresh and
// answering, and makes one the ordinary way once the pool is empty;
// draining releases the rest. No container is left behind.
func TestRunFromReadyPool(t *testing.T) {
	f := engine(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git to make a checkout with")
	}
	repo := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(repo, "hello.txt"), []byte("hello from the checkout\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := crabbox.New(crabbox.WithStateDir(t.TempDir()), crabbox.WithProvider(Name),
		crabbox.WithProviderConfig(Name, provider.Config{"image": f.image, "agent": f.agent}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := newBackend(t, f)

	info, err := c.EnsurePool(ctx, crabbox.PoolOptions{Size: 2, MaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, box := range info.Boxes {
		removeLeftovers(t, b, box.LeaseID)
	}
	if info.Key != Name || info.Ready != 2 || info.Config["image"] != f.image {
		t.Fatalf("EnsurePool = %+v", info)
	}
	for i, wantHit := range []bool{true, true, false} {
		var stdout, stderr bytes.Buffer
		res, err := c.Run(ctx, crabbox.RunRequest{
			Root: repo, Shell: "cat hello.txt", Acquire: crabbox.AcquireOptions{Pool: Name},
			Stdout: &stdout, Stderr: &stderr,
		})
		if err != nil {
			t.Fatalf("run %d: %v\nstderr:\n%s", i, err, &stderr)
		}
		removeLeftovers(t, b, res.LeaseID)
		if res.ExitCode != 0 || stdout.String() != "hello from the checkout\n" {
			t.Errorf("run %d: exit %d, stdout %q, stderr %q", i, res.ExitCode, stdout.String(), stderr.String())
		}
		if res.Pool == nil || res.Pool.Key != Name || res.Pool.Hit != wantHit {
			t.Errorf("run %d: pool %+v, want hit %v", i, res.Pool, wantHit)
		}
		t.Logf("run %d (pool hit %v): lease %s, connect %s, total %s", i, wantHit, res.Timing.Lease, res.Timing.Connect, res.Timing.Total)
		assertNoContainer(t, b, res.LeaseID)
	}
	if _, err := c.EnsurePool(ctx, crabbox.PoolOptions{Size: 1, MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	drained, err := c.DrainPool(ctx, Name)
	if err != nil || drained.Removed != 1 {
		t.Fatalf("DrainPool = %+v, %v", drained, err)
	}
	for _, box := range drained.Boxes {
		assertNoContainer(t, b, box.LeaseID)
	}
	if infos, err := c.List(ctx); err != nil || len(infos) != 0 {
		t.Errorf("leases left: %+v, %v", infos, err)
	}
}
