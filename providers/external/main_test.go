package external_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"go.uber.org/goleak"
)

// fakeEnv, when set in the environment, makes the test binary act as a
// scripted provider program instead of running the tests (see fake_test.go).
const fakeEnv = "CRABBOX_EXTERNAL_FAKE"

// examplePath is the example provider program, and sandboxProgram the
// program serving internal/servedsandbox, both built once by TestMain.
var examplePath, sandboxProgram string

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeEnv); mode != "" {
		os.Exit(fakeProgram(mode))
	}
	switch os.Getenv(serveEnv) {
	case "ssh":
		os.Exit(servedProgram())
	case "local":
		os.Exit(servedLocal(os.Args[1:]))
	}
	dir, err := os.MkdirTemp("", "crabbox-external-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	examplePath = filepath.Join(dir, "externalprovider")
	if runtime.GOOS == "windows" {
		examplePath += ".exe"
	}
	sandboxProgram = filepath.Join(dir, "crabbox-provider-sandbox")
	if runtime.GOOS == "windows" {
		sandboxProgram += ".exe"
	}
	for path, pkg := range map[string]string{
		examplePath:    "github.com/crabbox-dev/crabbox/examples/externalprovider",
		sandboxProgram: "github.com/crabbox-dev/crabbox/providers/external/internal/sandboxprogram",
	} {
		build := exec.Command("go", "build", "-o", path, pkg)
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}
