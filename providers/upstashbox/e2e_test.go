//go:build unix

package upstashbox_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/internal/clitest"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/upstashbox"
)

// The library's whole delegated workflow on the fake Box API: a one-shot
// run, then a warm lease reused twice (the second run sends only what
// changed), status and stop; no box is left.
func TestLibraryWorkflow(t *testing.T) {
	f := newFake(t, clockwork.NewRealClock()) // the library's expiries are real times
	c, err := crabbox.New(crabbox.WithBackend(newBackend(t, f, upstashbox.Config{}, provider.Runtime{})), crabbox.WithStateDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	repo := clitest.GitRepo(t)
	if err := os.WriteFile(filepath.Join(repo, "hello.txt"), []byte("hello from the checkout\n"), 0o644); err != nil {
		t.Fatal(err)
	}
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
	if res.ExitCode != 0 || out != "hello from the checkout\n" || res.Provider != upstashbox.Name {
		t.Errorf("one-shot run: exit %d, output %q, provider %q", res.ExitCode, out, res.Provider)
	}
	if ids := f.IDs(); len(ids) != 0 {
		t.Fatalf("boxes after a one-shot run: %v", ids)
	}

	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Slug: "warm-crab", Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	id := l.ID()
	l.Close()
	first, out := run(crabbox.RunRequest{Lease: id, Command: []string{"sh", "-c", "cat hello.txt; exit 4"}})
	if first.ExitCode != 4 || out != "hello from the checkout\n" {
		t.Errorf("first run on the warm lease: exit %d, output %q", first.ExitCode, out)
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
	if ids := f.IDs(); len(ids) != 0 {
		t.Errorf("boxes after stop: %v", ids)
	}
	if info, err := c.Status(ctx, id); !errors.Is(err, crabbox.ErrNotFound) {
		t.Errorf("status after stop: %+v, %v; want ErrNotFound", info, err)
	}
}

// The crabbox command on the fake Box API, configured as a user would
// (the key in the environment, the base URL as a setting): warmup, run
// --id twice (the second sends only the changed file), status, stop; no
// box is left.
func TestCommandWorkflow(t *testing.T) {
	f := newFake(t, clockwork.NewRealClock()) // the command's expiries are real times
	env := append(clitest.StateEnv(t),
		"CRABBOX_PROVIDER=upstash-box", "UPSTASH_BOX_API_KEY="+testKey,
		"CRABBOX_UPSTASH_BOX_BASE_URL="+f.URL, "CRABBOX_UPSTASH_BOX_WORK_ROOT="+f.dir+"/work")
	clitest.DelegatedWarmLease(t, clitest.Command(clitest.Build(t), env), upstashbox.Name)
	if ids := f.IDs(); len(ids) != 0 {
		t.Errorf("boxes left after stop: %v", ids)
	}
}
