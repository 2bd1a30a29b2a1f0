//go:build unix

package modal_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/modal"
)

func warmup(ttl time.Duration) provider.WarmupRequest {
	return provider.WarmupRequest{LeaseID: lease.NewID(), Slug: "blue-crab", TTL: ttl, IdleTimeout: 30 * time.Minute,
		Labels: map[string]string{"team": "infra"}}
}

// A sandbox's timeout is the lease's TTL, its idle timeout the lease's;
// a TTL beyond the max-lifetime cap is refused with a clear error and no
// sandbox, and the cap itself cannot exceed Modal's 24 hours.
func TestLifetime(t *testing.T) {
	ctx := context.Background()
	f := startFake(t)
	b := newBackend(t, f, modal.Config{MaxLifetime: 2 * time.Hour})
	if got := b.MaxLifetime(); got != 2*time.Hour {
		t.Errorf("MaxLifetime = %s, want 2h", got)
	}
	v, err := b.Warmup(ctx, warmup(90*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	_, timeout, idle, _ := f.Sandbox(v.CloudID)
	if timeout != 90*time.Minute || idle != 30*time.Minute {
		t.Errorf("sandbox timeout, idle = %s, %s; want 1h30m0s, 30m0s", timeout, idle)
	}
	before := f.Live()
	_, err = b.Warmup(ctx, warmup(3*time.Hour))
	if !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), "max-lifetime") {
		t.Errorf("Warmup with a TTL over the cap: err = %v, want a precondition error naming max-lifetime", err)
	}
	if diff := cmp.Diff(before, f.Live()); diff != "" {
		t.Errorf("a refused warmup changed the sandboxes (-before +after):\n%s", diff)
	}
	long := modal.Config{MaxLifetime: 25 * time.Hour, TokenID: "a", TokenSecret: "b"}
	if _, err := modal.New(long, provider.Runtime{}); err == nil || !strings.Contains(err.Error(), "24h") {
		t.Errorf("New with max-lifetime 25h: err = %v, want one naming Modal's 24h maximum", err)
	}
	if spec := (modal.Provider{}).Spec(); spec.LifetimeOption != "max-lifetime" {
		t.Errorf("spec LifetimeOption = %q", spec.LifetimeOption)
	}
}

