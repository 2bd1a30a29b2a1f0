package local

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
)

func TestConformanceInProcess(t *testing.T) {
	providertest.RunSSHLease(t, providertest.Harness{
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			root := t.TempDir()
			t.Cleanup(func() { checkEmpty(t, root) })
			return newBackend(t, Config{Root: root}, nil)
		},
		Reopen: reopen,
	})
}

func TestConformanceAgent(t *testing.T) {
	providertest.RunSSHLease(t, providertest.Harness{
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			root := t.TempDir()
			t.Cleanup(func() { checkEmpty(t, root) })
			return newBackend(t, Config{Root: root, Agent: agentPath(t)}, nil)
		},
		Reopen: reopen,
		// An agent is a child process that outlives the backend by design;
		// the goroutine reaping it runs until it exits (here, until the
		// suite releases the lease through the reopened backend).
		IgnoreGoroutines: []goleak.Option{goleak.IgnoreAnyFunction("github.com/crabbox-dev/crabbox/providers/local.(*Backend).startAgent.func1")},
	})
}

// reopen is a fresh backend on the same root as closed.
func reopen(t *testing.T, closed provider.SSHLeaseBackend) provider.SSHLeaseBackend {
	return newBackend(t, closed.(*Backend).cfg, nil)
}

func TestConfigure(t *testing.T) {
	p, err := provider.Default().Lookup(Name)
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	tests := []struct {
		name     string
		cfg      provider.Config
		stateDir string
		wantRoot string
		wantErr  string
	}{
		{name: "state dir", stateDir: state, wantRoot: filepath.Join(state, "local")},
		{name: "root", cfg: provider.Config{"root": filepath.Join(state, "r")}, wantRoot: filepath.Join(state, "r")},
		{name: "no root", wantErr: "no root directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := p.Spec().Resolve(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := p.Configure(cfg, provider.Runtime{StateDir: tt.stateDir})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Configure: err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Configure: %v", err)
			}
			lb := b.(*Backend)
			defer lb.Close()
			if lb.cfg.Root != tt.wantRoot || lb.cfg.Agent != "" {
				t.Errorf("config = %+v, want root %s and no agent", lb.cfg, tt.wantRoot)
			}
		})
	}
}

// TestAcquireRollsBack: a failed acquire leaves no lease directory.
func TestAcquireRollsBack(t *testing.T) {
	tests := []struct {
		name  string
		agent func(t *testing.T) string
		req   func(req *provider.AcquireRequest)
	}{
		{name: "bad public key", req: func(req *provider.AcquireRequest) { req.PublicKey = "ssh-ed25519 AAAA" }},
		{name: "expiry passed", req: func(req *provider.AcquireRequest) { req.ExpiresAt = req.CreatedAt.Add(-time.Second) }},
		{name: "lease ID escapes the root", req: func(req *provider.AcquireRequest) { req.LeaseID = "../x" }},
		{name: "no agent binary", agent: func(t *testing.T) string { return filepath.Join(t.TempDir(), "no-such-agent") }},
		{name: "agent exits before ready", agent: func(t *testing.T) string {
			script := filepath.Join(t.TempDir(), "agent")
			if err := os.WriteFile(script, []byte("#!/bin/sh\necho broken agent >&2\nexit 3\n"), 0o700); err != nil {
				t.Fatal(err)
			}
			return script
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			cfg := Config{Root: root}
			if tt.agent != nil {
				cfg.Agent = tt.agent(t)
			}
			b := newBackend(t, cfg, nil)
			req, _ := newRequest(t, time.Now(), time.Hour)
			if tt.req != nil {
				tt.req(&req)
			}
			if _, err := b.Acquire(t.Context(), req); err == nil {
				t.Fatal("Acquire succeeded")
			} else {
				t.Logf("Acquire: %v", err)
			}
			checkEmpty(t, root)
		})
	}
}

func TestAcquireTwiceConflicts(t *testing.T) {
	b := newBackend(t, Config{Root: t.TempDir()}, nil)
	req, _ := newRequest(t, time.Now(), time.Hour)
	if _, err := b.Acquire(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(t.Context(), req); !errors.Is(err, provider.ErrConflict) {
		t.Errorf("second Acquire of %s: err = %v, want one matching ErrConflict", req.LeaseID, err)
	}
	if _, err := b.Resolve(t.Context(), provider.ResolveRequest{ID: req.LeaseID}); err != nil {
		t.Errorf("the first lease is gone after a conflicting acquire: %v", err)
	}
}

// TestCloseStopsInProcessBoxes: closing the backend ends its boxes and
// their commands.
func TestCloseStopsInProcessBoxes(t *testing.T) {
	root := t.TempDir()
	b, err := New(Config{Root: root}, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	req, key := newRequest(t, time.Now(), time.Hour)
	target, err := b.Acquire(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := dial(t, target, key).NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Start("sleep 60"); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := sess.Wait(); err == nil {
		t.Error("command survived Close")
	}
	checkEmpty(t, root)
	if _, err := b.Acquire(t.Context(), req); err == nil {
		t.Error("Acquire after Close succeeded")
	}
}
