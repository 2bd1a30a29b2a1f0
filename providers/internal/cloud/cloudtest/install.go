package cloudtest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/internal/clitest"
)

// Module is the crabbox module's path, whose commands Install builds.
const Module = "github.com/crabbox-dev/crabbox"

// Install builds the crabbox command and the provider programs of the
// named providers (crabbox-provider-<name>) into one temporary directory
// of t, as `go install ./cmd/...` puts them into one bin directory, and
// returns the directory. It skips t when the go command is not on PATH:
// an end-to-end test of the installed command needs it to build them.
func Install(t testing.TB, providers ...string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("building the installed commands needs the go command on PATH: %v", err)
	}
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator), Module + "/cmd/crabbox"}
	for _, p := range providers {
		args = append(args, Module+"/cmd/crabbox-provider-"+p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
	return dir
}

// PathWith is the PATH environment entry with dir first, then the
// caller's PATH, for a command run with Install's programs.
func PathWith(dir string) string {
	return "PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH")
}

// Exe is the file name of program name on this system (name.exe on
// Windows).
func Exe(name string) string {
	if runtime.GOOS == "windows" {
		return name + ".exe"
	}
	return name
}

// InstalledCLI prepares an end-to-end test of the installed crabbox
// against a fake cloud served by a loopback fleet: it skips t where such a
// fleet cannot run (CheckLoopback), installs crabbox and the provider
// program of name (Install), and returns a runner of that crabbox with a
// fresh state, its directory first on PATH and env.
func InstalledCLI(t *testing.T, name string, env ...string) clitest.Runner {
	t.Helper()
	if err := CheckLoopback(); err != nil {
		t.Skip(err)
	}
	bin := Install(t, name)
	return clitest.Command(filepath.Join(bin, Exe("crabbox")), append(append(clitest.StateEnv(t), PathWith(bin)), env...))
}

// OneShot runs `crabbox run FLAGS -- CMD` in a fresh git checkout, CMD
// printing both of its files, writing to stderr and exiting 7, and fails t
// unless exactly that came back.
func OneShot(t *testing.T, run clitest.Runner, flags ...string) {
	t.Helper()
	repo := clitest.GitRepo(t)
	r := run(t, repo, append(append([]string{"run"}, flags...), "--", "sh", "-c", "cat committed.txt untracked.txt; echo to-stderr >&2; exit 7")...)
	if r.Code != 7 || r.Stdout != "committed\nuntracked\n" || !strings.Contains(r.Stderr, "to-stderr\n") {
		t.Errorf("run: exit %d, stdout %q, stderr %q; want 7, both files, and the command's stderr", r.Code, r.Stdout, r.Stderr)
	}
}

// InOrder reports whether events holds, in this order (others between
// them allowed), an event beginning with each of want.
func InOrder(events []string, want ...string) bool {
	for _, e := range events {
		if len(want) > 0 && strings.HasPrefix(e, want[0]) {
			want = want[1:]
		}
	}
	return len(want) == 0
}

// CLIRuns runs the flows of an end-to-end test of the installed crabbox
// with provider (see InstalledCLI) as subtests: a one-shot run (OneShot),
// then the provider's own checks of it (oneShot, if not nil), then a warm
// lease's flow (clitest.DelegatedWarmLease). After each, released checks
// that nothing billable is left.
func CLIRuns(t *testing.T, run clitest.Runner, provider string, flags []string, oneShot, released func(t *testing.T)) {
	t.Helper()
	t.Run("one-shot run", func(t *testing.T) {
		OneShot(t, run, flags...)
		if oneShot != nil {
			oneShot(t)
		}
		released(t)
	})
	t.Run("warm lease", func(t *testing.T) {
		clitest.DelegatedWarmLease(t, run, provider, flags...)
		released(t)
	})
}

// CLICheckpoint is the checkpoint flow of an end-to-end test of the
// installed crabbox with a provider that forks natively: a warm lease
// builds, checkpoint create saves it through the provider program (a
// native checkpoint), run --from starts a box from it that holds the
// build, and checkpoint delete removes it. released then checks that
// nothing billable is left, the checkpoint's image included.
func CLICheckpoint(t *testing.T, run clitest.Runner, flags []string, released func(t *testing.T)) {
	t.Helper()
	repo := clitest.GitRepo(t)
	// The command's words, then the provider's flags, then the rest.
	cli := func(what string, words int, sub ...string) string {
		t.Helper()
		r := run(t, repo, append(append(sub[:words:words], flags...), sub[words:]...)...)
		if r.Code != 0 {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q", what, r.Code, r.Stdout, r.Stderr)
		}
		return r.Stdout
	}
	var warm struct{ ID string }
	if err := json.Unmarshal([]byte(cli("warmup", 1, "warmup", "--json")), &warm); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			run(t, repo, append(append([]string{"stop"}, flags...), warm.ID)...)
		}
	})
	cli("build", 1, "run", "--id", warm.ID, "--quiet", "--", "sh", "-c", "cat committed.txt > build.out")
	var cp struct{ ID, Kind string }
	if err := json.Unmarshal([]byte(cli("checkpoint create", 2, "checkpoint", "create", warm.ID, "--json")), &cp); err != nil {
		t.Fatal(err)
	}
	if cp.Kind != "native" {
		t.Errorf("checkpoint create: kind %q, want native", cp.Kind)
	}
	if out := cli("run --from", 1, "run", "--from", cp.ID, "--quiet", "--", "cat", "build.out"); out != "committed\n" {
		t.Errorf("run --from %s: stdout %q, want the build output", cp.ID, out)
	}
	cli("checkpoint delete", 2, "checkpoint", "delete", cp.ID)
	cli("stop", 1, "stop", warm.ID)
	stopped = true
	released(t)
}
