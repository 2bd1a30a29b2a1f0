package aws_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/aws"
	"github.com/crabbox-dev/crabbox/providers/aws/internal/fakeec2"
)

// strangers are instances crabbox must never list, resolve or touch: a
// box of another provider, one with only a crabbox-like name, and one
// whose lease tag is not a lease ID.
func addStrangers(w *world, regionName, leaseID string) []fakeec2.Instance {
	return []fakeec2.Instance{
		w.ec2.AddInstance(regionName, fakeec2.Instance{Tags: map[string]string{
			"crabbox": "true", "provider": "hetzner", "lease": leaseID, "expires_at": "1",
		}}),
		w.ec2.AddInstance(regionName, fakeec2.Instance{Tags: map[string]string{"Name": "crabbox-" + leaseID}}),
		w.ec2.AddInstance(regionName, fakeec2.Instance{Tags: map[string]string{
			"crabbox": "true", "provider": "aws", "lease": "web-1", "expires_at": "1",
		}}),
	}
}

func TestLeasesAcrossRegions(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	east := w.backend(t, func(c *aws.Config) { c.Regions = []string{"us-east-1", "eu-west-1"} })
	west := w.backend(t, func(c *aws.Config) { c.Regions = []string{"eu-west-1", "us-east-1"} })
	if got := east.Regions(); !slices.Equal(got, []string{"us-east-1", "eu-west-1"}) {
		t.Errorf("Regions = %v", got)
	}
	a, err := east.Acquire(ctx, request(t))
	if err != nil {
		t.Fatal(err)
	}
	reqB := request(t)
	reqB.Slug = "west-crab"
	bl, err := west.Acquire(ctx, reqB)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.ec2.Instances("us-east-1")) != 1 || len(w.ec2.Instances("eu-west-1")) != 1 {
		t.Fatalf("instances: us-east-1 %+v, eu-west-1 %+v; want one each", w.ec2.Instances("us-east-1"), w.ec2.Instances("eu-west-1"))
	}
	strangers := addStrangers(w, "eu-west-1", bl.LeaseID)

	all, err := east.List(ctx, provider.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range all {
		ids = append(ids, l.LeaseID)
	}
	slices.Sort(ids)
	want := []string{a.LeaseID, bl.LeaseID}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("List = %v, want %v", ids, want)
	}

	got, err := east.Resolve(ctx, provider.ResolveRequest{ID: "west-crab"})
	if err != nil || got.CloudID != bl.CloudID {
		t.Errorf("Resolve by slug in the second region = %+v, %v; want %s", got, err, bl.CloudID)
	}

	later := bl.ExpiresAt.Add(time.Hour)
	touched, err := east.Touch(ctx, provider.TouchRequest{Lease: bl, Now: bl.CreatedAt.Add(time.Minute), ExpiresAt: later})
	if err != nil || !touched.ExpiresAt.Equal(later) {
		t.Fatalf("Touch = %+v, %v", touched, err)
	}
	inst, _ := w.ec2.Instance("eu-west-1", bl.CloudID)
	if inst.Tags["expires_at"] != unix(later) || inst.Tags["last_touched_at"] != unix(bl.CreatedAt.Add(time.Minute)) {
		t.Errorf("tags after Touch = %v", inst.Tags)
	}

	// Release knows only the lease ID, as after a crash: found by tags.
	if err := east.ReleaseLease(ctx, provider.ReleaseRequest{Lease: provider.LeaseTarget{LeaseID: bl.LeaseID}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := w.ec2.Instance("eu-west-1", bl.CloudID); got.State != "terminated" {
		t.Errorf("released instance is %s", got.State)
	}
	for _, k := range w.ec2.KeyPairs("eu-west-1") {
		t.Errorf("key pair left after release: %+v", k)
	}
	for _, s := range strangers {
		if got, _ := w.ec2.Instance("eu-west-1", s.ID); got.State != "running" {
			t.Errorf("release touched another instance %s (tags %v): %s", s.ID, s.Tags, got.State)
		}
	}
	if _, err := east.Resolve(ctx, provider.ResolveRequest{ID: bl.LeaseID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Resolve after release: %v, want ErrNotFound", err)
	}
	if _, err := east.Touch(ctx, provider.TouchRequest{Lease: bl, Now: time.Now(), ExpiresAt: later}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Touch after release: %v, want ErrNotFound", err)
	}
	if err := east.ReleaseLease(ctx, provider.ReleaseRequest{Lease: bl}); err != nil {
		t.Errorf("second release: %v", err)
	}
	if err := east.ReleaseLease(ctx, provider.ReleaseRequest{Lease: provider.LeaseTarget{LeaseID: "crabbox-*"}}); err == nil {
		t.Error("release of a non-lease ID succeeded")
	}
	if got, _ := w.ec2.Instance("us-east-1", a.CloudID); got.State != "running" {
		t.Errorf("the other lease's instance is %s", got.State)
	}
}

func TestResolveUnknown(t *testing.T) {
	w := newWorld(t)
	b := w.backend(t)
	if _, err := b.Acquire(context.Background(), request(t)); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{lease.NewID(), "no-such-slug", "test-*", "*", ""} {
		if _, err := b.Resolve(context.Background(), provider.ResolveRequest{ID: ref}); !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("Resolve(%q): %v, want ErrNotFound", ref, err)
		}
	}
}
