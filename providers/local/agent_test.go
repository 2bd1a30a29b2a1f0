package local

import (
	"errors"
	"fmt"
	procid "github.com/crabbox-dev/crabbox/internal/proc"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
)

// TestAgentOutlivesBackend is `crabbox warmup` then `crabbox run --id` and
// `crabbox stop` in separate processes: the lease's agent outlives the
// backend that started it, and a later backend over the same root uses and
// releases it.
func TestAgentOutlivesBackend(t *testing.T) {
	root := t.TempDir()
	warmup := newBackend(t, Config{Root: root, Agent: agentPath(t)}, nil)
	req, key := newRequest(t, time.Now(), time.Hour)
	target, err := warmup.Acquire(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if err := warmup.Close(); err != nil {
		t.Fatal(err)
	}

	later := newBackend(t, Config{Root: root, Agent: agentPath(t)}, nil)
	resolved, err := later.Resolve(t.Context(), provider.ResolveRequest{ID: req.Slug})
	if err != nil {
		t.Fatalf("Resolve after the acquiring backend closed: %v", err)
	}
	if diff := cmp.Diff(target, resolved); diff != "" {
		t.Errorf("Resolve differs from Acquire (-acquire +resolve):\n%s", diff)
	}
	client := dial(t, resolved, key)
	if out, code := run(t, client, "pwd; exit 7"); code != 7 || strings.TrimSpace(out) != resolved.WorkRoot {
		t.Errorf("pwd; exit 7 = (%q, %d), want (%q, 7)", out, code, resolved.WorkRoot)
	}
	pid := agentPID(t, later, req.LeaseID)

	if err := later.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: provider.LeaseTarget{LeaseID: req.LeaseID}}); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	if procid.Running(pid) {
		t.Errorf("agent (pid %d) still runs after release", pid)
	}
	checkEmpty(t, root)
	if _, err := later.Resolve(t.Context(), provider.ResolveRequest{ID: req.LeaseID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Resolve after release: err = %v, want one matching ErrNotFound", err)
	}
}

// TestAgentExpires: an agent stops and removes its lease directory when
// the lease expires, with nobody watching.
func TestAgentExpires(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	b := newBackend(t, Config{Root: root, Agent: agentPath(t)}, nil)
	req, _ := newRequest(t, time.Now(), 2*time.Second)
	if _, err := b.Acquire(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	pid := agentPID(t, b, req.LeaseID)
	if !waitExit(t.Context(), pid, 30*time.Second) {
		_ = b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: provider.LeaseTarget{LeaseID: req.LeaseID}})
		t.Fatalf("agent (pid %d) still runs 30s after the lease expired", pid)
	}
	checkEmpty(t, root)
}

// TestDeadAgentLeftovers: when an agent dies without cleaning up, its lease
// is no longer found or listed, and cleanup removes what it left, claim or
// not: its agent is gone, so nothing serves that directory again.
func TestDeadAgentLeftovers(t *testing.T) {
	root := t.TempDir()
	b := newBackend(t, Config{Root: root, Agent: agentPath(t)}, nil)
	req, _ := newRequest(t, time.Now(), time.Hour)
	if _, err := b.Acquire(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	pid := agentPID(t, b, req.LeaseID)
	p, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if !waitExit(t.Context(), pid, 30*time.Second) {
		t.Fatalf("killed agent (pid %d) still runs", pid)
	}

	if _, err := b.Resolve(t.Context(), provider.ResolveRequest{ID: req.LeaseID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Resolve of a dead agent's lease: err = %v, want one matching ErrNotFound", err)
	}
	if all, err := b.List(t.Context(), provider.ListRequest{}); err != nil || len(all) != 0 {
		t.Errorf("List = %v, %v; want no leases", all, err)
	}
	now := time.Now()
	reason := fmt.Sprintf("its agent (pid %d) is gone: removing leftovers", pid)
	for _, tt := range []struct {
		dryRun bool
		want   provider.CleanupDecision
	}{
		{true, provider.CleanupDecision{LeaseID: req.LeaseID, Slug: req.Slug, Delete: true, Reason: reason}},
		{false, provider.CleanupDecision{LeaseID: req.LeaseID, Slug: req.Slug, Delete: true, Deleted: true, Reason: reason}},
	} {
		got, err := b.Cleanup(t.Context(), provider.CleanupRequest{DryRun: tt.dryRun, Now: now, Claimed: func(string) bool { return false }})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]provider.CleanupDecision{tt.want}, got); diff != "" {
			t.Errorf("Cleanup (dry run: %v) decisions (-want +got):\n%s", tt.dryRun, diff)
		}
	}
	checkEmpty(t, root)
}

func agentPID(t *testing.T, b *Backend, id string) int {
	t.Helper()
	rec, err := readRecord(b.leaseDir(id))
	if err != nil {
		t.Fatal(err)
	}
	if rec.PID == 0 {
		t.Fatalf("lease %s records no agent pid", id)
	}
	return rec.PID
}

// TestAgentExitsWithoutLeaseDir: an agent whose lease directory is removed
// exits within leaseDirPoll, closing its port, with nobody signalling it.
func TestAgentExitsWithoutLeaseDir(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	b := newBackend(t, Config{Root: root, Agent: agentPath(t)}, nil)
	req, _ := newRequest(t, time.Now(), time.Hour)
	target, err := b.Acquire(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	pid := agentPID(t, b, req.LeaseID)
	if err := os.RemoveAll(b.leaseDir(req.LeaseID)); err != nil {
		t.Fatal(err)
	}
	if !waitExit(t.Context(), pid, 30*time.Second) {
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Kill()
		}
		t.Fatalf("agent (pid %d) still runs 30s after its lease directory was removed", pid)
	}
	if probe(t.Context(), target.Port, target.HostKey) {
		t.Errorf("port %d still answers with the box's host key", target.Port)
	}
	checkEmpty(t, root)
}
