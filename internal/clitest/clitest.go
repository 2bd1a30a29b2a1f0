// Package clitest drives the crabbox command in end-to-end tests: it builds
// the binary, runs it as a separate process with a state of its own, and
// walks a delegated provider's warm-lease workflow (warmup, run --id twice
// with only the changed file sent the second time, status, stop) through
// it. Only tests import this package.
package clitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// CallTimeout bounds one run of the command, so that a hang fails the test
// instead of hanging it.
const CallTimeout = 2 * time.Minute

// Build builds the crabbox command into a temporary directory of t and
// returns its path.
func Build(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "crabbox")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/crabbox-dev/crabbox/cmd/crabbox").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/crabbox: %v\n%s", err, out)
	}
	return bin
}

// Result is the outcome of one run of the command.
type Result struct {
	Code           int
	Stdout, Stderr string
}

// Runner runs the crabbox command with args in the checkout repo.
type Runner func(t *testing.T, repo string, args ...string) Result

// Command returns a Runner for the binary bin with the caller's
// environment plus env, which should give the command its own state
// directory (see StateEnv) and the provider's settings.
func Command(bin string, env []string) Runner {
	return func(t *testing.T, repo string, args ...string) Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir, cmd.Env, cmd.WaitDelay = repo, append(os.Environ(), env...), 5*time.Second
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if ctx.Err() != nil {
			t.Fatalf("crabbox %q: no end within %s; stdout %q, stderr %q", args, CallTimeout, stdout.String(), stderr.String())
		}
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("crabbox %q: %v", args, err)
		}
		return Result{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
	}
}

// StateEnv gives the command a state directory of t's own, no config file,
// no saved coordinator sign-in and no change watcher (a process that would
// outlive the test).
func StateEnv(t testing.TB) []string {
	t.Helper()
	return []string{
		"CRABBOX_STATE_DIR=" + t.TempDir(), "CRABBOX_CONFIG=" + filepath.Join(t.TempDir(), "none"),
		"XDG_CONFIG_HOME=" + t.TempDir(), "GORACE=atexit_sleep_ms=0", "CRABBOX_SYNC_WATCH=0",
	}
}

