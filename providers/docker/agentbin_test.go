package docker

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

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

// The test binary is not the crabbox CLI, so without an agent option the
// error names the option.
func TestDefaultAgentNamesTheOption(t *testing.T) {
	b, err := New(Config{}, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.agentPath(runtime.GOARCH); err == nil || !strings.Contains(err.Error(), "--docker-agent") {
		t.Errorf("agentPath with no agent configured = %v, want an error naming --docker-agent", err)
	}
}
