package cloudtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// Module is the crabbox module's path, whose commands Install builds.
const Module = "github.com/crabbox-dev/crabbox"

// Install builds the crabbox command and the provider programs of the
// named providers (crabbox-provider-<name>) into one temporary directory
// of t, as `go install ./cmd/...` puts them into one bin directory, and
// returns the directory. It skips t when the go command is not on PATH:
// an end-to-end test of the installed command needs it to build them.
func Install(t testing.TB, providers ...string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("building the installed commands needs the go command on PATH: %v", err)
	}
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator), Module + "/cmd/crabbox"}
	for _, p := range providers {
		args = append(args, Module+"/cmd/crabbox-provider-"+p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
	return dir
}

// PathWith is the PATH environment entry with dir first, then the
// caller's PATH, for a command run with Install's programs.
func PathWith(dir string) string {
	return "PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH")
}

// Exe is the file name of program name on this system (name.exe on
// Windows).
func Exe(name string) string {
	if runtime.GOOS == "windows" {
		return name + ".exe"
	}
	return name
}
