//go:build unix

package vercel_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/vercel"
)

// The library's workflow on the fake: warmup, run --id twice (the second
// sends only what changed), status, stop.
func TestEndToEnd(t *testing.T) {
	f := newFake(t, clockwork.NewRealClock())
	b := newBackend(t, f, vercel.Config{}, provider.Runtime{})
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
	second := run("changed\nother\n")
	if second.Sync.Sent != 1 {
		t.Errorf("second run sent %d files, want only the changed one", second.Sync.Sent)
	}
	info, err := c.Status(ctx, id)
	if err != nil || info.State != crabbox.StateReady {
		t.Errorf("status = %+v, %v; want ready", info, err)
	}
	if err := c.Stop(ctx, id); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if names := f.Names(); len(names) != 0 {
		t.Errorf("left behind after stop: %v", names)
	}
}
