//go:build live

package vercel_test

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
	"github.com/crabbox-dev/crabbox/providers/vercel"
)

// TestLive runs one lease against the real API: go test -tags live
// ./providers/vercel/ with VERCEL_TOKEN, VERCEL_PROJECT_ID and (for a
// team's project) VERCEL_TEAM_ID set.
func TestLive(t *testing.T) {
	if os.Getenv(vercel.TokenEnv) == "" || os.Getenv(vercel.ProjectEnv) == "" {
		t.Skipf("set %s and %s to run", vercel.TokenEnv, vercel.ProjectEnv)
	}
	cfg, err := vercel.Provider{}.Spec().Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := vercel.Provider{}.Configure(cfg, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	b := pb.(*vercel.Backend)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	id := lease.NewID()
	v, err := b.Warmup(ctx, provider.WarmupRequest{LeaseID: id, Slug: "live-test", TTL: 10 * time.Minute, IdleTimeout: 10 * time.Minute, ExpiresAt: time.Now().Add(10 * time.Minute)})
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
	var out bytes.Buffer
	res, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: id, Command: []string{"sh", "-c", "cat hello.txt; exit 3"}, Dir: v.WorkRoot + "/live", Stdout: &out, Stderr: os.Stderr})
	if err != nil || res.ExitCode != 3 || out.String() != "hello\n" {
		t.Errorf("Run = %v, %v, %q", res, err, out.String())
	}
	rc, err := b.ReadFile(ctx, provider.ReadFileRequest{LeaseID: id, Path: p})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if body, err := io.ReadAll(rc); err != nil || string(body) != "hello\n" {
		t.Errorf("ReadFile = %q, %v", body, err)
	}
}
