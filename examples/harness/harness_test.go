// Package harness shows how a test suite leases a box once in TestMain,
// syncs the repository to it, and runs commands there from its tests.
//
// It uses the embedded local provider, so it runs anywhere with no setup:
//
//	go test ./examples/harness/
package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox"
	_ "github.com/crabbox-dev/crabbox/providers/local"
)

var box *crabbox.Lease

func TestMain(m *testing.M) {
	os.Exit(func() int {
		ctx := context.Background()
		state, err := os.MkdirTemp("", "crabbox-harness-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(state)

		client, err := crabbox.New(crabbox.WithStateDir(state))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer client.Close()

		box, err = client.Acquire(ctx, crabbox.AcquireOptions{Labels: map[string]string{"suite": "harness"}})
		if err != nil {
			fmt.Fprintln(os.Stderr, "acquire box:", err)
			return 1
		}
		defer box.Release(ctx)

		if _, err := box.Sync(ctx, ".", crabbox.SyncOptions{}); err != nil {
			fmt.Fprintln(os.Stderr, "sync:", err)
			return 1
		}
		code := m.Run()
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil && code == 0 {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			return 1
		}
		return code
	}())
}

// onBox runs argv in the synced copy of this directory on the box.
func onBox(t *testing.T, argv ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	res, err := box.Run(context.Background(), crabbox.RunRequest{Command: argv, NoSync: true, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("run %q: %v", argv, err)
	}
	return out.String(), res.ExitCode
}

func TestSyncedFilesAreOnTheBox(t *testing.T) {
	out, code := onBox(t, "ls")
	if code != 0 || !strings.Contains(out, "harness_test.go") {
		t.Fatalf("ls = %q (exit %d), want harness_test.go listed", out, code)
	}
}

func TestExitCodeComesBack(t *testing.T) {
	if _, code := onBox(t, "sh", "-c", "exit 3"); code != 3 {
		t.Fatalf("exit code = %d, want 3", code)
	}
}
