package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

func checkpoint(id, owner, source string) store.Checkpoint {
	return store.Checkpoint{
		ID: id, Owner: owner, Org: "acme", Provider: "hetzner", SourceLease: source,
		Target: "linux", Class: "beast", ServerType: "cpx62", WorkRoot: "/work/crabbox",
		SSHUser: "crabbox", SSHPort: "2222", GBMonthUSD: 0.05, Labels: map[string]string{"team": "a"},
	}
}

// readyCheckpoint creates checkpoint id of owner and makes it ready.
func readyCheckpoint(t *testing.T, s store.Store, id, owner string, now time.Time) store.Checkpoint {
	t.Helper()
	ctx := testContext(t)
	if _, err := s.CreateCheckpoint(ctx, store.CheckpointCreate{Checkpoint: checkpoint(id, owner, "cbx_00000000000a"), Now: now}); err != nil {
		t.Fatalf("CreateCheckpoint(%s): %v", id, err)
	}
	cp, err := s.ReadyCheckpoint(ctx, id, store.CheckpointArtifactInfo{ArtifactID: "img-" + id, SizeBytes: 2e9, Locators: map[string]string{"region": "fsn1"}}, now)
	if err != nil {
		t.Fatalf("ReadyCheckpoint(%s): %v", id, err)
	}
	return cp
}

func claimUse(t *testing.T, s store.Store, id, owner, hash string, now time.Time) {
	t.Helper()
	if _, err := s.ClaimCheckpointUse(testContext(t), store.UseClaim{TokenHash: hash, CheckpointID: id, Owner: owner, Org: "acme", ExpiresAt: now.Add(10 * time.Minute)}, now); err != nil {
		t.Fatalf("ClaimCheckpointUse(%s): %v", id, err)
	}
}

func eventTypes(t *testing.T, s store.Store, id string) []string {
	t.Helper()
	evs, err := s.ListCheckpointEvents(testContext(t), id, 0, 0)
	if err != nil {
		t.Fatalf("ListCheckpointEvents(%s): %v", id, err)
	}
	out := []string{}
	for _, ev := range evs {
		out = append(out, ev.Type)
	}
	return out
}

