package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/internal/testenv"
)

// The test binary doubles as crabbox-coordinator: with
// CRABBOX_TEST_MAIN=1 it runs the program. Tests start it as separate
// processes, as users and service managers do.
func TestMain(m *testing.M) {
	if os.Getenv("CRABBOX_TEST_MAIN") == "1" {
		main() // exits
	}
	testenv.Main(m, nil)
}

type result struct {
	code           int
	stdout, stderr string
}

// coordinatorCmd runs the program as a separate process with env added to
// the test's environment.
func coordinatorCmd(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), append([]string{"CRABBOX_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0"}, env...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("crabbox-coordinator %v: %v", args, err)
	}
	return result{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

// stateEnv gives a test its own state directory and no config.
func stateEnv(t *testing.T) []string {
	t.Helper()
	return []string{"CRABBOX_STATE_DIR=" + t.TempDir(), "CRABBOX_CONFIG=" + filepath.Join(t.TempDir(), "none"), "XDG_CONFIG_HOME=" + t.TempDir()}
}

var testSecret = strings.Repeat("k", 40)
