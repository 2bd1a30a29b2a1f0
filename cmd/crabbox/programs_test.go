package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/providers/slim"
)

// programsDir is where the cloud providers' programs
// (crabbox-provider-<name>) are built, once per test binary, for the tests
// that run the command against a cloud: the command serves the clouds
// through them, as an installed crabbox does. removeProviderPrograms
// removes it after the tests.
var (
	programsOnce sync.Once
	programsDir  string
	programsErr  error
)

// programsPath returns the PATH entry that puts the provider programs
// first, building them on first use. It skips t when the go command is not
// on PATH.
func programsPath(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the cloud providers' programs are built with the go command, which is not on PATH: %v", err)
	}
	programsOnce.Do(func() {
		if programsDir, programsErr = os.MkdirTemp("", "crabbox-provider-programs-"); programsErr != nil {
			return
		}
		args := []string{"build", "-o", programsDir + string(filepath.Separator)}
		for _, spec := range slim.Clouds() {
			args = append(args, "github.com/crabbox-dev/crabbox/cmd/"+slim.Program(spec.Name))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var out []byte
		if out, programsErr = exec.CommandContext(ctx, goTool, args...).CombinedOutput(); programsErr != nil {
			programsErr = &buildError{programsErr, out}
		}
	})
	if programsErr != nil {
		t.Fatalf("build the provider programs: %v", programsErr)
	}
	return "PATH=" + programsDir + string(os.PathListSeparator) + os.Getenv("PATH")
}

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + string(e.out) }

// removeProviderPrograms removes what programsPath built.
func removeProviderPrograms() error {
	if programsDir == "" {
		return nil
	}
	return os.RemoveAll(programsDir)
}
