//go:build unix

package opensandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Warmup creates the sandbox with the image, resources, the keep-alive
// entrypoint, a timeout at the lease's expiry and crabbox's labels for
// this owner, waits for it to run, and makes the work root.
func TestWarmup(t *testing.T) {
	f := newFake(t)
	f.pendingGets = 2
	b := newBackend(t, f)
	ctx := testContext(t)
	now := f.clock.Now()
	clock := f.clock.(*clockwork.FakeClock)
	polled := make(chan struct{})
	go func() { // the two polls of a Pending sandbox wait on the clock
		defer close(polled)
		for range 2 {
			if err := clock.BlockUntilContext(ctx, 1); err != nil {
				return
			}
			clock.Advance(time.Second)
		}
	}()
	v := warmup(t, ctx, b, "blue-crab")
	<-polled

	f.mu.Lock()
	sb := f.sandboxes[v.CloudID]
	got := struct {
		Image, State string
		Timeout      int64
		Resources    map[string]string
		Entrypoint   []string
	}{sb.image, sb.state, sb.timeout, sb.resources, sb.entrypoint}
	meta := maps.Clone(sb.metadata)
	f.mu.Unlock()
	want := struct {
		Image, State string
		Timeout      int64
		Resources    map[string]string
		Entrypoint   []string
	}{"ubuntu:24.04", "Running", 1800, map[string]string{"cpu": "1", "memory": "2Gi"}, []string{"tail", "-f", "/dev/null"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sandbox (-want +got):\n%s", diff)
	}
	wantMeta := map[string]string{
		"crabbox": "true", "created_by": "crabbox", "provider": "opensandbox", "lease": v.ID, "slug": "blue-crab",
		"owner": "tester", "server_type": "ubuntu_24.04", "target": "linux", "keep": "false", "state": "ready",
		"created_at": strconv.FormatInt(now.Unix(), 10), "last_touched_at": strconv.FormatInt(now.Unix(), 10),
		"expires_at": strconv.FormatInt(now.Add(30*time.Minute).Unix(), 10), "idle_timeout_secs": "1800", "ttl_secs": "5400",
		"team": "crabs",
	}
	if diff := cmp.Diff(wantMeta, meta); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	wantView := provider.LeaseView{
		ID: v.ID, Slug: "blue-crab", Provider: "opensandbox", CloudID: v.CloudID, State: "Running", Labels: wantMeta,
		CreatedAt: now.UTC(), ExpiresAt: now.Add(30 * time.Minute).UTC(), WorkRoot: f.root + "/work",
	}
	if diff := cmp.Diff(wantView, v); diff != "" {
		t.Errorf("view (-want +got):\n%s", diff)
	}
	if n := f.count("get"); n != 3 {
		t.Errorf("%d GETs of the new sandbox, want 3 (Pending twice, then Running)", n)
	}
	if ids := f.sandboxIDs(); len(ids) != 1 {
		t.Errorf("sandboxes: %v", ids)
	}
}

// List, Status, Stop and Cleanup see only this owner's crabbox sandboxes
// of this provider, however many pages the server lists them on.
func TestOwnerScopeAndPages(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	expires := f.clock.Now().Add(time.Hour)
	labels := func(owner, prov string) map[string]string {
		l, err := cloud.NewLabels(provider.AcquireRequest{LeaseID: lease.NewID(), CreatedAt: f.clock.Now(), ExpiresAt: expires},
			cloud.LabelOptions{Provider: prov, Owner: owner, State: cloud.StateReady})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	var ours []string
	for range 150 {
		l := labels("tester", "opensandbox")
		f.plant(l, expires)
		ours = append(ours, l["lease"])
	}
	other := labels("someone-else", "opensandbox")
	f.plant(other, expires)
	f.plant(labels("tester", "e2b"), expires)
	f.plant(map[string]string{"team": "not-crabbox"}, expires)

	all, err := b.List(ctx, provider.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range all {
		got = append(got, v.ID)
	}
	if diff := cmp.Diff(ours, got, cmpSorted); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if n := f.count("list"); n != 2 {
		t.Errorf("List made %d list requests, want 2 (two pages of 100)", n)
	}
	if _, err := b.Status(ctx, provider.StatusRequest{ID: other["lease"]}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Status of another owner's lease: %v, want ErrNotFound", err)
	}
	if err := b.Stop(ctx, provider.StopRequest{ID: other["lease"]}); err != nil {
		t.Fatal(err)
	}
	ds, err := b.Cleanup(ctx, provider.CleanupRequest{Now: expires.Add(time.Minute), Claimed: func(string) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 150 {
		t.Errorf("Cleanup decided about %d sandboxes, want this owner's 150", len(ds))
	}
	if left := f.sandboxIDs(); len(left) != 3 {
		t.Errorf("after Stop and Cleanup %d sandboxes are left, want the 3 that are not this owner's", len(left))
	}
}

var cmpSorted = cmp.Transformer("sort", func(in []string) []string {
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

// Status and Stop take a slug; a failed sandbox is gone for Status and
// List, and Stop still deletes it.
func TestSlugAndFailed(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	v := warmup(t, ctx, b, "red-crab")
	st, err := b.Status(ctx, provider.StatusRequest{ID: "red-crab"})
	if err != nil || st.ID != v.ID {
		t.Fatalf("Status by slug: %+v, %v", st, err)
	}
	f.setState(v.CloudID, "Failed")
	if _, err := b.Status(ctx, provider.StatusRequest{ID: v.ID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Status of a failed sandbox: %v, want ErrNotFound", err)
	}
	if all, err := b.List(ctx, provider.ListRequest{}); err != nil || len(all) != 0 {
		t.Errorf("List with a failed sandbox: %+v, %v; want none", all, err)
	}
	if err := b.Stop(ctx, provider.StopRequest{ID: "red-crab"}); err != nil {
		t.Fatal(err)
	}
	if ids := f.sandboxIDs(); len(ids) != 0 {
		t.Errorf("Stop left %v", ids)
	}
	if err := b.Stop(ctx, provider.StopRequest{ID: "red-crab"}); err != nil {
		t.Errorf("Stop of a gone lease: %v", err)
	}
}

// Output arrives byte for byte: blank lines, a missing last newline, and
// the exit code; carriage returns are line ends to execd.
func TestRunOutput(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	v := warmup(t, ctx, b, "")
	for _, tc := range []struct {
		script, stdout, stderr string
		code                   int
	}{
		{`printf 'a\n\nb\n'; printf 'x' >&2`, "a\n\nb\n", "x", 0},
		{`printf '\n\n'; exit 4`, "\n\n", "", 4},
		{`printf 'no end'`, "no end", "", 0},
		{`printf 'bar\r\nbaz\r'`, "bar\nbaz\n", "", 0},
		{`exec no-such-command-here`, "", "", 127},
	} {
		var out, errOut bytes.Buffer
		res, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"sh", "-c", tc.script},
			Dir: f.root + "/work/new/dir", Stdout: &out, Stderr: &errOut})
		if err != nil {
			t.Fatalf("%s: %v", tc.script, err)
		}
		if res.ExitCode != tc.code || out.String() != tc.stdout || (tc.code != 127 && errOut.String() != tc.stderr) {
			t.Errorf("%s: exit %d stdout %q stderr %q; want %d %q %q", tc.script, res.ExitCode, out.String(), errOut.String(), tc.code, tc.stdout, tc.stderr)
		}
	}
	_, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"cat"}, Stdin: strings.NewReader("x")})
	if !errors.Is(err, provider.ErrPrecondition) {
		t.Errorf("Run with stdin: %v, want ErrPrecondition (execd takes none)", err)
	}
	if spec := b.Spec(); spec.Has(provider.FeatureStdin) {
		t.Error("spec declares stdin, which execd's command API does not take")
	}
}

// Warmup removes what it made when any step fails or the caller gives up,
// including a sandbox whose create answer was lost.
func TestWarmupRollback(t *testing.T) {
	for _, ft := range []fakeFault{
		{op: "create"},
		{op: "create", after: true},
		{op: "create", after: true, hang: true},
		{op: "create", hang: true},
		{op: "create", status: 401},
		{op: "get", status: 404},
		{op: "endpoint", status: 400},
		{op: "ping", status: 401},
		{op: "mkdir"},
	} {
		t.Run(fmt.Sprintf("%s/after=%v/hang=%v", ft.op, ft.after, ft.hang), func(t *testing.T) {
			f := newFake(t)
			b := newBackend(t, f)
			ctx := testContext(t)
			wctx := ctx
			if ft.hang {
				var cancel context.CancelFunc
				wctx, cancel = context.WithCancel(ctx)
				defer cancel()
				ft.onHang = cancel
			}
			f.addFault(ft)
			_, err := b.Warmup(wctx, provider.WarmupRequest{LeaseID: lease.NewID(), TTL: time.Hour, IdleTimeout: time.Hour})
			if err == nil {
				t.Fatal("Warmup succeeded despite the fault")
			}
			if strings.Contains(err.Error(), f.key) {
				t.Errorf("the error shows the API key: %v", err)
			}
			if ids := f.sandboxIDs(); len(ids) != 0 {
				t.Errorf("sandboxes left after a failed warmup: %v (error %v)", ids, err)
			}
		})
	}
	// A sandbox that fails while starting is named in the error, and
	// deleted.
	f := newFake(t)
	f.startState = "Failed"
	b := newBackend(t, f)
	_, err := b.Warmup(testContext(t), provider.WarmupRequest{LeaseID: lease.NewID(), TTL: time.Hour, IdleTimeout: time.Hour})
	if err == nil || !strings.Contains(err.Error(), "is Failed, not running") {
		t.Errorf("Warmup of a sandbox that fails: %v", err)
	}
	if ids := f.sandboxIDs(); len(ids) != 0 {
		t.Errorf("sandboxes left: %v", ids)
	}
}
