package fakemultipass_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/multipass/internal/fakemultipass"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const bin = "/usr/bin/multipass"

// run runs the fake with args and returns its stdout, stderr and exit
// code.
func run(t *testing.T, c *fakemultipass.CLI, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := c.Run(t.Context(), provider.Command{Path: bin, Args: args, Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut})
	code := 0
	if ee := (*fakemultipass.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// TestCommands: the fake's answers have the shapes of the client's JSON
// formatter and its failures the client's messages and exit codes.
func TestCommands(t *testing.T) {
	c := fakemultipass.New(bin, cloudtest.NewFleet(t))
	c.Add("primary")

	out, _, code := run(t, c, "", "version", "--format", "json")
	if diff := cmp.Diff(`{"multipass":"1.16.1","multipassd":"1.16.1"}`, compact(t, out)); code != 0 || diff != "" {
		t.Errorf("version: exit %d (-want +got):\n%s", code, diff)
	}
	out, _, code = run(t, c, "", "list", "--format", "json")
	var list struct {
		List []map[string]any `json:"list"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != 0 || len(list.List) != 1 {
		t.Fatalf("list: %q, exit %d, %v", out, code, err)
	}
	keys := func(m map[string]any) (ks []string) {
		for k := range m {
			ks = append(ks, k)
		}
		return ks
	}
	if diff := cmp.Diff([]string{"ipv4", "name", "release", "state", "zone"}, keys(list.List[0]), sortStrings); diff != "" {
		t.Errorf("list entry keys (-want +got):\n%s", diff)
	}
	out, _, code = run(t, c, "", "info", "--format", "json", "primary")
	var info struct {
		Errors []any                     `json:"errors"`
		Info   map[string]map[string]any `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil || code != 0 || info.Info["primary"]["state"] != "Running" {
		t.Fatalf("info: %q, exit %d, %v", out, code, err)
	}
	if ip, _ := info.Info["primary"]["ipv4"].([]any); len(ip) != 1 {
		t.Errorf("info ipv4 = %v, want the address", info.Info["primary"]["ipv4"])
	}

	tests := []struct {
		name     string
		stdin    string
		args     []string
		wantErr  string
		wantCode int
	}{
		{"missing instance", "", []string{"info", "--format", "json", "nope"}, `info failed: instance "nope" does not exist`, 2},
		{"delete missing", "", []string{"delete", "--purge", "nope"}, `delete failed: instance "nope" does not exist`, 2},
		{"unknown option", "", []string{"list", "--labels"}, "Unknown option 'labels'.", 1},
		{"unknown command", "", []string{"tag", "primary"}, "Unknown command: 'tag'", 1},
		{"name taken", "", []string{"launch", "--name", "primary"}, `launch failed: instance "primary" already exists`, 2},
		{"bad name", "", []string{"launch", "--name", "-x1"}, "Invalid instance name supplied: -x1", 2},
		{"bad name 2", "", []string{"launch", "--name", "1abc"}, "Invalid instance name supplied: 1abc", 2},
		{"small memory", "", []string{"launch", "--name", "a1", "--memory", "256M"}, "Invalid memory size value supplied: 256M.", 2},
		{"small disk", "", []string{"launch", "--name", "a1", "--disk", "512M"}, "Invalid disk size value supplied: 512M.", 2},
		{"no YAML", "", []string{"launch", "--name", "a1", "--cloud-init", "-"}, "Could not load cloud-init configuration", 1},
		{"script as user data", "#!/bin/sh\necho hi\n", []string{"launch", "--name", "a1", "--cloud-init", "-"}, "Could not load cloud-init configuration", 1},
		{"two images", "", []string{"launch", "--name", "a1", "lts", "noble"}, "Too many arguments supplied", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := run(t, c, tt.stdin, tt.args...)
			if code != tt.wantCode || !strings.Contains(stderr, tt.wantErr) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, tt.wantCode, tt.wantErr)
			}
		})
	}
	if diff := cmp.Diff([]string(nil), c.Events()); diff != "" {
		t.Errorf("failed commands changed something (-want +got):\n%s", diff)
	}
}

