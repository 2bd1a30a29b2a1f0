package crabbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/internal/testfs"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/run"
)

// sandboxProvider registers a providertest.Sandbox, wrapped by wrap.
type sandboxProvider struct {
	sb   *providertest.Sandbox
	wrap func(provider.DelegatedRunBackend) provider.DelegatedRunBackend
}

func (p sandboxProvider) Spec() provider.Spec { return p.sb.Spec() }

func (p sandboxProvider) Configure(provider.Config, provider.Runtime) (provider.Backend, error) {
	if p.wrap == nil {
		return p.sb, nil
	}
	return p.wrap(p.sb), nil
}

func sandboxClient(t *testing.T, wrap func(provider.DelegatedRunBackend) provider.DelegatedRunBackend) (*crabbox.Client, *providertest.Sandbox) {
	t.Helper()
	sb := providertest.NewSandbox("sandbox", t.TempDir())
	reg := provider.NewRegistry()
	reg.Register(sandboxProvider{sb: sb, wrap: wrap})
	return newClient(t, t.TempDir(), crabbox.WithRegistry(reg), crabbox.WithProvider("sandbox")), sb
}

// ops are the sandbox's calls as "op base-of-path".
func ops(sb *providertest.Sandbox) []string {
	var out []string
	for _, c := range sb.Calls() {
		if c.Path == "" {
			out = append(out, c.Op)
			continue
		}
		out = append(out, c.Op+" "+filepath.Base(c.Path))
	}
	return out
}

