// Package storetest is the conformance suite every store.Store
// implementation passes. An implementation's test file provides a Harness
// (how to make a fresh database and open Store instances on it) and calls
// Run:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{Database: func(t *testing.T) storetest.Opener { ... }})
//	}
//
// The suite drives time explicitly (every call takes its "now") and never
// sleeps. Concurrency cases run several goroutines on two Store instances
// opened on one database, as two coordinator processes would.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// Opener opens a new Store instance on the harness's database; each call
// is an independent instance, like another coordinator process. The
// harness closes it when the test ends.
type Opener func(t *testing.T) store.Store

// Harness adapts one implementation to the suite.
type Harness struct {
	// Database makes a fresh, empty database for test t (removed when t
	// ends) and returns how to open Store instances on it. The first open
	// applies the migrations.
	Database func(t *testing.T) Opener
}

// Run runs the conformance suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"Migrations", testMigrations},
		{"LeaseRoundTrip", testLeaseRoundTrip},
		{"CreateReplayAndConflicts", testCreateReplay},
		{"CancelCreate", testCancelCreate},
		{"PutLease", testPutLease},
		{"Slugs", testSlugs},
		{"FindAndList", testFindAndList},
		{"Heartbeat", testHeartbeat},
		{"HeartbeatsConcurrent", testConcurrentHeartbeats},
		{"Release", testRelease},
		{"ActivateAndFail", testActivateAndFail},
		{"Register", testRegister},
		{"ActiveLimits", testActiveLimits},
		{"MonthlyLimits", testMonthlyLimits},
		{"ConcurrentCreatesRespectLimit", testConcurrentCreates},
		{"Cleanup", testCleanup},
		{"CleanupTwoInstancesNeverDoubleClaim", testConcurrentCleanup},
		{"Runs", testRuns},
		{"RunEventsConcurrentGapless", testConcurrentEvents},
		{"RunLogs", testRunLogs},
		{"Usage", testUsage},
		{"InvalidInput", testInvalid},
		{"TextArguments", testTextArguments},
		{"RunEventUpdates", testRunEventUpdates},
		{"RunTelemetry", testRunTelemetry},
		{"ServerKept", testServerKept},
		{"Tokens", testTokens},
		{"TokenChecks", testTokenChecks},
		{"CheckpointLifecycle", testCheckpointLifecycle},
		{"CheckpointLimits", testCheckpointLimits},
		{"CheckpointForks", testCheckpointForks},
		{"CheckpointFixedFork", testCheckpointFixedFork},
		{"CheckpointForkRaceOneClaimOneLease", testCheckpointForkRace},
		{"CheckpointExpiryOnceAcrossInstances", testCheckpointExpiryOnce},
		{"CheckpointStaleCreation", testCheckpointStaleCreation},
		{"CheckpointEventsBounded", testCheckpointEventsBounded},
		{"CheckpointSpending", testCheckpointSpending},
		{"PoolDefinitions", testPoolDefinitions},
		{"PoolInvalidInput", testPoolInvalid},
		{"PoolTakeRaceEachBoxOnce", testPoolTakeRace},
		{"PoolAddRaceNeverOverfills", testPoolAddRace},
		{"PoolLimits", testPoolLimits},
		{"PoolLapsedReservation", testPoolLapsedReservation},
		{"PoolStaleBoxes", testPoolStaleBoxes},
		{"PoolCommit", testPoolCommit},
		{"PoolDeleteAndTrim", testPoolDeleteAndTrim},
		{"PoolUsage", testPoolUsage},
		{"Shares", testShares},
		{"ShareRegistered", testShareRegistered},
		{"ShareInvalid", testShareInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, h.Database(t))
		})
	}
}

// opTimeout bounds each test's store calls, so a stuck call fails the test
// with the operation's name instead of hanging the package.
const opTimeout = 2 * time.Minute

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

