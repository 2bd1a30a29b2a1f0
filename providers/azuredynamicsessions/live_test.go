//go:build live

package azuredynamicsessions_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/azuredynamicsessions"
	"github.com/crabbox-dev/crabbox/providers/azuredynamicsessions/azuredynamicsessionsspec"
)

// TestLive runs one lease against a real Shell session pool:
//
//	CRABBOX_AZURE_DYNAMIC_SESSIONS_ENDPOINT=https://... go test -tags live ./providers/azuredynamicsessions/
//
// with `az login` done (or CRABBOX_AZURE_DYNAMIC_SESSIONS_TOKEN set) and
// the Azure ContainerApps Session Executor role on the pool.
func TestLive(t *testing.T) {
	endpoint := os.Getenv(azuredynamicsessionsspec.EndpointEnv)
	if endpoint == "" {
		t.Skipf("set %s (and log in with az) to run", azuredynamicsessionsspec.EndpointEnv)
	}
	cfg, err := azuredynamicsessions.Provider{}.Spec().Resolve(provider.Config{"endpoint": endpoint})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := azuredynamicsessions.Provider{}.Configure(cfg, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	b := pb.(*azuredynamicsessions.Backend)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	checks, err := b.Doctor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		if !c.OK {
			t.Fatalf("doctor: %s: %s", c.Name, c.Detail)
		}
	}
	id := lease.NewID()
	now := time.Now()
	v, err := b.Warmup(ctx, provider.WarmupRequest{LeaseID: id, Slug: "live-test", TTL: 10 * time.Minute, IdleTimeout: 5 * time.Minute,
		ExpiresAt: now.Add(5 * time.Minute), Labels: map[string]string{"suite": "live"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Stop(context.Background(), provider.StopRequest{ID: id}); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()
	p := v.WorkRoot + "/live/hello.txt"
	if err := b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: id, Path: p, Mode: 0o644, Body: strings.NewReader("hello\n"), Size: 6}); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	res, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: id, Command: []string{"sh", "-c", "cat hello.txt; echo oops >&2; kill -TERM $$"},
		Dir: v.WorkRoot + "/live", Env: map[string]string{"X": "1"}, Stdout: &out, Stderr: &errOut})
	if err != nil || res.ExitCode != 143 || out.String() != "hello\n" || errOut.String() != "oops\n" {
		t.Errorf("Run = %v, %v, stdout %q, stderr %q; want 143, hello, oops", res, err, out.String(), errOut.String())
	}
	rc, err := b.ReadFile(ctx, provider.ReadFileRequest{LeaseID: id, Path: p})
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(body) != "hello\n" {
		t.Errorf("ReadFile = %q, %v", body, err)
	}
	all, err := b.List(ctx, provider.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range all {
		found = found || l.ID == id
	}
	if !found {
		t.Errorf("List does not show lease %s: %+v", id, all)
	}
}
