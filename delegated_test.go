package crabbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/external"
)

// fakeDelegated is a delegated-run provider and backend that records its
// calls.
type fakeDelegated struct {
	mu         gosync.Mutex
	calls      []string
	runs       []provider.DelegatedRunRequest
	warmupErr  error
	stopErr    error
	exit       int
	hang       bool // Run blocks until its context ends
	stdin      bool // declares FeatureStdin; Run echoes stdin to stdout
	store      *lease.Store
	claimState string // the claim's state seen during Run
}

func (f *fakeDelegated) Spec() provider.Spec {
	spec := provider.Spec{Name: "sandbox", Kind: provider.KindDelegatedRun, Targets: []provider.Target{provider.TargetLinux}}
	if f.stdin {
		spec.Features = append(spec.Features, provider.FeatureStdin)
	}
	return spec
}

func (f *fakeDelegated) Configure(provider.Config, provider.Runtime) (provider.Backend, error) {
	return f, nil
}

func (f *fakeDelegated) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeDelegated) Warmup(_ context.Context, req provider.WarmupRequest) (provider.LeaseView, error) {
	f.record("warmup " + req.Slug)
	if f.warmupErr != nil {
		return provider.LeaseView{}, f.warmupErr
	}
	return provider.LeaseView{ID: req.LeaseID, Slug: req.Slug, Provider: "sandbox"}, nil
}

func (f *fakeDelegated) Run(ctx context.Context, req provider.DelegatedRunRequest) (provider.DelegatedRunResult, error) {
	f.record("run " + strings.Join(req.Command, " "))
	f.mu.Lock()
	f.runs = append(f.runs, req)
	f.mu.Unlock()
	if c, err := f.store.Get(req.LeaseID); err == nil {
		f.claimState = string(c.State)
	}
	if f.hang {
		<-ctx.Done()
		return provider.DelegatedRunResult{}, ctx.Err()
	}
	if req.Stdin != nil {
		_, _ = io.Copy(req.Stdout, req.Stdin)
	}
	_, _ = req.Stdout.Write([]byte("out\n"))
	_, _ = req.Stderr.Write([]byte("err\n"))
	return provider.DelegatedRunResult{ExitCode: f.exit}, nil
}

func (f *fakeDelegated) List(context.Context, provider.ListRequest) ([]provider.LeaseView, error) {
	return nil, nil
}

func (f *fakeDelegated) Status(_ context.Context, req provider.StatusRequest) (provider.LeaseView, error) {
	return provider.LeaseView{}, provider.ErrNotFound
}

func (f *fakeDelegated) Stop(_ context.Context, req provider.StopRequest) error {
	f.record("stop")
	return f.stopErr
}

func delegatedClient(t *testing.T, f *fakeDelegated) *crabbox.Client {
	t.Helper()
	reg := provider.NewRegistry()
	reg.Register(f)
	c := newClient(t, t.TempDir(), crabbox.WithRegistry(reg), crabbox.WithProvider("sandbox"))
	f.store = crabbox.StoreOf(c)
	return c
}

