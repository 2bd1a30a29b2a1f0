package docker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
)

func TestCheckAgent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("uses this machine's linux executables")
	}
	text := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkAgent(text, "amd64"); err == nil || !strings.Contains(err.Error(), "not a linux (ELF) executable") {
		t.Errorf("checkAgent(script) = %v", err)
	}
	if err := checkAgent("/bin/sh", ""); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("checkAgent(/bin/sh, a dynamic executable) = %v", err)
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox-static to check a static executable with")
	}
	if err := checkAgent(busybox, runtime.GOARCH); err != nil {
		t.Errorf("checkAgent(%s, %s) = %v, want nil", busybox, runtime.GOARCH, err)
	}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	if err := checkAgent(busybox, other); err == nil || !strings.Contains(err.Error(), "but the engine runs "+other) {
		t.Errorf("checkAgent(%s, %s) = %v, want an architecture mismatch", busybox, other, err)
	}
}

// The test binary is not the crabbox CLI, so without an agent option and
// without a Go toolchain to build one the error names both fixes.
func TestDefaultAgentWithoutToolchainNamesTheFixes(t *testing.T) {
	b, err := New(Config{}, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.agentCache = t.TempDir()
	b.lookPath = func(string) (string, error) { return "", exec.ErrNotFound }
	_, err = b.agentPath(runtime.GOARCH)
	for _, want := range []string{"--docker-agent", "CGO_ENABLED=0 go install ./cmd/crabbox", "no Go toolchain"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("agentPath with no agent and no go = %v, want an error naming %q", err, want)
		}
	}
}

// countingRunner runs commands and counts them.
type countingRunner struct {
	mu   sync.Mutex
	runs []string
}

func (r *countingRunner) Run(ctx context.Context, cmd provider.Command) error {
	r.mu.Lock()
	r.runs = append(r.runs, strings.Join(append([]string{filepath.Base(cmd.Path)}, cmd.Args...), " "))
	r.mu.Unlock()
	return provider.ExecRunner{}.Run(ctx, cmd)
}

// The test binary is neither the CLI nor static (as `go run` output is
// not): the backend builds a static agent from this source tree once, and
// reuses it.
func TestDefaultAgentIsBuiltOnceAndReused(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go on PATH to build an agent with")
	}
	runner := &countingRunner{}
	b, err := New(Config{}, provider.Runtime{Commands: runner})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.agentCache = t.TempDir()
	first, err := b.agentPath(runtime.GOARCH)
	if err != nil {
		t.Fatalf("agentPath = %v, want a built agent", err)
	}
	if err := checkAgent(first, runtime.GOARCH); err != nil {
		t.Errorf("built agent %s: %v", first, err)
	}
	if !strings.HasPrefix(first, b.agentCache) {
		t.Errorf("built agent %s, want it under the cache %s", first, b.agentCache)
	}
	second, err := b.agentPath(runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("second agentPath (-first +second):\n%s", diff)
	}
	want := []string{"go build -o " + filepath.Join(filepath.Dir(first), "BUILD") + " ./providers/docker/internal/agent"}
	got := slices.Clone(runner.runs)
	for i, r := range got {
		f := strings.Fields(r)
		if len(f) > 3 && f[1] == "build" {
			f[3] = filepath.Join(filepath.Dir(f[3]), "BUILD")
		}
		got[i] = strings.Join(f, " ")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("commands run (-want +got):\n%s", diff)
	}
}
