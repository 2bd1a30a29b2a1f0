package external_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/external"
)

func TestTimeoutStopsProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	b, _ := fake(t, "hang", func(c *external.Config) {
		c.Timeout = 2 * time.Second // room for the fake to start on a loaded machine
		c.Env[fakePIDEnv] = pidFile
	})
	_, err := b.Resolve(context.Background(), provider.ResolveRequest{ID: "cbx_0123456789ab"})
	if err == nil || !strings.Contains(err.Error(), "no answer within 2s") || !strings.Contains(err.Error(), "fake: thinking") {
		t.Fatalf("Resolve error = %v, want a timeout with the stderr tail", err)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(string(data))
	if err != nil {
		t.Fatal(err)
	}
	// The child held the program's stdout, which crabbox read to its end:
	// it was killed. A killed process closes its files before it is done
	// exiting, so wait for its exit on a pidfd (readable once the
	// process has exited); the bound only detects a survivor.
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return // exited and reaped
	}
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	defer unix.Close(fd)
	n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Errorf("the program's child %d survived the timeout (still running 10 s later)", pid)
	}
}
