package gcp_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/gcp"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// Environment of the acquiring child process of TestCleanupAfterKilledAcquire.
const (
	childEndpoint = "CRABBOX_GCP_TEST_CHILD_ENDPOINT"
	childState    = "CRABBOX_GCP_TEST_CHILD_STATE"
	childWorkRoot = "CRABBOX_GCP_TEST_CHILD_WORK_ROOT"
)

// acquireChild is the child process: it acquires a lease through the
// lease store, as the library does, and is killed while it waits.
func acquireChild() int {
	b, err := gcp.New(gcp.Config{
		Project: project, Zones: zones, SourceRange: sourceRange, WorkRoot: os.Getenv(childWorkRoot),
		Endpoint: os.Getenv(childEndpoint), PollInterval: 10 * time.Millisecond,
	}, provider.Runtime{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	store, err := lease.OpenStore(os.Getenv(childState))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	_, err = store.Acquire(context.Background(), b, lease.Terms{Slug: "crashed-crab"})
	fmt.Fprintln(os.Stderr, "acquire returned:", err)
	return 1
}

// TestCleanupAfterKilledAcquire kills the process acquiring a lease after
// its instance was created (while it waits for the address), then shows
// that `crabbox cleanup` finds the instance from the claim the process
// left and deletes it.
func TestCleanupAfterKilledAcquire(t *testing.T) {
	e := newEnv(t)
	state := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waiting := make(chan struct{})
	e.api.setFault(opInstanceGet, fault{hang: true, times: 1, onHang: func() { close(waiting) }})

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEndpoint+"="+e.api.URL, childState+"="+state, childWorkRoot+"="+t.TempDir())
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-waiting:
	case err := <-exited:
		t.Fatalf("acquiring process ended before it was killed: %v", err)
	case <-ctx.Done():
		t.Fatal("the acquiring process never waited for its instance's address")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited

	if in := e.api.instanceList(); len(in) != 1 {
		t.Fatalf("after the crash: instances %v; want the one a crash leaves", in)
	}

	// Two hours later (past the acquire grace), cleanup of this client.
	clock := clockwork.NewFakeClockAt(time.Now().Add(2 * time.Hour))
	reg := provider.NewRegistry()
	reg.Register(fixedProvider{build: func(rt provider.Runtime) (provider.Backend, error) { return gcp.New(e.cfg, rt) }})
	client, err := crabbox.New(crabbox.WithRegistry(reg), crabbox.WithStateDir(state), crabbox.WithProvider(gcp.Name),
		crabbox.WithRuntime(runtime(t, clock, e.logs)))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	claims, err := cloudtest.Store(t, client.StateDir()).List()
	if err != nil || len(claims) != 1 || claims[0].State != lease.StateAcquiring {
		t.Fatalf("claims after the crash = %+v, %v; want one acquiring", claims, err)
	}

	ds, err := client.Cleanup(ctx, crabbox.CleanupOptions{Provider: gcp.Name, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if !hasDecision(ds, claims[0].ID, crabbox.CleanupDelete, "dry run") {
		t.Errorf("dry-run decisions = %+v, want the crashed lease deleted on a real run", ds)
	}
	if len(e.api.instanceList()) != 1 {
		t.Fatal("dry run deleted the instance")
	}

	ds, err = client.Cleanup(ctx, crabbox.CleanupOptions{Provider: gcp.Name})
	if err != nil {
		t.Fatal(err)
	}
	if !hasDecision(ds, claims[0].ID, crabbox.CleanupDelete, "deleted") {
		t.Errorf("decisions = %+v, want the crashed lease deleted", ds)
	}
	if in := e.api.instanceList(); len(in) != 0 {
		t.Errorf("instances left: %v", in)
	}
	if r := e.api.fleet.Running(); len(r) != 0 {
		t.Errorf("boxes still running: %v", r)
	}
	if diff := cmp.Diff([]string{"insert firewall", "insert instance", "delete instance"}, events(e.api)); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
	if left, _ := cloudtest.Store(t, client.StateDir()).List(); len(left) != 0 {
		t.Errorf("claims left: %+v", left)
	}
	if strings.Contains(e.logs.String(), "BEGIN OPENSSH PRIVATE KEY") {
		t.Error("a private key reached the logs")
	}
}

func hasDecision(ds []crabbox.CleanupOutcome, id string, action crabbox.CleanupAction, result string) bool {
	for _, d := range ds {
		if d.LeaseID == id && d.Action == action && d.Result == result {
			return true
		}
	}
	return false
}

// fixedProvider is the gcp provider with a configuration only a Go
// program can give (the fake endpoint).
type fixedProvider struct {
	build func(provider.Runtime) (provider.Backend, error)
}

func (fixedProvider) Spec() provider.Spec { return gcp.Provider{}.Spec() }

func (p fixedProvider) Configure(_ provider.Config, rt provider.Runtime) (provider.Backend, error) {
	return p.build(rt)
}
