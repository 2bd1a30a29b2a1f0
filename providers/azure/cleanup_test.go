package azure_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/azure"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// putVM puts a VM with tags into the fake directly (one made by someone
// else, or an earlier process), with its companions.
func putVM(e *env, leaseID string, tags map[string]string) string {
	base := "crabbox-" + strings.ReplaceAll(leaseID, "_", "-")
	t := map[string]any{}
	for k, v := range tags {
		t[k] = v
	}
	e.arm.put(kindGroup, "crabbox", map[string]any{"tags": map[string]any{"crabbox": "true"}})
	e.arm.put(kindPIP, base+"-ip", map[string]any{"tags": t})
	e.arm.put(kindNIC, base+"-nic", map[string]any{"tags": t})
	vt := map[string]any{azure.TagNIC: base + "-nic", azure.TagPublicIP: base + "-ip", azure.TagDisk: base + "-osdisk"}
	for k, v := range tags {
		vt[k] = v
	}
	e.arm.put(kindVM, base, map[string]any{"tags": vt})
	return base
}

// boxTags are a crabbox box's tags for a lease of provider.
func boxTags(t *testing.T, prov, state string, created time.Time, change func(map[string]string)) (string, map[string]string) {
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

// TestCleanupOwnership: cleanup deletes only VMs (and their companions)
// carrying crabbox's azure tags that this client holds a claim for,
// honours keep (never while the lease lives, like any other once it
// expired) and dry runs, and deletes nothing else.
func TestCleanupOwnership(t *testing.T) {
	created := time.Now().Add(-3 * time.Hour)
	now := time.Now()
	e := newEnv(t)
	type box struct {
		name    string
		claimed bool
		tags    func() (string, map[string]string)
		delete  bool
	}
	boxes := []box{
		{"expired ready, claimed", true, func() (string, map[string]string) { return boxTags(t, azure.Name, "ready", created, nil) }, true},
		{"failed, claimed", true, func() (string, map[string]string) {
			return boxTags(t, azure.Name, "failed", now, nil)
		}, true},
		{"expired ready, unclaimed", false, func() (string, map[string]string) { return boxTags(t, azure.Name, "ready", created, nil) }, false},
		{"expired and kept", true, func() (string, map[string]string) {
			return boxTags(t, azure.Name, "ready", created, func(l map[string]string) { l["keep"] = "true" })
		}, true},
		{"live and kept", true, func() (string, map[string]string) {
			return boxTags(t, azure.Name, "ready", now, func(l map[string]string) { l["keep"] = "true" })
		}, false},
		{"live", true, func() (string, map[string]string) { return boxTags(t, azure.Name, "ready", now, nil) }, false},
		{"another provider", true, func() (string, map[string]string) { return boxTags(t, "gcp", "ready", created, nil) }, false},
		{"not crabbox's", true, func() (string, map[string]string) {
			return boxTags(t, azure.Name, "ready", created, func(l map[string]string) { delete(l, "crabbox") })
		}, false},
		{"provisioning within grace", true, func() (string, map[string]string) {
			return boxTags(t, azure.Name, "provisioning", created, nil)
		}, false},
	}
	claims := map[string]bool{}
	wantLeft := map[string]bool{}
	var wantGone []string
	for _, bx := range boxes {
		id, tags := bx.tags()
		claims[id] = bx.claimed
		name := putVM(e, id, tags)
		if bx.delete {
			wantGone = append(wantGone, name)
		} else {
			wantLeft[name] = true
		}
	}
	b := e.backend(t)
	claimed := func(id string) bool { return claims[id] }

	ds, err := b.Cleanup(testCtx(t), provider.CleanupRequest{DryRun: true, Now: now, Claimed: claimed})
	if err != nil {
		t.Fatal(err)
	}
	if ev := e.arm.log(); len(ev) != 0 {
		t.Fatalf("dry run changed things: %v", ev)
	}
	var dryDeletes int
	for _, d := range ds {
		if d.Delete {
			dryDeletes++
		}
		if d.Deleted {
			t.Errorf("dry run reports %s deleted", d.CloudID)
		}
	}
	if dryDeletes != len(wantGone) {
		t.Errorf("dry run would delete %d, want %d: %+v", dryDeletes, len(wantGone), ds)
	}

	ds, err = b.Cleanup(testCtx(t), provider.CleanupRequest{Now: now, Claimed: claimed})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Err != nil {
			t.Errorf("%s: %v", d.CloudID, d.Err)
		}
	}
	for _, name := range wantGone {
		if e.arm.doc(kindVM, name) != nil || e.arm.doc(kindNIC, name+"-nic") != nil || e.arm.doc(kindPIP, name+"-ip") != nil {
			t.Errorf("%s or a companion is still there", name)
		}
	}
	for name := range wantLeft {
		if e.arm.doc(kindVM, name) == nil || e.arm.doc(kindNIC, name+"-nic") == nil || e.arm.doc(kindPIP, name+"-ip") == nil {
			t.Errorf("%s or a companion was deleted", name)
		}
	}
	if diff := cmp.Diff([]string{
		"tag nic state=released", "tag public-ip state=released", "delete vm", "delete nic", "delete public-ip",
		"tag nic state=released", "tag public-ip state=released", "delete vm", "delete nic", "delete public-ip",
		"tag nic state=released", "tag public-ip state=released", "delete vm", "delete nic", "delete public-ip",
	}, e.arm.log()); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
}

