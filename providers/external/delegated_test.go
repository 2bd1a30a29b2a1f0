package external_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/external"
)

func fakeDelegated(t *testing.T, mode string) (*external.DelegatedBackend, string) {
	t.Helper()
	raw, log := delegatedConfig(t, mode, nil)
	cfg, err := external.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	d, err := external.NewDelegated(cfg, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Spec().Kind != provider.KindDelegatedRun {
		t.Fatalf("delegated backend kind = %s", d.Spec().Kind)
	}
	return d, log
}

func TestDelegatedRunStreamsOutput(t *testing.T) {
	d, log := fakeDelegated(t, "run")
	ctx := context.Background()
	id := lease.NewID()
	v, err := d.Warmup(ctx, provider.WarmupRequest{LeaseID: id, Slug: "busy-crab"})
	if err != nil {
		t.Fatal(err)
	}
	if v.ID != id || v.CloudID != "sandbox-1" || v.Labels["lease"] != id {
		t.Errorf("Warmup = %+v", v)
	}
	var stdout, stderr bytes.Buffer
	root := t.TempDir()
	res, err := d.Run(ctx, provider.DelegatedRunRequest{
		LeaseID: id, Command: []string{"go", "test", "./..."}, Env: map[string]string{"CI": "true"},
		Workdir: "sub/dir", Root: root, Stdout: &stdout, Stderr: &stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 {
		t.Errorf("exit code = %d, want 7", res.ExitCode)
	}
	if got, want := stdout.String(), "hello go test ./...\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if got, want := stderr.String(), "warning\n"; got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
	var run *external.Request
	for _, r := range requests(t, log) {
		if r.Operation == external.OpRun {
			run = &r
		}
	}
	if run == nil {
		t.Fatal("no run request sent")
	}
	if diff := cmp.Diff(external.Request{
		ProtocolVersion: 1, Operation: external.OpRun,
		Lease:   &external.Lease{LeaseID: id, Slug: "fake-sandbox", Name: external.LeaseName(id, "fake-sandbox"), CloudID: "sandbox-1", Labels: map[string]string{"lease": id, "slug": "fake-sandbox", "name": external.LeaseName(id, "fake-sandbox")}},
		Command: []string{"go", "test", "./..."}, Env: map[string]string{"CI": "true"}, Workdir: "sub/dir",
		Repo: &external.Repo{Root: root, Name: filepath.Base(root)},
	}, *run); diff != "" {
		t.Errorf("run request (-want +got):\n%s", diff)
	}
	if err := d.Stop(ctx, provider.StopRequest{ID: id}); err != nil {
		t.Fatal(err)
	}
}

func TestDelegatedRunRejectsBadStreams(t *testing.T) {
	tests := []struct{ mode, wantErr string }{
		{"run-no-exit", "ended without an exitCode line"},
		{"run-bad-line", `line 4: run output field stream is "stdin"`},
		{"run-error", "program reported: sandbox vanished"},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			d, _ := fakeDelegated(t, tt.mode)
			_, err := d.Run(context.Background(), provider.DelegatedRunRequest{LeaseID: lease.NewID(), Command: []string{"true"}})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Run error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestDelegatedNeedsRunCapability(t *testing.T) {
	d, _ := fakeDelegated(t, "norun")
	_, err := d.Warmup(context.Background(), provider.WarmupRequest{LeaseID: lease.NewID(), Slug: "idle-crab"})
	if !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), "capabilities.run") {
		t.Fatalf("Warmup error = %v, want a precondition error naming capabilities.run", err)
	}
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		cfg     provider.Config
		wantErr string
	}{
		{provider.Config{}, `"command" is required`},
		{provider.Config{"command": "x", "args": "--a b"}, `"args" must be a JSON array`},
		{provider.Config{"command": "x", "env": `["A"]`}, `"env" must be a JSON object`},
		{provider.Config{"command": "x", "env": `{"A=B":"c"}`}, `"A=B" is not a variable name`},
		{provider.Config{"command": "x", "pass-env": "TOKEN,1BAD"}, `"1BAD" is not a variable name`},
		{provider.Config{"command": "x", "config": `[1]`}, `"config" must be a JSON object`},
		{provider.Config{"command": "x", "timeout": "soon"}, `"timeout"`},
		{provider.Config{"command": "x", "mode": "magic"}, `"mode" is "magic"`},
	}
	for _, tt := range tests {
		_, err := external.ParseConfig(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseConfig(%v) error = %v, want one containing %q", tt.cfg, err, tt.wantErr)
		}
	}
	got, err := external.ParseConfig(provider.Config{
		"command": "/opt/p", "args": `["--region","eu west"]`, "env": `{"REGION":"eu"}`,
		"pass-env": "TOKEN, OTHER", "config": `{"size":"large"}`, "timeout": "90s", "work-root": "/w",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := external.Config{
		Command: "/opt/p", Args: []string{"--region", "eu west"}, Env: map[string]string{"REGION": "eu"},
		PassEnv: []string{"TOKEN", "OTHER"}, ProviderConfig: []byte(`{"size":"large"}`), Timeout: 90e9,
		Mode: external.ModeSSHLease, WorkRoot: "/w",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseConfig (-want +got):\n%s", diff)
	}
}
