package aws_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/aws"
	"github.com/crabbox-dev/crabbox/providers/aws/internal/fakeec2"
)

// boxTags are the tags of a crabbox instance of lease id.
func boxTags(id, state string, expires time.Time, keep bool) map[string]string {
	return map[string]string{
		"crabbox": "true", "created_by": "crabbox", "provider": "aws", "lease": id, "slug": "s-" + id[4:],
		"state": state, "keep": strconv.FormatBool(keep), "created_at": unix(expires.Add(-time.Hour)),
		"expires_at": unix(expires),
	}
}

func TestCleanupDecisions(t *testing.T) {
	w := newWorld(t)
	b := w.backend(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	past, future := now.Add(-time.Minute), now.Add(time.Hour)

	// A real lease, acquired and then expired: its key pair goes too.
	acquired, err := b.Acquire(ctx, request(t))
	if err != nil {
		t.Fatal(err)
	}
	type box struct {
		name         string
		claimed      bool
		tags         map[string]string
		wantDelete   bool
		reasonPrefix string
	}
	boxes := []box{
		{"expired", true, boxTags(lease.NewID(), "ready", past, false), true, "expired at"},
		{"failed", true, boxTags(lease.NewID(), "failed", future, false), true, "state failed"},
		{"unclaimed", false, boxTags(lease.NewID(), "ready", past, false), false, "no claim"},
		{"live", true, boxTags(lease.NewID(), "ready", future, false), false, "live until"},
		{"kept, expired", true, boxTags(lease.NewID(), "ready", past, true), true, "expired at"},
		{"kept, live", true, boxTags(lease.NewID(), "ready", future, true), false, "keep=true: kept while live until"},
		{"provisioning within grace", true, boxTags(lease.NewID(), "provisioning", past, false), false, "state \"provisioning\""},
		{"unreadable lease tag", true, map[string]string{"crabbox": "true", "provider": "aws", "lease": "web-1", "expires_at": "1"}, false, "unreadable labels"},
	}
	ids := map[string]string{} // instance ID to box name
	claims := map[string]bool{acquired.LeaseID: true}
	for _, bx := range boxes {
		in := w.ec2.AddInstance(region, fakeec2.Instance{Tags: bx.tags})
		ids[in.ID] = bx.name
		if bx.claimed {
			claims[bx.tags["lease"]] = true
		}
	}
	strangers := addStrangers(w, region, acquired.LeaseID)
	claimed := func(id string) bool { return claims[id] }
	afterExpiry := acquired.ExpiresAt.Add(time.Minute)
	if afterExpiry.Before(now) {
		afterExpiry = now
	}

	check := func(t *testing.T, ds []provider.CleanupDecision, dryRun bool) {
		t.Helper()
		seen := map[string]bool{}
		for _, d := range ds {
			seen[d.CloudID] = true
			if d.CloudID == acquired.CloudID {
				if !d.Delete || d.Deleted == dryRun || d.Err != nil {
					t.Errorf("decision for the acquired lease = %+v, want delete (deleted: %v)", d, !dryRun)
				}
				continue
			}
			bx, ok := boxes[0], false
			for _, c := range boxes {
				if c.name == ids[d.CloudID] {
					bx, ok = c, true
				}
			}
			if !ok {
				if d.Delete || d.Deleted {
					t.Errorf("decided to delete an instance that is not crabbox's: %+v", d)
				}
				continue
			}
			if d.Delete != bx.wantDelete || d.Deleted != (bx.wantDelete && !dryRun) || d.Err != nil || !strings.HasPrefix(d.Reason, bx.reasonPrefix) {
				t.Errorf("%s: decision %+v, want delete=%v with a reason starting %q", bx.name, d, bx.wantDelete, bx.reasonPrefix)
			}
		}
		for id, name := range ids {
			if !seen[id] {
				t.Errorf("no decision for %s (%s)", name, id)
			}
		}
	}

	t.Run("dry run", func(t *testing.T) {
		before := len(w.ec2.Calls())
		ds, err := b.Cleanup(ctx, provider.CleanupRequest{DryRun: true, Now: afterExpiry, Claimed: claimed})
		if err != nil {
			t.Fatal(err)
		}
		check(t, ds, true)
		for _, c := range w.ec2.Calls()[before:] {
			if !isDescribe(c.Action) {
				t.Errorf("dry run changed something: %s", c)
			}
		}
	})
	t.Run("cleanup", func(t *testing.T) {
		ds, err := b.Cleanup(ctx, provider.CleanupRequest{Now: afterExpiry, Claimed: claimed})
		if err != nil {
			t.Fatal(err)
		}
		check(t, ds, false)
		var left []string
		for _, in := range w.ec2.Instances(region) {
			if name, ok := ids[in.ID]; ok {
				left = append(left, name)
			}
		}
		want := []string{"unclaimed", "live", "kept, live", "provisioning within grace", "unreadable lease tag"}
		if diff := cmp.Diff(want, left); diff != "" {
			t.Errorf("instances left (-want +got):\n%s", diff)
		}
		for _, s := range strangers {
			if got, _ := w.ec2.Instance(region, s.ID); got.State != "running" {
				t.Errorf("cleanup touched another instance %s (tags %v)", s.ID, s.Tags)
			}
		}
		if got, _ := w.ec2.Instance(region, acquired.CloudID); got.State != "terminated" {
			t.Errorf("expired acquired lease is %s", got.State)
		}
		if k := w.ec2.KeyPairs(region); len(k) != 0 {
			t.Errorf("key pairs left: %+v", k)
		}
	})
}

// TestCleanupRechecksBeforeDeleting: a lease touched between the listing
// and the deletion is left alone.
func TestCleanupRechecksBeforeDeleting(t *testing.T) {
	w := newWorld(t)
	b := w.backend(t)
	now := time.Now().UTC()
	id := lease.NewID()
	in := w.ec2.AddInstance(region, fakeec2.Instance{Tags: boxTags(id, "ready", now.Add(-time.Minute), false)})
	w.ec2.SetHooks(fakeec2.Hooks{BeforeCall: func(c fakeec2.Call) {
		if c.Action == "DescribeInstances" && c.Params.Get("InstanceId.1") == in.ID {
			// Another process of the same user touches the lease meanwhile.
			w.ec2.SetTags(region, in.ID, map[string]string{"expires_at": unix(now.Add(time.Hour))})
		}
	}})
	ds, err := b.Cleanup(context.Background(), provider.CleanupRequest{Now: now, Claimed: func(string) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Delete || ds[0].Deleted || !strings.Contains(ds[0].Reason, "changed since listed") {
		t.Errorf("decisions = %+v, want one that keeps the touched lease", ds)
	}
	if got, _ := w.ec2.Instance(region, in.ID); got.State != "running" {
		t.Errorf("touched lease's instance is %s", got.State)
	}
}

func TestCleanupAcrossRegions(t *testing.T) {
	w := newWorld(t)
	now := time.Now().UTC()
	var ids []string
	for _, r := range []string{"us-east-1", "eu-west-1"} {
		id := lease.NewID()
		ids = append(ids, id)
		w.ec2.AddInstance(r, fakeec2.Instance{Tags: boxTags(id, "ready", now.Add(-time.Minute), false)})
	}
	b := w.backend(t, func(c *aws.Config) { c.Regions = []string{"us-east-1", "eu-west-1"} })
	ds, err := b.Cleanup(context.Background(), provider.CleanupRequest{Now: now, Claimed: func(string) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || !ds[0].Deleted || !ds[1].Deleted {
		t.Errorf("decisions = %+v, want both deleted", ds)
	}
	var decided []string
	for _, d := range ds {
		decided = append(decided, d.LeaseID)
	}
	if diff := cmp.Diff(ids, decided, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("decided leases (-want +got):\n%s", diff)
	}
	if len(w.ec2.Instances("us-east-1")) != 0 || len(w.ec2.Instances("eu-west-1")) != 0 {
		t.Error("instances left")
	}
}
