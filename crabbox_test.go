package crabbox_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	gosync "sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/local"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newClient(t testing.TB, state string, opts ...crabbox.Option) *crabbox.Client {
	t.Helper()
	c, err := crabbox.New(append([]crabbox.Option{crabbox.WithStateDir(state)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// gitRepo makes a repository with a committed, an untracked and an ignored file.
func gitRepo(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"committed.txt": "committed\n", "untracked.txt": "untracked\n",
		".gitignore": "*.log\n", "ignored.log": "ignored\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"init", "-q"}, {"add", "committed.txt", ".gitignore"},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "init"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

func noLeases(t *testing.T, c *crabbox.Client) {
	t.Helper()
	infos, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 0 {
		t.Errorf("leases left behind: %+v", infos)
	}
}

func TestRunSyncsCheckoutAndPassesExitCode(t *testing.T) {
	repo := gitRepo(t)
	c := newClient(t, t.TempDir())
	var out bytes.Buffer
	res, err := c.Run(context.Background(), crabbox.RunRequest{
		Root:    repo,
		Command: []string{"sh", "-c", "cat committed.txt untracked.txt; test -e ignored.log && echo ignored-synced; pwd; exit 7"},
		Stdout:  &out, Stderr: &out,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.ExitCode != 7 {
		t.Errorf("ExitCode = %d, want 7", res.ExitCode)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || lines[0] != "committed" || lines[1] != "untracked" {
		t.Fatalf("output = %q, want the two files' contents and the workdir", out.String())
	}
	if wd, want := lines[2], "/"+res.LeaseID+"/"+filepath.Base(repo)+"-"; wd == repo || !strings.Contains(wd, want) {
		t.Errorf("command ran in %q, want <workRoot>%s<hash>, not the checkout", wd, want)
	}
	if res.Kept {
		t.Errorf("one-shot lease was kept")
	}
	noLeases(t, c)
}

func TestWarmLeaseIsReusedByIDAndSlug(t *testing.T) {
	state, repo := t.TempDir(), gitRepo(t)
	owner := newClient(t, state)
	ctx := context.Background()
	box, err := owner.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()

	// Another client over the same state directory, as another process would be.
	other := newClient(t, state)
	for i, ref := range []string{box.ID(), box.Slug()} {
		var out bytes.Buffer
		res, err := other.Run(ctx, crabbox.RunRequest{
			Lease: ref, Root: repo, Stdout: &out,
			Shell: "echo run >> ../runs.txt; wc -l < ../runs.txt",
		})
		if err != nil {
			t.Fatalf("Run --id %s: %v", ref, err)
		}
		if got, want := strings.TrimSpace(out.String()), string(rune('1'+i)); res.ExitCode != 0 || got != want || !res.Kept || res.LeaseID != box.ID() {
			t.Errorf("run %d on %s: exit %d, output %q (want %q), kept %v, lease %s", i, ref, res.ExitCode, got, want, res.Kept, res.LeaseID)
		}
	}
	// The box is served in-process by owner, so owner stops it. (Leases that
	// outlive their process come from the CLI's agent; see cmd/crabbox.)
	if err := owner.Stop(ctx, box.Slug()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	noLeases(t, owner)
	if _, err := os.Stat(box.Target().WorkRoot); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("work root %s still there after stop (err %v)", box.Target().WorkRoot, err)
	}
}

func TestUnknownLeaseIsNotFound(t *testing.T) {
	c := newClient(t, t.TempDir())
	for _, ref := range []string{"nope", "cbx_000000000000"} {
		_, err := c.Run(context.Background(), crabbox.RunRequest{Lease: ref, Command: []string{"true"}})
		if !errors.Is(err, crabbox.ErrNotFound) {
			t.Errorf("Run --id %s: err = %v, want ErrNotFound", ref, err)
		}
	}
	if _, err := c.Resolve(context.Background(), "cbx_XYZ"); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("Resolve of a malformed ID: err = %v, want it named malformed", err)
	}
}

func TestUnknownProviderListsKnownOnes(t *testing.T) {
	c := newClient(t, t.TempDir(), crabbox.WithProvider("nope"))
	_, err := c.Acquire(context.Background(), crabbox.AcquireOptions{})
	if !errors.Is(err, crabbox.ErrNotFound) || !strings.Contains(err.Error(), `unknown provider "nope"`) || !strings.Contains(err.Error(), "local") {
		t.Fatalf("err = %v, want unknown provider (ErrNotFound) with the known names", err)
	}
}

// New rejects settings no provider takes, before anything is acquired.
func TestBadProviderConfigIsNamed(t *testing.T) {
	for name, opt := range map[string]crabbox.Option{
		`unknown config key "colour"`: crabbox.WithProviderConfig("local", provider.Config{"colour": "blue"}),
		`unknown provider "nope"`:     crabbox.WithProviderConfig("nope", provider.Config{"root": "/x"}),
	} {
		_, err := crabbox.New(crabbox.WithStateDir(t.TempDir()), opt)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("New = %v, want an error naming %s", err, name)
		}
	}
}

// faultyLocal is the local provider with faults injected into its backend.
type faultyLocal struct {
	local.Provider
	faults []providertest.Fault
	mu     gosync.Mutex
	inner  provider.SSHLeaseBackend
}

func (p *faultyLocal) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	b, err := p.Provider.Configure(cfg, rt)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.inner = b.(provider.SSHLeaseBackend)
	p.mu.Unlock()
	return providertest.WithFaults(p.inner, p.faults...), nil // closes the inner backend
}

func TestFailedAcquireLeavesNothing(t *testing.T) {
	for _, ft := range []providertest.Fault{
		{Step: providertest.StepAcquire},
		{Step: providertest.StepAcquire, AfterCall: true},
	} {
		p := &faultyLocal{faults: []providertest.Fault{ft}}
		reg := provider.NewRegistry()
		reg.Register(p)
		c := newClient(t, t.TempDir(), crabbox.WithRegistry(reg))
		_, err := c.Run(context.Background(), crabbox.RunRequest{Command: []string{"true"}, Root: t.TempDir(), PlainDir: true})
		if !errors.Is(err, providertest.ErrInjected) {
			t.Fatalf("fault %+v: err = %v, want the injected failure", ft, err)
		}
		claims, err := crabbox.StoreOf(c).List()
		if err != nil {
			t.Fatal(err)
		}
		if len(claims) != 0 {
			t.Errorf("fault %+v: claims left: %+v", ft, claims)
		}
		boxes, err := p.inner.List(context.Background(), provider.ListRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(0, len(boxes)); diff != "" {
			t.Errorf("fault %+v: boxes left: %+v", ft, boxes)
		}
	}
}

// A caller that gives up while the provider is creating the box (Ctrl-C,
// SIGTERM) gets context.Canceled, and the acquire is rolled back: no box,
// no claim. The box is made, then the answer is lost to the cancellation,
// or the provider is still at work when it comes.
func TestCancelledAcquireLeavesNothing(t *testing.T) {
	for _, tt := range []struct {
		name      string
		afterCall bool
	}{{"while creating", false}, {"box made, answer lost", true}} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p := &faultyLocal{faults: []providertest.Fault{{Step: providertest.StepAcquire, Hang: true, AfterCall: tt.afterCall, OnHang: cancel}}}
			reg := provider.NewRegistry()
			reg.Register(p)
			c := newClient(t, t.TempDir(), crabbox.WithRegistry(reg))
			_, err := c.Run(ctx, crabbox.RunRequest{Command: []string{"true"}, Root: gitRepo(t)})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Run: err = %v, want context.Canceled", err)
			}
			claims, err := crabbox.StoreOf(c).List()
			if err != nil {
				t.Fatal(err)
			}
			if len(claims) != 0 {
				t.Errorf("claims left: %+v", claims)
			}
			boxes, err := p.inner.List(context.Background(), provider.ListRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(boxes) != 0 {
				t.Errorf("boxes left: %+v", boxes)
			}
		})
	}
}

// signalWriter reports on a channel when a marker has been written.
type signalWriter struct {
	mu     gosync.Mutex
	buf    bytes.Buffer
	marker string
	seen   chan struct{}
	once   gosync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.marker) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func TestCancelledRunReleasesOneShotLease(t *testing.T) {
	c := newClient(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &signalWriter{marker: "started", seen: make(chan struct{})}
	go func() {
		<-w.seen
		cancel()
	}()
	_, err := c.Run(ctx, crabbox.RunRequest{Root: t.TempDir(), PlainDir: true, Shell: "echo started; sleep 1000", Stdout: w})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: err = %v, want context.Canceled", err)
	}
	noLeases(t, c)
}

// Run from a directory inside a checkout syncs the whole checkout and runs
// in the same directory on the box.
func TestRunFromSubdirectory(t *testing.T) {
	repo := gitRepo(t)
	sub := filepath.Join(repo, "pkg", "inner")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "here.txt"), []byte("here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, t.TempDir())
	var out bytes.Buffer
	res, err := c.Run(context.Background(), crabbox.RunRequest{
		Root: sub, Shell: "cat here.txt ../../committed.txt; pwd", Stdout: &out,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run: %v (exit %d)", err, res.ExitCode)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := "/" + res.LeaseID + "/" + filepath.Base(repo) + "-"
	if len(lines) != 3 || lines[0] != "here" || lines[1] != "committed" || !strings.Contains(lines[2], want) || !strings.HasSuffix(lines[2], "/pkg/inner") {
		t.Errorf("output = %q, want both files and a workdir ending in %s", out.String(), want)
	}
}

func TestRunRejectsMissingCheckout(t *testing.T) {
	c := newClient(t, t.TempDir())
	missing := filepath.Join(t.TempDir(), "nope")
	_, err := c.Run(context.Background(), crabbox.RunRequest{Root: missing, Command: []string{"true"}})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("err = %v, want fs.ErrNotExist naming %s", err, missing)
	}
	noLeases(t, c)
}
