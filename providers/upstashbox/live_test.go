//go:build live

package upstashbox_test

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
	"github.com/crabbox-dev/crabbox/providers/upstashbox"
)

// TestLive runs one lease against the real API: go test -tags live
// -run TestLive ./providers/upstashbox/ with UPSTASH_BOX_API_KEY set (and
// UPSTASH_BOX_BASE_URL for another region).
func TestLive(t *testing.T) {
	if os.Getenv(upstashbox.APIKeyEnv) == "" && os.Getenv(upstashbox.CrabboxAPIKeyEnv) == "" {
		t.Skipf("set %s to run", upstashbox.APIKeyEnv)
	}
	cfg, err := upstashbox.Provider{}.Spec().Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := upstashbox.Provider{}.Configure(cfg, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	b := pb.(*upstashbox.Backend)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if checks, err := b.Doctor(ctx); err != nil || !checks[0].OK {
		t.Fatalf("Doctor = %+v, %v", checks, err)
	}
	id := lease.NewID()
	v, err := b.Warmup(ctx, provider.WarmupRequest{LeaseID: id, Slug: "live-test", TTL: 10 * time.Minute, IdleTimeout: 10 * time.Minute,
		ExpiresAt: time.Now().Add(10 * time.Minute), Labels: map[string]string{"suite": "live"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Stop(context.Background(), provider.StopRequest{ID: id}); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()
	if got := v.ExpiresAt.Sub(v.CreatedAt); got < 9*time.Minute || got > 11*time.Minute {
		t.Errorf("box lives %v, want the 10m TTL", got)
	}
	if all, err := b.List(ctx, provider.ListRequest{}); err != nil || !listed(all, id) {
		t.Errorf("List = %+v, %v; want lease %s", all, err, id)
	}
	p := v.WorkRoot + "/live/hello.txt"
	if err := b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: id, Path: p, Mode: 0o755, Body: strings.NewReader("hello\n"), Size: 6}); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	res, err := b.Run(ctx, provider.DelegatedRunRequest{
		LeaseID: id, Command: []string{"sh", "-c", `cat hello.txt; test -x hello.txt && echo "$LIVE_VAR"; echo oops >&2; exit 3`},
		Dir: v.WorkRoot + "/live", Env: map[string]string{"LIVE_VAR": "a b"}, Stdout: &out, Stderr: &errOut,
	})
	if err != nil || res.ExitCode != 3 || out.String() != "hello\na b\n" || errOut.String() != "oops\n" {
		t.Errorf("Run = %v, %v, stdout %q, stderr %q", res, err, out.String(), errOut.String())
	}
	res, err = b.Run(ctx, provider.DelegatedRunRequest{LeaseID: id, Command: []string{"sh", "-c", "kill -TERM $$"}, Dir: v.WorkRoot})
	if err != nil || res.ExitCode != 143 {
		t.Errorf("Run of a command killed by SIGTERM = %v, %v; want exit 143", res, err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = b.Run(rctx, provider.DelegatedRunRequest{LeaseID: id, Command: []string{"sleep", "300"}, Dir: v.WorkRoot})
	rcancel()
	if err == nil {
		t.Error("Run past its deadline succeeded")
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

func listed(all []provider.LeaseView, id string) bool {
	for _, v := range all {
		if v.ID == id {
			return true
		}
	}
	return false
}