func claims(t *testing.T, c *crabbox.Client) []lease.Claim {
	t.Helper()
	cl, err := crabbox.StoreOf(c).List()
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func TestDelegatedRun(t *testing.T) {
	f := &fakeDelegated{exit: 3}
	c := delegatedClient(t, f)
	repo := gitRepo(t)
	sub := filepath.Join(repo, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	res, err := c.Run(context.Background(), crabbox.RunRequest{
		Root: sub, Shell: "make test", Env: map[string]string{"CI": "true"},
		Acquire: crabbox.AcquireOptions{Slug: "busy-crab"}, Stdout: &out, Stderr: &errOut,
		SyncProgress: func(int, int64) {}, SyncWarn: func(string) {}, // the CLI always sets them; unused
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || res.Slug != "busy-crab" || res.Provider != "sandbox" || !lease.IsID(res.LeaseID) {
		t.Errorf("result = %+v", res)
	}
	if out.String() != "out\n" || errOut.String() != "err\n" {
		t.Errorf("output = %q, %q", out.String(), errOut.String())
	}
	if want := []string{"warmup busy-crab", "run sh -c make test", "stop"}; !equal(f.calls, want) {
		t.Errorf("calls = %q, want %q", f.calls, want)
	}
	run := f.runs[0]
	realRepo, _ := filepath.EvalSymlinks(repo)
	if run.Root != realRepo || run.Workdir != "sub" || run.LeaseID != res.LeaseID || run.Env["CI"] != "true" {
		t.Errorf("run request = %+v, want root %s, workdir sub", run, realRepo)
	}
	if f.claimState != string(lease.StateReady) {
		t.Errorf("claim state during the run = %q, want ready", f.claimState)
	}
	if cl := claims(t, c); len(cl) != 0 {
		t.Errorf("claims left after the run: %+v", cl)
	}
}

func equal(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }

func TestDelegatedRunRejectsOptions(t *testing.T) {
	f := &fakeDelegated{}
	c := delegatedClient(t, f)
	_, err := c.Run(context.Background(), crabbox.RunRequest{
		Root: t.TempDir(), PlainDir: true, Command: []string{"true"}, Checksum: true, JUnit: "*.xml",
		SyncExclude: []string{"dist"}, RefuseOutsideLinks: true, SkipSubmodules: true,
	})
	if !errors.Is(err, provider.ErrPrecondition) {
		t.Fatalf("Run error = %v, want a precondition error", err)
	}
	for _, want := range []string{`provider "sandbox" runs commands itself`, "Checksum (--checksum)", "JUnit (--junit)", "SyncExclude (--sync-exclude)",
		"RefuseOutsideLinks (--refuse-outside-links)", "SkipSubmodules (--skip-submodules)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if len(f.calls) != 0 {
		t.Errorf("the provider was called: %q", f.calls)
	}
	if cl := claims(t, c); len(cl) != 0 {
		t.Errorf("claims made: %+v", cl)
	}
}

func TestDelegatedRunReleasesOnFailure(t *testing.T) {
	f := &fakeDelegated{warmupErr: errors.New("quota exceeded")}
	c := delegatedClient(t, f)
	_, err := c.Run(context.Background(), crabbox.RunRequest{Root: t.TempDir(), PlainDir: true, Command: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "quota exceeded") {
		t.Fatalf("Run error = %v, want the warmup failure", err)
	}
	if want := []string{"warmup " + "", "stop"}; len(f.calls) != 2 || f.calls[1] != want[1] {
		t.Errorf("calls = %q, want a warmup then a stop", f.calls)
	}
	if cl := claims(t, c); len(cl) != 0 {
		t.Errorf("claims left: %+v", cl)
	}
}

// A delegated lease that cannot be stopped after the command leaves the
// command's exit code standing, and its claim, marked failed, for cleanup.
func TestDelegatedFailedReleaseKeepsExitCode(t *testing.T) {
	f := &fakeDelegated{exit: 3, stopErr: errors.New("sandbox API down")}
	c := delegatedClient(t, f)
	res, err := c.Run(context.Background(), crabbox.RunRequest{Root: gitRepo(t), Command: []string{"true"}, Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		t.Fatalf("Run: %v, want the command's result", err)
	}
	if res.ExitCode != 3 || res.ReleaseErr == nil || !strings.Contains(res.ReleaseErr.Error(), "sandbox API down") {
		t.Errorf("exit %d, ReleaseErr %v; want 3 and the stop failure", res.ExitCode, res.ReleaseErr)
	}
	if cl := claims(t, c); len(cl) != 1 || cl[0].ID != res.LeaseID || cl[0].State != lease.StateFailed {
		t.Errorf("claims = %+v, want %s marked failed", cl, res.LeaseID)
	}
}

func TestDelegatedRunTimeout(t *testing.T) {
	f := &fakeDelegated{hang: true}
	c := delegatedClient(t, f)
	res, err := c.Run(context.Background(), crabbox.RunRequest{Root: t.TempDir(), PlainDir: true, Command: []string{"sleep", "1000"}, Timeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.ExitCode != 124 {
		t.Errorf("result = %+v, want a timeout with exit 124", res)
	}
	if f.calls[len(f.calls)-1] != "stop" {
		t.Errorf("calls = %q, want the lease stopped", f.calls)
	}
}

// buildExample builds the example external provider program.
func buildExample(t *testing.T) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "externalprovider")
	if runtime.GOOS == "windows" {
		exe += ".exe"
	}
	out, err := exec.Command("go", "build", "-o", exe, "github.com/crabbox-dev/crabbox/examples/externalprovider").CombinedOutput()
	if err != nil {
		t.Fatalf("build the example provider: %v\n%s", err, out)
	}
	return exe
}

// TestExternalProviderEndToEnd runs commands through the external provider
// and the example program: once on an SSH lease (crabbox syncs and runs)
// and once through the program's run operation (the program syncs and runs).
func TestExternalProviderEndToEnd(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the example program serves boxes with /bin/sh")
	}
	exe := buildExample(t)
	for _, mode := range []string{external.ModeSSHLease, external.ModeDelegatedRun} {
		t.Run(mode, func(t *testing.T) {
			reg := provider.NewRegistry()
			reg.Register(external.Provider{})
			cfg, _ := json.Marshal(map[string]string{"root": t.TempDir()})
			c := newClient(t, t.TempDir(), crabbox.WithRegistry(reg), crabbox.WithProvider(external.Name),
				crabbox.WithProviderConfig(external.Name, provider.Config{"command": exe, "config": string(cfg), "mode": mode}))
			repo := gitRepo(t)
			var out, errOut bytes.Buffer
			res, err := c.Run(context.Background(), crabbox.RunRequest{
				Root:    repo,
				Command: []string{"sh", "-c", `cat committed.txt untracked.txt; test -e ignored.log && echo ignored-synced; echo "to stderr $CI" >&2; exit 7`},
				Env:     map[string]string{"CI": "yes"},
				Stdout:  &out, Stderr: &errOut,
			})
			if err != nil {
				t.Fatalf("Run: %v (stderr %q)", err, errOut.String())
			}
			if res.ExitCode != 7 || res.Provider != external.Name {
				t.Errorf("result = %+v, want exit 7 from %s", res, external.Name)
			}
			if got, want := out.String(), "committed\nuntracked\n"; got != want {
				t.Errorf("stdout = %q, want %q", got, want)
			}
			if got, want := errOut.String(), "to stderr yes\n"; got != want {
				t.Errorf("stderr = %q, want %q", got, want)
			}
			noLeases(t, c)
			if cl := claims(t, c); len(cl) != 0 {
				t.Errorf("claims left: %+v", cl)
			}
			b, err := c.Backend(external.Name)
			if err != nil {
				t.Fatal(err)
			}
			var live int
			switch b := b.(type) {
			case provider.SSHLeaseBackend:
				ls, err := b.List(context.Background(), provider.ListRequest{})
				if err != nil {
					t.Fatal(err)
				}
				live = len(ls)
			case provider.DelegatedRunBackend:
				ls, err := b.List(context.Background(), provider.ListRequest{})
				if err != nil {
					t.Fatal(err)
				}
				live = len(ls)
			}
			if live != 0 {
				t.Errorf("the program still lists %d boxes after the run", live)
			}
			if mode != external.ModeDelegatedRun {
				return
			}
			// A timeout stops the program, which stops the command on the box.
			res, err = c.Run(context.Background(), crabbox.RunRequest{
				Root: repo, Command: []string{"sleep", "1000"}, Timeout: 500 * time.Millisecond,
			})
			if err != nil || !res.TimedOut || res.ExitCode != 124 {
				t.Errorf("Run with a timeout = %+v, %v, want a timeout and exit 124", res, err)
			}
			noLeases(t, c)

			// A warm lease: warmup, run --id twice (the program syncs each
			// time), status, stop.
			ctx := context.Background()
			l, err := c.Acquire(ctx, crabbox.AcquireOptions{Slug: "warm-crab", Keep: true})
			if err != nil {
				t.Fatalf("warmup: %v", err)
			}
			l.Close()
			for i, want := range []string{"untracked\n", "edited\n"} {
				if i == 1 {
					if err := os.WriteFile(filepath.Join(repo, "untracked.txt"), []byte("edited\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				var out bytes.Buffer
				res, err := c.Run(ctx, crabbox.RunRequest{Lease: "warm-crab", Root: repo, Command: []string{"cat", "untracked.txt"}, Stdout: &out})
				if err != nil || res.ExitCode != 0 || out.String() != want || !res.Kept {
					t.Errorf("run --id #%d = %+v, %v, output %q; want %q on the kept lease", i+1, res, err, out.String(), want)
				}
			}
			if info, err := c.Status(ctx, "warm-crab"); err != nil || info.State != crabbox.StateReady {
				t.Errorf("Status = %+v, %v; want ready", info, err)
			}
			if err := c.Stop(ctx, "warm-crab"); err != nil {
				t.Fatal(err)
			}
			noLeases(t, c)
		})
	}
}

// TestDelegatedClaimsAfterACrash shows that list, status and cleanup work
// on the claims a crashed delegated run leaves behind: cleanup releases
// the failed lease at the provider and drops the claim of the ready one,
// whose sandbox the provider no longer has (gone, not kept).
func TestDelegatedClaimsAfterACrash(t *testing.T) {
	f := &fakeDelegated{}
	c := delegatedClient(t, f)
	now := time.Now().UTC()
	for _, cl := range []lease.Claim{
		{ID: lease.NewID(), Slug: "failed-crab", State: lease.StateFailed},
		{ID: lease.NewID(), Slug: "ready-crab", State: lease.StateReady},
	} {
		cl.Provider, cl.CreatedAt, cl.ExpiresAt = "sandbox", now, now.Add(time.Hour)
		if _, err := crabbox.StoreOf(c).Create(cl); err != nil {
			t.Fatal(err)
		}
	}
	infos, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]crabbox.LeaseState{}
	for _, info := range infos {
		states[info.Slug] = info.State
	}
	if states["failed-crab"] != "failed" || states["ready-crab"] != crabbox.StateGone {
		t.Errorf("list states = %v, want failed-crab failed and ready-crab gone (the fake has no leases)", states)
	}
	if info, err := c.Status(context.Background(), "ready-crab"); err != nil || info.State != crabbox.StateGone {
		t.Errorf("Status = %+v, %v, want gone", info, err)
	}
	ds, err := c.Cleanup(context.Background(), crabbox.CleanupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range ds {
		got[d.Slug] = string(d.Action) + " " + d.Result
	}
	if got["failed-crab"] != "delete deleted" || got["ready-crab"] != "delete claim dropped" {
		t.Errorf("cleanup decisions = %v", got)
	}
	if len(f.calls) != 1 || f.calls[0] != "stop" {
		t.Errorf("provider calls = %q, want one stop", f.calls)
	}
	if cl := claims(t, c); len(cl) != 0 {
		t.Errorf("claims left: %+v", cl)
	}
}
