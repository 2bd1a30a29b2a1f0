// Package delegatedtest is the end-to-end test the delegated sandbox
// providers share: the library's whole workflow on a provider's fake.
package delegatedtest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
)

// GitCheckout returns a git repository with one committed file,
// hello.txt.
func GitCheckout(t *testing.T) string {
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

// LibraryWorkflow runs the library's whole delegated workflow through b
// (a backend on a fake of its service, whose expiries are real times): a
// warm lease reused twice (the first run sends the checkout, the second
// only what changed), status and stop, then a one-shot run. remaining
// lists the sandboxes the fake still holds; none may be left after the
// stop and the one-shot run.
func LibraryWorkflow(t *testing.T, b provider.DelegatedRunBackend, remaining func() []string) {
	t.Helper()
	name := b.Spec().Name
	c, err := crabbox.New(crabbox.WithBackend(b), crabbox.WithStateDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()
	repo := GitCheckout(t)
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
	if left := remaining(); len(left) != 0 {
		t.Errorf("%s sandboxes after stop: %v", name, left)
	}
	if info, err := c.Status(ctx, id); !errors.Is(err, crabbox.ErrNotFound) {
		t.Errorf("status after stop: %+v, %v; want ErrNotFound", info, err)
	}

	// Last, as some fakes keep one filesystem for all their sandboxes.
	res, out := run(crabbox.RunRequest{Command: []string{"cat", "hello.txt", "new.txt"}})
	if res.ExitCode != 0 || out != "hello from the checkout\nnew\n" || res.Provider != name {
		t.Errorf("one-shot run: exit %d, output %q, provider %q", res.ExitCode, out, res.Provider)
	}
	if left := remaining(); len(left) != 0 {
		t.Errorf("%s sandboxes after a one-shot run: %v", name, left)
	}
}
