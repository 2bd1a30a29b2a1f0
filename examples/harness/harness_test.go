// Package harness shows a test suite that leases one box for all its
// tests: crabboxtest.Main leases it in TestMain, syncs the repository to
// it, releases it after the tests and checks for leaked goroutines.
//
// It uses the embedded local provider, so it runs anywhere with no setup:
//
//	go test ./examples/harness/
package harness

import (
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/crabboxtest"
)

var box *crabbox.Lease

func TestMain(m *testing.M) { crabboxtest.Main(m, &box) }

func TestSyncedFilesAreOnTheBox(t *testing.T) {
	if out := crabboxtest.Run(t, box, "ls"); !strings.Contains(out, "harness_test.go") {
		t.Fatalf("ls = %q, want harness_test.go listed", out)
	}
}

func TestExitCodeComesBack(t *testing.T) {
	if _, code := crabboxtest.RunExitCode(t, box, "sh", "-c", "exit 3"); code != 3 {
		t.Fatalf("exit code = %d, want 3", code)
	}
}

// A test that needs a box of its own (to change it, or to run in
// parallel) gets one released when it ends.
func TestOwnBox(t *testing.T) {
	t.Parallel()
	own := crabboxtest.Box(t, crabboxtest.WithoutSync())
	crabboxtest.Run(t, own, "touch", "scratch")
	if out := crabboxtest.Run(t, own, "ls"); out != "scratch\n" {
		t.Fatalf("ls on a fresh box after touch = %q, want only scratch", out)
	}
}
