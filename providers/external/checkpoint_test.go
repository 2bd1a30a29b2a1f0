package external_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/external"
	"github.com/crabbox-dev/crabbox/providers/local"
	sshp "github.com/crabbox-dev/crabbox/providers/ssh"
)

// servedLocal is the test binary as the provider program of the local
// provider (serveEnv "local"), and as the agent serving its boxes, which
// outlive the program (`agent --lease-dir DIR`).
func servedLocal(args []string) int {
	if len(args) == 3 && args[0] == "agent" && args[1] == "--lease-dir" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		if err := local.ServeAgent(ctx, args[2], os.Stdout, nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	if err := external.Serve(context.Background(), local.Provider{}, provider.Runtime{}, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// installLocalPlugin puts the test binary on PATH as the provider program
// crabbox-provider-local, and returns the configuration of a local
// provider with a fresh root whose boxes the test binary serves as
// agents.
func installLocalPlugin(t *testing.T) func(t *testing.T) provider.Config {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the test binary is linked in as a provider program with a symlink; not on Windows")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(self, filepath.Join(bin, "crabbox-provider-local")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(serveEnv, "local")
	// A race-enabled test binary otherwise lingers a second at exit.
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	return func(t *testing.T) provider.Config {
		root := t.TempDir()
		t.Cleanup(func() { checkNoLeases(t, root) })
		return provider.Config{"root": root, "agent": self}
	}
}

// checkNoLeases fails if lease directories or checkpoints are left under
// a local provider's root.
func checkNoLeases(t *testing.T, root string) {
	t.Helper()
	des, _ := os.ReadDir(root)
	for _, de := range des {
		if de.Name() == "checkpoints" {
			if left, _ := os.ReadDir(filepath.Join(root, de.Name())); len(left) > 0 {
				t.Errorf("checkpoints left under %s: %d", root, len(left))
			}
			continue
		}
		t.Errorf("left behind under %s: %s", root, de.Name())
	}
}

// The local provider served by its own program passes the conformance
// suite through Plugin, its native checkpoints included: every
// operation crosses the protocol, each in a fresh process, and the boxes
// are served by agents that outlive them.
func TestPluginCheckpointConformance(t *testing.T) {
	config := installLocalPlugin(t)
	p := external.Plugin(local.Provider{}.Spec(), "crabbox-provider-local")
	providertest.RunSSHLease(t, providertest.Harness{
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			return configurePlugin(t, p, config(t), t.TempDir())
		},
		Timeout: 2 * time.Minute,
	})
}

// A Plugin implements exactly the checkpoint interfaces its spec declares.
func TestPluginCheckpointInterfaces(t *testing.T) {
	config := installLocalPlugin(t)
	base := local.Provider{}.Spec()
	with := func(fs ...provider.Feature) provider.Spec {
		s := base.Clone()
		s.Features = []provider.Feature{provider.FeatureSSH}
		s.Features = append(s.Features, fs...)
		return s
	}
	for _, tt := range []struct {
		name                   string
		spec                   provider.Spec
		native, fork, restores bool
	}{
		{name: "none", spec: sshp.Provider{}.Spec()},
		{name: "none of local's", spec: with()},
		{name: "checkpoint", spec: with(provider.FeatureCheckpoint), native: true},
		{name: "fork", spec: with(provider.FeatureCheckpoint, provider.FeatureFork), native: true, fork: true},
		{name: "restore", spec: with(provider.FeatureCheckpoint, provider.FeatureRestore), native: true, restores: true},
		{name: "all", spec: base, native: true, fork: true, restores: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config(t)
			if tt.spec.Name == "ssh" {
				cfg = nil
			}
			b, err := external.Plugin(tt.spec, "crabbox-provider-local").Configure(cfg, provider.Runtime{StateDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			_, native := b.(provider.NativeCheckpointBackend)
			_, fork := b.(provider.NativeForkBackend)
			_, restores := b.(provider.NativeRestoreBackend)
			if native != tt.native || fork != tt.fork || restores != tt.restores {
				t.Errorf("implements (checkpoint, fork, restore) = (%v, %v, %v), want (%v, %v, %v)", native, fork, restores, tt.native, tt.fork, tt.restores)
			}
			if _, ok := b.(provider.CleanupBackend); !ok {
				t.Error("the backend lost its cleanup")
			}
		})
	}
	_, err := external.Plugin(with(provider.FeatureFork), "crabbox-provider-local").Configure(config(t), provider.Runtime{})
	if err == nil || !strings.Contains(err.Error(), string(provider.FeatureCheckpoint)) {
		t.Errorf("a spec with fork but no checkpoint: err = %v, want one naming %s", err, provider.FeatureCheckpoint)
	}
}

// serveOnce answers one request with Serve, in-process.
func serveOnce(t *testing.T, p provider.Provider, req external.Request) (external.Response, error) {
	t.Helper()
	req.ProtocolVersion = external.ProtocolVersion
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := external.Serve(t.Context(), p, provider.Runtime{StateDir: t.TempDir()}, strings.NewReader(string(body)), &out); err != nil {
		t.Fatal(err)
	}
	return external.ParseResponse([]byte(out.String()))
}

// Serve refuses the checkpoint operations clearly, changing nothing, for
// a provider that has none, and refuses requests missing what they need.
func TestServeRefusesCheckpoints(t *testing.T) {
	art := &provider.CheckpointArtifact{ID: "ckp_0123456789ab"}
	lse := &external.Lease{LeaseID: "cbx_0123456789ab", Slug: "tidal-lobster"}
	desired := &external.Desired{LeaseID: "cbx_0123456789ab", Slug: "tidal-lobster"}
	ssh := sshp.Provider{}
	sshCfg, _ := json.Marshal(map[string]string{"host": "127.0.0.1", "user": "crab", "work-root": "/tmp/w"})
	for _, req := range []external.Request{
		{Operation: external.OpCheckpointCreate, Lease: lse, Checkpoint: &external.Checkpoint{CheckpointID: "ckp_0123456789ab"}},
		{Operation: external.OpCheckpointList},
		{Operation: external.OpCheckpointDelete, Artifact: art},
		{Operation: external.OpFork, Desired: desired, Artifact: art},
		{Operation: external.OpRestore, Lease: lse, Artifact: art},
	} {
		req.Config = sshCfg
		resp, err := serveOnce(t, ssh, req)
		if !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(resp.Error, "provider ssh cannot") || !strings.Contains(resp.Error, "workspace-") {
			t.Errorf("%s for the ssh provider: err = %v, want a precondition saying it cannot", req.Operation, err)
		}
	}
	resp, err := serveOnce(t, ssh, external.Request{Operation: external.OpCapabilities, Config: sshCfg})
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.Capabilities; c == nil || c.Checkpoint || c.Fork || c.Restore {
		t.Errorf("ssh provider's capabilities = %+v, want no checkpoint operations", c)
	}

	root, _ := json.Marshal(map[string]string{"root": t.TempDir()})
	resp, err = serveOnce(t, local.Provider{}, external.Request{Operation: external.OpCapabilities, Config: root})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&external.Capabilities{Cleanup: true, Checkpoint: true, Fork: true, Restore: true}, resp.Capabilities); diff != "" {
		t.Errorf("local provider's capabilities (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		req  external.Request
		want string
	}{
		{external.Request{Operation: external.OpCheckpointCreate, Lease: lse}, "checkpoint"},
		{external.Request{Operation: external.OpCheckpointCreate, Checkpoint: &external.Checkpoint{CheckpointID: "ckp_0123456789ab"}}, "lease"},
		{external.Request{Operation: external.OpCheckpointDelete}, "artifact"},
		{external.Request{Operation: external.OpFork, Artifact: art}, "desired"},
		{external.Request{Operation: external.OpRestore, Lease: lse}, "artifact"},
	} {
		tt.req.Config = root
		resp, err := serveOnce(t, local.Provider{}, tt.req)
		if err == nil || !strings.Contains(resp.Error, tt.want) {
			t.Errorf("%s missing %s: err = %v, want one naming it", tt.req.Operation, tt.want, err)
		}
	}
	// Path tricks reach the provider's own checks.
	resp, err = serveOnce(t, local.Provider{}, external.Request{Operation: external.OpCheckpointDelete, Config: root, Artifact: &provider.CheckpointArtifact{ID: "../../etc"}})
	if err == nil || !strings.Contains(resp.Error, "malformed") {
		t.Errorf("delete of artifact ../../etc: err = %v, want it refused as malformed", err)
	}
}

// checkpointConfig is the raw configuration of the fake program in mode as
// an ssh-lease provider with the given workspace, and its request log.
func checkpointConfig(t *testing.T, mode, workspace string) (provider.Config, string) {
	t.Helper()
	exe, env, log := fakeCommand(t, mode)
	envJSON, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return provider.Config{"command": exe, "env": string(envJSON), "workspace": workspace}, log
}

func configureExternal(t *testing.T, cfg provider.Config) (provider.Backend, error) {
	t.Helper()
	resolved, err := external.Provider{}.Spec().Resolve(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return external.Provider{}.Configure(resolved, provider.Runtime{})
}

// The external provider has the checkpoint interfaces and features its
// workspace setting names, and none without it.
func TestExternalWorkspaceSetting(t *testing.T) {
	for _, tt := range []struct {
		workspace              string
		native, fork, restores bool
		wantErr                string
	}{
		{workspace: ""},
		{workspace: "checkpoint", native: true},
		{workspace: "checkpoint, fork", native: true, fork: true},
		{workspace: "restore,checkpoint", native: true, restores: true},
		{workspace: "checkpoint,fork,restore", native: true, fork: true, restores: true},
		{workspace: "fork", wantErr: "need checkpoint"},
		{workspace: "checkpoint,snapshot", wantErr: `"snapshot" is not one of`},
	} {
		t.Run(tt.workspace, func(t *testing.T) {
			cfg, _ := checkpointConfig(t, "checkpoint", tt.workspace)
			b, err := configureExternal(t, cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "workspace") {
					t.Fatalf("Configure: err = %v, want one about workspace containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, native := b.(provider.NativeCheckpointBackend)
			_, fork := b.(provider.NativeForkBackend)
			_, restores := b.(provider.NativeRestoreBackend)
			if native != tt.native || fork != tt.fork || restores != tt.restores {
				t.Errorf("implements (checkpoint, fork, restore) = (%v, %v, %v), want (%v, %v, %v)", native, fork, restores, tt.native, tt.fork, tt.restores)
			}
			spec := b.Spec()
			if spec.Has(provider.FeatureCheckpoint) != native || spec.Has(provider.FeatureFork) != fork || spec.Has(provider.FeatureRestore) != restores {
				t.Errorf("spec features %v do not match the interfaces", spec.Features)
			}
		})
	}
	cfg, _ := checkpointConfig(t, "checkpoint", "checkpoint")
	cfg["mode"] = external.ModeDelegatedRun
	if _, err := configureExternal(t, cfg); err == nil || !strings.Contains(err.Error(), "workspace") {
		t.Errorf("workspace in delegated-run mode: err = %v, want it refused", err)
	}
	if _, err := external.New(external.Config{Command: "true", Workspace: []string{"checkpoint"}}, provider.Runtime{}); err == nil {
		t.Error("New with a workspace succeeded")
	}
}

// A program configured with workspace but not declaring it is refused
// before any checkpoint operation runs.
func TestExternalWorkspaceNeedsCapability(t *testing.T) {
	cfg, log := checkpointConfig(t, "norun", "checkpoint,fork")
	b, err := configureExternal(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	nb := b.(provider.NativeForkBackend)
	_, err = nb.CreateCheckpoint(t.Context(), provider.CheckpointRequest{Lease: provider.LeaseTarget{LeaseID: "cbx_0123456789ab"}, CheckpointID: lease.NewCheckpointID()})
	if !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), "capabilities.checkpoint") {
		t.Errorf("CreateCheckpoint: err = %v, want a precondition naming capabilities.checkpoint", err)
	}
	for _, r := range requests(t, log) {
		if r.Operation != external.OpCapabilities {
			t.Errorf("the program got %s", r.Operation)
		}
	}
}

// The program's checkpoint answers are validated; an artifact that is
// rejected is deleted.
func TestExternalCheckpointAnswers(t *testing.T) {
	cfg, log := checkpointConfig(t, "checkpoint", "checkpoint,fork,restore")
	b, err := configureExternal(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	nb := b.(provider.NativeForkBackend)
	ctx := t.Context()
	src := provider.LeaseTarget{LeaseID: "cbx_0123456789ab", Slug: "tidal-lobster", Host: "127.0.0.1", Port: 22, User: "crab"}
	id := lease.NewCheckpointID()
	a, err := nb.CreateCheckpoint(ctx, provider.CheckpointRequest{Lease: src, CheckpointID: id, Labels: map[string]string{"team": "infra"}})
	if err != nil {
		t.Fatalf("CreateCheckpoint: %v", err)
	}
	want := provider.CheckpointArtifact{
		ID: "image-" + id, Provider: external.Name, CheckpointID: id, SourceLease: src.LeaseID,
		Labels: map[string]string{provider.LabelCheckpoint: id, "team": "infra"},
	}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("CreateCheckpoint (-want +got):\n%s", diff)
	}
	all, err := nb.ListCheckpoints(ctx, provider.CheckpointListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].CheckpointID != "ckp_00000000000a" || all[0].Provider != external.Name {
		t.Errorf("ListCheckpoints = %+v, want the checkpoint ID taken from its label", all)
	}
	if err := nb.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: provider.CheckpointArtifact{ID: "gone"}}); err != nil {
		t.Errorf("DeleteCheckpoint of a gone artifact: %v, want nil", err)
	}
	req := acquireRequest(t)
	target, err := nb.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: a})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	if target.LeaseID != req.LeaseID || target.Host == "" {
		t.Errorf("Fork = %+v, want lease %s with SSH coordinates", target, req.LeaseID)
	}
	if _, err := nb.Fork(ctx, provider.ForkRequest{AcquireRequest: req, Artifact: provider.CheckpointArtifact{ID: "gone"}}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Fork from a gone artifact: err = %v, want one matching ErrNotFound", err)
	}
	if _, err := b.(provider.NativeRestoreBackend).Restore(ctx, provider.RestoreRequest{Lease: src, Artifact: a, PublicKey: req.PublicKey}); err != nil {
		t.Errorf("Restore: %v", err)
	}
	var sent []external.Request
	for _, r := range requests(t, log) {
		if r.Operation != external.OpCapabilities {
			sent = append(sent, r)
		}
	}
	if len(sent) != 6 {
		t.Fatalf("the program got %d requests, want 6", len(sent))
	}
	if c := sent[0].Checkpoint; c == nil || c.CheckpointID != id || c.Labels["team"] != "infra" || sent[0].Lease == nil || sent[0].Lease.LeaseID != src.LeaseID {
		t.Errorf("checkpoint-create request = %+v, want the lease and the checkpoint", sent[0])
	}
	if f := sent[3]; f.Desired == nil || f.Desired.PublicKey != req.PublicKey || f.Artifact == nil || f.Artifact.ID != a.ID {
		t.Errorf("fork request = %+v, want the desired lease with its key and the artifact", f)
	}
	if r := sent[5]; r.PublicKey != req.PublicKey || r.Artifact == nil || r.Lease == nil {
		t.Errorf("restore request = %+v, want the lease, the artifact and the key", r)
	}

	for _, mode := range []string{"checkpoint-wrong-id", "checkpoint-no-artifact"} {
		t.Run(mode, func(t *testing.T) {
			cfg, log := checkpointConfig(t, mode, "checkpoint")
			b, err := configureExternal(t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, err = b.(provider.NativeCheckpointBackend).CreateCheckpoint(ctx, provider.CheckpointRequest{Lease: src, CheckpointID: id})
			if err == nil || !strings.Contains(err.Error(), "rejected response") {
				t.Fatalf("CreateCheckpoint: err = %v, want the response rejected", err)
			}
			var deleted []string
			for _, r := range requests(t, log) {
				if r.Operation == external.OpCheckpointDelete {
					deleted = append(deleted, r.Artifact.ID)
				}
			}
			if want := map[string][]string{"checkpoint-wrong-id": {"image-wrong"}}[mode]; !cmp.Equal(want, deleted) {
				t.Errorf("deleted %v after the rejected answer, want %v", deleted, want)
			}
		})
	}
}
