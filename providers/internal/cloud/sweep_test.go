package cloud_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// sweptBox is a machine of TestSweep: its labels, and what its re-read
// finds.
type sweptBox struct {
	id     string
	labels map[string]string
}

// TestSweep: of four expired, claimed boxes, the one touched since the
// listing survives, the one already gone counts as deleted, the one whose
// re-read fails keeps its error, the last is deleted; a dry run deletes
// nothing; unclaimed boxes are never re-read.
func TestSweep(t *testing.T) {
	failed, err := cloud.NewLabels(acquireRequest(), cloud.LabelOptions{Provider: "hetzner", State: cloud.StateFailed})
	if err != nil {
		t.Fatal(err)
	}
	box := func(id string) sweptBox { return sweptBox{id, maps.Clone(failed)} }
	found := []sweptBox{box("touched"), box("gone"), box("unreadable"), box("deleted")}
	touched := cloud.Touch(cloud.WithState(maps.Clone(failed), cloud.StateReady), expires, expires.Add(time.Hour)) // renewed
	now := expires                                                                                                 // a failed box goes at once; a ready one lives until its expiry plus grace
	for _, dry := range []bool{false, true} {
		var reread, deleted []string
		sweep := cloud.Sweep[sweptBox]{
			Provider: "hetzner", Noun: "server",
			View: func(b sweptBox) (string, map[string]string) { return b.id, b.labels },
			Reread: func(_ context.Context, b sweptBox) (sweptBox, error) {
				reread = append(reread, b.id)
				switch b.id {
				case "touched":
					return sweptBox{b.id, touched}, nil
				case "gone":
					return sweptBox{}, provider.ErrNotFound
				case "unreadable":
					return sweptBox{}, errors.New("boom")
				}
				return b, nil
			},
			Delete: func(_ context.Context, b sweptBox) error { deleted = append(deleted, b.id); return nil },
		}
		ds, err := sweep.Run(context.Background(), provider.CleanupRequest{Now: now, DryRun: dry, Claimed: func(string) bool { return true }}, found)
		if err != nil {
			t.Fatal(err)
		}
		type outcome struct {
			ID              string
			Delete, Deleted bool
			Err             bool
		}
		var got []outcome
		for _, d := range ds {
			got = append(got, outcome{d.CloudID, d.Delete, d.Deleted, d.Err != nil})
		}
		want := []outcome{{"touched", false, false, false}, {"gone", true, true, false}, {"unreadable", true, false, true}, {"deleted", true, true, false}}
		wantDeleted := []string{"deleted"}
		if dry {
			want = []outcome{{"touched", true, false, false}, {"gone", true, false, false}, {"unreadable", true, false, false}, {"deleted", true, false, false}}
			wantDeleted = nil
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("dry run %v: decisions (-want +got):\n%s", dry, diff)
		}
		if diff := cmp.Diff(wantDeleted, deleted); diff != "" {
			t.Errorf("dry run %v: deleted (-want +got):\n%s", dry, diff)
		}
		if dry && len(reread) != 0 {
			t.Errorf("a dry run re-read %v", reread)
		}
	}
	ds, err := cloud.Sweep[sweptBox]{Provider: "hetzner", View: func(b sweptBox) (string, map[string]string) { return b.id, b.labels }}.
		Run(context.Background(), provider.CleanupRequest{Now: now}, found)
	if err != nil || len(ds) != 4 || ds[0].Delete {
		t.Errorf("without claims: %+v, %v; want every box kept", ds, err)
	}
}
