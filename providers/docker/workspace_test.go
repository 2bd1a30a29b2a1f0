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
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/run"
)

// The whole checkpoint workflow through the library on the real engine:
// warm a box, install a tool outside the workdir and build in it,
// checkpoint, fork two boxes; both have the tool and the build output, and
// their first sync sends only the file edited since the checkpoint.
func TestCheckpointForkTwoBoxes(t *testing.T) {
	f := engine(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git to make a checkout with")
	}
	repo := t.TempDir()
	for _, args := range [][]string{{"init", "-q"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	for name, body := range map[string]string{"main.txt": "source\n", "notes.txt": "v1\n"} {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := crabbox.New(crabbox.WithStateDir(t.TempDir()), crabbox.WithProvider(Name),
		crabbox.WithProviderConfig(Name, provider.Config{"image": f.image, "agent": f.agent}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sh := func(l *crabbox.Lease, shell string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		res, err := l.Exec(ctx, run.Command{Shell: shell, Dir: l.Workdir(repo), Stdout: &out, Stderr: &errOut})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%q on %s: exit %d, %v (stderr %q)", shell, l.ID(), res.ExitCode, err, errOut.String())
		}
		return out.String()
	}

	src, err := c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Release(context.Background())
	if _, err := src.Sync(ctx, repo, crabbox.SyncOptions{}); err != nil {
		t.Fatal(err)
	}
	sh(src, `mkdir -p /opt/tool/bin && printf '#!/bin/sh\necho tool ok\n' > /opt/tool/bin/tool && chmod +x /opt/tool/bin/tool && /opt/tool/bin/tool > build.out && cat main.txt >> build.out`)
	cp, err := src.Checkpoint(ctx, crabbox.CheckpointOptions{Name: "built"})
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	defer c.DeleteCheckpoint(context.Background(), cp.ID)
	if cp.Kind != lease.CheckpointNative || cp.Artifact == nil {
		t.Fatalf("checkpoint = %+v, want a native one with its image", cp)
	}

	if err := os.WriteFile(filepath.Join(repo, "notes.txt"), []byte("v2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		fork, err := c.Fork(ctx, "built", crabbox.AcquireOptions{})
		if err != nil {
			t.Fatalf("Fork %d: %v", i, err)
		}
		defer fork.Release(context.Background())
		if got := sh(fork, "cat build.out; /opt/tool/bin/tool"); got != "tool ok\nsource\ntool ok\n" {
			t.Errorf("fork %d: %q, want the build output and the installed tool", i, got)
		}
		stats, err := fork.Sync(ctx, repo, crabbox.SyncOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if stats.Sent != 1 || stats.Skipped {
			t.Errorf("fork %d's first sync sent %d of %d files (skipped %v), want only the edited one", i, stats.Sent, stats.Total, stats.Skipped)
		}
		if got := sh(fork, "cat notes.txt"); got != "v2\n" {
			t.Errorf("fork %d: notes.txt = %q after the sync, want v2", i, got)
		}
	}
}