func testCheckpointLifecycle(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	const id = "ckp_000000000001"
	cp, err := s.CreateCheckpoint(ctx, store.CheckpointCreate{Checkpoint: checkpoint(id, "alice", "cbx_00000000000a"), Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if cp.State != store.CheckpointCreating || !cp.CreatedAt.Equal(t0) {
		t.Fatalf("new checkpoint %+v", cp)
	}
	_, err = s.CreateCheckpoint(ctx, store.CheckpointCreate{Checkpoint: checkpoint(id, "alice", "cbx_00000000000a"), Now: t0})
	wantErr(t, "create again", err, store.ErrCheckpointExists)
	_, err = s.RequestCheckpointDelete(ctx, id, "alice", "acme", t0)
	wantErr(t, "delete while creating", err, store.ErrCheckpointBusy)

	cp, err = s.ReadyCheckpoint(ctx, id, store.CheckpointArtifactInfo{ArtifactID: "img-1", SizeBytes: 5, Locators: map[string]string{"region": "fsn1"}}, at(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if cp.State != store.CheckpointReady || cp.ArtifactID != "img-1" || !cp.ReadyAt.Equal(at(time.Minute)) || !cp.ExpiresAt.IsZero() {
		t.Fatalf("ready checkpoint %+v", cp)
	}
	got, err := s.GetCheckpoint(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cp, got); diff != "" {
		t.Errorf("GetCheckpoint differs from ReadyCheckpoint's answer (-ready +get):\n%s", diff)
	}

	// Ownership: another owner or org sees nothing.
	_, err = s.SetCheckpointRetention(ctx, id, "bob", "acme", 60, at(time.Minute))
	wantErr(t, "retention by bob", err, store.ErrNotFound)
	_, err = s.RequestCheckpointDelete(ctx, id, "alice", "other", at(time.Minute))
	wantErr(t, "delete in another org", err, store.ErrNotFound)
	_, err = s.ClaimCheckpointUse(ctx, store.UseClaim{TokenHash: "h", CheckpointID: id, Owner: "bob", Org: "acme", ExpiresAt: at(time.Hour)}, at(time.Minute))
	wantErr(t, "use by bob", err, store.ErrNotFound)

	cp, err = s.SetCheckpointRetention(ctx, id, "alice", "acme", 3600, at(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if want := at(time.Minute + time.Hour); !cp.ExpiresAt.Equal(want) {
		t.Errorf("expiresAt %s, want %s (last use + 1h)", cp.ExpiresAt, want)
	}
	claimUse(t, s, id, "alice", "hash-1", at(10*time.Minute))
	cp, _ = s.GetCheckpoint(ctx, id)
	if want := at(10*time.Minute + time.Hour); !cp.ExpiresAt.Equal(want) {
		t.Errorf("expiresAt after a use %s, want %s", cp.ExpiresAt, want)
	}

	list, err := s.ListCheckpoints(ctx, store.CheckpointFilter{Owner: "alice", Org: "acme"})
	if err != nil || len(list) != 1 || list[0].ID != id {
		t.Fatalf("ListCheckpoints = %v, %v", list, err)
	}
	if list, _ := s.ListCheckpoints(ctx, store.CheckpointFilter{Owner: "bob"}); len(list) != 0 {
		t.Errorf("bob lists %d checkpoints", len(list))
	}

	cp, err = s.RequestCheckpointDelete(ctx, id, "alice", "acme", at(20*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if cp.State != store.CheckpointDeleting || !cp.DeletePending {
		t.Fatalf("after delete request: %+v", cp)
	}
	if again, err := s.RequestCheckpointDelete(ctx, id, "alice", "acme", at(21*time.Minute)); err != nil || !again.DeleteRequestedAt.Equal(cp.DeleteRequestedAt) {
		t.Fatalf("repeated delete request: %+v, %v", again, err)
	}
	_, err = s.ClaimCheckpointUse(ctx, store.UseClaim{TokenHash: "hash-2", CheckpointID: id, Owner: "alice", Org: "acme", ExpiresAt: at(time.Hour)}, at(21*time.Minute))
	wantErr(t, "use of a deleting checkpoint", err, store.ErrCheckpointNotReady)

	// Cleanup: claimed, fails, retried after its retry time, finished.
	now := at(22 * time.Minute)
	if next, ok, err := s.NextCheckpointCleanupAt(ctx, time.Hour); err != nil || !ok || next.After(now) {
		t.Fatalf("NextCheckpointCleanupAt = %s, %v, %v; want due", next, ok, err)
	}
	claimed, err := s.ClaimCheckpointsForCleanup(ctx, now, now.Add(-time.Hour), 10, time.Minute)
	if err != nil || len(claimed) != 1 || claimed[0].CleanupToken == "" {
		t.Fatalf("claim = %+v, %v", claimed, err)
	}
	if again, _ := s.ClaimCheckpointsForCleanup(ctx, now, now.Add(-time.Hour), 10, time.Minute); len(again) != 0 {
		t.Fatalf("claimed twice")
	}
	retry := now.Add(time.Minute)
	failed, err := s.FailCheckpointCleanup(ctx, id, claimed[0].CleanupToken, "provider down", now, retry)
	if err != nil {
		t.Fatal(err)
	}
	if failed.CleanupAttempts != 1 || failed.CleanupError != "provider down" || !failed.DeletePending {
		t.Errorf("after a failed delete: %+v", failed)
	}
	_, err = s.FinishCheckpointCleanup(ctx, id, claimed[0].CleanupToken, now)
	wantErr(t, "finish with a stale token", err, store.ErrClaimLost)
	if got, _ := s.ClaimCheckpointsForCleanup(ctx, now, now.Add(-time.Hour), 10, time.Minute); len(got) != 0 {
		t.Fatalf("claimed before its retry time")
	}
	claimed, err = s.ClaimCheckpointsForCleanup(ctx, retry, retry.Add(-time.Hour), 10, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim after retry time = %+v, %v", claimed, err)
	}
	done, err := s.FinishCheckpointCleanup(ctx, id, claimed[0].CleanupToken, retry)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != store.CheckpointDeleted || done.DeletePending || !done.DeletedAt.Equal(retry) {
		t.Errorf("after cleanup: %+v", done)
	}
	if stored, err := s.GetCheckpoint(ctx, id); err != nil || !cmp.Equal(stored, done) {
		t.Errorf("stored after cleanup differs (-answer +stored):\n%s", cmp.Diff(done, stored))
	}
	if got, _ := s.ClaimCheckpointsForCleanup(ctx, at(48*time.Hour), at(47*time.Hour), 10, time.Minute); len(got) != 0 {
		t.Errorf("a deleted checkpoint was claimed again")
	}
	if _, ok, _ := s.NextCheckpointCleanupAt(ctx, time.Hour); ok {
		t.Errorf("NextCheckpointCleanupAt still has work")
	}
	want := []string{"created", "ready", "retention_changed", "used", "delete_requested", "delete_failed", "deleted"}
	if diff := cmp.Diff(want, eventTypes(t, s, id)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func testCheckpointLimits(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	lim := store.CheckpointLimits{MaxPerOwner: 2, MaxPerOrg: 3, MaxCreating: 2}
	mk := func(id, owner string) error {
		_, err := s.CreateCheckpoint(ctx, store.CheckpointCreate{Checkpoint: checkpoint(id, owner, "cbx_00000000000a"), Limits: lim, Now: t0})
		return err
	}
	if err := mk("ckp_000000000001", "alice"); err != nil {
		t.Fatal(err)
	}
	if err := mk("ckp_000000000002", "bob"); err != nil {
		t.Fatal(err)
	}
	err := mk("ckp_000000000003", "carol")
	var le *store.LimitError
	wantErr(t, "third creation at once", err, store.ErrLimitExceeded)
	if !asLimit(err, &le) || le.Kind != store.LimitCheckpointCreating {
		t.Errorf("error %v, want a checkpoint creation limit", err)
	}
	if _, err := s.ReadyCheckpoint(ctx, "ckp_000000000001", store.CheckpointArtifactInfo{ArtifactID: "a"}, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadyCheckpoint(ctx, "ckp_000000000002", store.CheckpointArtifactInfo{ArtifactID: "b"}, t0); err != nil {
		t.Fatal(err)
	}
	if err := mk("ckp_000000000004", "alice"); err != nil {
		t.Fatal(err)
	}
	err = mk("ckp_000000000005", "alice")
	if !asLimit(err, &le) || le.Kind != store.LimitCheckpoints || le.Scope != "owner" {
		t.Fatalf("error %v, want the owner checkpoint limit", err)
	}
	if _, err := s.ReadyCheckpoint(ctx, "ckp_000000000004", store.CheckpointArtifactInfo{ArtifactID: "c"}, t0); err != nil {
		t.Fatal(err)
	}
	err = mk("ckp_000000000006", "dave")
	if !asLimit(err, &le) || le.Scope != "org" {
		t.Fatalf("error %v, want the org checkpoint limit", err)
	}
	// A deleted checkpoint no longer counts; one whose deletion is
	// pending still does.
	if _, err := s.RequestCheckpointDelete(ctx, "ckp_000000000001", "alice", "acme", t0); err != nil {
		t.Fatal(err)
	}
	err = mk("ckp_000000000007", "alice")
	wantErr(t, "create while a deletion is pending", err, store.ErrLimitExceeded)
	claimed, err := s.ClaimCheckpointsForCleanup(ctx, t0, t0.Add(-time.Hour), 10, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim = %v, %v", claimed, err)
	}
	if _, err := s.FinishCheckpointCleanup(ctx, claimed[0].ID, claimed[0].CleanupToken, t0); err != nil {
		t.Fatal(err)
	}
	if err := mk("ckp_000000000007", "alice"); err != nil {
		t.Fatalf("create after a deletion: %v", err)
	}
}

func asLimit(err error, le **store.LimitError) bool {
	e, ok := err.(*store.LimitError)
	if ok {
		*le = e
	}
	return ok
}

func forkReq(leaseID, cpID, claim, attempt, hash string, now time.Time) store.ForkCreate {
	l := lease(leaseID, "alice")
	l.CreatedAt, l.LastTouchedAt = now, now
	return store.ForkCreate{
		Create:       store.CreateRequest{Lease: l, AttemptID: attempt, RequestHash: hash, Now: now},
		CheckpointID: cpID, ClaimHash: claim,
	}
}

func testCheckpointForks(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	const id = "ckp_000000000001"
	readyCheckpoint(t, s, id, "alice", t0)
	now := at(time.Minute)

	_, err := s.ForkLease(ctx, forkReq("cbx_000000000001", id, "nope", "cat_1", "", now))
	wantErr(t, "fork with an unknown claim", err, store.ErrClaimInvalid)
	claimUse(t, s, id, "alice", "claim-1", now)
	other := forkReq("cbx_000000000001", id, "claim-1", "cat_1", "", now)
	other.Create.Lease.Owner = "bob"
	_, err = s.ForkLease(ctx, other)
	wantErr(t, "fork with alice's claim by bob", err, store.ErrClaimInvalid)
	_, err = s.ForkLease(ctx, forkReq("cbx_000000000001", id, "claim-1", "cat_1", "", at(time.Hour)))
	wantErr(t, "fork with an expired claim", err, store.ErrClaimInvalid)

	res, err := s.ForkLease(ctx, forkReq("cbx_000000000001", id, "claim-1", "cat_1", "", now))
	if err != nil || res.Replayed || res.Lease.State != store.StateProvisioning {
		t.Fatalf("fork = %+v, %v", res, err)
	}
	// The same attempt replays; another lease with the used claim does not.
	res, err = s.ForkLease(ctx, forkReq("cbx_000000000001", id, "claim-1", "cat_1", "", now))
	if err != nil || !res.Replayed {
		t.Fatalf("replay = %+v, %v", res, err)
	}
	_, err = s.ForkLease(ctx, forkReq("cbx_000000000002", id, "claim-1", "cat_2", "", now))
	wantErr(t, "second fork with one claim", err, store.ErrClaimInvalid)

	// The artifact stays while the fork provisions.
	if _, err := s.RequestCheckpointDelete(ctx, id, "alice", "acme", now); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ClaimCheckpointsForCleanup(ctx, now, now.Add(-time.Hour), 10, time.Minute); len(got) != 0 {
		t.Fatalf("claimed while a fork provisions")
	}
	if _, err := s.ActivateLease(ctx, "cbx_000000000001", now, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ClaimCheckpointsForCleanup(ctx, now, now.Add(-time.Hour), 10, time.Minute); len(got) != 1 {
		t.Fatalf("not claimed after the fork became active")
	}
	cp, _ := s.GetCheckpoint(ctx, id)
	if cp.Uses != 1 {
		t.Errorf("uses %d, want 1", cp.Uses)
	}
	claimUseErr := func() error {
		_, err := s.ClaimCheckpointUse(ctx, store.UseClaim{TokenHash: "claim-3", CheckpointID: id, Owner: "alice", Org: "acme", ExpiresAt: at(time.Hour)}, now)
		return err
	}
	wantErr(t, "claim of a deleting checkpoint", claimUseErr(), store.ErrCheckpointNotReady)
	want := []string{"created", "ready", "used", "forked", "delete_requested"}
	if diff := cmp.Diff(want, eventTypes(t, s, id)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func testCheckpointFixedFork(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	const id = "ckp_000000000001"
	readyCheckpoint(t, s, id, "alice", t0)
	now := at(time.Minute)
	claimUse(t, s, id, "alice", "claim-1", now)
	res, err := s.ForkLease(ctx, forkReq("cbx_000000000001", id, "claim-1", "", "hash-a", now))
	if err != nil || res.Replayed {
		t.Fatalf("fixed fork = %+v, %v", res, err)
	}
	// Identical replay with the bound claim.
	res, err = s.ForkLease(ctx, forkReq("cbx_000000000001", id, "claim-1", "", "hash-a", now))
	if err != nil || !res.Replayed {
		t.Fatalf("replay = %+v, %v", res, err)
	}
	// Drift.
	claimUse(t, s, id, "alice", "claim-2", now)
	_, err = s.ForkLease(ctx, forkReq("cbx_000000000001", id, "claim-2", "", "hash-b", now))
	wantErr(t, "drifted replay", err, store.ErrLeaseIDConflict)
	// A fresh valid claim replays too, and is consumed.
	res, err = s.ForkLease(ctx, forkReq("cbx_000000000001", id, "claim-2", "", "hash-a", now))
	if err != nil || !res.Replayed {
		t.Fatalf("replay with a fresh claim = %+v, %v", res, err)
	}
	_, err = s.ForkLease(ctx, forkReq("cbx_000000000002", id, "claim-2", "", "hash-c", now))
	wantErr(t, "reuse of the consumed claim", err, store.ErrClaimInvalid)
	cp, _ := s.GetCheckpoint(ctx, id)
	if cp.Uses != 1 {
		t.Errorf("uses %d after replays, want 1", cp.Uses)
	}
}

func testCheckpointForkRace(t *testing.T, open Opener) {
	a, b := open(t), open(t)
	ctx := testContext(t)
	const id = "ckp_000000000001"
	readyCheckpoint(t, a, id, "alice", t0)
	now := at(time.Minute)
	claimUse(t, a, id, "alice", "claim-1", now)
	const n = 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  []string
		errs []error
	)
	for i := range n {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			leaseID := fmt.Sprintf("cbx_%012x", i+1)
			var req store.ForkCreate
			if i%3 == 0 {
				req = forkReq(leaseID, id, "claim-1", "", "hash", now)
			} else {
				req = forkReq(leaseID, id, "claim-1", fmt.Sprintf("cat_%d", i), "", now)
			}
			res, err := s.ForkLease(ctx, req)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, res.Lease.ID)
			default:
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d forks won with one claim (%v), want exactly 1", len(won), won)
	}
	for _, err := range errs {
		wantErr(t, "losing fork", err, store.ErrClaimInvalid)
	}
	leases, err := a.ListLeases(ctx, store.LeaseFilter{Owner: "alice"})
	if err != nil || len(leases) != 1 {
		t.Fatalf("leases after the race: %v, %v", ids(leases), err)
	}
}

func testCheckpointExpiryOnce(t *testing.T, open Opener) {
	a, b := open(t), open(t)
	ctx := testContext(t)
	const n = 6
	for i := range n {
		id := fmt.Sprintf("ckp_%012x", i+1)
		readyCheckpoint(t, a, id, "alice", t0)
		if _, err := a.SetCheckpointRetention(ctx, id, "alice", "acme", 3600, t0); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := a.ClaimCheckpointsForCleanup(ctx, at(59*time.Minute), t0.Add(-time.Hour), 10, time.Minute); len(got) != 0 {
		t.Fatalf("claimed before expiry")
	}
	now := at(2 * time.Hour)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		claimed = map[string]int{}
		errs    []error
	)
	for w := range 4 {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Go(func() {
			for {
				got, err := s.ClaimCheckpointsForCleanup(ctx, now, now.Add(-time.Hour), 2, time.Hour)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, c := range got {
					claimed[c.ID]++
				}
				mu.Unlock()
				if err != nil || len(got) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("claim errors: %v", errs)
	}
	if len(claimed) != n {
		t.Errorf("%d checkpoints claimed, want %d", len(claimed), n)
	}
	for id, c := range claimed {
		if c != 1 {
			t.Errorf("%s claimed %d times", id, c)
		}
		want := []string{"created", "ready", "retention_changed", "expired"}
		if diff := cmp.Diff(want, eventTypes(t, a, id)); diff != "" {
			t.Errorf("%s events (-want +got):\n%s", id, diff)
		}
	}
}

func testCheckpointStaleCreation(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	const id = "ckp_000000000001"
	if _, err := s.CreateCheckpoint(ctx, store.CheckpointCreate{Checkpoint: checkpoint(id, "alice", "cbx_00000000000a"), Now: t0}); err != nil {
		t.Fatal(err)
	}
	if next, ok, err := s.NextCheckpointCleanupAt(ctx, time.Hour); err != nil || !ok || !next.Equal(at(time.Hour)) {
		t.Fatalf("NextCheckpointCleanupAt = %s, %v, %v; want %s", next, ok, err, at(time.Hour))
	}
	if got, _ := s.ClaimCheckpointsForCleanup(ctx, at(30*time.Minute), at(-30*time.Minute), 10, time.Minute); len(got) != 0 {
		t.Fatalf("a creation in time was claimed")
	}
	got, err := s.ClaimCheckpointsForCleanup(ctx, at(2*time.Hour), at(time.Hour), 10, time.Minute)
	if err != nil || len(got) != 1 || got[0].State != store.CheckpointFailed || !got[0].DeletePending {
		t.Fatalf("claim of a stale creation = %+v, %v", got, err)
	}
	// The late provider answer is recorded, so the artifact is deleted.
	cp, err := s.ReadyCheckpoint(ctx, id, store.CheckpointArtifactInfo{ArtifactID: "img-late"}, at(2*time.Hour))
	wantErr(t, "late ready", err, store.ErrCheckpointNotReady)
	if cp.ArtifactID != "img-late" || cp.State != store.CheckpointFailed || !cp.DeletePending {
		t.Errorf("after a late ready: %+v", cp)
	}
	done, err := s.FinishCheckpointCleanup(ctx, id, got[0].CleanupToken, at(2*time.Hour))
	if err != nil || done.State != store.CheckpointFailed || done.DeletePending {
		t.Fatalf("finish = %+v, %v", done, err)
	}
	// FailCheckpoint of a creating checkpoint without leftovers.
	const id2 = "ckp_000000000002"
	if _, err := s.CreateCheckpoint(ctx, store.CheckpointCreate{Checkpoint: checkpoint(id2, "alice", "cbx_00000000000a"), Now: t0}); err != nil {
		t.Fatal(err)
	}
	f, err := s.FailCheckpoint(ctx, id2, "provider said no", false, t0)
	if err != nil || f.State != store.CheckpointFailed || f.DeletePending || f.FailureError != "provider said no" {
		t.Fatalf("FailCheckpoint = %+v, %v", f, err)
	}
	_, err = s.FailCheckpoint(ctx, id2, "again", false, t0)
	wantErr(t, "fail a failed checkpoint", err, store.ErrCheckpointNotReady)
}

func testCheckpointEventsBounded(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	const id = "ckp_000000000001"
	readyCheckpoint(t, s, id, "alice", t0)
	for i := range store.MaxCheckpointEvents + 10 {
		if _, err := s.SetCheckpointRetention(ctx, id, "alice", "acme", int64(3600+i%2), at(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.ListCheckpointEvents(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != store.MaxCheckpointEvents {
		t.Fatalf("%d events kept, want %d", len(evs), store.MaxCheckpointEvents)
	}
	total := int64(store.MaxCheckpointEvents + 10 + 2)
	if evs[0].Seq != total-store.MaxCheckpointEvents+1 || evs[len(evs)-1].Seq != total {
		t.Errorf("kept seq %d..%d, want the last %d of %d", evs[0].Seq, evs[len(evs)-1].Seq, store.MaxCheckpointEvents, total)
	}
	page, err := s.ListCheckpointEvents(ctx, id, total-3, 2)
	if err != nil || len(page) != 2 || page[0].Seq != total-2 {
		t.Errorf("page after %d: %+v, %v", total-3, page, err)
	}
	_, err = s.ListCheckpointEvents(ctx, "ckp_00000000ffff", 0, 0)
	wantErr(t, "events of an unknown checkpoint", err, store.ErrNotFound)
}

func testCheckpointSpending(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	// 2 GB at 0.05 USD per GB-month, stored for a tenth of a storage month.
	readyCheckpoint(t, s, "ckp_000000000001", "alice", t0)
	now := t0.Add(store.StorageMonth / 10)
	const usd = 2 * 0.05 * 0.1
	u, err := s.Usage(ctx, store.UsageQuery{Month: t0, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
	if u.Total.Checkpoints != 1 || !near(u.Total.CheckpointStorageUSD, usd) || !near(u.Total.ReservedUSD, usd) {
		t.Errorf("usage total %+v, want one checkpoint costing %v", u.Total, usd)
	}
	if len(u.ByOwner) != 1 || u.ByOwner[0].Key != "alice" || !near(u.ByOwner[0].CheckpointStorageUSD, usd) {
		t.Errorf("usage by owner %+v", u.ByOwner)
	}
	if len(u.ByServerType) != 0 {
		t.Errorf("usage by server type %+v, want none", u.ByServerType)
	}
	// The storage counts against monthly limits.
	lim := store.Limits{MaxMonthlyUSDPerOwner: 0.015}
	l := lease("cbx_000000000001", "alice")
	l.CreatedAt, l.LastTouchedAt, l.EstimatedHourlyUSD, l.MaxEstimatedUSD = now, now, 0, 0.01
	_, err = s.CreateLease(ctx, store.CreateRequest{Lease: l, AttemptID: "cat_1", Limits: lim, Now: now})
	wantErr(t, "lease over the limit with storage", err, store.ErrLimitExceeded)
	l.MaxEstimatedUSD = 0.004
	if _, err := s.CreateLease(ctx, store.CreateRequest{Lease: l, AttemptID: "cat_1", Limits: lim, Now: now}); err != nil {
		t.Fatalf("lease within the limit: %v", err)
	}
	_, err = s.CreateCheckpoint(ctx, store.CheckpointCreate{Checkpoint: checkpoint("ckp_000000000002", "alice", "cbx_00000000000a"),
		Monthly: store.Limits{MaxMonthlyUSDPerOwner: 0.005}, Now: now})
	wantErr(t, "checkpoint over the monthly limit", err, store.ErrLimitExceeded)
	// Deleted after half that time: only the stored time counts.
	if _, err := s.RequestCheckpointDelete(ctx, "ckp_000000000001", "alice", "acme", t0); err != nil {
		t.Fatal(err)
	}
	del := t0.Add(store.StorageMonth / 20)
	claimed, err := s.ClaimCheckpointsForCleanup(ctx, del, del.Add(-time.Hour), 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim = %v, %v", claimed, err)
	}
	if _, err := s.FinishCheckpointCleanup(ctx, claimed[0].ID, claimed[0].CleanupToken, del); err != nil {
		t.Fatal(err)
	}
	u, err = s.Usage(ctx, store.UsageQuery{Month: t0, Now: now, Owner: "alice", Org: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if !near(u.Total.CheckpointStorageUSD, usd/2) {
		t.Errorf("storage after deletion %v, want %v", u.Total.CheckpointStorageUSD, usd/2)
	}
	// Next month: nothing.
	u, err = s.Usage(ctx, store.UsageQuery{Month: t0.AddDate(0, 1, 0), Now: t0.AddDate(0, 1, 0)})
	if err != nil || u.Total.Checkpoints != 0 {
		t.Errorf("next month's usage %+v, %v", u.Total, err)
	}
}
