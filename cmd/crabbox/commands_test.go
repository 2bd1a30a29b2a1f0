package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

func stateDir(env []string) string {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "CRABBOX_STATE_DIR="); ok {
			return v
		}
	}
	return ""
}

// A warm lease: ssh --print, a shell without a terminal, heartbeat, and a
// cleanup that keeps it.
func TestWarmLeaseCommands(t *testing.T) {
	t.Parallel()
	env, dir := stateEnv(t), t.TempDir()
	warm := warmLease(t, env, dir)

	r := crabboxCmd(t, env, dir, "ssh", "--print", warm.Slug)
	// Outside a checkout the shell opens in the work root: the line ends
	// with -t, the destination and the command that changes there.
	opts, command, _ := strings.Cut(strings.TrimSpace(r.stdout), " -t ")
	words := strings.Fields(strings.ReplaceAll(opts, "'", "")) // no quotes inside the test's paths
	if r.code != 0 || len(words) != 13 || words[0] != "ssh" || !strings.HasPrefix(words[6], "UserKnownHostsFile=") {
		t.Fatalf("ssh --print: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	store, err := lease.OpenStore(stateDir(env))
	if err != nil {
		t.Fatal(err)
	}
	claim, err := store.Get(warm.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantWords := []string{
		"ssh", "-i", store.KeyPath(warm.ID), "-p", words[4],
		"-o", "UserKnownHostsFile=" + store.KnownHostsPath(warm.ID), "-o", "StrictHostKeyChecking=yes",
		"-o", "IdentitiesOnly=yes", "-o", "ForwardAgent=no",
	}
	if diff := cmp.Diff(wantWords, words); diff != "" {
		t.Errorf("ssh --print (-want +got):\n%s", diff)
	}
	dest, shell, _ := strings.Cut(command, " ")
	if dest != claim.Target.User+"@"+warm.Host || !strings.HasPrefix(shell, "'cd -- "+claim.Target.WorkRoot) {
		t.Errorf("ssh --print ends with %q, want the destination and a cd into the work root %s", command, claim.Target.WorkRoot)
	}
	knownHosts, err := os.ReadFile(store.KnownHostsPath(warm.ID))
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(knownHosts)), claim.PinnedHostKey) || claim.PinnedHostKey == "" {
		t.Errorf("known_hosts = %q (%v), want the pinned key %q", knownHosts, err, claim.PinnedHostKey)
	}

	if r := crabboxInput(t, env, "echo hi; exit 3\n", "ssh", warm.ID); r.code != 3 || r.stdout != "hi\n" {
		t.Errorf("ssh with piped stdin: exit %d, stdout %q, stderr %q; want 3 and hi", r.code, r.stdout, r.stderr)
	}

	r = crabboxCmd(t, env, dir, "heartbeat", "--json", "--idle-timeout", "2h", warm.Slug)
	var beat crabbox.LeaseInfo
	if err := json.Unmarshal([]byte(r.stdout), &beat); r.code != 0 || err != nil || beat.ID != warm.ID || !beat.ExpiresAt.After(warm.ExpiresAt) {
		t.Errorf("heartbeat --json: exit %d, stdout %q, stderr %q; want a later expiry than %s", r.code, r.stdout, r.stderr, warm.ExpiresAt)
	}
	if r := crabboxCmd(t, env, dir, "heartbeat", "--idle-timeout", "0s", warm.ID); r.code != exitUsage {
		t.Errorf("heartbeat --idle-timeout 0s: exit %d, want %d", r.code, exitUsage)
	}

	r = crabboxCmd(t, env, dir, "cleanup", "--dry-run", "--json")
	var ds []crabbox.CleanupOutcome
	if err := json.Unmarshal([]byte(r.stdout), &ds); r.code != 0 || err != nil || len(ds) != 1 || ds[0].LeaseID != warm.ID || ds[0].Action != crabbox.CleanupKeep {
		t.Errorf("cleanup --dry-run --json: exit %d, stdout %q, stderr %q; want the lease kept", r.code, r.stdout, r.stderr)
	}
	r = crabboxCmd(t, env, dir, "cleanup")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); r.code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "LEASE") || !strings.Contains(lines[1], " keep ") {
		t.Errorf("cleanup: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestProvidersCommand(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"providers", "--json"}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("providers --json: exit %d, stderr %q", code, errOut.String())
	}
	var infos []providerDescription
	if err := json.Unmarshal(out.Bytes(), &infos); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range infos {
		names = append(names, p.Name)
	}
	if !slices.Contains(names, "local") || !slices.Contains(names, "ssh") {
		t.Errorf("providers = %q, want local and ssh", names)
	}
	out.Reset()
	if code := Main(context.Background(), []string{"providers", "describe", "byo"}, strings.NewReader(""), &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "--ssh-host") || !strings.Contains(out.String(), "CRABBOX_SSH_HOST") {
		t.Errorf("providers describe byo: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
}

func TestDoctorCommand(t *testing.T) {
	t.Parallel()
	env := stateEnv(t)
	if r := crabboxCmd(t, env, t.TempDir(), "doctor"); r.code != 0 || strings.Contains(r.stdout, "FAIL") || !strings.Contains(r.stdout, "git") {
		t.Errorf("doctor: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r := crabboxCmd(t, env, t.TempDir(), "doctor", "--json", "--provider", "nope")
	var checks []provider.Check
	if err := json.Unmarshal([]byte(r.stdout), &checks); r.code != exitFailure || err != nil || checks[len(checks)-1].OK {
		t.Errorf("doctor --provider nope: exit %d, stdout %q, stderr %q; want a failed check and %d", r.code, r.stdout, r.stderr, exitFailure)
	}
}

func TestConfigCommands(t *testing.T) {
	t.Parallel()
	config := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(config, []byte("ssh-host build.example\nssh-user from-file\nttl 2h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	env := []string{"CRABBOX_STATE_DIR=" + state, "CRABBOX_CONFIG=" + config, "CRABBOX_SSH_KEY=/keys/id", "CRABBOX_PROVIDER=ssh",
		"CRABBOX_COORDINATOR=http://127.0.0.1:9", "CRABBOX_COORDINATOR_TOKEN=tok-secret"}
	if r := crabboxCmd(t, env, t.TempDir(), "config", "path"); r.code != 0 || r.stdout != config+"\n" {
		t.Errorf("config path: exit %d, stdout %q, stderr %q; want %s", r.code, r.stdout, r.stderr, config)
	}
	r := crabboxCmd(t, env, t.TempDir(), "config", "show", "--json", "--ssh-user", "from-flag")
	var got struct {
		ConfigFile string
		Settings   []setting
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 0 || err != nil {
		t.Fatalf("config show --json: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	want := []setting{
		{Key: "provider", Flag: "provider", Value: "ssh", Source: "env", Origin: "CRABBOX_PROVIDER"},
		{Provider: "ssh", Key: "host", Flag: "ssh-host", Value: "build.example", Source: "file", Origin: config + ":1"},
		{Provider: "ssh", Key: "user", Flag: "ssh-user", Value: "from-flag", Source: "flag", Origin: "--ssh-user"},
		{Provider: "ssh", Key: "key", Flag: "ssh-key", Value: "/keys/id", Source: "env", Origin: "CRABBOX_SSH_KEY"},
		{Key: "coordinator", Value: "http://127.0.0.1:9", Source: "env", Origin: "CRABBOX_COORDINATOR"},
		{Key: "coordinator-token", Value: "<redacted>", Source: "env", Origin: "CRABBOX_COORDINATOR_TOKEN"},
		{Key: "state-dir", Value: state, Source: "env", Origin: "CRABBOX_STATE_DIR"},
		{Key: "ttl", Flag: "ttl", Value: "2h", Source: "file", Origin: config + ":3"}, // run's flag, from the file
	}
	if diff := cmp.Diff(want, got.Settings); diff != "" || got.ConfigFile != config {
		t.Errorf("config show --json settings (-want +got):\n%s\nconfig file %q", diff, got.ConfigFile)
	}
	r = crabboxCmd(t, env, t.TempDir(), "config", "show")
	if r.code != 0 || !strings.Contains(r.stdout, "ssh.host") || !strings.Contains(r.stdout, "file "+config+":1") || strings.Contains(r.stdout, "tok-secret") {
		t.Errorf("config show: exit %d, stdout %q, stderr %q; want sources and no token", r.code, r.stdout, r.stderr)
	}

	// The file never sets the coordinator token, nor an unknown key; the
	// error names the file, the line and the key, and commands fail
	// before touching anything.
	for _, tt := range []struct{ line, want string }{
		{"coordinator-token tok-from-file", config + ":2: \"coordinator-token\": set CRABBOX_COORDINATOR_TOKEN in the environment"},
		{"ssh-hots build.example", config + ":2: \"ssh-hots\": unknown key"},
	} {
		if err := os.WriteFile(config, []byte("provider ssh\n"+tt.line+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"config", "show"}, {"list"}} {
			r := crabboxCmd(t, env, t.TempDir(), args...)
			if r.code != exitFailure || !strings.Contains(r.stderr, tt.want) || strings.Contains(r.stderr, "tok-from-file") {
				t.Errorf("%v with %q in the file: exit %d, stderr %q; want %d and %q", args, tt.line, r.code, r.stderr, exitFailure, tt.want)
			}
		}
	}
}

func TestRedact(t *testing.T) {
	tests := []struct {
		opt  provider.Option
		want string
	}{
		{provider.Option{Name: "host", Flag: "ssh-host"}, "v"},
		{provider.Option{Name: "key", Flag: "ssh-key", Help: "private key file"}, "v"},
		{provider.Option{Name: "api-token", Flag: "hcloud-token", Help: "API token"}, "<redacted>"},
		{provider.Option{Name: "client-secret", Help: "the secret"}, "<redacted>"},
		{provider.Option{Name: "access-key", Help: "access key ID"}, "<redacted>"},
		{provider.Option{Name: "token-file", Help: "read the token from this file"}, "v"},
	}
	for _, tt := range tests {
		if got := redact(tt.opt, "v"); got != tt.want {
			t.Errorf("redact(%s) = %q, want %q", tt.opt.Name, got, tt.want)
		}
	}
}

// crabbox ssh from a git checkout opens where a run from the same directory
// runs (its synced copy on the box); from elsewhere in the work root; in a
// checkout not synced yet, in the login directory with a note.
func TestSSHOpensInTheSyncedCheckout(t *testing.T) {
	t.Parallel()
	env, repo := append(stateEnv(t), "SHELL=/bin/sh"), gitRepo(t)
	pkg := filepath.Join(repo, "pkg")
	if err := os.Mkdir(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, "a.txt"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	warm := warmLease(t, env, repo)

	other := gitRepo(t)
	r := runCLI(t, env, other, "pwd\n", "ssh", warm.ID)
	if r.code != 0 || !strings.Contains(r.stderr, "is not on the box") || strings.TrimSpace(r.stdout) == "" {
		t.Errorf("ssh from a checkout not synced: exit %d, stdout %q, stderr %q; want a note and a shell", r.code, r.stdout, r.stderr)
	}

	r = crabboxCmd(t, env, pkg, "run", "--quiet", "--id", warm.ID, "--", "pwd")
	runDir := strings.TrimSpace(r.stdout)
	if r.code != 0 || filepath.Base(runDir) != "pkg" {
		t.Fatalf("run pwd from pkg: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, env, pkg, "pwd; cat a.txt\n", "ssh", warm.Slug)
	if diff := cmp.Diff(runDir+"\na\n", r.stdout); r.code != 0 || diff != "" {
		t.Errorf("ssh from pkg: exit %d, stderr %q, stdout (-want +got):\n%s", r.code, r.stderr, diff)
	}
	r = crabboxCmd(t, env, pkg, "ssh", "--print", warm.ID)
	if want := "'cd -- " + runDir + " "; r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Errorf("ssh --print from pkg: exit %d, stdout %q, stderr %q; want it to contain %q", r.code, r.stdout, r.stderr, want)
	}
	// crabbox's own state is not in the workdir (only the marker of the
	// copy it synced, .crabbox-synced).
	r = crabboxCmd(t, env, repo, "run", "--quiet", "--id", warm.ID, "--", "ls", "-A")
	if r.code != 0 || slices.Contains(strings.Fields(r.stdout), ".crabbox") || !slices.Contains(strings.Fields(r.stdout), ".crabbox-synced") {
		t.Errorf("ls -A in the workdir: exit %d, stdout %q, stderr %q; want .crabbox-synced, no .crabbox", r.code, r.stdout, r.stderr)
	}
	workRoot := filepath.Dir(filepath.Dir(filepath.Dir(runDir)))
	r = runCLI(t, env, t.TempDir(), "pwd\n", "ssh", warm.ID)
	if diff := cmp.Diff(workRoot+"\n", r.stdout); r.code != 0 || diff != "" {
		t.Errorf("ssh outside a checkout: exit %d, stderr %q, stdout (-want +got):\n%s", r.code, r.stderr, diff)
	}
}