// t0 is the suite's "now": mid-month, so month edges are deliberate.
var t0 = time.Date(2026, 3, 15, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// lease returns a valid new managed lease request.
func lease(id, owner string) store.Lease {
	return store.Lease{
		ID: id, Provider: "hetzner", State: store.StateProvisioning,
		Owner: owner, Org: "acme", Target: "linux", Class: "beast", ServerType: "cpx62",
		SSHUser: "crabbox", SSHPort: "2222", SSHFallbackPorts: []string{"22"}, WorkRoot: "/work/crabbox",
		TTLSeconds: 5400, IdleTimeoutSeconds: 1800, CreatedAt: t0, LastTouchedAt: t0,
		EstimatedHourlyUSD: 1, MaxEstimatedUSD: 1.5,
	}
}

func create(t *testing.T, s store.Store, l store.Lease, attempt string) store.Lease {
	t.Helper()
	res, err := s.CreateLease(testContext(t), store.CreateRequest{Lease: l, AttemptID: attempt, Now: l.CreatedAt})
	if err != nil {
		t.Fatalf("CreateLease(%s, %s): %v", l.ID, attempt, err)
	}
	if res.Replayed {
		t.Fatalf("CreateLease(%s, %s) replayed, want new", l.ID, attempt)
	}
	return res.Lease
}

func get(t *testing.T, s store.Store, id string) store.Lease {
	t.Helper()
	l, err := s.GetLease(testContext(t), id)
	if err != nil {
		t.Fatalf("GetLease(%s): %v", id, err)
	}
	return l
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

func ids(ls []store.Lease) []string {
	out := []string{}
	for _, l := range ls {
		out = append(out, l.ID)
	}
	return out
}

func testMigrations(t *testing.T, open Opener) {
	// Several processes starting at once on a fresh database all migrate
	// safely, and reopening is a no-op.
	var wg sync.WaitGroup
	stores := make([]store.Store, 3)
	for i := range stores {
		wg.Go(func() { stores[i] = open(t) })
	}
	wg.Wait()
	create(t, stores[0], lease("cbx_000000000001", "alice"), "cat_1")
	for _, s := range stores {
		get(t, s, "cbx_000000000001")
	}
	get(t, open(t), "cbx_000000000001")
}

func testLeaseRoundTrip(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	in := lease("cbx_00000000000a", "alice")
	in.Slug = "tidal-lobster"
	in.Keep = true
	in.Labels = map[string]string{"team": "infra"}
	in.Image, in.ImageSource, in.Location = "ubuntu-24.04", "explicit", "fsn1"
	in.LastTouchedAt = at(time.Minute)
	res, err := s.CreateLease(ctx, store.CreateRequest{Lease: in, AttemptID: "cat_a", Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	want := in
	want.Lifecycle = store.LifecycleManaged
	want.UpdatedAt = t0
	want.ExpiresAt = at(time.Minute + 30*time.Minute)
	want.CreateAttemptID = "cat_a"
	if diff := cmp.Diff(want, res.Lease); diff != "" {
		t.Errorf("CreateLease result (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, get(t, s, in.ID)); diff != "" {
		t.Errorf("GetLease (-want +got):\n%s", diff)
	}
	if _, err := s.GetLease(ctx, "cbx_ffffffffffff"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetLease(unknown): %v, want ErrNotFound", err)
	}
	if !res.Lease.HoldsCapacity() {
		t.Error("a provisioning lease must hold capacity")
	}
	// An image without a source is how leases stored before sources were
	// recorded look; it loads back as it was, whatever its text.
	for i, image := range []string{"debian-12", `{"id":"x"}`} {
		old := lease(fmt.Sprintf("cbx_00000000010%d", i), "alice")
		old.Image = image
		create(t, s, old, fmt.Sprintf("cat_img%d", i))
		if got := get(t, s, old.ID); got.Image != image || got.ImageSource != "" {
			t.Errorf("image %q without a source loads as %q from %q", image, got.Image, got.ImageSource)
		}
	}
}

func testCreateReplay(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	first := create(t, s, lease("cbx_000000000001", "alice"), "cat_1")

	res, err := s.CreateLease(ctx, store.CreateRequest{Lease: lease("cbx_000000000001", "alice"), AttemptID: "cat_1", Now: at(time.Second)})
	if err != nil || !res.Replayed {
		t.Fatalf("same attempt: %+v, %v; want replay", res, err)
	}
	if diff := cmp.Diff(first, res.Lease); diff != "" {
		t.Errorf("replayed lease (-want +got):\n%s", diff)
	}
	_, err = s.CreateLease(ctx, store.CreateRequest{Lease: lease("cbx_000000000001", "alice"), AttemptID: "cat_2", Now: t0})
	wantErr(t, "other attempt, same ID", err, store.ErrAttemptConflict)
	_, err = s.CreateLease(ctx, store.CreateRequest{Lease: lease("cbx_000000000001", "bob"), AttemptID: "cat_1", Now: t0})
	wantErr(t, "other owner", err, store.ErrLeaseIDConflict)
	other := lease("cbx_000000000001", "alice")
	other.Org = "other-org"
	_, err = s.CreateLease(ctx, store.CreateRequest{Lease: other, AttemptID: "cat_1", Now: t0})
	wantErr(t, "other org", err, store.ErrLeaseIDConflict)
	_, err = s.CreateLease(ctx, store.CreateRequest{Lease: lease("cbx_000000000002", "alice"), AttemptID: "cat_1", Now: t0})
	wantErr(t, "attempt reused for another ID", err, store.ErrAttemptConflict)

	if _, err := s.Release(ctx, first.ID, store.ReleaseRequest{Now: at(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	_, err = s.CreateLease(ctx, store.CreateRequest{Lease: lease("cbx_000000000001", "alice"), AttemptID: "cat_1", Now: at(2 * time.Minute)})
	var sc *store.StateChangedError
	if !errors.As(err, &sc) || !errors.Is(err, store.ErrLeaseStateChanged) {
		t.Fatalf("replay of ended lease: %v, want *StateChangedError", err)
	}
	if sc.Lease.ID != first.ID || sc.Lease.State != store.StateReleased {
		t.Errorf("StateChangedError lease = %s %s, want %s released", sc.Lease.ID, sc.Lease.State, first.ID)
	}
	_, err = s.CreateLease(ctx, store.CreateRequest{Lease: lease("cbx_000000000001", "alice"), AttemptID: "cat_3", Now: at(2 * time.Minute)})
	wantErr(t, "new attempt for ended ID", err, store.ErrLeaseIDConflict)
	if got, err := s.ListLeases(ctx, store.LeaseFilter{}); err != nil || len(got) != 1 {
		t.Errorf("ListLeases = %v, %v; want exactly the one lease", ids(got), err)
	}
}

func testCancelCreate(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)

	// Cancel before the create arrives: a tombstone.
	res, err := s.CancelCreate(ctx, "cbx_000000000001", "cat_1", "alice", "acme", t0)
	if err != nil || res.Lease != nil {
		t.Fatalf("cancel unseen attempt: %+v, %v", res, err)
	}
	_, err = s.CreateLease(ctx, store.CreateRequest{Lease: lease("cbx_000000000001", "alice"), AttemptID: "cat_1", Now: at(time.Second)})
	wantErr(t, "create after cancel", err, store.ErrCreateCanceled)
	if _, err := s.GetLease(ctx, "cbx_000000000001"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a canceled create made a lease: %v", err)
	}
	// The tombstone rejects only that owner's attempt; it does not reserve the ID.
	create(t, s, lease("cbx_000000000001", "alice"), "cat_fresh")
	_, err = s.CancelCreate(ctx, "cbx_000000000002", "cat_1", "bob", "acme", t0)
	if err != nil {
		t.Fatal(err)
	}
	create(t, s, lease("cbx_000000000003", "carol"), "cat_1")

	// Cancel of a bound attempt releases the lease and queues deletion.
	l := create(t, s, lease("cbx_000000000004", "alice"), "cat_4")
	now := at(time.Minute)
	res, err = s.CancelCreate(ctx, l.ID, "cat_4", "alice", "acme", now)
	if err != nil || res.Lease == nil {
		t.Fatalf("cancel bound attempt: %+v, %v", res, err)
	}
	got := get(t, s, l.ID)
	if diff := cmp.Diff(got, *res.Lease); diff != "" {
		t.Errorf("cancel result differs from stored lease (-stored +result):\n%s", diff)
	}
	if got.State != store.StateReleased || !got.ReleaseDeletesServer || !got.CleanupStartedAt.Equal(now) ||
		!got.ReleasedAt.Equal(now) || !got.EndedAt.IsZero() || !got.HoldsCapacity() {
		t.Errorf("after cancel: state %s deletes %v cleanupStarted %v released %v ended %v",
			got.State, got.ReleaseDeletesServer, got.CleanupStartedAt, got.ReleasedAt, got.EndedAt)
	}
	// Repeating is harmless, and the attempt stays canceled.
	again, err := s.CancelCreate(ctx, l.ID, "cat_4", "alice", "acme", at(2*time.Minute))
	if err != nil || again.Lease == nil || !again.Lease.UpdatedAt.Equal(now) && again.Lease.State != store.StateReleased {
		t.Fatalf("repeated cancel: %+v, %v", again, err)
	}
	if again.Lease.State != store.StateReleased || !again.Lease.ReleasedAt.Equal(now) {
		t.Errorf("repeated cancel changed the lease: %+v", again.Lease)
	}
	_, err = s.CreateLease(ctx, store.CreateRequest{Lease: lease(l.ID, "alice"), AttemptID: "cat_4", Now: at(3 * time.Minute)})
	wantErr(t, "create replay after cancel", err, store.ErrCreateCanceled)
	// A cancel naming another lease than the attempt's fails closed.
	_, err = s.CancelCreate(ctx, "cbx_000000000009", "cat_4", "alice", "acme", now)
	wantErr(t, "cancel with wrong lease", err, store.ErrAttemptConflict)
	// Another owner cannot cancel alice's lease with her attempt token:
	// not found, and nothing written (no tombstone for mallory either).
	_, err = s.CancelCreate(ctx, "cbx_000000000001", "cat_fresh", "mallory", "acme", now)
	wantErr(t, "foreign cancel", err, store.ErrNotFound)
	_, err = s.CancelCreate(ctx, "cbx_000000000001", "cat_fresh", "alice", "other-org", now)
	wantErr(t, "cancel from another org", err, store.ErrNotFound)
	if got := get(t, s, "cbx_000000000001"); got.State != store.StateProvisioning {
		t.Errorf("foreign cancel changed the lease to %s", got.State)
	}
	create(t, s, lease("cbx_000000000005", "mallory"), "cat_fresh")
}

func testPutLease(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	put := func(l store.Lease, hash string) (store.CreateResult, error) {
		return s.PutLease(ctx, store.CreateRequest{Lease: l, RequestHash: hash, Now: t0})
	}
	res, err := put(lease("cbx_000000000001", "alice"), "h1")
	if err != nil || res.Replayed {
		t.Fatalf("first put: %+v, %v", res, err)
	}
	if res.Lease.RequestHash != "h1" || res.Lease.CreateAttemptID != "" {
		t.Errorf("put lease private fields: hash %q attempt %q", res.Lease.RequestHash, res.Lease.CreateAttemptID)
	}
	again, err := put(lease("cbx_000000000001", "alice"), "h1")
	if err != nil || !again.Replayed {
		t.Fatalf("identical put: %+v, %v", again, err)
	}
	if diff := cmp.Diff(res.Lease, again.Lease); diff != "" {
		t.Errorf("replay (-first +replay):\n%s", diff)
	}
	_, err = put(lease("cbx_000000000001", "alice"), "h2")
	wantErr(t, "different request", err, store.ErrLeaseIDConflict)
	_, err = put(lease("cbx_000000000001", "bob"), "h1")
	wantErr(t, "other owner", err, store.ErrLeaseIDConflict)
	create(t, s, lease("cbx_000000000002", "alice"), "cat_2")
	_, err = put(lease("cbx_000000000002", "alice"), "h1")
	wantErr(t, "ID created by POST", err, store.ErrLeaseIDConflict)
	if _, err := s.Release(ctx, "cbx_000000000001", store.ReleaseRequest{Now: at(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	_, err = put(lease("cbx_000000000001", "alice"), "h1")
	wantErr(t, "ended ID", err, store.ErrLeaseIDConflict)
}

func testSlugs(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	a := lease("cbx_000000000001", "alice")
	a.Slug = "tidal-lobster"
	create(t, s, a, "cat_1")
	b := lease("cbx_000000000002", "alice")
	b.Slug = "tidal-lobster"
	_, err := s.CreateLease(ctx, store.CreateRequest{Lease: b, AttemptID: "cat_2", Now: t0})
	wantErr(t, "same slug, same owner", err, store.ErrSlugTaken)
	c := lease("cbx_000000000003", "bob")
	c.Slug = "tidal-lobster"
	create(t, s, c, "cat_3")

	found, err := s.FindLease(ctx, "tidal-lobster", "alice", "acme")
	if err != nil || found.ID != a.ID {
		t.Fatalf("FindLease(slug) = %s, %v; want %s", found.ID, err, a.ID)
	}
	if _, err := s.Release(ctx, a.ID, store.ReleaseRequest{Now: at(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	// Released: the slug is free again, and resolves to the live lease.
	b.CreatedAt = at(2 * time.Minute)
	create(t, s, b, "cat_2")
	found, err = s.FindLease(ctx, "tidal-lobster", "alice", "acme")
	if err != nil || found.ID != b.ID {
		t.Fatalf("FindLease(slug) with one ended = %s, %v; want %s", found.ID, err, b.ID)
	}
	if _, err := s.Release(ctx, b.ID, store.ReleaseRequest{Now: at(3 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	found, err = s.FindLease(ctx, "tidal-lobster", "alice", "acme")
	if err != nil || found.ID != b.ID {
		t.Errorf("FindLease(slug) all ended = %s, %v; want newest %s", found.ID, err, b.ID)
	}
}

func testFindAndList(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	for i, owner := range []string{"alice", "bob", "alice", "alice"} {
		l := lease(fmt.Sprintf("cbx_00000000000%d", i), owner)
		l.CreatedAt = at(time.Duration(i) * time.Minute)
		l.LastTouchedAt = l.CreatedAt
		if i == 3 {
			l.Provider = "aws"
		}
		create(t, s, l, fmt.Sprintf("cat_%d", i))
	}
	if _, err := s.Release(ctx, "cbx_000000000002", store.ReleaseRequest{Now: at(10 * time.Minute)}); err != nil {
		t.Fatal(err)
	}

	if _, err := s.FindLease(ctx, "cbx_000000000001", "alice", "acme"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("FindLease of bob's lease as alice: %v, want ErrNotFound", err)
	}
	if l, err := s.FindLease(ctx, "cbx_000000000001", "bob", "acme"); err != nil || l.Owner != "bob" {
		t.Errorf("FindLease as bob: %v, %v", l.ID, err)
	}
	if _, err := s.FindLease(ctx, "cbx_000000000001", "bob", "elsewhere"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("FindLease in another org: %v, want ErrNotFound", err)
	}

	for _, tc := range []struct {
		f    store.LeaseFilter
		want []string
	}{
		{store.LeaseFilter{}, []string{"cbx_000000000003", "cbx_000000000002", "cbx_000000000001", "cbx_000000000000"}},
		{store.LeaseFilter{Owner: "alice"}, []string{"cbx_000000000003", "cbx_000000000002", "cbx_000000000000"}},
		{store.LeaseFilter{Owner: "alice", State: store.StateProvisioning}, []string{"cbx_000000000003", "cbx_000000000000"}},
		{store.LeaseFilter{State: store.StateReleased}, []string{"cbx_000000000002"}},
		{store.LeaseFilter{Provider: "aws"}, []string{"cbx_000000000003"}},
		{store.LeaseFilter{Org: "acme", Limit: 2}, []string{"cbx_000000000003", "cbx_000000000002"}},
		{store.LeaseFilter{Org: "nobody"}, []string{}},
	} {
		got, err := s.ListLeases(ctx, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, ids(got)); diff != "" {
			t.Errorf("ListLeases(%+v) (-want +got):\n%s", tc.f, diff)
		}
	}
}

func testHeartbeat(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	l := create(t, s, lease("cbx_000000000001", "alice"), "cat_1")
	if !l.ExpiresAt.Equal(at(30 * time.Minute)) {
		t.Fatalf("ExpiresAt = %v, want created+idle", l.ExpiresAt)
	}
	got, err := s.Heartbeat(ctx, l.ID, store.HeartbeatRequest{ExpectedProvider: "hetzner", Now: at(20 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if !got.LastTouchedAt.Equal(at(20*time.Minute)) || !got.ExpiresAt.Equal(at(50*time.Minute)) {
		t.Errorf("after heartbeat: touched %v expires %v", got.LastTouchedAt, got.ExpiresAt)
	}
	// A longer idle timeout is capped by created+ttl (90 minutes).
	got, err = s.Heartbeat(ctx, l.ID, store.HeartbeatRequest{IdleTimeoutSeconds: 7200, Now: at(40 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if got.IdleTimeoutSeconds != 7200 || !got.ExpiresAt.Equal(at(90*time.Minute)) {
		t.Errorf("idle 7200: idle %d expires %v, want expiry at created+ttl", got.IdleTimeoutSeconds, got.ExpiresAt)
	}
	_, err = s.Heartbeat(ctx, l.ID, store.HeartbeatRequest{ExpectedProvider: "aws", Now: at(41 * time.Minute)})
	wantErr(t, "provider mismatch", err, store.ErrProviderMismatch)
	// Restricted to an owner: someone else's lease is not found.
	_, err = s.Heartbeat(ctx, l.ID, store.HeartbeatRequest{Owner: "bob", Org: "acme", Now: at(41 * time.Minute)})
	wantErr(t, "other owner", err, store.ErrNotFound)
	_, err = s.Heartbeat(ctx, l.ID, store.HeartbeatRequest{Owner: "alice", Org: "other", Now: at(41 * time.Minute)})
	wantErr(t, "other org", err, store.ErrNotFound)
	// Telemetry is kept until the next sample replaces it.
	sample := json.RawMessage(`{"load1":0.5,"memUsedPct":41}`)
	got, err = s.Heartbeat(ctx, l.ID, store.HeartbeatRequest{Owner: "alice", Org: "acme", Telemetry: sample, Now: at(42 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Telemetry) != string(sample) || !got.TelemetryAt.Equal(at(42*time.Minute)) {
		t.Errorf("telemetry %s at %v, want %s at +42m", got.Telemetry, got.TelemetryAt, sample)
	}
	got, err = s.Heartbeat(ctx, l.ID, store.HeartbeatRequest{Now: at(43 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, get(t, s, l.ID)); diff != "" {
		t.Errorf("heartbeat result differs from the stored lease:\n%s", diff)
	}
	if string(got.Telemetry) != string(sample) || !got.TelemetryAt.Equal(at(42*time.Minute)) {
		t.Errorf("telemetry after a heartbeat without one: %s at %v, want it kept", got.Telemetry, got.TelemetryAt)
	}
	_, err = s.Heartbeat(ctx, l.ID, store.HeartbeatRequest{Telemetry: make(json.RawMessage, store.MaxTelemetryBytes+1), Now: at(44 * time.Minute)})
	wantErr(t, "oversized telemetry", err, store.ErrInvalid)
	// Expired: not revived, nothing changes.
	before := get(t, s, l.ID)
	_, err = s.Heartbeat(ctx, l.ID, store.HeartbeatRequest{Now: at(90 * time.Minute)})
	wantErr(t, "expired", err, store.ErrLeaseExpired)
	if diff := cmp.Diff(before, get(t, s, l.ID)); diff != "" {
		t.Errorf("failed heartbeat changed the lease:\n%s", diff)
	}
	// Ended.
	m := create(t, s, lease("cbx_000000000002", "alice"), "cat_2")
	if _, err := s.Release(ctx, m.ID, store.ReleaseRequest{Now: at(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Heartbeat(ctx, m.ID, store.HeartbeatRequest{Now: at(2 * time.Minute)})
	wantErr(t, "ended", err, store.ErrLeaseEnded)
	_, err = s.Heartbeat(ctx, "cbx_ffffffffffff", store.HeartbeatRequest{Now: t0})
	wantErr(t, "unknown", err, store.ErrNotFound)

	// Registered leases: lastTouched + min(ttl, idle).
	r := lease("ext-box-1", "alice")
	r.TTLSeconds, r.IdleTimeoutSeconds = 600, 1800
	reg, _, err := s.RegisterLease(ctx, r, t0)
	if err != nil {
		t.Fatal(err)
	}
	got, err = s.Heartbeat(ctx, reg.ID, store.HeartbeatRequest{Now: at(5 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if !got.ExpiresAt.Equal(at(15 * time.Minute)) {
		t.Errorf("registered expiry %v, want touched+min(ttl,idle)", got.ExpiresAt)
	}
}

// Concurrent heartbeats (committed together where the store batches
// them) each get their own outcome: one refused heartbeat fails no other.
func testConcurrentHeartbeats(t *testing.T, open Opener) {
	stores := []store.Store{open(t), open(t)}
	ctx := testContext(t)
	const n = 24
	var ids []string
	for i := range n {
		l := create(t, stores[0], lease(fmt.Sprintf("cbx_%012x", 0x100+i), "alice"), fmt.Sprintf("cat_%d", i))
		ids = append(ids, l.ID)
		if i%4 == 0 {
			if _, err := stores[0].Release(ctx, l.ID, store.ReleaseRequest{Now: at(time.Minute)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	errs := make([]error, 3*n)
	got := make([]store.Lease, 3*n)
	var wg sync.WaitGroup
	for k := range 3 * n {
		wg.Go(func() {
			id := ids[k%n]
			req := store.HeartbeatRequest{Now: at(10 * time.Minute), Owner: "alice", Org: "acme"}
			if k >= 2*n {
				req.Owner = "mallory" // someone else's lease: not found
			}
			got[k], errs[k] = stores[k%2].Heartbeat(ctx, id, req)
		})
	}
	wg.Wait()
	for k, err := range errs {
		i := k % n
		switch {
		case k >= 2*n:
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("heartbeat %d of %s by another owner: %v, want ErrNotFound", k, ids[i], err)
			}
		case i%4 == 0:
			if !errors.Is(err, store.ErrLeaseEnded) {
				t.Errorf("heartbeat %d of released %s: %v, want ErrLeaseEnded", k, ids[i], err)
			}
		case err != nil:
			t.Errorf("heartbeat %d of %s: %v", k, ids[i], err)
		case got[k].ID != ids[i] || !got[k].LastTouchedAt.Equal(at(10*time.Minute)):
			t.Errorf("heartbeat %d of %s returned %s touched at %v", k, ids[i], got[k].ID, got[k].LastTouchedAt)
		}
	}
}

func testRelease(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	l := create(t, s, lease("cbx_000000000001", "alice"), "cat_1")
	_, err := s.Release(ctx, l.ID, store.ReleaseRequest{ExpectedProvider: "aws", DeleteServer: true, Now: at(time.Minute)})
	wantErr(t, "provider mismatch", err, store.ErrProviderMismatch)
	got, err := s.Release(ctx, l.ID, store.ReleaseRequest{ExpectedProvider: "hetzner", DeleteServer: true, Now: at(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.StateReleased || !got.ReleaseDeletesServer || !got.CleanupStartedAt.Equal(at(time.Minute)) ||
		!got.EndedAt.IsZero() || !got.HoldsCapacity() {
		t.Errorf("release with delete: %+v", got)
	}
	again, err := s.Release(ctx, l.ID, store.ReleaseRequest{Now: at(2 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, again); diff != "" {
		t.Errorf("second release changed the lease:\n%s", diff)
	}

	k := create(t, s, lease("cbx_000000000002", "alice"), "cat_2")
	got, err = s.Release(ctx, k.ID, store.ReleaseRequest{Now: at(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.StateReleased || got.ReleaseDeletesServer || !got.EndedAt.Equal(at(time.Minute)) || got.HoldsCapacity() {
		t.Errorf("release without delete: %+v", got)
	}

	reg, _, err := s.RegisterLease(ctx, lease("ext-box-1", "alice"), t0)
	if err != nil {
		t.Fatal(err)
	}
	got, err = s.Release(ctx, reg.ID, store.ReleaseRequest{DeleteServer: true, Now: at(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.StateReleased || got.ReleaseDeletesServer || got.EndedAt.IsZero() {
		t.Errorf("registered release must never queue a deletion: %+v", got)
	}
	_, err = s.Release(ctx, "cbx_ffffffffffff", store.ReleaseRequest{Now: t0})
	wantErr(t, "unknown", err, store.ErrNotFound)
}

func testActivateAndFail(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	l := create(t, s, lease("cbx_000000000001", "alice"), "cat_1")
	now := at(2 * time.Minute)
	got, err := s.ActivateLease(ctx, l.ID, now, func(l *store.Lease) {
		l.Host, l.CloudID, l.SSHHostKey, l.ServerName = "203.0.113.7", "4711", "ssh-ed25519 AAAA", "crabbox-tidal"
		l.State = store.StateExpired // ignored: the store owns the state
		l.CreateAttemptID = "cat_evil"
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.StateActive || got.Host != "203.0.113.7" || got.CloudID != "4711" ||
		!got.LastTouchedAt.Equal(now) || !got.ExpiresAt.Equal(at(32*time.Minute)) || got.CreateAttemptID != "cat_1" {
		t.Errorf("activated lease: %+v", got)
	}
	if diff := cmp.Diff(got, get(t, s, l.ID)); diff != "" {
		t.Errorf("activate result differs from stored (-result +stored):\n%s", diff)
	}

	// Canceled while provisioning: activation records the server, queues
	// its deletion again, and reports the change.
	m := create(t, s, lease("cbx_000000000002", "alice"), "cat_2")
	if _, err := s.CancelCreate(ctx, m.ID, "cat_2", "alice", "acme", at(time.Minute)); err != nil {
		t.Fatal(err)
	}
	claims, err := s.ClaimForCleanup(ctx, at(time.Minute), 10, time.Minute)
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %v, %v", ids(claims), err)
	}
	if _, err := s.FinishCleanup(ctx, m.ID, claims[0].CleanupToken, at(time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, err = s.ActivateLease(ctx, m.ID, now, func(l *store.Lease) { l.CloudID = "4712" })
	var sc *store.StateChangedError
	if !errors.As(err, &sc) {
		t.Fatalf("activate canceled lease: %v, want *StateChangedError", err)
	}
	if sc.Lease.CloudID != "4712" || !sc.Lease.ReleaseDeletesServer || !sc.Lease.EndedAt.IsZero() || sc.Lease.State != store.StateReleased {
		t.Errorf("activate canceled lease: %+v", sc.Lease)
	}
	if got := get(t, s, m.ID); !got.ReleaseDeletesServer || got.CloudID != "4712" {
		t.Errorf("stored after late activation: %+v", got)
	}

	// FailLease with and without deletion.
	f := create(t, s, lease("cbx_000000000003", "alice"), "cat_3")
	got, err = s.FailLease(ctx, f.ID, "quota exceeded", true, now)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.StateFailed || got.FailureError != "quota exceeded" || !got.ReleaseDeletesServer || !got.HoldsCapacity() {
		t.Errorf("failed with deletion: %+v", got)
	}
	g := create(t, s, lease("cbx_000000000004", "alice"), "cat_4")
	got, err = s.FailLease(ctx, g.ID, "no capacity", false, now)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.StateFailed || got.ReleaseDeletesServer || !got.EndedAt.Equal(now) || got.HoldsCapacity() {
		t.Errorf("failed without deletion: %+v", got)
	}
	_, err = s.FailLease(ctx, g.ID, "again", false, now)
	wantErr(t, "fail ended lease", err, store.ErrLeaseStateChanged)
}

func testRegister(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	r := lease("ext-box-1", "alice")
	r.Provider, r.Host = "ssh", "10.0.0.5"
	got, created, err := s.RegisterLease(ctx, r, t0)
	if err != nil || !created {
		t.Fatalf("register: %v, %v", created, err)
	}
	if got.Lifecycle != store.LifecycleRegistered || got.State != store.StateActive {
		t.Errorf("registered: %s %s", got.Lifecycle, got.State)
	}
	r.Host = "10.0.0.6"
	r.CreatedAt = at(time.Hour)
	got, created, err = s.RegisterLease(ctx, r, at(10*time.Minute))
	if err != nil || created {
		t.Fatalf("refresh: %v, %v", created, err)
	}
	if got.Host != "10.0.0.6" || !got.CreatedAt.Equal(t0) || !got.LastTouchedAt.Equal(at(10*time.Minute)) {
		t.Errorf("refreshed: host %s created %v touched %v", got.Host, got.CreatedAt, got.LastTouchedAt)
	}
	// A released registration becomes active again when re-registered.
	if _, err := s.Release(ctx, r.ID, store.ReleaseRequest{Now: at(11 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	got, _, err = s.RegisterLease(ctx, r, at(12*time.Minute))
	if err != nil || got.State != store.StateActive || !got.EndedAt.IsZero() {
		t.Fatalf("re-register: %+v, %v", got, err)
	}
	_, _, err = s.RegisterLease(ctx, lease("ext-box-1", "bob"), t0)
	wantErr(t, "other owner", err, store.ErrLeaseIDConflict)
	other := r
	other.Provider = "aws"
	_, _, err = s.RegisterLease(ctx, other, at(13*time.Minute))
	wantErr(t, "other provider", err, store.ErrProviderMismatch)
	create(t, s, lease("cbx_000000000001", "alice"), "cat_1")
	_, _, err = s.RegisterLease(ctx, lease("cbx_000000000001", "alice"), t0)
	wantErr(t, "managed ID", err, store.ErrLeaseIDConflict)

	// Registered leases never count against limits.
	_, err = s.CreateLease(ctx, store.CreateRequest{Lease: lease("cbx_000000000002", "alice"), AttemptID: "cat_2", Now: t0,
		Limits: store.Limits{MaxActiveLeases: 2, MaxMonthlyUSD: 3}})
	if err != nil {
		t.Errorf("create beside a registered lease: %v", err)
	}
}

func testActiveLimits(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	try := func(id, owner, org string, lim store.Limits, now time.Time) error {
		l := lease(id, owner)
		l.Org, l.CreatedAt, l.LastTouchedAt = org, now, now
		_, err := s.CreateLease(ctx, store.CreateRequest{Lease: l, AttemptID: "cat_" + id, Limits: lim, Now: now})
		return err
	}
	global := store.Limits{MaxActiveLeases: 1}
	if err := try("cbx_000000000001", "alice", "acme", global, t0); err != nil {
		t.Fatal(err)
	}
	err := try("cbx_000000000002", "bob", "acme", global, t0)
	var le *store.LimitError
	if !errors.As(err, &le) || !errors.Is(err, store.ErrLimitExceeded) {
		t.Fatalf("second lease over global limit: %v", err)
	}
	if le.Error() != "active lease limit exceeded: 2/1" {
		t.Errorf("message %q", le.Error())
	}
	if _, err := s.GetLease(ctx, "cbx_000000000002"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("refused create left a lease: %v", err)
	}
	// Past its expiry but not cleaned up: still counts.
	late := at(3 * time.Hour)
	if err := try("cbx_000000000002", "bob", "acme", global, late); !errors.Is(err, store.ErrLimitExceeded) {
		t.Errorf("expired but uncleaned lease must count: %v", err)
	}
	// Released with deletion queued: counts until cleanup commits.
	if _, err := s.Release(ctx, "cbx_000000000001", store.ReleaseRequest{DeleteServer: true, Now: late}); err != nil {
		t.Fatal(err)
	}
	if err := try("cbx_000000000002", "bob", "acme", global, late); !errors.Is(err, store.ErrLimitExceeded) {
		t.Errorf("queued deletion must count: %v", err)
	}
	claims, err := s.ClaimForCleanup(ctx, late, 10, time.Minute)
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %v %v", ids(claims), err)
	}
	if _, err := s.FinishCleanup(ctx, claims[0].ID, claims[0].CleanupToken, late); err != nil {
		t.Fatal(err)
	}
	if err := try("cbx_000000000002", "bob", "acme", global, late); err != nil {
		t.Errorf("after cleanup: %v", err)
	}

	perOwner := store.Limits{MaxActiveLeases: 10, MaxActiveLeasesPerOwner: 1}
	err = try("cbx_000000000003", "bob", "acme", perOwner, late)
	if !errors.As(err, &le) || le.Scope != "owner" || le.Error() != "owner active lease limit exceeded: 2/1" {
		t.Errorf("per-owner: %v", err)
	}
	if err := try("cbx_000000000003", "carol", "acme", perOwner, late); err != nil {
		t.Errorf("other owner: %v", err)
	}
	perOrg := store.Limits{MaxActiveLeasesPerOrg: 2}
	err = try("cbx_000000000004", "dave", "acme", perOrg, late)
	if !errors.As(err, &le) || le.Scope != "org" || le.Would != 3 || le.Max != 2 {
		t.Errorf("per-org: %v", err)
	}
	if err := try("cbx_000000000004", "dave", "other", perOrg, late); err != nil {
		t.Errorf("other org: %v", err)
	}
}

func testMonthlyLimits(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	// A lease started last month and still running reserves its full
	// budget in this month too.
	march := time.Date(2026, 3, 31, 23, 0, 0, 0, time.UTC)
	old := lease("cbx_000000000001", "alice")
	old.CreatedAt, old.LastTouchedAt = march, march
	old.EstimatedHourlyUSD, old.MaxEstimatedUSD = 4, 6
	create(t, s, old, "cat_1")

	april := time.Date(2026, 4, 1, 0, 30, 0, 0, time.UTC)
	lim := store.Limits{MaxMonthlyUSD: 10}
	next := lease("cbx_000000000002", "bob")
	next.CreatedAt, next.LastTouchedAt = april, april
	next.EstimatedHourlyUSD, next.MaxEstimatedUSD = 4, 6
	_, err := s.CreateLease(ctx, store.CreateRequest{Lease: next, AttemptID: "cat_2", Limits: lim, Now: april})
	var le *store.LimitError
	if !errors.As(err, &le) || le.Kind != store.LimitMonthlyUSD || le.Error() != "monthly reserved USD limit exceeded: 12.00/10.00" {
		t.Fatalf("monthly limit with last month's running lease: %v", err)
	}
	// Once it ended (after 1.5 h, 0.5 h of it in April) it reserves what it
	// cost in April: 4 USD/h * 0.5 h = 2.
	if _, err := s.Release(ctx, old.ID, store.ReleaseRequest{Now: april}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateLease(ctx, store.CreateRequest{Lease: next, AttemptID: "cat_2", Limits: lim, Now: april}); err != nil {
		t.Fatalf("after the old lease ended: %v", err)
	}
	// 2 (ended) + 6 (live) + 3 = 11 > 10; per-owner and per-org scopes.
	third := lease("cbx_000000000003", "carol")
	third.CreatedAt, third.LastTouchedAt, third.MaxEstimatedUSD = april, april, 3
	_, err = s.CreateLease(ctx, store.CreateRequest{Lease: third, AttemptID: "cat_3", Limits: lim, Now: april})
	if !errors.As(err, &le) || le.Would != 11 {
		t.Errorf("third lease: %v", err)
	}
	_, err = s.CreateLease(ctx, store.CreateRequest{Lease: third, AttemptID: "cat_3", Now: april,
		Limits: store.Limits{MaxMonthlyUSDPerOwner: 3, MaxMonthlyUSDPerOrg: 10}})
	if !errors.As(err, &le) || le.Scope != "org" {
		t.Errorf("per-org monthly: %v", err)
	}
	if _, err := s.CreateLease(ctx, store.CreateRequest{Lease: third, AttemptID: "cat_3", Now: april,
		Limits: store.Limits{MaxMonthlyUSDPerOwner: 3}}); err != nil {
		t.Errorf("per-owner at exactly the limit: %v", err)
	}

	// reserved reports the month's reservations through a refused create.
	reserved := func(now time.Time) float64 {
		t.Helper()
		probe := lease("cbx_0000000000ff", "probe")
		probe.CreatedAt, probe.LastTouchedAt, probe.MaxEstimatedUSD = now, now, 100
		_, err := s.CreateLease(ctx, store.CreateRequest{Lease: probe, AttemptID: "cat_probe", Now: now, Limits: store.Limits{MaxMonthlyUSD: 1}})
		if !errors.As(err, &le) {
			t.Fatalf("probe: %v", err)
		}
		return le.Would - 100
	}
	// Ended after an hour at 4 USD/h, next reserves 4 instead of 6.
	later := april.Add(time.Hour)
	if _, err := s.Release(ctx, next.ID, store.ReleaseRequest{Now: later}); err != nil {
		t.Fatal(err)
	}
	if got := reserved(later); got < 9-1e-9 || got > 9+1e-9 {
		t.Errorf("reserved after release = %v, want 2+4+3", got)
	}
	// A late activation brings the server back: reserved in full again.
	if _, err := s.ActivateLease(ctx, next.ID, later, func(l *store.Lease) { l.CloudID = "late" }); !errors.Is(err, store.ErrLeaseStateChanged) {
		t.Fatalf("late activation: %v", err)
	}
	if got := reserved(later); got < 11-1e-9 || got > 11+1e-9 {
		t.Errorf("reserved after late activation = %v, want 2+6+3", got)
	}
}

func testConcurrentCreates(t *testing.T, open Opener) {
	a, b := open(t), open(t)
	ctx := testContext(t)
	const workers, max = 12, 3
	lim := store.Limits{MaxActiveLeases: max}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		ok, over int
		errs     []error
	)
	for i := range workers {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			id := fmt.Sprintf("cbx_%012x", i+1)
			_, err := s.CreateLease(ctx, store.CreateRequest{
				Lease: lease(id, fmt.Sprintf("user%d", i)), AttemptID: "cat_" + id, Limits: lim, Now: t0})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, store.ErrLimitExceeded):
				over++
			default:
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("unexpected errors: %v", errs)
	}
	if ok != max || over != workers-max {
		t.Errorf("%d created, %d refused; want %d and %d", ok, over, max, workers-max)
	}
	all, err := a.ListLeases(ctx, store.LeaseFilter{})
	if err != nil || len(all) != max {
		t.Errorf("stored leases: %v, %v", ids(all), err)
	}
}

func testCleanup(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	if _, ok, err := s.NextCleanupAt(ctx); err != nil || ok {
		t.Fatalf("NextCleanupAt on empty store: %v %v", ok, err)
	}
	a := create(t, s, lease("cbx_000000000001", "alice"), "cat_1") // expires t0+30m
	b := create(t, s, lease("cbx_000000000002", "alice"), "cat_2")
	if _, err := s.Heartbeat(ctx, b.ID, store.HeartbeatRequest{Now: at(20 * time.Minute)}); err != nil { // expires t0+50m
		t.Fatal(err)
	}
	if next, ok, err := s.NextCleanupAt(ctx); err != nil || !ok || !next.Equal(at(30*time.Minute)) {
		t.Errorf("NextCleanupAt = %v %v %v, want %v", next, ok, err, at(30*time.Minute))
	}
	if got, err := s.ClaimForCleanup(ctx, at(29*time.Minute), 10, time.Minute); err != nil || len(got) != 0 {
		t.Errorf("claim before expiry: %v, %v", ids(got), err)
	}
	now := at(31 * time.Minute)
	claims, err := s.ClaimForCleanup(ctx, now, 10, 5*time.Minute)
	if err != nil || len(claims) != 1 || claims[0].ID != a.ID || claims[0].CleanupToken == "" {
		t.Fatalf("claim: %v, %v", ids(claims), err)
	}
	if !claims[0].CleanupStartedAt.Equal(now) || claims[0].State != store.StateActive && claims[0].State != store.StateProvisioning {
		t.Errorf("claimed lease: %+v", claims[0])
	}
	// A coordinator whose clock lags cannot revive a lease being cleaned up.
	_, err = s.Heartbeat(ctx, a.ID, store.HeartbeatRequest{Now: at(29 * time.Minute)})
	wantErr(t, "heartbeat of a claimed lease", err, store.ErrLeaseExpired)
	if got, err := s.ClaimForCleanup(ctx, at(35*time.Minute), 10, 5*time.Minute); err != nil || len(got) != 0 {
		t.Errorf("claim while held: %v, %v", ids(got), err)
	}
	// A holder at work renews its claim: it holds past the first hold.
	if err := s.RenewCleanupClaim(ctx, a.ID, claims[0].CleanupToken, at(35*time.Minute), time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ClaimForCleanup(ctx, at(36*time.Minute-time.Microsecond), 10, 5*time.Minute); err != nil || len(got) != 0 {
		t.Errorf("claim while renewed: %v, %v", ids(got), err)
	}
	// The holder died: after the hold lapses the lease is claimable again,
	// and the old token is fenced off.
	reclaim, err := s.ClaimForCleanup(ctx, at(36*time.Minute), 10, 5*time.Minute)
	if err != nil || len(reclaim) != 1 || reclaim[0].CleanupToken == claims[0].CleanupToken {
		t.Fatalf("reclaim after hold: %v, %v", ids(reclaim), err)
	}
	_, err = s.FinishCleanup(ctx, a.ID, claims[0].CleanupToken, at(37*time.Minute))
	wantErr(t, "finish with stale token", err, store.ErrClaimLost)
	err = s.RenewCleanupClaim(ctx, a.ID, claims[0].CleanupToken, at(37*time.Minute), time.Minute)
	wantErr(t, "renew with stale token", err, store.ErrClaimLost)
	_, err = s.FailCleanup(ctx, a.ID, claims[0].CleanupToken, "boom", at(37*time.Minute), at(40*time.Minute))
	wantErr(t, "fail with stale token", err, store.ErrClaimLost)

	// A failed delete keeps the lease live and retries after retryAt.
	failed, err := s.FailCleanup(ctx, a.ID, reclaim[0].CleanupToken, "provider said 503", at(37*time.Minute), at(42*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if failed.CleanupAttempts != 1 || failed.CleanupError != "provider said 503" || !failed.CleanupRetryAt.Equal(at(42*time.Minute)) ||
		failed.CleanupToken != "" || !failed.State.Live() || !failed.HoldsCapacity() {
		t.Errorf("after failed cleanup: %+v", failed)
	}
	if got, err := s.ClaimForCleanup(ctx, at(41*time.Minute), 10, time.Minute); err != nil || len(got) != 0 {
		t.Errorf("claim before retryAt: %v, %v", ids(got), err)
	}
	if next, ok, err := s.NextCleanupAt(ctx); err != nil || !ok || !next.Equal(at(42*time.Minute)) {
		t.Errorf("NextCleanupAt = %v %v %v, want retry time", next, ok, err)
	}
	claims, err = s.ClaimForCleanup(ctx, at(42*time.Minute), 10, time.Minute)
	if err != nil || len(claims) != 1 || claims[0].ID != a.ID {
		t.Fatalf("claim at retryAt: %v, %v", ids(claims), err)
	}
	done, err := s.FinishCleanup(ctx, a.ID, claims[0].CleanupToken, at(43*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if done.State != store.StateExpired || !done.EndedAt.Equal(at(43*time.Minute)) || done.CleanupToken != "" ||
		!done.CleanupStartedAt.IsZero() || !done.CleanupRetryAt.IsZero() || done.CleanupError != "" ||
		done.CleanupAttempts != 1 || done.HoldsCapacity() {
		t.Errorf("after cleanup: %+v", done)
	}
	_, err = s.FinishCleanup(ctx, a.ID, claims[0].CleanupToken, at(44*time.Minute))
	wantErr(t, "finish twice", err, store.ErrClaimLost)

	// A queued deletion is claimable at once, also before expiry, and
	// finishing it keeps the released state.
	c := create(t, s, lease("cbx_000000000003", "alice"), "cat_3")
	c.CreatedAt = at(40 * time.Minute)
	if _, err := s.Release(ctx, c.ID, store.ReleaseRequest{DeleteServer: true, Now: at(44 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	claims, err = s.ClaimForCleanup(ctx, at(44*time.Minute), 1, time.Minute)
	if err != nil || len(claims) != 1 || claims[0].ID != c.ID {
		t.Fatalf("claim queued deletion: %v, %v", ids(claims), err)
	}
	done, err = s.FinishCleanup(ctx, c.ID, claims[0].CleanupToken, at(45*time.Minute))
	if err != nil || done.State != store.StateReleased || done.ReleaseDeletesServer || !done.EndedAt.Equal(at(45*time.Minute)) {
		t.Errorf("finished queued deletion: %+v, %v", done, err)
	}
	// b expired at t0+50m; nothing else is left.
	claims, err = s.ClaimForCleanup(ctx, at(2*time.Hour), 10, time.Minute)
	if err != nil || len(claims) != 1 || claims[0].ID != b.ID {
		t.Errorf("final claim: %v, %v", ids(claims), err)
	}
}

func testConcurrentCleanup(t *testing.T, open Opener) {
	a, b := open(t), open(t)
	ctx := testContext(t)
	const n = 20
	for i := range n {
		create(t, a, lease(fmt.Sprintf("cbx_%012x", i+1), "alice"), fmt.Sprintf("cat_%d", i))
	}
	now := at(time.Hour)
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
				got, err := s.ClaimForCleanup(ctx, now, 3, time.Hour)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, l := range got {
					claimed[l.ID]++
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
		t.Errorf("%d leases claimed, want %d", len(claimed), n)
	}
	for id, c := range claimed {
		if c != 1 {
			t.Errorf("%s claimed %d times", id, c)
		}
	}
}

func run(id, owner string) store.Run {
	return store.Run{ID: id, LeaseID: "cbx_000000000001", Slug: "tidal-lobster", Owner: owner, Org: "acme",
		Provider: "hetzner", Target: "linux", Class: "beast", ServerType: "cpx62",
		Command: []string{"go", "test", "./..."}, Label: "ci", StartedAt: t0}
}

func testRuns(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	r, err := s.CreateRun(ctx, run("run_000000000001", "alice"))
	if err != nil {
		t.Fatal(err)
	}
	want := run("run_000000000001", "alice")
	want.State = store.RunRunning
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("CreateRun (-want +got):\n%s", diff)
	}
	if _, err := s.CreateRun(ctx, run("run_000000000001", "alice")); !errors.Is(err, store.ErrRunExists) {
		t.Errorf("duplicate run: %v", err)
	}
	got, err := s.GetRun(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GetRun (-want +got):\n%s", diff)
	}
	if _, err := s.GetRun(ctx, "run_ffffffffffff"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetRun(unknown): %v", err)
	}

	for i, ev := range []store.RunEvent{
		{Type: "phase", Phase: "sync", Message: "syncing"},
		{Type: "output", Stream: "stdout", Message: "ok\n", Data: []byte(`{"bytes":3}`)},
		{Type: "phase", Phase: "command"},
	} {
		ev.CreatedAt = at(time.Duration(i+1) * time.Second)
		got, err := s.AppendRunEvent(ctx, r.ID, ev)
		if err != nil {
			t.Fatal(err)
		}
		if got.Seq != int64(i+1) || got.RunID != r.ID {
			t.Errorf("event %d: seq %d run %s", i, got.Seq, got.RunID)
		}
	}
	events, err := s.ListRunEvents(ctx, r.ID, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantEvents := []store.RunEvent{
		{RunID: r.ID, Seq: 2, Type: "output", Stream: "stdout", Message: "ok\n", Data: []byte(`{"bytes":3}`), CreatedAt: at(2 * time.Second)},
		{RunID: r.ID, Seq: 3, Type: "phase", Phase: "command", CreatedAt: at(3 * time.Second)},
	}
	if diff := cmp.Diff(wantEvents, events); diff != "" {
		t.Errorf("ListRunEvents(after 1) (-want +got):\n%s", diff)
	}
	if events, err := s.ListRunEvents(ctx, r.ID, 0, 1); err != nil || len(events) != 1 || events[0].Seq != 1 {
		t.Errorf("ListRunEvents(limit 1): %+v, %v", events, err)
	}
	if _, err := s.ListRunEvents(ctx, "run_ffffffffffff", 0, 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("events of unknown run: %v", err)
	}
	got, _ = s.GetRun(ctx, r.ID)
	if got.EventCount != 3 || got.Phase != "command" || !got.LastEventAt.Equal(at(3*time.Second)) {
		t.Errorf("run after events: count %d phase %q last %v", got.EventCount, got.Phase, got.LastEventAt)
	}

	fin := store.RunFinish{ExitCode: 0, SyncMs: 120, CommandMs: 4000, Log: []byte("ok\n"),
		Results: []byte(`{"tests":3,"failures":0}`), Now: at(5 * time.Second)}
	done, err := s.FinishRun(ctx, r.ID, fin)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != store.RunSucceeded || done.ExitCode == nil || *done.ExitCode != 0 || done.DurationMs != 5000 ||
		done.LogBytes != 3 || done.LogTruncated || !done.EndedAt.Equal(at(5*time.Second)) || string(done.Results) != `{"tests":3,"failures":0}` {
		t.Errorf("finished run: %+v", done)
	}
	if stored, _ := s.GetRun(ctx, r.ID); !cmp.Equal(done, stored) {
		t.Errorf("finish result differs from stored:\n%s", cmp.Diff(done, stored))
	}
	replay, err := s.FinishRun(ctx, r.ID, fin)
	if err != nil || !cmp.Equal(done, replay) {
		t.Errorf("identical finish replay: %v\n%s", err, cmp.Diff(done, replay))
	}
	fin.ExitCode = 1
	if _, err := s.FinishRun(ctx, r.ID, fin); !errors.Is(err, store.ErrRunConflict) {
		t.Errorf("different finish: %v", err)
	}
	// Events are taken after the finish (clients report the lease's
	// release then); they change neither the state nor the outcome.
	late, err := s.AppendRunEvent(ctx, r.ID, store.RunEvent{Type: "lease.released", CreatedAt: at(time.Minute),
		Apply: store.RunUpdate{Fail: true}})
	if err != nil || late.Seq != done.EventCount+1 {
		t.Errorf("event after finish: %+v, %v", late, err)
	}
	if stored, _ := s.GetRun(ctx, r.ID); stored.State != store.RunSucceeded || stored.EventCount != done.EventCount+1 || !stored.EndedAt.Equal(done.EndedAt) {
		t.Errorf("run after a late event: %+v", stored)
	}

	f, err := s.CreateRun(ctx, func() store.Run { r := run("run_000000000002", "bob"); r.StartedAt = at(time.Minute); return r }())
	if err != nil {
		t.Fatal(err)
	}
	failed, err := s.FinishRun(ctx, f.ID, store.RunFinish{ExitCode: 7, Now: at(2 * time.Minute)})
	if err != nil || failed.State != store.RunFailed || *failed.ExitCode != 7 {
		t.Errorf("failed run: %+v, %v", failed, err)
	}
	if _, err := s.CreateRun(ctx, func() store.Run {
		r := run("run_000000000003", "alice")
		r.LeaseID, r.StartedAt = "cbx_000000000002", at(2*time.Minute)
		return r
	}()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f    store.RunFilter
		want []string
	}{
		{store.RunFilter{}, []string{"run_000000000003", "run_000000000002", "run_000000000001"}},
		{store.RunFilter{Owner: "alice"}, []string{"run_000000000003", "run_000000000001"}},
		{store.RunFilter{LeaseID: "cbx_000000000001"}, []string{"run_000000000002", "run_000000000001"}},
		{store.RunFilter{State: store.RunRunning}, []string{"run_000000000003"}},
		{store.RunFilter{State: store.RunFailed, Org: "acme"}, []string{"run_000000000002"}},
		{store.RunFilter{Limit: 1}, []string{"run_000000000003"}},
	} {
		runs, err := s.ListRuns(ctx, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		got := []string{}
		for _, r := range runs {
			got = append(got, r.ID)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ListRuns(%+v) (-want +got):\n%s", tc.f, diff)
		}
	}
}

func testConcurrentEvents(t *testing.T, open Opener) {
	a, b := open(t), open(t)
	ctx := testContext(t)
	if _, err := a.CreateRun(ctx, run("run_000000000001", "alice")); err != nil {
		t.Fatal(err)
	}
	const writers, each = 4, 25
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for w := range writers {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Go(func() {
			for i := range each {
				_, err := s.AppendRunEvent(ctx, "run_000000000001", store.RunEvent{
					Type: "output", Message: fmt.Sprintf("%d/%d", w, i), CreatedAt: at(time.Second)})
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("append errors: %v", errs)
	}
	events, err := a.ListRunEvents(ctx, "run_000000000001", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, ev := range events {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: gap or duplicate", i, ev.Seq)
		}
		seen[ev.Message] = true
	}
	if len(events) != writers*each || len(seen) != writers*each {
		t.Errorf("%d events (%d distinct), want %d", len(events), len(seen), writers*each)
	}
	if r, _ := a.GetRun(ctx, "run_000000000001"); r.EventCount != writers*each {
		t.Errorf("EventCount = %d", r.EventCount)
	}
}

func testRunLogs(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	r, err := s.CreateRun(ctx, run("run_000000000001", "alice"))
	if err != nil {
		t.Fatal(err)
	}
	if log, err := s.RunLog(ctx, r.ID); err != nil || len(log) != 0 {
		t.Errorf("log before finish: %q, %v", log, err)
	}
	if _, err := s.RunLog(ctx, "run_ffffffffffff"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("log of unknown run: %v", err)
	}
	big := make([]byte, store.MaxLogBytes+1000)
	for i := range big {
		big[i] = byte('a' + i%26)
	}
	done, err := s.FinishRun(ctx, r.ID, store.RunFinish{ExitCode: 0, Log: big, Now: at(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if !done.LogTruncated || done.LogBytes != store.MaxLogBytes {
		t.Errorf("truncated %v bytes %d", done.LogTruncated, done.LogBytes)
	}
	log, err := s.RunLog(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != store.MaxLogBytes || string(log[len(log)-100:]) != string(big[len(big)-100:]) || log[0] != big[1000] {
		t.Errorf("stored log is not the last %d bytes (len %d)", store.MaxLogBytes, len(log))
	}
	// The client's own truncation flag is kept.
	r2, _ := s.CreateRun(ctx, run("run_000000000002", "alice"))
	done, err = s.FinishRun(ctx, r2.ID, store.RunFinish{ExitCode: 0, Log: []byte("tail"), LogTruncated: true, Now: at(time.Minute)})
	if err != nil || !done.LogTruncated || done.LogBytes != 4 {
		t.Errorf("client-truncated log: %+v, %v", done, err)
	}
}

func testUsage(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	mk := func(id, owner, org, provider, serverType string, created time.Time, hourly float64) store.Lease {
		l := lease(id, owner)
		l.Org, l.Provider, l.ServerType = org, provider, serverType
		l.CreatedAt, l.LastTouchedAt = created, created
		l.EstimatedHourlyUSD, l.MaxEstimatedUSD = hourly, hourly*1.5
		return create(t, s, l, "cat_"+id)
	}
	// 23:00 on Feb 28 to 01:00 on Mar 1: one hour in March.
	feb := time.Date(2026, 2, 28, 23, 0, 0, 0, time.UTC)
	mk("cbx_000000000001", "alice", "acme", "hetzner", "cpx62", feb, 2)
	if _, err := s.Release(ctx, "cbx_000000000001", store.ReleaseRequest{Now: feb.Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	mar := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	mk("cbx_000000000002", "alice", "acme", "aws", "c7a.large", mar, 1) // still running
	mk("cbx_000000000003", "bob", "beta", "hetzner", "cpx62", mar, 4)
	if _, err := s.Release(ctx, "cbx_000000000003", store.ReleaseRequest{Now: mar.Add(30 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	mk("cbx_000000000004", "bob", "beta", "hetzner", "cpx62", time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC), 4) // next month
	if _, _, err := s.RegisterLease(ctx, lease("ext-box-1", "alice"), mar); err != nil {
		t.Fatal(err)
	}

	now := mar.Add(time.Hour)
	u, err := s.Usage(ctx, store.UsageQuery{Month: mar, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	alice := store.UsageGroup{Key: "alice", Leases: 2, ActiveLeases: 1, RuntimeSeconds: 3600 + 3600, EstimatedUSD: 2 + 1, ReservedUSD: 2 + 1.5}
	bob := store.UsageGroup{Key: "bob", Leases: 1, RuntimeSeconds: 1800, EstimatedUSD: 2, ReservedUSD: 2}
	total := store.UsageGroup{Leases: 3, ActiveLeases: 1, RuntimeSeconds: 9000, EstimatedUSD: 5, ReservedUSD: 5.5}
	want := store.Usage{
		Month:   time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC),
		Total:   total,
		ByOwner: []store.UsageGroup{alice, bob},
		ByOrg: []store.UsageGroup{
			{Key: "acme", Leases: 2, ActiveLeases: 1, RuntimeSeconds: 7200, EstimatedUSD: 3, ReservedUSD: 3.5},
			{Key: "beta", Leases: 1, RuntimeSeconds: 1800, EstimatedUSD: 2, ReservedUSD: 2},
		},
		ByProvider: []store.UsageGroup{
			{Key: "aws", Leases: 1, ActiveLeases: 1, RuntimeSeconds: 3600, EstimatedUSD: 1, ReservedUSD: 1.5},
			{Key: "hetzner", Leases: 2, RuntimeSeconds: 5400, EstimatedUSD: 4, ReservedUSD: 4},
		},
		ByServerType: []store.UsageGroup{
			{Key: "c7a.large", Leases: 1, ActiveLeases: 1, RuntimeSeconds: 3600, EstimatedUSD: 1, ReservedUSD: 1.5},
			{Key: "cpx62", Leases: 2, RuntimeSeconds: 5400, EstimatedUSD: 4, ReservedUSD: 4},
		},
	}
	approx := cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })
	if diff := cmp.Diff(want, u, approx); diff != "" {
		t.Errorf("Usage (-want +got):\n%s", diff)
	}
	u, err = s.Usage(ctx, store.UsageQuery{Month: mar, Owner: "bob", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.UsageGroup{bob}, u.ByOwner, approx); diff != "" {
		t.Errorf("Usage for bob (-want +got):\n%s", diff)
	}
}

func testInvalid(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	noOwner := lease("cbx_000000000001", "")
	for name, err := range map[string]error{
		"create without attempt": func() error {
			_, err := s.CreateLease(ctx, store.CreateRequest{Lease: lease("cbx_000000000001", "alice"), Now: t0})
			return err
		}(),
		"create without owner": func() error {
			_, err := s.CreateLease(ctx, store.CreateRequest{Lease: noOwner, AttemptID: "cat_1", Now: t0})
			return err
		}(),
		"put without hash": func() error {
			_, err := s.PutLease(ctx, store.CreateRequest{Lease: lease("cbx_000000000001", "alice"), Now: t0})
			return err
		}(),
		"claim with zero limit": func() error { _, err := s.ClaimForCleanup(ctx, t0, 0, time.Minute); return err }(),
		"event with bad JSON": func() error {
			_, err := s.AppendRunEvent(ctx, "run_1", store.RunEvent{Data: []byte("{"), CreatedAt: t0})
			return err
		}(),
		"finish with empty token": func() error { _, err := s.FinishCleanup(ctx, "cbx_000000000001", "", t0); return err }(),
	} {
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if got, err := s.ListLeases(ctx, store.LeaseFilter{}); err != nil || len(got) != 0 {
		t.Errorf("invalid input changed the store: %v, %v", ids(got), err)
	}
}

// testTextArguments: text no database takes the same way (a NUL byte,
// invalid UTF-8) is ErrInvalid on every store, in filters and in records,
// and changes nothing.
func testTextArguments(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	create(t, s, lease("cbx_000000000001", "alice"), "cat_1")
	if _, err := s.CreateRun(ctx, run("run_000000000001", "alice")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"a\x00b", "a\xffb"} {
		for name, err := range map[string]error{
			"list filter": func() error { _, err := s.ListLeases(ctx, store.LeaseFilter{Provider: bad}); return err }(),
			"slug filter": func() error { _, err := s.ListLeases(ctx, store.LeaseFilter{Slug: bad}); return err }(),
			"find":        func() error { _, err := s.FindLease(ctx, bad, "alice", "acme"); return err }(),
			"get":         func() error { _, err := s.GetLease(ctx, bad); return err }(),
			"run filter":  func() error { _, err := s.ListRuns(ctx, store.RunFilter{LeaseID: bad}); return err }(),
			"event message": func() error {
				_, err := s.AppendRunEvent(ctx, "run_000000000001", store.RunEvent{Type: "output", Message: bad, CreatedAt: t0})
				return err
			}(),
			"run label": func() error {
				r := run("run_000000000002", "alice")
				r.Label = bad
				_, err := s.CreateRun(ctx, r)
				return err
			}(),
			"lease host": func() error {
				l := lease("cbx_000000000002", "alice")
				l.Host = bad
				_, err := s.CreateLease(ctx, store.CreateRequest{Lease: l, AttemptID: "cat_2", Now: t0})
				return err
			}(),
		} {
			if !errors.Is(err, store.ErrInvalid) {
				t.Errorf("%s %q: %v, want ErrInvalid", name, bad, err)
			}
		}
	}
	if got, err := s.ListLeases(ctx, store.LeaseFilter{}); err != nil || len(got) != 1 {
		t.Errorf("leases after invalid text: %v, %v", ids(got), err)
	}
	if r, err := s.GetRun(ctx, "run_000000000001"); err != nil || r.EventCount != 0 {
		t.Errorf("run after invalid text: %+v, %v", r, err)
	}
	if _, err := s.GetRun(ctx, "run_000000000002"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("run with invalid label was stored: %v", err)
	}
}

// testRunEventUpdates: lease fields on an event are applied to the run; a
// failing event ends a running run, which still takes its finish.
func testRunEventUpdates(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	r := run("run_000000000001", "alice")
	r.LeaseID, r.Slug, r.Provider, r.Target, r.Class, r.ServerType = "", "", "", "", "", ""
	if _, err := s.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendRunEvent(ctx, r.ID, store.RunEvent{Type: "lease.created", CreatedAt: at(time.Second),
		Apply: store.RunUpdate{LeaseID: "cbx_000000000009", Slug: "blue-crab", Provider: "aws", Target: "linux", Class: "beast", ServerType: "c7a.large"}}); err != nil {
		t.Fatal(err)
	}
	// Empty fields leave the run's as they are.
	if _, err := s.AppendRunEvent(ctx, r.ID, store.RunEvent{Type: "phase", Phase: "sync", CreatedAt: at(2 * time.Second),
		Apply: store.RunUpdate{ServerType: "c7a.xlarge"}}); err != nil {
		t.Fatal(err)
	}
	code := 2
	if _, err := s.AppendRunEvent(ctx, r.ID, store.RunEvent{Type: "run.failed", Message: "sync failed", CreatedAt: at(3 * time.Second),
		Apply: store.RunUpdate{Fail: true, ExitCode: &code}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetRun(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := r
	want.LeaseID, want.Slug, want.Provider, want.Target, want.Class, want.ServerType = "cbx_000000000009", "blue-crab", "aws", "linux", "beast", "c7a.xlarge"
	want.State, want.ExitCode, want.EndedAt, want.DurationMs = store.RunFailed, &code, at(3*time.Second), 3000
	want.Phase, want.EventCount, want.LastEventAt = "sync", 3, at(3*time.Second)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("run after its events (-want +got):\n%s", diff)
	}
	done, err := s.FinishRun(ctx, r.ID, store.RunFinish{ExitCode: 1, Log: []byte("log"), Now: at(4 * time.Second)})
	if err != nil || done.State != store.RunFailed || *done.ExitCode != 1 || done.LogBytes != 3 || !done.EndedAt.Equal(at(4*time.Second)) {
		t.Errorf("finish after run.failed: %+v, %v", done, err)
	}
	if _, err := s.FinishRun(ctx, r.ID, store.RunFinish{ExitCode: 0, Now: at(5 * time.Second)}); !errors.Is(err, store.ErrRunConflict) {
		t.Errorf("second, different finish: %v", err)
	}
}

// testRunTelemetry: the latest sample is kept on the run.
func testRunTelemetry(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	if _, err := s.CreateRun(ctx, run("run_000000000001", "alice")); err != nil {
		t.Fatal(err)
	}
	for _, sample := range []string{`{"load1":0.5}`, `{"load1":1.5,"memUsedBytes":12}`} {
		if err := s.SetRunTelemetry(ctx, "run_000000000001", []byte(sample)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.GetRun(ctx, "run_000000000001")
	if err != nil || string(got.Telemetry) != `{"load1":1.5,"memUsedBytes":12}` {
		t.Errorf("telemetry %s, %v", got.Telemetry, err)
	}
	wantErr(t, "unknown run", s.SetRunTelemetry(ctx, "run_00000000000f", []byte(`{}`)), store.ErrNotFound)
	wantErr(t, "not JSON", s.SetRunTelemetry(ctx, "run_000000000001", []byte(`{`)), store.ErrInvalid)
}

// testServerKept: a release that keeps the server says so; one that
// deletes it never does, also after the deletion finished.
func testServerKept(t *testing.T, open Opener) {
	s := open(t)
	ctx := testContext(t)
	kept := create(t, s, lease("cbx_000000000001", "alice"), "cat_1")
	deleted := create(t, s, lease("cbx_000000000002", "alice"), "cat_2")
	if kept.ServerKept || deleted.ServerKept {
		t.Fatalf("live leases with ServerKept: %v %v", kept.ServerKept, deleted.ServerKept)
	}
	got, err := s.Release(ctx, kept.ID, store.ReleaseRequest{Now: at(time.Minute)})
	if err != nil || !got.ServerKept || !get(t, s, kept.ID).ServerKept {
		t.Errorf("kept release: %+v, %v", got, err)
	}
	got, err = s.Release(ctx, deleted.ID, store.ReleaseRequest{DeleteServer: true, Now: at(time.Minute)})
	if err != nil || got.ServerKept {
		t.Errorf("deleting release: %+v, %v", got, err)
	}
	claimed, err := s.ClaimForCleanup(ctx, at(time.Minute), 10, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v, %v", ids(claimed), err)
	}
	done, err := s.FinishCleanup(ctx, deleted.ID, claimed[0].CleanupToken, at(time.Minute))
	if err != nil || done.ServerKept || done.ReleaseDeletesServer {
		t.Errorf("after deletion: %+v, %v", done, err)
	}
	l := lease("cbx_000000000003", "alice")
	l.Slug = "slow-crab"
	create(t, s, l, "cat_3")
	found, err := s.ListLeases(ctx, store.LeaseFilter{Slug: "slow-crab"})
	if err != nil || len(found) != 1 || found[0].ID != l.ID {
		t.Errorf("list by slug: %v, %v", ids(found), err)
	}
}
