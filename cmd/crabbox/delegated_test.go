package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
	boxes, err := os.ReadDir(filepath.Join(root, "boxes"))
	if err != nil || len(boxes) != 0 {
		t.Errorf("the program's boxes after stop: %v (%v), want none", boxes, err)
	}
}
