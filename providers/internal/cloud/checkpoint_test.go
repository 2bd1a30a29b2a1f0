package cloud_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

func TestCheckpointLabels(t *testing.T) {
	lid, cid := lease.NewID(), lease.NewCheckpointID()
	req := provider.CheckpointRequest{Lease: provider.LeaseTarget{LeaseID: lid}, CheckpointID: cid, Labels: map[string]string{"suite": "a b"}}
	got, err := cloud.CheckpointLabels("hetzner", req)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"crabbox": "true", "created_by": "crabbox", "provider": "hetzner", "checkpoint": cid, "source_lease": lid, "suite": "a_b"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if !cloud.IsCheckpoint("hetzner", got) || cloud.IsCheckpoint("scaleway", got) {
		t.Errorf("IsCheckpoint of its labels: want true for hetzner only")
	}
	a := cloud.Artifact("hetzner", "7", got, req.Lease.CreatedAt, 0)
	if a.CheckpointID != cid || a.SourceLease != lid || a.ID != "7" || a.Provider != "hetzner" {
		t.Errorf("Artifact = %+v", a)
	}
	for _, bad := range []struct {
		name string
		req  provider.CheckpointRequest
		want string
	}{
		{"checkpoint ID", provider.CheckpointRequest{Lease: req.Lease, CheckpointID: "ckp_x"}, "checkpoint ID"},
		{"lease ID", provider.CheckpointRequest{CheckpointID: cid}, "lease ID"},
		{"reserved", provider.CheckpointRequest{Lease: req.Lease, CheckpointID: cid, Labels: map[string]string{"source_lease": "x"}}, "reserved"},
		{"ownership", provider.CheckpointRequest{Lease: req.Lease, CheckpointID: cid, Labels: map[string]string{"lease": "x"}}, "reserved"},
		{"key", provider.CheckpointRequest{Lease: req.Lease, CheckpointID: cid, Labels: map[string]string{"a b": "x"}}, "label key"},
	} {
		if _, err := cloud.CheckpointLabels("hetzner", bad.req); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", bad.name, err, bad.want)
		}
	}
}