// Sandboxes carry crabbox's ownership tags and the lease's labels; List,
// Status and Cleanup see only this owner's crabbox sandboxes, across
// SandboxList pages; cleanup terminates only expired, claimed ones.
func TestOwnershipAndCleanup(t *testing.T) {
	ctx := context.Background()
	f := startFake(t)
	b := newBackend(t, f, modal.Config{Owner: "Alice"})
	other := newBackend(t, f, modal.Config{Owner: "bob"})
	var mine []provider.LeaseView
	for range 3 {
		v, err := b.Warmup(ctx, warmup(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, v)
	}
	theirs, err := other.Warmup(ctx, warmup(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	stranger := f.AddSandbox(map[string]string{"crabbox": "true", "provider": "modal", "owner": "alice"}) // no lease tag
	tags, _, _, _ := f.Sandbox(mine[0].CloudID)
	for k, want := range map[string]string{"crabbox": "true", "provider": "modal", "owner": "alice", "lease": mine[0].ID,
		"slug": "blue-crab", "label.team": "infra", "created_by": "crabbox"} {
		if tags[k] != want {
			t.Errorf("tag %s = %q, want %q (tags %v)", k, tags[k], want, tags)
		}
	}
	views, err := b.List(ctx, provider.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range views {
		got = append(got, v.ID)
		if v.Labels["team"] != "infra" || v.Slug != "blue-crab" {
			t.Errorf("List view %+v lacks the slug or labels", v)
		}
	}
	want := []string{mine[2].ID, mine[1].ID, mine[0].ID}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if _, err := b.Status(ctx, provider.StatusRequest{ID: theirs.ID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Status of another owner's lease: err = %v, want ErrNotFound", err)
	}
	if _, err := b.Status(ctx, provider.StatusRequest{ID: "blue-crab"}); !errors.Is(err, provider.ErrConflict) {
		t.Errorf("Status by a slug of three leases: err = %v, want ErrConflict", err)
	}
	claimed := map[string]bool{mine[0].ID: true, mine[1].ID: true, theirs.ID: true}
	ds, err := b.Cleanup(ctx, provider.CleanupRequest{Now: time.Now().Add(2 * time.Hour), Claimed: func(id string) bool { return claimed[id] }})
	if err != nil {
		t.Fatal(err)
	}
	deleted := map[string]bool{}
	for _, d := range ds {
		if d.Err != nil {
			t.Errorf("cleanup of %s: %v", d.LeaseID, d.Err)
		}
		if d.Deleted {
			deleted[d.LeaseID] = true
		}
	}
	if diff := cmp.Diff(map[string]bool{mine[0].ID: true, mine[1].ID: true}, deleted); diff != "" {
		t.Errorf("cleanup deleted (-want +got):\n%s", diff)
	}
	live := f.Live()
	for _, id := range []string{mine[2].CloudID, theirs.CloudID, stranger} {
		if !contains(live, id) {
			t.Errorf("sandbox %s was terminated; live %v", id, live)
		}
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// A warmup whose sandbox was made but whose next step failed terminates
// the sandbox.
func TestWarmupRollback(t *testing.T) {
	ctx := context.Background()
	f := startFake(t)
	b := newBackend(t, f, modal.Config{})
	f.FailNext("TaskExecStart", status.Error(codes.InvalidArgument, "worker lost"))
	if _, err := b.Warmup(ctx, warmup(time.Hour)); err == nil {
		t.Fatal("Warmup succeeded despite a failed exec")
	}
	if live := f.Live(); len(live) != 0 {
		t.Errorf("sandboxes left after a failed warmup: %v", live)
	}
	f.FailNext("SandboxCreateV2", status.Error(codes.FailedPrecondition, "no capacity"))
	if _, err := b.Warmup(ctx, warmup(time.Hour)); err == nil || !strings.Contains(err.Error(), "no capacity") {
		t.Errorf("Warmup with a refused create: err = %v", err)
	}
	if live := f.Live(); len(live) != 0 {
		t.Errorf("sandboxes left after a refused create: %v", live)
	}
}

// Doctor reports working credentials, and bad ones without the secret.
func TestDoctorAndSecrets(t *testing.T) {
	ctx := context.Background()
	f := startFake(t)
	checks, err := newBackend(t, f, modal.Config{}).Doctor(ctx)
	if err != nil || len(checks) != 1 || !checks[0].OK {
		t.Errorf("Doctor = %+v, %v; want one passing check", checks, err)
	}
	const wrong = "as-wrong-secret-value"
	bad := newBackend(t, f, modal.Config{TokenID: testTokenID, TokenSecret: wrong})
	checks, err = bad.Doctor(ctx)
	if err != nil || len(checks) != 1 || checks[0].OK {
		t.Fatalf("Doctor with a wrong secret = %+v, %v; want one failing check", checks, err)
	}
	_, werr := bad.Warmup(ctx, warmup(time.Hour))
	if !errors.Is(werr, provider.ErrUnauthenticated) {
		t.Errorf("Warmup with a wrong secret: err = %v, want ErrUnauthenticated", werr)
	}
	for _, msg := range []string{checks[0].Detail, werr.Error()} {
		if strings.Contains(msg, wrong) || strings.Contains(msg, testTokenSecret) {
			t.Errorf("a message shows the token secret: %q", msg)
		}
	}
	// The SDK's own server URL (MODAL_SERVER_URL, set to the fake) and
	// token variables, without the endpoint option.
	t.Setenv("MODAL_TOKEN_ID", testTokenID)
	t.Setenv("MODAL_TOKEN_SECRET", testTokenSecret)
	be, err := modal.Provider{}.Configure(provider.Config{"owner": "carol", "workdir": t.TempDir()}, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.(*modal.Backend).Close()
	checks, err = be.(provider.DoctorBackend).Doctor(ctx)
	if err != nil || len(checks) != 1 || !checks[0].OK {
		t.Errorf("Doctor through the SDK's profile = %+v, %v", checks, err)
	}
}

// Bad configuration is refused with an error naming the setting.
func TestConfig(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  provider.Config
		want string
	}{
		"http endpoint":  {provider.Config{"endpoint": "http://api.modal.com"}, "endpoint"},
		"bad endpoint":   {provider.Config{"endpoint": "api.modal.com"}, "endpoint"},
		"relative dir":   {provider.Config{"workdir": "crabbox"}, "workdir"},
		"long lifetime":  {provider.Config{"max-lifetime": "48h"}, "max-lifetime"},
		"bad lifetime":   {provider.Config{"max-lifetime": "forever"}, "max-lifetime"},
		"app with space": {provider.Config{"app": "my app"}, "app"},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := modal.ParseConfig(tc.cfg)
			if err == nil {
				c.TokenID, c.TokenSecret = "a", "b"
				_, err = modal.New(c, provider.Runtime{})
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// A control-plane call answered UNAVAILABLE or RESOURCE_EXHAUSTED is
// retried, boundedly.
func TestRetry(t *testing.T) {
	ctx := context.Background()
	f := startFake(t)
	b := newBackend(t, f, modal.Config{})
	if _, err := b.List(ctx, provider.ListRequest{}); err != nil {
		t.Fatal(err)
	}
	f.FailNext("SandboxListV2", status.Error(codes.ResourceExhausted, "rate limited"))
	if _, err := b.List(ctx, provider.ListRequest{}); err != nil {
		t.Errorf("List after one rate-limited answer: %v", err)
	}
	calls := 0
	for _, c := range f.Calls() {
		if c == "SandboxListV2" {
			calls++
		}
	}
	if calls != 3 {
		t.Errorf("SandboxListV2 calls = %d, want 3 (one, then a refused one and its retry)", calls)
	}
}
