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

// examplePath is the example provider program, built once by TestMain.
var examplePath string

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeEnv); mode != "" {
		os.Exit(fakeProgram(mode))
	}
	switch os.Getenv(serveEnv) {
	case "ssh":
		os.Exit(servedProgram())
	case "local":
		os.Exit(servedLocal(os.Args[1:]))
	case "sandbox":
		os.Exit(servedSandbox())
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
	build := exec.Command("go", "build", "-o", examplePath, "github.com/crabbox-dev/crabbox/examples/externalprovider")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the example provider: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}
