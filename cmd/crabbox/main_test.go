package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/internal/clitest"
	"github.com/crabbox-dev/crabbox/internal/testenv"
	"github.com/crabbox-dev/crabbox/internal/testsshd"
)

// The test binary doubles as the crabbox binary: with CRABBOX_TEST_MAIN=1 it
// runs the CLI. Tests start it as separate processes, as users do, and local
// leases made by warmup are served by it as `crabbox agent`.
func TestMain(m *testing.M) {
	if os.Getenv("CRABBOX_TEST_MAIN") == "1" {
		registerTestProviders()
		main() // exits
	}
	// No test starts a change watcher unless it asks for one: in-process
	// runs would start this test binary as one.
	os.Setenv(envSyncWatch, "0")
	// Nor shares a connection (see TestRunWithSharedConnection).
	os.Setenv(envShare, "0")
	// Nor refills a ready pool in the background (see TestPoolEndToEnd).
	os.Setenv(envPoolRefill, "0")
	testenv.Main(m, removeProviderPrograms, testsshd.Tests)
}

type result struct {
	code           int
	stdout, stderr string
}

// crabboxCmd runs the CLI as a separate process in dir with its own state.
func crabboxCmd(t *testing.T, env []string, dir string, args ...string) result {
	t.Helper()
	return runCLI(t, env, dir, "", args...)
}

// crabboxInput runs the CLI as a separate process with stdin (not a terminal).
func crabboxInput(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	return runCLI(t, env, "", stdin, args...)
}