// GitRepo is a git checkout with committed.txt (committed) and
// untracked.txt (not), both of which a sync sends.
func GitRepo(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{"committed.txt": "committed\n", "untracked.txt": "untracked\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"init", "-q"}, {"add", "committed.txt"},
		{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "init"},
	} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// leaseInfo is the part of `--json` lease output the workflow checks.
type leaseInfo struct {
	ID       string `json:"id"`
	Slug     string `json:"slug"`
	Provider string `json:"provider"`
	State    string `json:"state"`
}

// timing is the part of --timing-json the workflow checks.
type timing struct {
	LeaseID     string `json:"leaseId"`
	SyncSkipped bool   `json:"syncSkipped"`
	SyncFiles   int    `json:"syncFiles"`
	ExitCode    int    `json:"exitCode"`
	Kept        bool   `json:"kept"`
}

// DelegatedWarmLease walks the warm-lease workflow of a delegated provider
// with files (or of an SSH-lease provider, whose syncs send only what
// changed too) through the command, in a checkout of GitRepo's: warmup; run
// --id, which sends both files; untracked.txt edited, run --id by slug,
// which sends only it; run --id again with nothing changed, which sends
// nothing; status; stop; and list, which is then empty. provider is the
// provider's name, which the command must already be configured for (by
// env or args, which go after each subcommand).
func DelegatedWarmLease(t *testing.T, run Runner, provider string, args ...string) {
	t.Helper()
	repo := GitRepo(t)
	with := func(sub ...string) []string {
		return append(append([]string{sub[0]}, args...), sub[1:]...)
	}
	r := run(t, repo, with("warmup", "--json", "--slug", "e2e-crab")...)
	if r.Code != 0 {
		t.Fatalf("warmup: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	var warm leaseInfo
	if err := json.Unmarshal([]byte(r.Stdout), &warm); err != nil {
		t.Fatalf("warmup --json output %q: %v", r.Stdout, err)
	}
	if !strings.HasPrefix(warm.ID, "cbx_") || warm.Slug != "e2e-crab" || warm.Provider != provider || warm.State != "ready" {
		t.Fatalf("warmup --json = %+v, want a ready %s lease e2e-crab", warm, provider)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			run(t, repo, with("stop", warm.ID)...)
		}
	})

	steps := []struct {
		ref, edit, want string
		sent            int
	}{
		{warm.ID, "", "committed\nuntracked\n", 2},
		{warm.Slug, "edited\n", "committed\nedited\n", 1},
		{warm.ID, "", "committed\nedited\n", 0},
	}
	for i, s := range steps {
		if s.edit != "" {
			if err := os.WriteFile(filepath.Join(repo, "untracked.txt"), []byte(s.edit), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		r := run(t, repo, with("run", "--id", s.ref, "--quiet", "--timing-json", "-", "--", "sh", "-c", "cat committed.txt untracked.txt; exit 3")...)
		var tm timing
		if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stderr)), &tm); err != nil {
			t.Fatalf("run #%d: exit %d, stdout %q; stderr %q is not the timing JSON: %v", i+1, r.Code, r.Stdout, r.Stderr, err)
		}
		if r.Code != 3 || r.Stdout != s.want || tm.ExitCode != 3 || tm.LeaseID != warm.ID || !tm.Kept {
			t.Errorf("run #%d --id %s: exit %d, stdout %q, timing %+v; want exit 3, %q, on the kept lease %s", i+1, s.ref, r.Code, r.Stdout, tm, s.want, warm.ID)
		}
		if tm.SyncFiles != s.sent || (s.sent == 0) != tm.SyncSkipped {
			t.Errorf("run #%d --id %s sent %d files (skipped %v), want %d", i+1, s.ref, tm.SyncFiles, tm.SyncSkipped, s.sent)
		}
	}

	// Artifacts and downloads come home (through the provider's file API
	// on a delegated lease), a symlink out of the workdir is skipped with
	// a warning, and the command's exit code stands.
	arts, got := t.TempDir(), filepath.Join(t.TempDir(), "got", "c.txt")
	r = run(t, repo, with("run", "--id", warm.ID, "--quiet", "--artifacts", "out/**", "--artifacts-dir", arts,
		"--download", "committed.txt="+got, "--", "sh", "-c", "mkdir -p out/sub && echo a > out/a.txt && echo b > out/sub/b.txt && ln -s /bin/sh out/sh; exit 4")...)
	if r.Code != 4 || !strings.Contains(r.Stderr, `crabbox: warning: "out/sh" stayed on the box: a symlink to `) {
		t.Errorf("run with artifacts: exit %d, stderr %q; want 4 and a warning for out/sh", r.Code, r.Stderr)
	}
	for file, want := range map[string]string{filepath.Join(arts, "out", "a.txt"): "a\n", filepath.Join(arts, "out", "sub", "b.txt"): "b\n", got: "committed\n"} {
		if data, err := os.ReadFile(file); err != nil || string(data) != want {
			t.Errorf("run with artifacts: %s = %q (%v), want %q", file, data, err, want)
		}
	}

	r = run(t, repo, with("status", "--json", warm.Slug)...)
	var status leaseInfo
	if err := json.Unmarshal([]byte(r.Stdout), &status); err != nil || status.ID != warm.ID || status.State != "ready" {
		t.Errorf("status --json = %q (%v), stderr %q; want lease %s ready", r.Stdout, err, r.Stderr, warm.ID)
	}

	if r := run(t, repo, with("stop", warm.ID)...); r.Code != 0 {
		t.Fatalf("stop: exit %d, stderr %q", r.Code, r.Stderr)
	}
	stopped = true
	r = run(t, repo, with("list", "--json")...)
	var list []leaseInfo
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil || len(list) != 0 {
		t.Errorf("list --json after stop = %q (%v), stderr %q; want []", r.Stdout, err, r.Stderr)
	}
	if r := run(t, repo, with("status", warm.ID)...); r.Code == 0 {
		t.Errorf("status after stop: exit 0, stdout %q; want the lease gone", r.Stdout)
	}
}