// TestLaunchBootsCloudConfig: launch boots the script the cloud-config
// runs, and delete --purge removes the instance and its box; delete
// alone leaves it Deleted.
func TestLaunchBootsCloudConfig(t *testing.T) {
	fleet := cloudtest.NewFleet(t)
	c := fakemultipass.New(bin, fleet)
	c.SetNoBoot() // the script is not a real bootstrap
	cfg := "#cloud-config\n" + `{"write_files":[{"path":"/var/lib/x.sh","permissions":"0700","content":"#!/bin/sh\necho hi\n"}],` +
		`"runcmd":[["sh","-c","sh /var/lib/x.sh; rm -f /var/lib/x.sh"]]}` + "\n"
	if _, stderr, code := run(t, c, cfg, "launch", "--name", "crabbox-a", "--cpus", "2", "--memory", "1.5G", "--disk", "10G",
		"--timeout", "600", "--cloud-init", "-", "24.04"); code != 0 {
		t.Fatalf("launch: exit %d, %s", code, stderr)
	}
	got := c.Instances()
	if len(got) != 1 || got[0].CPUs != 2 || got[0].Memory != "1.5G" || got[0].Disk != "10G" || got[0].Image != "24.04" || got[0].UserData != cfg {
		t.Errorf("instances %+v", got)
	}
	if _, _, code := run(t, c, "", "delete", "crabbox-a"); code != 0 || c.Instances()[0].State != "Deleted" {
		t.Errorf("delete without --purge: exit %d, %+v", code, c.Instances())
	}
	if _, _, code := run(t, c, "", "delete", "--purge", "crabbox-a"); code != 0 || len(c.Instances()) != 0 {
		t.Errorf("delete --purge: exit %d, %+v", code, c.Instances())
	}
	if diff := cmp.Diff([]string{"launch crabbox-a", "delete crabbox-a", "delete crabbox-a"}, c.Events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestFaults: a hang ends with the context; Halfway leaves a stopped
// instance without an address; a missing program is not run.
func TestFaults(t *testing.T) {
	c := fakemultipass.New(bin, cloudtest.NewFleet(t))
	ctx, cancel := context.WithCancel(t.Context())
	c.SetFault("list", fakemultipass.Fault{Hang: true, OnHang: cancel, Times: 1})
	if err := c.Run(ctx, provider.Command{Path: bin, Args: []string{"list", "--format", "json"}}); !errors.Is(err, context.Canceled) {
		t.Errorf("hung list: %v, want context.Canceled", err)
	}
	c.SetFault("launch", fakemultipass.Fault{Halfway: true})
	_, stderr, code := run(t, c, "", "launch", "--name", "half")
	if code != 2 || !strings.Contains(stderr, "timed out waiting for initialization") {
		t.Errorf("half-way launch: exit %d, %q", code, stderr)
	}
	if in := c.Instances(); len(in) != 1 || in[0].State != "Stopped" || in[0].IPv4 != "" {
		t.Errorf("after a half-way launch: %+v", in)
	}
	if err := c.Run(t.Context(), provider.Command{Path: "/nope/multipass", Args: []string{"version"}}); err == nil {
		t.Error("another program ran")
	}
	c.SetNoDaemon()
	out, _, code := run(t, c, "", "version", "--format", "json")
	if code != 0 || strings.Contains(out, "multipassd") {
		t.Errorf("version without the daemon: exit %d, %q", code, out)
	}
	if _, stderr, code := run(t, c, "", "list", "--format", "json"); code != 3 {
		t.Errorf("list without the daemon: exit %d, %q; want 3", code, stderr)
	}
}

var sortStrings = cmp.Transformer("sort", func(in []string) []string {
	out := append([]string(nil), in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
})

func compact(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
