package docker

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The CLI built without the README's CGO_ENABLED=0 (a plain `go build
// ./cmd/crabbox`, as a `go install ...@latest` without it builds it:
// dynamically linked where cgo is available) runs a command on a docker
// box with no agent flag: it builds its static agent itself, once, into
// the user's cache.
func TestPlainGoBuildRunsOnDocker(t *testing.T) {
	f := engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	bin := filepath.Join(t.TempDir(), "crabbox")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../cmd/crabbox")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/crabbox: %v\n%s", err, out)
	}

	repo := t.TempDir()
	for _, args := range [][]string{{"init", "-q"}, {"config", "user.email", "t@example.invalid"}, {"config", "user.name", "t"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(repo, "hello.txt"), []byte("hello from the checkout\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The agent goes into a cache of the test's own; Go's build cache
	// stays where it is (it is under the same directory by default).
	gocache, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOCACHE: %v", err)
	}
	cache := t.TempDir()
	env := append(os.Environ(),
		"CRABBOX_STATE_DIR="+t.TempDir(), "CRABBOX_CONFIG="+filepath.Join(t.TempDir(), "none"),
		"XDG_CACHE_HOME="+cache, "GOCACHE="+strings.TrimSpace(string(gocache)))
	for i := range 2 { // the second run reuses the agent built by the first
		var stdout, stderr bytes.Buffer
		run := exec.CommandContext(ctx, bin, "run", "--provider", "docker", "--docker-image", f.image, "--", "cat", "hello.txt")
		run.Dir, run.Env, run.Stdout, run.Stderr = repo, env, &stdout, &stderr
		if err := run.Run(); err != nil {
			t.Fatalf("run %d: crabbox run --provider docker: %v\nstdout:\n%s\nstderr:\n%s", i, err, &stdout, &stderr)
		}
		if diff := cmp.Diff("hello from the checkout\n", stdout.String()); diff != "" {
			t.Errorf("run %d: stdout (-want +got):\n%s\nstderr:\n%s", i, diff, &stderr)
		}
	}
	agents, _ := filepath.Glob(filepath.Join(cache, "crabbox", "docker-agent", "*", "crabbox-agent-linux-*"))
	if len(agents) != 1 {
		t.Errorf("agents built in the cache: %q, want one", agents)
	}
	if t.Failed() {
		return
	}
	for _, a := range agents {
		if !strings.HasPrefix(a, cache) {
			t.Errorf("agent %s outside the cache", a)
		}
	}
}
