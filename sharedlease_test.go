package crabbox_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/internal/handover"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/run"
)

// userClient is a crabbox client of user owner (org team) of rc.
func (rc *realCoordinator) userClient(t *testing.T, owner string) (*crabbox.Client, *coordclient.Client) {
	t.Helper()
	now := time.Now()
	token, err := auth.MintUserToken([]byte(strings.Repeat("s", 40)), auth.Claims{Owner: owner, Org: "team", IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var mu gosync.Mutex
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(logs.String(), "level=WARN") {
			t.Errorf("warnings of %s's client:\n%s", owner, logs.String())
		}
	})
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	c := newClient(t, t.TempDir(),
		crabbox.WithRuntime(provider.Runtime{HTTPClient: rc.ts.Client(), Logger: logger}),
		crabbox.WithCoordinator(rc.ts.URL, token), crabbox.WithBrokerMode(crabbox.BrokerAll))
	coord, err := coordclient.New(rc.ts.URL, token, coordclient.WithHTTPClient(rc.ts.Client()))
	if err != nil {
		t.Fatal(err)
	}
	return c, coord
}

// TestSharedLeaseThroughTheCoordinator: bob, with whom alice shares her
// warm lease to use, syncs and runs on it and opens a shell there by its
// ID, all through the coordinator (he holds no key of the box); his run
// leaves the lease alive for alice. Carol, a reader, is refused.
func TestSharedLeaseThroughTheCoordinator(t *testing.T) {
	ctx := t.Context()
	rc := newRealCoordinator(t)
	alice, aliceCoord := rc.userClient(t, "alice")
	l, err := alice.Acquire(ctx, crabbox.AcquireOptions{Provider: "local", Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if _, err := l.SSH(ctx); err != nil { // installs the coordinator's access key
		t.Fatal(err)
	}
	id := l.ID()
	share := api.LeaseShare{Users: map[string]api.ShareRole{"bob": api.ShareUse, "carol": api.ShareRead}}
	if _, err := aliceCoord.UpdateLeaseShare(ctx, id, share); err != nil {
		t.Fatal(err)
	}

	bob, _ := rc.userClient(t, "bob")
	repo := gitRepo(t)
	var out bytes.Buffer
	res, err := bob.Run(ctx, crabbox.RunRequest{
		Lease: id, Root: repo, Shell: "cat untracked.txt; exit 3", Stdout: &out, Stderr: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || out.String() != "untracked\n" {
		t.Errorf("bob's run: exit %d, output %q; want 3 and the synced file", res.ExitCode, out.String())
	}

	bl, err := bob.Resolve(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code, err := bl.Shell(ctx, crabbox.ShellOptions{Stdin: strings.NewReader("echo shell-$((6*7))\nexit 4\n"), Stdout: &stdout, Stderr: &stderr})
	if err != nil || code != 4 || stdout.String() != "shell-42\n" {
		t.Errorf("bob's shell = %d, %v, output %q (%q); want 4 and shell-42", code, err, stdout.String(), stderr.String())
	}
	if _, err := bl.OpenSSHCommand(ctx); !errors.Is(err, provider.ErrPrecondition) {
		t.Errorf("OpenSSH command line of a shared lease = %v, want a precondition error", err)
	}
	if err := bl.Release(ctx); err != nil {
		t.Errorf("bob's release (a close): %v", err)
	}

	// Alice's lease is still hers and alive.
	if _, err := l.Exec(ctx, run.Command{Shell: "true"}); err != nil {
		t.Errorf("alice's lease after bob's run and release: %v", err)
	}
	if got, err := aliceCoord.GetLease(ctx, id); err != nil || got.State != api.LeaseActive {
		t.Errorf("alice's lease at the coordinator: %+v, %v; want active", got.State, err)
	}

	carol, _ := rc.userClient(t, "carol")
	_, err = carol.Resolve(ctx, id)
	if !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), "shared with you to read") {
		t.Errorf("carol's resolve = %v, want a refusal naming her role", err)
	}
	dave, _ := rc.userClient(t, "dave")
	if _, err := dave.Resolve(ctx, id); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("dave's resolve = %v, want not found", err)
	}
}

// TestSharedLeaseRevokedOrUnreachable: revoking bob's share cuts his open
// connection at once; a box without the coordinator's access key (the
// upstream client never installs it) gives bob an error saying so.
func TestSharedLeaseRevokedOrUnreachable(t *testing.T) {
	ctx := t.Context()
	rc := newRealCoordinator(t)
	alice, aliceCoord := rc.userClient(t, "alice")
	l, err := alice.Acquire(ctx, crabbox.AcquireOptions{Provider: "local", Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	// Acquire let the coordinator in; take its key off the box again, as
	// a client that does not install it (the upstream one) leaves it.
	st, err := lease.OpenStore(alice.StateDir())
	if err != nil {
		t.Fatal(err)
	}
	leaseKey, err := st.LoadKey(l.ID())
	if err != nil {
		t.Fatal(err)
	}
	owner, err := l.SSH(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := handover.SetKeys(ctx, owner, leaseKey.Signer.PublicKey()); err != nil {
		t.Fatal(err)
	}
	share := api.LeaseShare{Users: map[string]api.ShareRole{"bob": api.ShareUse}}
	if _, err := aliceCoord.UpdateLeaseShare(ctx, l.ID(), share); err != nil {
		t.Fatal(err)
	}
	bob, _ := rc.userClient(t, "bob")
	bl, err := bob.Resolve(ctx, l.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer bl.Close()
	_, err = bl.SSH(ctx)
	if err == nil || !strings.Contains(err.Error(), api.CodeNoBoxAccess) || !strings.Contains(err.Error(), "did not install it") {
		t.Fatalf("bob's SSH to a box without the access key = %v, want no_box_access saying why", err)
	}

	access, err := lease.ParsePublicKey(l.Target().AccessKeys[0]) // what alice's crabbox installs
	if err != nil {
		t.Fatal(err)
	}
	if err := handover.SetKeys(ctx, owner, leaseKey.Signer.PublicKey(), access); err != nil {
		t.Fatal(err)
	}
	conn, err := bl.SSH(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := aliceCoord.DeleteLeaseShare(ctx, l.ID(), api.ShareDeleteRequest{User: "bob"}); err != nil {
		t.Fatal(err)
	}
	if err := conn.Wait(); err == nil {
		t.Error("bob's connection ended cleanly after the revoke, want it cut")
	}
}
