//go:build unix

package opensandbox_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox"
)

// gitCheckout is a git repository with one committed file.
func gitCheckout(t *testing.T) string {
	t.Helper()
	repo := t.TempDir()
	if err := os.WriteFile(filepath.Join(repo, "hello.txt"), []byte("hello from the checkout\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"init", "-q"}, {"config", "user.email", "t@example.invalid"}, {"config", "user.name", "t"},
		{"add", "."}, {"commit", "-qm", "first"},
	} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return repo
}

// The library's whole delegated workflow on the fake OpenSandbox server: a one-shot run,
// then a warm lease reused twice (the second run sends only what changed),
// status and stop; no sandbox is left.
func TestLibraryWorkflow(t *testing.T) {
	f := newFake(t)
	f.clock = clockwork.NewRealClock() // the library's expiries are real times
	c, err := crabbox.New(crabbox.WithBackend(newBackend(t, f)), crabbox.WithStateDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := testContext(t)
	repo := gitCheckout(t)
	run := func(req crabbox.RunRequest) (crabbox.RunResult, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		req.Root, req.Stdout, req.Stderr = repo, &out, &errOut
		req.SyncProgress, req.SyncWarn = func(int, int64) {}, func(string) {}
		res, err := c.Run(ctx, req)
		if err != nil {
			t.Fatalf("run %q: %v (stderr %q)", req.Command, err, errOut.String())
		}
		return res, out.String()
	}

	res, out := run(crabbox.RunRequest{Command: []string{"cat", "hello.txt"}})
	if res.ExitCode != 0 || out != "hello from the checkout\n" || res.Provider != "opensandbox" {
		t.Errorf("one-shot run: exit %d, output %q, provider %q", res.ExitCode, out, res.Provider)
	}
	if ids := f.sandboxIDs(); len(ids) != 0 {
		t.Fatalf("sandboxes after a one-shot run: %v", ids)
	}

	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Slug: "warm-crab", Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	id := l.ID()
	l.Close()
	first, out := run(crabbox.RunRequest{Lease: id, Command: []string{"sh", "-c", "cat hello.txt; exit 4"}})
	if first.ExitCode != 4 || out != "hello from the checkout\n" || first.Sync.Sent != 1 {
		t.Errorf("first run on the warm lease: exit %d, output %q, sent %d files", first.ExitCode, out, first.Sync.Sent)
	}
	if err := os.WriteFile(filepath.Join(repo, "new.txt"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	second, out := run(crabbox.RunRequest{Lease: "warm-crab", Command: []string{"cat", "hello.txt", "new.txt"}})
	if second.ExitCode != 0 || out != "hello from the checkout\nnew\n" || second.Sync.Sent != 1 {
		t.Errorf("second run: exit %d, output %q, sent %d files (want only the new one)", second.ExitCode, out, second.Sync.Sent)
	}

	info, err := c.Status(ctx, "warm-crab")
	if err != nil || info.ID != id || info.State != crabbox.StateReady {
		t.Errorf("status: %+v, %v", info, err)
	}
	if err := c.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if ids := f.sandboxIDs(); len(ids) != 0 {
		t.Errorf("sandboxes after stop: %v", ids)
	}
	if info, err := c.Status(ctx, id); !errors.Is(err, crabbox.ErrNotFound) {
		t.Errorf("status after stop: %+v, %v; want ErrNotFound", info, err)
	}
}
