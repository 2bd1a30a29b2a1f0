package local

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// testAgentEnv makes the test binary act as the agent: Config.Agent points
// at the test binary itself, as the CLI's points at crabbox.
const testAgentEnv = "CRABBOX_LOCAL_TEST_AGENT"

// testOneShotEnv makes the test binary act as a one-shot run that serves
// its box in-process under the root the variable names, until it is killed
// (see TestKilledOneShotLeftovers).
const testOneShotEnv = "CRABBOX_LOCAL_TEST_ONESHOT"

func TestMain(m *testing.M) {
	if root := os.Getenv(testOneShotEnv); root != "" {
		os.Exit(runTestOneShot(root))
	}
	if os.Getenv(testAgentEnv) == "1" {
		os.Exit(runTestAgent(os.Args[1:]))
	}
	if err := os.Setenv(testAgentEnv, "1"); err != nil { // inherited by the agents
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if os.Getenv("GORACE") == "" {
		// Race-enabled agents would otherwise linger a second at exit.
		_ = os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	goleak.VerifyTestMain(m)
}

// runTestAgent is what `crabbox agent --lease-dir DIR` does.
func runTestAgent(args []string) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	dir := fs.String("lease-dir", "", "lease directory to serve")
	if len(args) == 0 || args[0] != "agent" || fs.Parse(args[1:]) != nil || *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: agent --lease-dir DIR")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if err := ServeAgent(ctx, *dir, os.Stdout, log); err != nil {
		log.Error("agent failed", "err", err)
		return 1
	}
	return 0
}

// runTestOneShot acquires an in-process box under root, puts a file into
// its work root as a sync would, says "ready <leaseID>" and serves the box
// until the process is killed.
func runTestOneShot(root string) int {
	b, err := New(Config{Root: root}, provider.Runtime{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	key, err := lease.NewKey()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	now := time.Now()
	target, err := b.Acquire(context.Background(), provider.AcquireRequest{
		LeaseID: lease.NewID(), Slug: "one-shot", PublicKey: key.AuthorizedKey(),
		TTL: time.Hour, IdleTimeout: time.Hour, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
	})
	if err == nil {
		err = os.WriteFile(filepath.Join(target.WorkRoot, "synced.txt"), []byte("a synced copy\n"), 0o600)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("ready %s\n", target.LeaseID)
	// Until killed; should the test die first, stdin ends and so does this.
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 1
}

// agentPath is the test binary, which serves as the agent.
func agentPath(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// newBackend returns a backend that is closed when the test ends.
func newBackend(t *testing.T, cfg Config, clock clockwork.Clock) *Backend {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := New(cfg, provider.Runtime{Clock: clock, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// checkEmpty fails if lease directories or checkpoints are left under
// root (an empty checkpoints directory may stay).
func checkEmpty(t *testing.T, root string) {
	t.Helper()
	des, err := os.ReadDir(root)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, de := range des {
		if de.Name() == checkpointsDir {
			checkEmpty(t, filepath.Join(root, checkpointsDir))
			continue
		}
		t.Errorf("left behind under %s: %s", root, de.Name())
	}
}

// newRequest is an acquire request for a fresh lease expiring ttl after now.
func newRequest(t *testing.T, now time.Time, ttl time.Duration) (provider.AcquireRequest, lease.Key) {
	t.Helper()
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return provider.AcquireRequest{
		LeaseID: lease.NewID(), Slug: "test-crab", PublicKey: key.AuthorizedKey(),
		TTL: ttl, IdleTimeout: ttl, CreatedAt: now, ExpiresAt: now.Add(ttl),
		Labels: map[string]string{"test": t.Name()},
	}, key
}

// dial connects to the box with the lease key, pinning the target's host key.
func dial(t *testing.T, target provider.LeaseTarget, key lease.Key) *ssh.Client {
	t.Helper()
	hostKey, err := lease.ParsePublicKey(target.HostKey)
	if err != nil {
		t.Fatal(err)
	}
	client, err := ssh.Dial("tcp", net.JoinHostPort(target.Host, strconv.Itoa(target.Port)), &ssh.ClientConfig{
		User: target.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(key.Signer)},
		HostKeyCallback: ssh.FixedHostKey(hostKey), Timeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatalf("SSH to lease %s: %v", target.LeaseID, err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// run runs cmd on the box and returns its stdout and exit code.
func run(t *testing.T, client *ssh.Client, cmd string) (string, int) {
	t.Helper()
	sess, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	var out bytes.Buffer
	sess.Stdout = &out
	err = sess.Run(cmd)
	var exit *ssh.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &exit):
		return out.String(), exit.ExitStatus()
	default:
		t.Fatalf("run %q: %v", cmd, err)
		return "", 0
	}
}