// TestDelegatedWarmLease: warmup, run --id twice (the second sends only
// the changed file), an unchanged rerun that reads one file, status, list,
// heartbeat and stop, on a delegated backend with files.
func TestDelegatedWarmLease(t *testing.T) {
	c, sb := sandboxClient(t, nil)
	ctx := context.Background()
	repo := gitRepo(t)
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Slug: "warm-crab", Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	id := l.ID()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Status(ctx, provider.StatusRequest{ID: id}); err != nil {
		t.Fatalf("the sandbox has no lease %s after warmup: %v", id, err)
	}

	run := func(cmd string) crabbox.RunResult {
		t.Helper()
		var out, errOut bytes.Buffer
		res, err := c.Run(ctx, crabbox.RunRequest{Lease: "warm-crab", Root: repo, Shell: cmd, Env: map[string]string{"CI": "yes"}, Stdout: &out, Stderr: &errOut})
		if err != nil {
			t.Fatalf("Run %q: %v (stderr %q)", cmd, err, errOut.String())
		}
		if res.ExitCode != 0 {
			t.Fatalf("Run %q: exit %d, stderr %q", cmd, res.ExitCode, errOut.String())
		}
		if !res.Kept || res.LeaseID != id {
			t.Errorf("Run on the warm lease: result %+v, want lease %s kept", res, id)
		}
		return res
	}
	first := run(`cat committed.txt untracked.txt; test ! -e ignored.log; test "$CI" = yes`)
	if first.Sync.Sent != 3 || first.SyncSkipped {
		t.Errorf("first run synced %+v, want the 3 files of the checkout (.gitignore, committed, untracked)", first.Sync)
	}
	if err := os.WriteFile(filepath.Join(repo, "untracked.txt"), []byte("changed!\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb.ResetCalls()
	second := run(`grep -q changed untracked.txt`)
	if second.Sync.Sent != 1 || second.Sync.Bytes != int64(len("changed!\n")) {
		t.Errorf("second run synced %+v, want only the changed file (9 bytes)", second.Sync)
	}
	sb.ResetCalls()
	third := run(`true`)
	if !third.SyncSkipped {
		t.Errorf("an unchanged rerun synced %+v", third.Sync)
	}
	// Besides resolving the lease (status) and keeping it alive (touch):
	var got []string
	for _, op := range ops(sb) {
		if op != "status" && op != "touch" {
			got = append(got, op)
		}
	}
	if len(got) != 2 || got[0] != "read-file .crabbox-synced" || !strings.HasPrefix(got[1], "run ") {
		t.Errorf("an unchanged rerun made calls %q, want one read of the workdir's marker (with the fingerprint) and the run", got)
	}

	info, err := c.Status(ctx, id)
	if err != nil || info.State != crabbox.StateReady || !info.Keep {
		t.Errorf("Status = %+v, %v; want ready and kept", info, err)
	}
	infos, err := c.List(ctx)
	if err != nil || len(infos) != 1 || infos[0].ID != id || infos[0].State != crabbox.StateReady {
		t.Errorf("List = %+v, %v; want the one ready lease", infos, err)
	}
	sb.ResetCalls()
	if _, err := c.Heartbeat(ctx, id, crabbox.HeartbeatOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := ops(sb); !contains(got, "touch") {
		t.Errorf("heartbeat made calls %q, want a touch at the provider", got)
	}
	if err := c.Stop(ctx, "warm-crab"); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Status(ctx, provider.StatusRequest{ID: id}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("sandbox status after Stop: %v, want not found", err)
	}
	if _, err := c.Status(ctx, id); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Status after Stop: %v, want not found", err)
	}
	noLeases(t, c)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestDelegatedSyncOptions: sync-only and no-sync on a backend with files.
func TestDelegatedSyncOptions(t *testing.T) {
	c, sb := sandboxClient(t, nil)
	ctx := context.Background()
	repo := gitRepo(t)
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	res, err := l.Run(ctx, crabbox.RunRequest{Root: repo, SyncOnly: true, SyncExclude: []string{"untracked.txt"}})
	if err != nil || res.Sync.Sent != 2 {
		t.Fatalf("sync-only run: %+v, %v; want 2 files sent (untracked.txt excluded)", res.Sync, err)
	}
	dir := filepath.FromSlash(l.Workdir(repo))
	if _, err := os.Stat(filepath.Join(dir, "committed.txt")); err != nil {
		t.Errorf("sync-only left no checkout in the sandbox: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "untracked.txt")); !os.IsNotExist(err) {
		t.Errorf("an excluded file was synced (stat: %v)", err)
	}
	if err := os.WriteFile(filepath.Join(repo, "committed.txt"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res, err = l.Run(ctx, crabbox.RunRequest{Root: repo, NoSync: true, Command: []string{"cat", "committed.txt"}, Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "committed\n" || !res.SyncSkipped {
		t.Errorf("no-sync run: %+v, %v, output %q; want the old file, nothing synced", res, err, out.String())
	}
	_ = sb
}

// TestDelegatedRunOnlyBackend: a backend without files syncs the checkout
// itself; crabbox's sync options are refused before anything is created,
// and warm leases work.
func TestDelegatedRunOnlyBackend(t *testing.T) {
	c, sb := sandboxClient(t, providertest.RunOnly)
	ctx := context.Background()
	repo := gitRepo(t)
	_, err := c.Run(ctx, crabbox.RunRequest{Root: repo, Command: []string{"true"}, NoSync: true, ForceSyncLarge: true})
	if !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), "NoSync (--no-sync)") || !strings.Contains(err.Error(), "ForceSyncLarge (--force-sync-large)") {
		t.Errorf("Run with sync options: %v, want them named and refused", err)
	}
	if len(sb.Calls()) != 0 || len(claims(t, c)) != 0 {
		t.Errorf("a refused run made calls %q, claims %+v", ops(sb), claims(t, c))
	}
	var out bytes.Buffer
	res, err := c.Run(ctx, crabbox.RunRequest{Root: repo, Keep: true, Command: []string{"cat", "committed.txt"}, Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "committed\n" || !res.Kept {
		t.Fatalf("Run: %+v, %v, output %q", res, err, out.String())
	}
	res, err = c.Run(ctx, crabbox.RunRequest{Lease: res.LeaseID, Root: repo, Command: []string{"true"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run --id: %+v, %v", res, err)
	}
	if err := c.Stop(ctx, res.LeaseID); err != nil {
		t.Fatal(err)
	}
	noLeases(t, c)
}

// TestDelegatedNoLeak: a failure (or hang) at each step of a delegated run
// leaves no sandbox and no claim.
func TestDelegatedNoLeak(t *testing.T) {
	steps := []providertest.Fault{
		{Step: providertest.StepWarmup},
		{Step: providertest.StepWarmup, AfterCall: true},
		{Step: providertest.StepWarmup, Hang: true, AfterCall: true},
		{Step: providertest.StepWriteFile},
		{Step: providertest.StepWriteFile, Times: 2}, // the work root's, then the archive
		{Step: providertest.StepReadFile},
		{Step: providertest.StepRun},
		{Step: providertest.StepRun, Hang: true},
		{Step: providertest.StepTouchView},
	}
	for _, ft := range steps {
		t.Run(fmt.Sprintf("%s/after=%v/hang=%v/times=%d", ft.Step, ft.AfterCall, ft.Hang, ft.Times), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ft.OnHang = cancel
			c, sb := sandboxClient(t, func(b provider.DelegatedRunBackend) provider.DelegatedRunBackend {
				return providertest.WithDelegatedFaults(b, ft)
			})
			_, _ = c.Run(ctx, crabbox.RunRequest{Root: gitRepo(t), Command: []string{"true"}})
			if cl := claims(t, c); len(cl) != 0 {
				t.Errorf("claims left: %+v", cl)
			}
			views, err := sb.List(context.Background(), provider.ListRequest{})
			if err != nil || len(views) != 0 {
				t.Errorf("sandboxes left: %+v (%v)", views, err)
			}
		})
	}
}

// TestDelegatedCleanup: cleanup stops an expired warm lease and keeps a
// live one.
func TestDelegatedCleanup(t *testing.T) {
	c, sb := sandboxClient(t, nil)
	ctx := context.Background()
	live, err := c.Acquire(ctx, crabbox.AcquireOptions{Slug: "live-crab", Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release(ctx)
	old, err := c.Acquire(ctx, crabbox.AcquireOptions{Slug: "old-crab", Keep: true, TTL: 1})
	if err != nil {
		t.Fatal(err)
	}
	oldID := old.ID()
	old.Close()
	ds, err := c.Cleanup(ctx, crabbox.CleanupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range ds {
		got[d.Slug] = string(d.Action) + " " + d.Result
	}
	if diff := cmp.Diff(map[string]string{"old-crab": "delete deleted", "live-crab": "keep "}, got); diff != "" {
		t.Errorf("cleanup (-want +got):\n%s", diff)
	}
	if _, err := sb.Status(ctx, provider.StatusRequest{ID: oldID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("the expired lease's sandbox is still there: %v", err)
	}
}

// TestDelegatedArtifacts: a delegated backend with files brings artifacts
// and downloads home through its file API, also after a failed command,
// skipping and reporting what cannot come home as over SSH, and leaving
// no scratch files in the sandbox. A backend without files refuses them
// before anything is created, naming the provider.
func TestDelegatedArtifacts(t *testing.T) {
	c, sb := sandboxClient(t, nil)
	ctx := context.Background()
	repo := gitRepo(t)
	arts, here, outside := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "host"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	res, err := l.Run(ctx, crabbox.RunRequest{
		Root: repo, Shell: "mkdir -p out/sub && echo a > out/a.txt && echo b > out/sub/b.txt && ln -s " + filepath.Join(outside, "host") + " out/host.txt && echo r > r.json; exit 3",
		Artifacts: []string{"out/**"}, ArtifactsDir: arts,
		Downloads: []run.Download{{Remote: "r.json", Local: "got/r.json"}, {Remote: "committed.txt"}}, DownloadDir: here,
	})
	if err != nil || res.ExitCode != 3 {
		t.Fatalf("run: exit %d, %v; want the command's 3", res.ExitCode, err)
	}
	if diff := cmp.Diff(map[string]string{"out/a.txt": "a\n", "out/sub/b.txt": "b\n"}, testfs.Files(t, arts)); diff != "" {
		t.Errorf("artifacts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"got/r.json": "r\n", "committed.txt": "committed\n"}, testfs.Files(t, here)); diff != "" {
		t.Errorf("downloads (-want +got):\n%s", diff)
	}
	if len(res.ArtifactsSkipped) != 1 || res.ArtifactsSkipped[0].Path != "out/host.txt" || !strings.Contains(res.ArtifactsSkipped[0].Reason, "outside the workdir") {
		t.Errorf("skipped %+v, want out/host.txt, a symlink outside", res.ArtifactsSkipped)
	}
	if res.ArtifactsDir != arts || len(res.Artifacts) != 4 {
		t.Errorf("result: %d files in %q, want 4 in %q", len(res.Artifacts), res.ArtifactsDir, arts)
	}
	root := filepath.Dir(filepath.FromSlash(l.Workdir(repo)))
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".crabbox-fetch-") {
			t.Errorf("scratch directory %s left in the sandbox", e.Name())
		}
	}
	var reads int
	for _, call := range sb.Calls() {
		if call.Op == "read-file" {
			reads++
		}
	}
	if reads < 2 {
		t.Errorf("%d read-file calls, want the listing and the archive read through the file API", reads)
	}

	runOnly, rsb := sandboxClient(t, providertest.RunOnly)
	_, err = runOnly.Run(ctx, crabbox.RunRequest{Root: repo, Command: []string{"true"}, Artifacts: []string{"out/**"}, Downloads: []run.Download{{Remote: "r.json"}}})
	if !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), `provider "sandbox"`) ||
		!strings.Contains(err.Error(), "Artifacts (--artifacts)") || !strings.Contains(err.Error(), "Downloads (--download)") {
		t.Errorf("artifacts on a backend without files: %v, want them refused naming the provider", err)
	}
	if len(rsb.Calls()) != 0 || len(claims(t, runOnly)) != 0 {
		t.Errorf("a refused run made calls %q, claims %+v", ops(rsb), claims(t, runOnly))
	}
}
