package cloudtest

import (
	"bytes"
	"context"
	"fmt"
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

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// CleanupHarness adapts a label cloud provider (Hetzner, Scaleway, Vultr)
// and its fake API to RunCleanup.
type CleanupHarness struct {
	// Spec is the provider's spec; its backends are registered under
	// Provider.
	Spec     provider.Spec
	Provider string
	// Noun is what the cloud calls a machine: "server", "instance".
	Noun string
	// Foreign is another provider whose labelled machine in the same
	// account cleanup must leave alone.
	Foreign string
	// Mutations the fake logs (as CleanupEnv.Mutations normalises them)
	// for: the ownership cleanup, an acquire killed after the create and
	// cleaned up, and a one-shot run.
	CleanupMutations, KilledMutations, RunMutations []string
	// NewEnv makes a fresh fake cloud per test.
	NewEnv func(t *testing.T) *CleanupEnv
}

// CleanupMachine is a machine of a fake cloud.
type CleanupMachine struct {
	ID     string
	Labels map[string]string
}

// CleanupEnv is one fake cloud and a way to configure backends against it.
type CleanupEnv struct {
	// Runtime is what backends are configured with; the suite sets its
	// clock.
	Runtime *provider.Runtime
	// New configures a backend on the fake with rt.
	New func(rt provider.Runtime) (provider.Backend, error)
	// AddMachine adds a machine named name with labels and returns its ID.
	AddMachine func(name string, labels map[string]string) string
	// AddKey adds an SSH key named name with labels; nil if the provider
	// keeps no labelled keys. Keys then lists the keys' names.
	AddKey func(name string, labels map[string]string)
	Keys   func() []string
	// Machines lists the fake's machines.
	Machines func() []CleanupMachine
	// Mutations is the fake's mutation log, IDs dropped.
	Mutations func() []string
	// OnGet makes every read of a machine call hook with its ID and a copy
	// of its labels; the machine takes the labels if hook returns true.
	OnGet func(hook func(id string, labels map[string]string) bool)
	// HangGet makes the next read of a machine hang after calling onHang.
	HangGet func(onHang func())
	// Kill makes every request fail (the process that sends them is dead)
	// or, with false, work again.
	Kill func(dead bool)
	// CheckEmpty fails unless the fake has no machine, no key and no
	// running box.
	CheckEmpty func(t *testing.T)
}

// TaggedMachines sets e's Machines and OnGet for a fake whose machines, of
// type M, carry their labels as tags written by codec: list lists them, ref
// returns a machine's ID and its tags, and setOnGet installs the fake's
// hook on reads of a machine.
func TaggedMachines[M any](e *CleanupEnv, codec cloud.TagCodec, list func() []M, ref func(*M) (string, *[]string), setOnGet func(func(*M))) {
	e.Machines = func() []CleanupMachine {
		var ms []CleanupMachine
		for _, m := range list() {
			id, tags := ref(&m)
			ms = append(ms, CleanupMachine{ID: id, Labels: codec.Labels(*tags)})
		}
		return ms
	}
	e.OnGet = func(hook func(string, map[string]string) bool) {
		setOnGet(func(m *M) {
			id, tags := ref(m)
			if l := codec.Labels(*tags); hook(id, l) {
				t, err := codec.Tags(l)
				if err != nil {
					panic(err) // the suite's labels always fit
				}
				*tags = t
			}
		})
	}
}

// RunCleanup runs the cleanup tests of a label cloud provider.
func RunCleanup(t *testing.T, h CleanupHarness) {
	t.Run("CleanupOwnership", func(t *testing.T) { testCleanupOwnership(t, h) })
	t.Run("CleanupAfterKilledAcquire", func(t *testing.T) { testCleanupAfterKilledAcquire(t, h) })
	t.Run("EndToEnd", func(t *testing.T) { testEndToEnd(t, h) })
	t.Run("CleanupReleasesOrphanedOneShotLease", func(t *testing.T) { testCleanupReleasesOrphanedOneShotLease(t, h) })
}

// backend configures a backend on the fake, as a new process would.
func (e *CleanupEnv) backend(t *testing.T) interface {
	provider.SSHLeaseBackend
	provider.CleanupBackend
} {
	t.Helper()
	b, err := e.New(*e.Runtime)
	if err != nil {
		t.Fatal(err)
	}
	lb, ok := b.(interface {
		provider.SSHLeaseBackend
		provider.CleanupBackend
	})
	if !ok {
		t.Fatalf("backend %T cannot acquire and clean up", b)
	}
	return lb
}

func (e *CleanupEnv) machineIDs() []string {
	var ids []string
	for _, m := range e.Machines() {
		ids = append(ids, m.ID)
	}
	return ids
}

// boxLabels are a crabbox box's labels for a lease of provider.
func boxLabels(t *testing.T, prov, state string, created time.Time, change func(map[string]string)) (string, map[string]string) {
	t.Helper()
	created = created.UTC().Truncate(time.Second)
	req := provider.AcquireRequest{
		LeaseID: lease.NewID(), Slug: "tidal-lobster",
		TTL: lease.DefaultTTL, IdleTimeout: lease.DefaultIdleTimeout, CreatedAt: created, ExpiresAt: created.Add(lease.DefaultIdleTimeout),
		Labels: map[string]string{"suite": prov},
	}
	l, err := cloud.NewLabels(req, cloud.LabelOptions{Provider: prov, State: state})
	if err != nil {
		t.Fatal(err)
	}
	if change != nil {
		change(l)
	}
	return req.LeaseID, l
}

// testCleanupOwnership: cleanup deletes only machines (and keys) carrying
// crabbox's labels of the provider that this client holds a claim for,
// honours keep (never while the lease lives, like any other once it
// expired) and dry runs, and re-reads a machine before deleting it.
func testCleanupOwnership(t *testing.T, h CleanupHarness) {
	e := h.NewEnv(t)
	b := e.backend(t)
	now := time.Now().UTC().Truncate(time.Second)
	past := now.Add(-2 * time.Hour)
	prov, noun := h.Provider, h.Noun

	ours, oursLabels := boxLabels(t, prov, "ready", past, nil)
	oursID := e.AddMachine("ours", oursLabels)
	theirs, theirsLabels := boxLabels(t, prov, "ready", past, nil)
	e.AddMachine("theirs", theirsLabels)
	kept, keptLabels := boxLabels(t, prov, "ready", past, func(l map[string]string) { l["keep"] = "true" })
	keptID := e.AddMachine("kept", keptLabels)
	keptLive, keptLiveLabels := boxLabels(t, prov, "ready", now, func(l map[string]string) { l["keep"] = "true" })
	keptLiveID := e.AddMachine("kept-live", keptLiveLabels)
	foreignLease, foreignLabels := boxLabels(t, h.Foreign, "failed", past, nil)
	foreignID := e.AddMachine(h.Foreign, foreignLabels)
	prefixLease := lease.NewID()
	prefixID := e.AddMachine("crabbox-"+strings.ReplaceAll(prefixLease, "_", "-"), nil) // name only: not ours
	renewed, renewedLabels := boxLabels(t, prov, "ready", past, nil)
	renewedID := e.AddMachine("renewed", renewedLabels)
	fresh, freshLabels := boxLabels(t, prov, "provisioning", now, nil)
	e.AddMachine("fresh", freshLabels)
	claims := map[string]bool{ours: true, kept: true, keptLive: true, foreignLease: true, prefixLease: true, renewed: true, fresh: true}
	var orphan string
	if e.AddKey != nil {
		var orphanLabels map[string]string
		orphan, orphanLabels = boxLabels(t, prov, "provisioning", now.Add(-14*time.Hour), nil)
		e.AddKey("orphan", orphanLabels)
		e.AddKey("ours-key", oursLabels)
		claims[orphan] = true
	}

	claimed := func(id string) bool { return claims[id] }
	// The renewed lease is touched by its owner between listing and deleting.
	e.OnGet(func(id string, l map[string]string) bool {
		if id != renewedID {
			return false
		}
		l["expires_at"] = strconv.FormatInt(now.Add(time.Hour).Unix(), 10)
		return true
	})

	others := fmt.Sprintf("a %s crabbox %s or key", prov, noun)
	dry := map[string]Outcome{
		ours:     WouldDelete("expired at"),
		theirs:   Left("another client's box"),
		kept:     WouldDelete("expired at"),
		keptLive: Left("keep=true: kept while live until"),
		renewed:  WouldDelete("expired at"),
		fresh:    Left("live until"),
	}
	if e.AddKey != nil {
		dry[orphan] = WouldDelete("SSH key without a " + noun + ": state \"provisioning\"")
	}
	CheckDecisions(t, "dry run", Decide(t, b, true, now, claimed), dry, others)
	if n := len(e.Machines()); n != 8 || len(e.Mutations()) != 0 {
		t.Fatalf("dry run changed the account: %d %ss, mutations %v", n, noun, e.Mutations())
	}

	wet := map[string]Outcome{
		ours:     Deleted("expired at"),
		theirs:   Left("another client's box"),
		kept:     Deleted("expired at"),
		keptLive: Left("keep=true: kept while live until"),
		renewed:  Left("changed since listed: live until"),
		fresh:    Left("live until"),
	}
	if e.AddKey != nil {
		wet[orphan] = Deleted("SSH key without a " + noun)
	}
	CheckDecisions(t, "cleanup", Decide(t, b, false, now, claimed), wet, others)
	left := e.machineIDs()
	if slices.Contains(left, oursID) || slices.Contains(left, keptID) || !slices.Contains(left, keptLiveID) || !slices.Contains(left, foreignID) || !slices.Contains(left, prefixID) || !slices.Contains(left, renewedID) || len(left) != 6 {
		t.Errorf("%ss left %v: want all but %s (ours) and %s (kept, expired), including the live kept %s, %s %s, name-prefix %s and renewed %s ones", noun, left, oursID, keptID, keptLiveID, h.Foreign, foreignID, prefixID, renewedID)
	}
	if diff := cmp.Diff(h.CleanupMutations, e.Mutations()); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
	if e.Keys != nil {
		if k := e.Keys(); len(k) != 0 {
			t.Errorf("keys left: %+v", k)
		}
	}
}

// killAfterCreate acquires through the lease store as the library does,
// but "kills the process" right after the machine was created: from the
// first look at the machine on, no request of this process reaches the
// API, and the acquire never gets to roll back. The claim stays,
// acquiring.
func killAfterCreate(t *testing.T, h CleanupHarness, e *CleanupEnv, store *lease.Store) lease.Claim {
	t.Helper()
	c := KilledAcquire(t, context.Background(), e.backend(t), store, h.Provider, e.Runtime.Clock.Now(),
		func(cancel func()) { e.HangGet(func() { e.Kill(true); cancel() }) },
		func() { e.Kill(false) })
	if s := e.Machines(); len(s) != 1 {
		t.Fatalf("after the kill: %d %ss, want the 1 a crash leaves", len(s), h.Noun)
	}
	if e.Keys != nil {
		if k := e.Keys(); len(k) != 1 {
			t.Fatalf("after the kill: %d keys, want the 1 a crash leaves", len(k))
		}
	}
	return c
}

// cleanupProvider hands the library a backend configured against the fake.
type cleanupProvider struct {
	spec provider.Spec
	e    *CleanupEnv
}

func (p cleanupProvider) Spec() provider.Spec { return p.spec }

func (p cleanupProvider) Configure(_ provider.Config, rt provider.Runtime) (provider.Backend, error) {
	p.e.Runtime.Clock = rt.Clock
	return p.e.New(*p.e.Runtime)
}

// NewClient makes a library client whose only provider is h's, configured
// on e's fake, with clock.
func (h CleanupHarness) NewClient(t *testing.T, e *CleanupEnv, clock clockwork.Clock) *crabbox.Client {
	t.Helper()
	reg := provider.NewRegistry()
	reg.Register(cleanupProvider{h.Spec, e})
	rt := *e.Runtime
	rt.Clock = clock
	c, err := crabbox.New(crabbox.WithRegistry(reg), crabbox.WithProvider(h.Provider),
		crabbox.WithStateDir(filepath.Join(t.TempDir(), "state")), crabbox.WithRuntime(rt))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testCleanupAfterKilledAcquire: the process dies after the machine was
// created; `crabbox cleanup` later finds the machine from the claim and
// deletes it (and its key).
func testCleanupAfterKilledAcquire(t *testing.T, h CleanupHarness) {
	t.Run("library cleanup releases the stale claim", func(t *testing.T) {
		e := h.NewEnv(t)
		clock := clockwork.NewFakeClockAt(time.Now())
		e.Runtime.Clock = clock
		client := h.NewClient(t, e, clock)
		c := killAfterCreate(t, h, e, Store(t, client.StateDir()))

		clock.Advance(2 * time.Hour) // the acquire is clearly dead by now
		ds, err := client.Cleanup(context.Background(), crabbox.CleanupOptions{Provider: h.Provider})
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
		if diff := cmp.Diff(h.KilledMutations, e.Mutations()); diff != "" {
			t.Errorf("API mutations (-want +got):\n%s", diff)
		}
		e.CheckEmpty(t)
		if _, err := Store(t, client.StateDir()).Get(c.ID); err == nil {
			t.Errorf("claim %s still there after cleanup", c.ID)
		}
	})
	t.Run("a dead acquire's "+h.Noun+" is deleted at once", func(t *testing.T) {
		e := h.NewEnv(t)
		client := h.NewClient(t, e, clockwork.NewRealClock())
		c := killAfterCreate(t, h, e, Store(t, client.StateDir()))
		if _, err := Store(t, client.StateDir()).Update(c.ID, func(cl *lease.Claim) error {
			cl.Process = deadProcess(t)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		ds, err := client.Cleanup(context.Background(), crabbox.CleanupOptions{Provider: h.Provider})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 1 || ds[0].LeaseID != c.ID || ds[0].Result != "deleted" {
			t.Errorf("cleanup decisions %+v, want lease %s deleted", ds, c.ID)
		}
		e.CheckEmpty(t)
	})
	t.Run("a live acquire's "+h.Noun+" is left alone", func(t *testing.T) {
		e := h.NewEnv(t)
		client := h.NewClient(t, e, clockwork.NewRealClock())
		c := killAfterCreate(t, h, e, Store(t, client.StateDir()))
		self := lease.ThisProcess()
		if _, err := Store(t, client.StateDir()).Update(c.ID, func(cl *lease.Claim) error { cl.Process = &self; return nil }); err != nil {
			t.Fatal(err)
		}
		ds, err := client.Cleanup(context.Background(), crabbox.CleanupOptions{Provider: h.Provider})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Action == crabbox.CleanupDelete {
				t.Errorf("cleanup while the acquiring process runs: %+v", d)
			}
		}
		if len(e.Machines()) != 1 {
			t.Errorf("the %s of an acquire in progress was deleted", h.Noun)
		}
	})
	t.Run("backend cleanup after the grace period", func(t *testing.T) {
		e := h.NewEnv(t)
		store, err := lease.OpenStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		c := killAfterCreate(t, h, e, store)
		b := e.backend(t) // a new process
		claimed := func(id string) bool { _, err := store.Get(id); return err == nil }
		inGrace := c.ExpiresAt.Add(time.Hour)
		ds, err := b.Cleanup(context.Background(), provider.CleanupRequest{Now: inGrace, Claimed: claimed})
		if err != nil || len(ds) != 1 || ds[0].Delete {
			t.Fatalf("cleanup within the grace period: %+v, %v; want the provisioning %s kept", ds, err, h.Noun)
		}
		ds, err = b.Cleanup(context.Background(), provider.CleanupRequest{Now: c.ExpiresAt.Add(cloud.DefaultGrace), Claimed: claimed})
		if err != nil || len(ds) != 1 || !ds[0].Deleted || ds[0].LeaseID != c.ID {
			t.Fatalf("cleanup past the grace period: %+v, %v; want lease %s deleted", ds, err, c.ID)
		}
		e.CheckEmpty(t)
	})
}

// testEndToEnd runs the library's one-shot workflow against the fake:
// acquire, sync a checkout, run a command over SSH, release.
func testEndToEnd(t *testing.T, h CleanupHarness) {
	e := h.NewEnv(t)
	client := h.NewClient(t, e, clockwork.NewRealClock())
	repo := t.TempDir()
	git := exec.Command("git", "init", "-q")
	git.Dir = repo
	if err := git.Run(); err != nil {
		t.Skipf("git unavailable: %v", err)
	}
	if err := os.WriteFile(filepath.Join(repo, "hello.txt"), []byte("hello from the box\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	res, err := client.Run(context.Background(), crabbox.RunRequest{
		Root: repo, Shell: "cat hello.txt; exit 7", Stdout: &stdout,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 || stdout.String() != "hello from the box\n" || res.Provider != h.Provider {
		t.Errorf("run = exit %d, output %q, provider %q; want 7, the synced file, %s", res.ExitCode, stdout.String(), res.Provider, h.Provider)
	}
	if diff := cmp.Diff(h.RunMutations, e.Mutations()); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
	e.CheckEmpty(t)
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

// testCleanupReleasesOrphanedOneShotLease: a one-shot lease whose process
// died (SIGKILL mid-run) is released by the next cleanup at once, while a
// kept lease of a process that ended is left until it expires.
func testCleanupReleasesOrphanedOneShotLease(t *testing.T, h CleanupHarness) {
	e := h.NewEnv(t)
	client := h.NewClient(t, e, clockwork.NewRealClock())
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
		if _, err := Store(t, client.StateDir()).Update(l.ID(), func(cl *lease.Claim) error { cl.Process = deadProcess(t); return nil }); err != nil {
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
	if s := e.Machines(); len(s) != 1 || s[0].Labels["lease"] != kept.ID() {
		t.Errorf("%ss after cleanup: %+v, want only the kept lease's", h.Noun, s)
	}
}