func runCLI(t *testing.T, env []string, dir, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"CRABBOX_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0"}, env...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin) // a pipe; without, /dev/null
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("crabbox %v: %v", args, err)
	}
	return result{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

// stateEnv gives a test its own state, an empty config and no saved
// coordinator sign-in (an empty user config directory).
// warmLease warms up a lease with crabbox warmup in dir, fails t if it
// cannot, and stops the lease when t ends.
func warmLease(t *testing.T, env []string, dir string) crabbox.LeaseInfo {
	t.Helper()
	r := crabboxCmd(t, env, dir, "warmup", "--json")
	var warm crabbox.LeaseInfo
	if err := json.Unmarshal([]byte(r.stdout), &warm); r.code != 0 || err != nil {
		t.Fatalf("warmup: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	t.Cleanup(func() { crabboxCmd(t, env, dir, "stop", warm.ID) })
	return warm
}

func stateEnv(t *testing.T) []string {
	t.Helper()
	return []string{"CRABBOX_STATE_DIR=" + t.TempDir(), "CRABBOX_CONFIG=" + filepath.Join(t.TempDir(), "none"), "XDG_CONFIG_HOME=" + t.TempDir()}
}

func gitRepo(t *testing.T) string {
	t.Helper()
	return clitest.GitRepo(t)
}

func TestRunOneShot(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	r := crabboxCmd(t, env, repo, "run", "--", "sh", "-c", "cat committed.txt untracked.txt; pwd")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || lines[0] != "committed" || lines[1] != "untracked" || lines[2] == repo {
		t.Errorf("stdout = %q, want both files' contents and a workdir that is not %s", r.stdout, repo)
	}
	if r := crabboxCmd(t, env, repo, "run", "--", "sh", "-c", "exit 7"); r.code != 7 {
		t.Errorf("sh -c 'exit 7': exit %d, want 7 (stderr %q)", r.code, r.stderr)
	}
	if r := crabboxCmd(t, env, repo, "list", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("list after one-shot runs = %q, want []", r.stdout)
	}
}

func TestCrabboxFailuresExit125(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	tests := []struct {
		args     []string
		code     int
		inStderr string
	}{
		{[]string{"run", "--id", "nope", "--", "true"}, 125, `crabbox: lease "nope": not found`},
		{[]string{"run", "--provider", "nope", "--", "true"}, 125, `unknown provider "nope" (known: aws, azure, azure-dynamic-sessions, daytona, digitalocean, docker, e2b, external, gcp, hetzner, kubernetes, kubevirt, linode, local, modal, multipass, nvidiabrev, opensandbox, proxmox, runpod, scaleway, ssh, tensorlake, upstash-box, vercel, vultr)`},
		{[]string{"run", "--provider", "ssh", "--", "true"}, 125, `host is required`},
		{[]string{"stop", "cbx_000000000000"}, 125, `not found`},
		{[]string{"run"}, 2, "no command given"},
		{[]string{"run", "--bogus", "--", "true"}, 2, "crabbox run: unknown flag --bogus"},
		{[]string{"status"}, 2, "want exactly one lease ID or slug"},
	}
	for _, tt := range tests {
		r := crabboxCmd(t, env, repo, tt.args...)
		if r.code != tt.code || !strings.Contains(r.stderr, tt.inStderr) {
			t.Errorf("crabbox %v: exit %d, stderr %q; want exit %d with %q", tt.args, r.code, r.stderr, tt.code, tt.inStderr)
		}
		if tt.code == 125 && strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("crabbox %v: stderr is not one line: %q", tt.args, r.stderr)
		}
	}
}

// warmup, two runs from separate processes, stop: the lease outlives each
// process, and stop removes the box and its work root.
func testWarmLease(t *testing.T, env []string, providerArgs ...string) {
	repo := gitRepo(t)
	r := crabboxCmd(t, env, repo, append([]string{"warmup", "--json"}, providerArgs...)...)
	if r.code != 0 {
		t.Fatalf("warmup: exit %d, stderr %q", r.code, r.stderr)
	}
	var warm crabbox.LeaseInfo
	if err := json.Unmarshal([]byte(r.stdout), &warm); err != nil {
		t.Fatalf("warmup --json output %q: %v", r.stdout, err)
	}
	if !strings.HasPrefix(warm.ID, "cbx_") || warm.Slug == "" || warm.Provider == "" || warm.ExpiresAt.IsZero() || warm.State != "ready" {
		t.Fatalf("warmup --json = %+v, want id, slug, provider, expiresAt and state ready", warm)
	}
	t.Cleanup(func() { crabboxCmd(t, env, repo, "stop", warm.ID) })

	for i, ref := range []string{warm.Slug, warm.ID} {
		r := crabboxCmd(t, env, repo, "run", "--id", ref, "--", "sh", "-c", "cat committed.txt; echo x >> ../count; wc -l < ../count")
		want := "committed\n" + strconv.Itoa(i+1) + "\n"
		if r.code != 0 || strings.ReplaceAll(r.stdout, " ", "") != want {
			t.Errorf("run --id %s: exit %d, stdout %q, stderr %q; want %q", ref, r.code, r.stdout, r.stderr, want)
		}
	}

	r = crabboxCmd(t, env, repo, "status", "--json", warm.Slug)
	var status crabbox.LeaseInfo
	if err := json.Unmarshal([]byte(r.stdout), &status); err != nil || status.ID != warm.ID || status.State != "ready" {
		t.Errorf("status --json = %q (%v), want lease %s ready", r.stdout, err, warm.ID)
	}

	if r := crabboxCmd(t, env, repo, "stop", warm.ID); r.code != 0 {
		t.Fatalf("stop: exit %d, stderr %q", r.code, r.stderr)
	}
	r = crabboxCmd(t, env, repo, "list", "--json")
	var list []crabbox.LeaseInfo
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("list --json output %q: %v", r.stdout, err)
	}
	if diff := cmp.Diff([]crabbox.LeaseInfo{}, list); diff != "" {
		t.Errorf("list after stop (-want +got):\n%s", diff)
	}
	leaseDir := warm.WorkRoot + "/" + warm.ID
	if _, err := os.Stat(leaseDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lease directory %s still there after stop (err %v)", leaseDir, err)
	}
}

func TestWarmLeaseLocal(t *testing.T) {
	t.Parallel()
	testWarmLease(t, stateEnv(t))
}

func TestWarmLeaseSSH(t *testing.T) {
	t.Parallel()
	sshd := testsshd.Start(t)
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(keyFile, sshd.ClientKeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	// Provider settings from the environment, as a CI job would set them.
	env := append(stateEnv(t),
		"CRABBOX_PROVIDER=ssh", "CRABBOX_SSH_HOST="+sshd.Host, "CRABBOX_SSH_PORT="+strconv.Itoa(sshd.Port),
		"CRABBOX_SSH_USER="+sshd.User, "CRABBOX_SSH_KEY="+keyFile, "CRABBOX_WORK_ROOT="+t.TempDir())
	testWarmLease(t, env)
}

// Flags win over the environment, which wins over the config file.
func TestConfigPrecedence(t *testing.T) {
	t.Parallel()
	repo := gitRepo(t)
	config := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(config, []byte("# crabbox config\nprovider from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"CRABBOX_STATE_DIR=" + t.TempDir(), "CRABBOX_CONFIG=" + config}
	if r := crabboxCmd(t, env, repo, "run", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, `"from-file"`) {
		t.Errorf("config file provider: exit %d, stderr %q; want the file's provider used", r.code, r.stderr)
	}
	envOverride := append(env, "CRABBOX_PROVIDER=from-env")
	if r := crabboxCmd(t, envOverride, repo, "run", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, `"from-env"`) {
		t.Errorf("env provider: exit %d, stderr %q; want the environment's provider used", r.code, r.stderr)
	}
	if r := crabboxCmd(t, envOverride, repo, "run", "--provider", "local", "--", "true"); r.code != 0 {
		t.Errorf("flag provider: exit %d, stderr %q; want the flag to win", r.code, r.stderr)
	}
}

func TestEnvAllowList(t *testing.T) {
	t.Parallel()
	env := append(stateEnv(t), "CI=yes", "CRABBOX_TEST_SECRET=hidden", "FORWARDED=shown")
	r := crabboxCmd(t, env, gitRepo(t), "run", "--env", "FORWARDED", "--", "sh", "-c", `echo "$CI ${CRABBOX_TEST_SECRET-unset} $FORWARDED"`)
	if got := strings.TrimSpace(r.stdout); r.code != 0 || got != "yes unset shown" {
		t.Errorf("exit %d, stdout %q, stderr %q; want CI and --env variables only", r.code, got, r.stderr)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if code := Main(context.Background(), []string{"version"}, strings.NewReader(""), &out, &out); code != 0 || !strings.HasPrefix(out.String(), "crabbox ") {
		t.Errorf("version: exit %d, output %q", code, out.String())
	}
}

// A lease remembers the settings that reach its box: after warmup with
// them, run, list, cleanup and stop work without them.
func TestLeaseRemembersProviderSettings(t *testing.T) {
	t.Parallel()
	for name, settings := range map[string]func(t *testing.T) []string{
		"local": func(t *testing.T) []string { return []string{"--local-root", t.TempDir()} },
		"ssh": func(t *testing.T) []string {
			sshd := testsshd.Start(t)
			keyFile := filepath.Join(t.TempDir(), "id_ed25519")
			if err := os.WriteFile(keyFile, sshd.ClientKeyPEM, 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{"--provider", "ssh", "--ssh-host", sshd.Host, "--ssh-port", strconv.Itoa(sshd.Port),
				"--ssh-user", sshd.User, "--ssh-key", keyFile, "--work-root", t.TempDir()}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			settings := settings(t)
			env, repo := stateEnv(t), gitRepo(t)
			r := crabboxCmd(t, env, repo, append([]string{"warmup", "--json"}, settings...)...)
			var warm crabbox.LeaseInfo
			if err := json.Unmarshal([]byte(r.stdout), &warm); r.code != 0 || err != nil {
				t.Fatalf("warmup: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
			t.Cleanup(func() { crabboxCmd(t, env, repo, append([]string{"stop", warm.ID}, settings...)...) })
			if r := crabboxCmd(t, env, repo, "run", "--id", warm.Slug, "--", "cat", "committed.txt"); r.code != 0 || r.stdout != "committed\n" {
				t.Errorf("run --id without the settings: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
			if r := crabboxCmd(t, env, repo, "cleanup"); r.code != 0 {
				t.Errorf("cleanup: exit %d, stderr %q", r.code, r.stderr)
			}
			r = crabboxCmd(t, env, repo, "status", "--json", warm.ID)
			var status crabbox.LeaseInfo
			if err := json.Unmarshal([]byte(r.stdout), &status); err != nil || status.State != "ready" || status.Route != "direct" {
				t.Errorf("status after cleanup: %q (%v), stderr %q; want ready, direct", r.stdout, err, r.stderr)
			}
			if r := crabboxCmd(t, env, repo, "stop", warm.Slug); r.code != 0 {
				t.Errorf("stop without the settings: exit %d, stderr %q", r.code, r.stderr)
			}
			if r := crabboxCmd(t, env, repo, "list", "--json"); strings.TrimSpace(r.stdout) != "[]" {
				t.Errorf("list after stop = %q", r.stdout)
			}
		})
	}
}

// Using a warm lease is activity (end to end, with the agent that serves a
// warm local box): runs 1.5 s apart keep a lease with a 6 s idle timeout
// alive for longer than its idle timeout (the margin lets a loaded machine
// take seconds per run). Real time is what is under test here.
func TestRunsKeepWarmLeaseAlive(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 8 s of real time: skipped with -short")
	}
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	r := crabboxCmd(t, env, repo, "warmup", "--idle-timeout", "6s", "--slug", "busy-crab")
	if r.code != 0 {
		t.Fatalf("warmup: exit %d, stderr %q", r.code, r.stderr)
	}
	t.Cleanup(func() { crabboxCmd(t, env, repo, "stop", "busy-crab") })
	for i := range 5 {
		time.Sleep(1500 * time.Millisecond) // time passing is the behaviour under test
		if r := crabboxCmd(t, env, repo, "run", "--id", "busy-crab", "--quiet", "--", "true"); r.code != 0 {
			t.Fatalf("run %d, %.1f s after warmup: exit %d, stderr %q", i+1, 1.5*float64(i+1), r.code, r.stderr)
		}
	}
}