// TestCleanupRechecksBeforeDeleting: a lease touched between the listing
// and the deletion survives.
func TestCleanupRechecksBeforeDeleting(t *testing.T) {
	e := newEnv(t)
	created := time.Now().Add(-3 * time.Hour)
	id, tags := boxTags(t, azure.Name, "ready", created, nil)
	name := putVM(e, id, tags)
	b := e.backend(t)
	// The owner touches the lease right after cleanup lists it.
	touched := cloud.Touch(tags, time.Now(), time.Now().Add(time.Hour))
	e.arm.onList = func(kind string) {
		if kind == kindVM {
			e.arm.mergeTags(kindVM, name, touched)
		}
	}
	ds, err := b.Cleanup(testCtx(t), provider.CleanupRequest{Now: time.Now(), Claimed: func(string) bool { return true }})
	if err != nil || len(ds) != 1 || ds[0].Deleted || !strings.HasPrefix(ds[0].Reason, "changed since listed") {
		t.Fatalf("Cleanup = %+v, %v; want the touched lease left alone", ds, err)
	}
	if e.arm.doc(kindVM, name) == nil {
		t.Error("touched VM deleted")
	}
}

// killAfterCreate acquires a lease through backend calls that die (the
// process is killed) while waiting for the VM's address, leaving the
// claim and the lease's resources behind.
func killAfterCreate(t *testing.T, e *env, store *lease.Store) lease.Claim {
	t.Helper()
	c := cloudtest.KilledAcquire(t, testCtx(t), e.backend(t), store, azure.Name, e.rt.Clock.Now(),
		func(cancel func()) {
			e.arm.setFault("GET "+kindVM, fault{hang: true, times: 1, onHang: func() { e.arm.kill(true); cancel() }})
		},
		func() { e.arm.kill(false) })
	if vm, nic, pip := e.arm.names(kindVM), e.arm.names(kindNIC), e.arm.names(kindPIP); len(vm) != 1 || len(nic) != 1 || len(pip) != 1 {
		t.Fatalf("after the kill: VMs %v, NICs %v, public IPs %v; want the one each a crash leaves", vm, nic, pip)
	}
	return c
}

// testProvider hands the library a backend configured against the fake.
type testProvider struct{ e *env }

func (p testProvider) Spec() provider.Spec { return azure.Provider{}.Spec() }

func (p testProvider) Configure(_ provider.Config, rt provider.Runtime) (provider.Backend, error) {
	p.e.rt.Clock = rt.Clock
	return azure.New(p.e.cfg, p.e.rt)
}

