package main

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/lease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestOutsideProgram builds this program as a module of its own, outside
// the repository, reaching crabbox through a replace directive (so that
// it can import crabbox's public packages only: Go refuses internal ones
// across modules), and runs it. What it does takes real time (a 6-second
// command, then pauses past the 3-second idle timeout), since that is
// what it shows.
func TestOutsideProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the program runs a 6-second command and waits past a 3-second idle timeout (about 10 s)")
	}
	if runtime.GOOS == "windows" {
		t.Skip("local boxes need sh")
	}
	prog := buildOutside(t)
	state := t.TempDir()

	cmd := exec.CommandContext(t.Context(), prog, state)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
			stderr = exit.Stderr
		}
		t.Fatalf("outside program: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	want := strings.Join([]string{
		"acquired a box with a 3s idle timeout",
		"sleep 6: exit 0",
		"short command 1",
		"echo short command 1: exit 0",
		"short command 2",
		"echo short command 2: exit 0",
		"released on a cancelled context: <nil>",
		"leases left: 0",
	}, "\n") + "\n"
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("outside program's output (-want +got):\n%s", diff)
	}

	store, err := lease.OpenStore(state)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 0 {
		t.Errorf("claims left in the state directory: %+v", claims)
	}
	boxes, err := os.ReadDir(filepath.Join(state, "local"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	for _, b := range boxes {
		t.Errorf("local box left in the state directory: %s", b.Name())
	}
}

// buildOutside writes this program into a module of its own and builds
// it there, with the module cache and proxy settings of the environment.
func buildOutside(t *testing.T) string {
	t.Helper()
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	sums, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goMod := "module example.com/outside\n\n" +
		"go 1.26\n\n" +
		"require github.com/crabbox-dev/crabbox v0.0.0\n\n" +
		"replace github.com/crabbox-dev/crabbox => " + repo + "\n"
	for name, content := range map[string][]byte{"go.mod": []byte(goMod), "go.sum": sums, "main.go": src} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	prog := filepath.Join(dir, "outside")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", prog, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod "+os.Getenv("GOFLAGS"), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the outside program as its own module: %v\n%s", err, out)
	}
	return prog
}
