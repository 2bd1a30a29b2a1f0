package scaleway_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
	"github.com/scaleway/scaleway-sdk-go/api/instance/v1"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/scaleway"
)

// boxLabels are a crabbox box's labels for a lease of provider.
func boxLabels(t *testing.T, prov, state string, created time.Time, change func(map[string]string)) (string, map[string]string) {
	t.Helper()
	req, _ := newRequest(t, created)
	l, err := cloud.NewLabels(req, cloud.LabelOptions{Provider: prov, State: state})
	if err != nil {
		t.Fatal(err)
	}
	if change != nil {
		change(l)
	}
	return req.LeaseID, l
}

// TestCleanupOwnership: cleanup deletes only servers carrying crabbox's
// scaleway tags that this client holds a claim for, honours keep (never while
// the lease lives, like any other once it expired) and dry runs, and
// re-reads an server before deleting it.
func TestCleanupOwnership(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	now := time.Now().UTC().Truncate(time.Second)
	past := now.Add(-2 * time.Hour)

	ours, oursLabels := boxLabels(t, "scaleway", "ready", past, nil)
	oursID := e.api.addServer("ours", oursLabels)
	theirs, theirsLabels := boxLabels(t, "scaleway", "ready", past, nil)
	e.api.addServer("theirs", theirsLabels)
	kept, keptLabels := boxLabels(t, "scaleway", "ready", past, func(l map[string]string) { l["keep"] = "true" })
	keptID := e.api.addServer("kept", keptLabels)
	keptLive, keptLiveLabels := boxLabels(t, "scaleway", "ready", now, func(l map[string]string) { l["keep"] = "true" })
	keptLiveID := e.api.addServer("kept-live", keptLiveLabels)
	doLease, doLabels := boxLabels(t, "digitalocean", "failed", past, nil)
	doID := e.api.addServer("digitalocean", doLabels)
	prefixLease := lease.NewID()
	prefixID := e.api.addServer("crabbox-"+strings.ReplaceAll(prefixLease, "_", "-"), nil) // name only: not ours
	renewed, renewedLabels := boxLabels(t, "scaleway", "ready", past, nil)
	renewedID := e.api.addServer("renewed", renewedLabels)
	fresh, freshLabels := boxLabels(t, "scaleway", "provisioning", now, nil)
	e.api.addServer("fresh", freshLabels)

	claims := map[string]bool{ours: true, kept: true, keptLive: true, doLease: true, prefixLease: true, renewed: true, fresh: true}
	claimed := func(id string) bool { return claims[id] }
	// The renewed lease is touched by its owner between listing and deleting.
	e.api.onGet = func(inst *instance.Server) {
		if inst.ID == renewedID {
			l := labelsOf(*inst)
			l["expires_at"] = strconv.FormatInt(now.Add(time.Hour).Unix(), 10)
			inst.Tags = mustTags(l)
		}
	}

	type outcome struct {
		Delete, Deleted bool
		Reason          string
	}
	decide := func(dryRun bool) map[string]outcome {
		ds, err := b.Cleanup(context.Background(), provider.CleanupRequest{DryRun: dryRun, Now: now, Claimed: claimed})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]outcome{}
		for _, d := range ds {
			if d.Err != nil {
				t.Errorf("decision for %s failed: %v", d.LeaseID, d.Err)
			}
			out[d.LeaseID] = outcome{d.Delete, d.Deleted, d.Reason}
		}
		return out
	}
	check := func(what string, got map[string]outcome, want map[string]outcome) {
		t.Helper()
		for id, w := range want {
			g, ok := got[id]
			if !ok || g.Delete != w.Delete || g.Deleted != w.Deleted || !strings.Contains(g.Reason, w.Reason) {
				t.Errorf("%s decision for %s = %+v (made: %v), want %+v (reason containing)", what, id, g, ok, w)
			}
		}
		for id, g := range got {
			if _, ok := want[id]; !ok {
				t.Errorf("%s decided about %s, which is not a scaleway crabbox server: %+v", what, id, g)
			}
		}
	}
	check("dry run", decide(true), map[string]outcome{
		ours:     {true, false, "expired at"},
		theirs:   {false, false, "another client's box"},
		kept:     {true, false, "expired at"},
		keptLive: {false, false, "keep=true: kept while live until"},
		renewed:  {true, false, "expired at"},
		fresh:    {false, false, "live until"},
	})
	if n := len(e.api.serverList()); n != 8 || len(e.api.log()) != 0 {
		t.Fatalf("dry run changed the project: %d servers, mutations %v", n, e.api.log())
	}

	check("cleanup", decide(false), map[string]outcome{
		ours:     {true, true, "expired at"},
		theirs:   {false, false, "another client's box"},
		kept:     {true, true, "expired at"},
		keptLive: {false, false, "keep=true: kept while live until"},
		renewed:  {false, false, "changed since listed: live until"},
		fresh:    {false, false, "live until"},
	})
	var left []string
	for _, s := range e.api.serverList() {
		left = append(left, s.ID)
	}
	if slices.Contains(left, oursID) || slices.Contains(left, keptID) || !slices.Contains(left, keptLiveID) || !slices.Contains(left, doID) || !slices.Contains(left, prefixID) || !slices.Contains(left, renewedID) || len(left) != 6 {
		t.Errorf("servers left %v: want all but %s (ours) and %s (kept, expired), including the live kept %s, digitalocean %s, name-prefix %s and renewed %s ones", left, oursID, keptID, keptLiveID, doID, prefixID, renewedID)
	}
	if diff := cmp.Diff([]string{"terminate server", "terminate server"}, events(e.api)); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
}

