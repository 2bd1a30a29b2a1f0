package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/internal/clitest"
)

// The external provider in delegated-run mode with files, on the example
// program, through the command: warmup, run --id twice (the second sends
// only the changed file), status, stop; no box of the program is left.
func TestDelegatedExternalFilesWorkflow(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("the example program serves boxes with /bin/sh")
	}
	exe := filepath.Join(t.TempDir(), "externalprovider")
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/crabbox-dev/crabbox/examples/externalprovider").CombinedOutput(); err != nil {
		t.Fatalf("build the example provider: %v\n%s", err, out)
	}
	root := t.TempDir()
	cfg, _ := json.Marshal(map[string]string{"root": root})
	env := append(stateEnv(t),
		"CRABBOX_PROVIDER=external", "CRABBOX_EXTERNAL_COMMAND="+exe, "CRABBOX_EXTERNAL_MODE=delegated-run",
		"CRABBOX_EXTERNAL_FILES=true", "CRABBOX_EXTERNAL_CONFIG="+string(cfg))
	clitest.DelegatedWarmLease(t, func(t *testing.T, repo string, args ...string) clitest.Result {
		r := crabboxCmd(t, env, repo, args...)
		return clitest.Result{Code: r.code, Stdout: r.stdout, Stderr: r.stderr}
	}, "external")
	// Its protocol has no stdin for a command: a piped stdin is refused
	// before a box is made, saying what to do, and -n runs.
	repo := gitRepo(t)
	r := runCLI(t, env, repo, "input\n", "run", "--", "cat")
	if r.code != exitFailure || !strings.Contains(r.stderr, `provider "external" cannot forward stdin`) || !strings.Contains(r.stderr, "--no-stdin (-n)") {
		t.Errorf("run with piped stdin: exit %d, stderr %q; want 125, the provider refusing stdin and --no-stdin (-n)", r.code, r.stderr)
	}
	if r := runCLI(t, env, repo, "input\n", "run", "-n", "--quiet", "--", "wc", "-c"); r.code != 0 || strings.TrimSpace(r.stdout) != "0" {
		t.Errorf("run -n with piped stdin: exit %d, stdout %q, stderr %q; want 0 and 0 bytes read", r.code, r.stdout, r.stderr)
	}
	boxes, err := os.ReadDir(filepath.Join(root, "boxes"))
	if err != nil || len(boxes) != 0 {
		t.Errorf("the program's boxes after stop: %v (%v), want none", boxes, err)
	}
}