func newClient(t *testing.T, e *env, clock clockwork.Clock) *crabbox.Client {
	t.Helper()
	reg := provider.NewRegistry()
	reg.Register(testProvider{e})
	rt := e.rt
	rt.Clock = clock
	c, err := crabbox.New(crabbox.WithRegistry(reg), crabbox.WithProvider(azure.Name),
		crabbox.WithStateDir(filepath.Join(t.TempDir(), "state")), crabbox.WithRuntime(rt))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestCleanupAfterKilledAcquire: the process dies after the VM was
// created; `crabbox cleanup` later finds the VM from the claim and deletes
// it and its companions, VM first.
func TestCleanupAfterKilledAcquire(t *testing.T) {
	created := []string{"create public-ip", "create nic", "create vm spot"}
	t.Run("library cleanup releases the stale claim", func(t *testing.T) {
		e := newEnv(t)
		clock := clockwork.NewFakeClockAt(time.Now())
		e.rt.Clock = clock
		client := newClient(t, e, clock)
		c := killAfterCreate(t, e, cloudtest.Store(t, client.StateDir()))

		clock.Advance(2 * time.Hour) // the acquire is clearly dead by now
		ds, err := client.Cleanup(testCtx(t), crabbox.CleanupOptions{Provider: azure.Name})
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
		if diff := cmp.Diff(append(created,
			"tag nic state=released", "tag public-ip state=released", "delete vm", "delete nic", "delete disk", "delete public-ip",
		), e.arm.log()); diff != "" {
			t.Errorf("API mutations (-want +got):\n%s", diff)
		}
		checkEmpty(t, e.arm)
		if _, err := cloudtest.Store(t, client.StateDir()).Get(c.ID); err == nil {
			t.Errorf("claim %s still there after cleanup", c.ID)
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
		ds, err := b.Cleanup(testCtx(t), provider.CleanupRequest{Now: c.ExpiresAt.Add(time.Hour), Claimed: claimed})
		if err != nil || len(ds) != 1 || ds[0].Delete {
			t.Fatalf("cleanup within the grace period: %+v, %v; want the provisioning VM kept", ds, err)
		}
		ds, err = b.Cleanup(testCtx(t), provider.CleanupRequest{Now: c.ExpiresAt.Add(cloud.DefaultGrace), Claimed: claimed})
		if err != nil || len(ds) != 1 || !ds[0].Deleted || ds[0].LeaseID != c.ID {
			t.Fatalf("cleanup past the grace period: %+v, %v; want lease %s deleted", ds, err, c.ID)
		}
		checkEmpty(t, e.arm)
	})
}

// TestCleanupAfterKilledDelete: the process dies in the middle of a
// release, after the VM is gone but before its companions are. The
// companions were tagged released first, so the next cleanup deletes them
// at once (NIC before public IP) from their own tags and the claim.
func TestCleanupAfterKilledDelete(t *testing.T) {
	for _, tc := range []struct {
		name     string
		keepNICs bool   // Azure did not delete the NIC with the VM
		op       string // the call during which the process dies
		after    bool
		left     []string // resource kinds left behind
		want     []string // cleanup's mutations
	}{
		{"after the VM delete", false, "DELETE " + kindVM, true, []string{kindPIP}, []string{"delete public-ip"}},
		{"before the NIC delete", true, "DELETE " + kindNIC, false, []string{kindNIC, kindPIP}, []string{"delete nic", "delete public-ip"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.arm.keepNICs = tc.keepNICs
			b := e.backend(t)
			req, _ := newRequest(t, time.Now())
			target, err := b.Acquire(testCtx(t), req)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			e.arm.setFault(tc.op, fault{hang: true, after: tc.after, times: 1, onHang: func() { e.arm.kill(true); cancel() }})
			if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: target}); err == nil {
				t.Fatal("release succeeded though the process was killed")
			}
			e.arm.kill(false)
			if len(e.arm.names(kindVM)) != 0 {
				t.Fatalf("VM still there: %v", e.arm.names(kindVM))
			}
			for _, kind := range tc.left {
				n := e.arm.names(kind)
				if len(n) != 1 || e.arm.tags(kind, n[0])["state"] != "released" {
					t.Fatalf("%s after the crash: %v; want one tagged released", kind, n)
				}
			}
			before := len(e.arm.log())

			other := e.backend(t) // the next process
			ds, err := other.Cleanup(testCtx(t), provider.CleanupRequest{Now: time.Now(), Claimed: func(id string) bool { return id == req.LeaseID }})
			if err != nil {
				t.Fatal(err)
			}
			if len(ds) != len(tc.left) {
				t.Errorf("decisions %+v, want one per orphan", ds)
			}
			for _, d := range ds {
				if !d.Deleted || d.LeaseID != req.LeaseID || !strings.Contains(d.Reason, "without a VM: state released") {
					t.Errorf("decision %+v, want the orphan deleted", d)
				}
			}
			if diff := cmp.Diff(tc.want, e.arm.log()[before:]); diff != "" {
				t.Errorf("cleanup's mutations (-want +got):\n%s", diff)
			}
			checkEmpty(t, e.arm)
		})
	}
}

// TestCleanupLeavesUnclaimedOrphans: orphan companions of a lease this
// client holds no claim for are never deleted.
func TestCleanupLeavesUnclaimedOrphans(t *testing.T) {
	e := newEnv(t)
	id, tags := boxTags(t, azure.Name, "released", time.Now().Add(-3*time.Hour), nil)
	name := putVM(e, id, tags)
	e.arm.remove(kindVM, name)
	b := e.backend(t)
	ds, err := b.Cleanup(testCtx(t), provider.CleanupRequest{Now: time.Now(), Claimed: func(string) bool { return false }})
	if err != nil || len(ds) != 2 || ds[0].Delete || ds[1].Delete {
		t.Fatalf("Cleanup = %+v, %v; want both orphans skipped", ds, err)
	}
	if ev := e.arm.log(); len(ev) != 0 {
		t.Errorf("mutations: %v", ev)
	}
}