// killAfterCreate acquires through the lease store as the library does,
// but "kills the process" right after the server was created: from the
// first look at the server on, no request of this process reaches the API,
// and the acquire never gets to roll back. The claim stays, acquiring.
func killAfterCreate(t *testing.T, e *env, store *lease.Store) lease.Claim {
	t.Helper()
	b := e.backend(t)
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	now := e.rt.Clock.Now().UTC().Truncate(time.Second)
	c, err := store.Create(lease.Claim{
		ID: lease.NewID(), Provider: scaleway.Name, State: lease.StateAcquiring,
		CreatedAt: now, LastTouchedAt: now, ExpiresAt: now.Add(lease.DefaultIdleTimeout),
		TTLSeconds: int64(lease.DefaultTTL / time.Second), IdleSeconds: int64(lease.DefaultIdleTimeout / time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.SaveKey(c.ID, key); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.api.setFault(opGet, fault{hang: true, times: 1, onHang: func() { e.api.kill(true); cancel() }})
	_, err = b.Acquire(ctx, provider.AcquireRequest{
		LeaseID: c.ID, Slug: c.Slug, PublicKey: key.AuthorizedKey(), TTL: c.TTL(), IdleTimeout: c.IdleTimeout(),
		CreatedAt: c.CreatedAt, ExpiresAt: c.ExpiresAt,
	})
	if err == nil {
		t.Fatal("Acquire succeeded though the process was killed")
	}
	e.api.kill(false) // the API is fine; the process that called it is gone
	if s := e.api.serverList(); len(s) != 1 {
		t.Fatalf("after the kill: %d servers, want the 1 a crash leaves", len(s))
	}
	if got, err := store.Get(c.ID); err != nil || got.State != lease.StateAcquiring {
		t.Fatalf("claim after the kill: %+v, %v; want it still acquiring", got, err)
	}
	return c
}

// testProvider hands the library a backend configured against the fake.
type testProvider struct{ e *env }

func (p testProvider) Spec() provider.Spec { return scaleway.Provider{}.Spec() }

func (p testProvider) Configure(_ provider.Config, rt provider.Runtime) (provider.Backend, error) {
	p.e.rt.Clock = rt.Clock
	return scaleway.New(p.e.cfg, p.e.rt)
}

func newClient(t *testing.T, e *env, clock clockwork.Clock) *crabbox.Client {
	t.Helper()
	reg := provider.NewRegistry()
	reg.Register(testProvider{e})
	rt := e.rt
	rt.Clock = clock
	c, err := crabbox.New(crabbox.WithRegistry(reg), crabbox.WithProvider(scaleway.Name),
		crabbox.WithStateDir(filepath.Join(t.TempDir(), "state")), crabbox.WithRuntime(rt))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestCleanupAfterKilledAcquire: the process dies after the server was
// created; `crabbox cleanup` later finds the server from the claim and
// deletes it.
func TestCleanupAfterKilledAcquire(t *testing.T) {
	t.Run("library cleanup releases the stale claim", func(t *testing.T) {
		e := newEnv(t)
		clock := clockwork.NewFakeClockAt(time.Now())
		e.rt.Clock = clock
		client := newClient(t, e, clock)
		c := killAfterCreate(t, e, cloudtest.Store(t, client.StateDir()))

		clock.Advance(2 * time.Hour) // the acquire is clearly dead by now
		ds, err := client.Cleanup(context.Background(), crabbox.CleanupOptions{Provider: scaleway.Name})
		if err != nil {
			t.Fatal(err)
		}
		var deleted bool
		for _, d := range ds {
			if d.LeaseID == c.ID && d.Action == crabbox.CleanupDelete && d.Result == "deleted" {
				deleted = true
			}
		}
		if !deleted {
			t.Errorf("cleanup decisions %+v: none deleted lease %s", ds, c.ID)
		}
		if diff := cmp.Diff([]string{"create server", "poweron server", "terminate server"}, events(e.api)); diff != "" {
			t.Errorf("API mutations (-want +got):\n%s", diff)
		}
		checkEmpty(t, e.api)
		if _, err := cloudtest.Store(t, client.StateDir()).Get(c.ID); err == nil {
			t.Errorf("claim %s still there after cleanup", c.ID)
		}
	})
	t.Run("a dead acquire's server is deleted at once", func(t *testing.T) {
		e := newEnv(t)
		client := newClient(t, e, clockwork.NewRealClock())
		c := killAfterCreate(t, e, cloudtest.Store(t, client.StateDir()))
		if _, err := cloudtest.Store(t, client.StateDir()).Update(c.ID, func(cl *lease.Claim) error {
			cl.Process = deadProcess(t)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		ds, err := client.Cleanup(context.Background(), crabbox.CleanupOptions{Provider: scaleway.Name})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 1 || ds[0].LeaseID != c.ID || ds[0].Result != "deleted" {
			t.Errorf("cleanup decisions %+v, want lease %s deleted", ds, c.ID)
		}
		checkEmpty(t, e.api)
	})
	t.Run("a live acquire's server is left alone", func(t *testing.T) {
		e := newEnv(t)
		client := newClient(t, e, clockwork.NewRealClock())
		c := killAfterCreate(t, e, cloudtest.Store(t, client.StateDir()))
		self := lease.ThisProcess()
		if _, err := cloudtest.Store(t, client.StateDir()).Update(c.ID, func(cl *lease.Claim) error { cl.Process = &self; return nil }); err != nil {
			t.Fatal(err)
		}
		ds, err := client.Cleanup(context.Background(), crabbox.CleanupOptions{Provider: scaleway.Name})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Action == crabbox.CleanupDelete {
				t.Errorf("cleanup while the acquiring process runs: %+v", d)
			}
		}
		if len(e.api.serverList()) != 1 {
			t.Errorf("the server of an acquire in progress was deleted")
		}
	})
	t.Run("backend cleanup after the grace period", func(t *testing.T) {
		e := newEnv(t)
		store, err := lease.OpenStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		c := killAfterCreate(t, e, store)
		b := e.backend(t) // a new process
		claimed := func(id string) bool { _, err := store.Get(id); return err == nil }
		inGrace := c.ExpiresAt.Add(time.Hour)
		ds, err := b.Cleanup(context.Background(), provider.CleanupRequest{Now: inGrace, Claimed: claimed})
		if err != nil || len(ds) != 1 || ds[0].Delete {
			t.Fatalf("cleanup within the grace period: %+v, %v; want the provisioning server kept", ds, err)
		}
		ds, err = b.Cleanup(context.Background(), provider.CleanupRequest{Now: c.ExpiresAt.Add(cloud.DefaultGrace), Claimed: claimed})
		if err != nil || len(ds) != 1 || !ds[0].Deleted || ds[0].LeaseID != c.ID {
			t.Fatalf("cleanup past the grace period: %+v, %v; want lease %s deleted", ds, err, c.ID)
		}
		checkEmpty(t, e.api)
	})
}

// TestEndToEnd runs the library's one-shot workflow against the fake:
// acquire, sync a checkout, run a command over SSH, release.
func TestEndToEnd(t *testing.T) {
	e := newEnv(t)
	client := newClient(t, e, clockwork.NewRealClock())
	repo := t.TempDir()
	for _, args := range [][]string{{"init", "-q"}} {
		if err := runGit(repo, args...); err != nil {
			t.Skipf("git unavailable: %v", err)
		}
	}
	writeFile(t, filepath.Join(repo, "hello.txt"), "hello from the box\n")
	var stdout bytes.Buffer
	res, err := client.Run(context.Background(), crabbox.RunRequest{
		Root: repo, Shell: "cat hello.txt; exit 7", Stdout: &stdout,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 || stdout.String() != "hello from the box\n" || res.Provider != scaleway.Name {
		t.Errorf("run = exit %d, output %q, provider %q; want 7, the synced file, hetzner", res.ExitCode, stdout.String(), res.Provider)
	}
	if diff := cmp.Diff([]string{"create server", "poweron server", "tag server state=ready", "terminate server"}, events(e.api)); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
	checkEmpty(t, e.api)
}

// deadProcess is the record of a process of this host that has ended.
func deadProcess(t *testing.T) *lease.Process {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	p := lease.ThisProcess()
	p.PID = cmd.Process.Pid
	return &p
}

// TestCleanupReleasesOrphanedOneShotLease: a one-shot lease whose process
// died (SIGKILL mid-run) is released by the next cleanup at once, while a
// kept lease of a process that ended is left until it expires.
func TestCleanupReleasesOrphanedOneShotLease(t *testing.T) {
	e := newEnv(t)
	client := newClient(t, e, clockwork.NewRealClock())
	ctx := context.Background()
	oneShot, err := client.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := client.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Stop(ctx, kept.ID())
	for _, l := range []*crabbox.Lease{oneShot, kept} {
		l.Close()
		if _, err := cloudtest.Store(t, client.StateDir()).Update(l.ID(), func(cl *lease.Claim) error { cl.Process = deadProcess(t); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := client.Cleanup(ctx, crabbox.CleanupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{} // one row per lease: a second one shows up joined
	for _, d := range ds {
		if got[d.LeaseID] != "" {
			got[d.LeaseID] += "; "
		}
		got[d.LeaseID] += string(d.Action) + " " + d.Result
	}
	want := map[string]string{oneShot.ID(): "delete deleted", kept.ID(): "keep "}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cleanup decisions (-want +got):\n%s", diff)
	}
	if s := e.api.serverList(); len(s) != 1 || labelsOf(s[0])["lease"] != kept.ID() {
		t.Errorf("servers after cleanup: %+v, want only the kept lease's", s)
	}
}
