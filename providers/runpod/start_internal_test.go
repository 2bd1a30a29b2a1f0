package runpod

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestStartCommandParses checks the start command's shell syntax (sh -n
// reads it without running it) and that it takes no secret.
func TestStartCommandParses(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	if out, err := exec.Command(sh, "-n", "-c", startCommand).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
	for _, bad := range []string{"PRIVATE KEY", "curl -H \"Authorization", "-H \"$RUNPOD_API_KEY"} {
		if strings.Contains(startCommand, bad) {
			t.Errorf("start command contains %q", bad)
		}
	}
}

func TestLabelsRoundTrip(t *testing.T) {
	in := map[string]string{"crabbox": "true", "lease": "cbx_0123456789ab", "server_type": "NVIDIA_L4", "team": "ml-1.2"}
	enc := encodeLabels(in)
	if enc != "crabbox=true,lease=cbx_0123456789ab,server_type=NVIDIA_L4,team=ml-1.2" {
		t.Errorf("encoded %q", enc)
	}
	out, err := decodeLabels(enc)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out); diff != "" {
		t.Errorf("round trip (-in +out):\n%s", diff)
	}
	for _, bad := range []string{"a", "=b", "a=1,a=2"} {
		if _, err := decodeLabels(bad); err == nil {
			t.Errorf("decodeLabels(%q) accepted it", bad)
		}
	}
	env := podEnv("#!/bin/sh\n", in, time.Unix(1700000000, 0), "https://rest.runpod.io/v1/", "ssh-ed25519 AAAA k\n")
	if env[DeleteAtEnv] != "1700000000" || env[APIEnv] != "https://rest.runpod.io/v1" || env["PUBLIC_KEY"] != "ssh-ed25519 AAAA k" || env[BootstrapEnv] != "IyEvYmluL3NoCg==" {
		t.Errorf("env %v", env)
	}
}
