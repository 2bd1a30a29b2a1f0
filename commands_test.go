package crabbox_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/local"
)

func acquire(t *testing.T, c *crabbox.Client, opts crabbox.AcquireOptions) *crabbox.Lease {
	t.Helper()
	l, err := c.Acquire(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	return l
}

// Without a pty the shell reads its commands from stdin.
func TestShellWithoutPty(t *testing.T) {
	c := newClient(t, t.TempDir())
	l := acquire(t, c, crabbox.AcquireOptions{})
	var stdout, stderr bytes.Buffer
	code, err := l.Shell(context.Background(), crabbox.ShellOptions{
		Stdin: strings.NewReader("echo hi; exit 3\n"), Stdout: &stdout, Stderr: &stderr,
	})
	if err != nil || code != 3 || stdout.String() != "hi\n" {
		t.Errorf("Shell = %d, %v; stdout %q, stderr %q; want 3 and hi", code, err, stdout.String(), stderr.String())
	}
}

// A shell with Dir starts there: CheckoutDir is where a run from the same
// local directory runs; a Dir not on the box falls back with a note.
func TestShellInCheckoutDir(t *testing.T) {
	t.Setenv("SHELL", "/bin/sh")
	repo := gitRepo(t)
	c := newClient(t, t.TempDir())
	ctx := context.Background()
	l := acquire(t, c, crabbox.AcquireOptions{})
	if _, ok, err := l.CheckoutDir(ctx, t.TempDir()); ok || err != nil {
		t.Errorf("CheckoutDir outside git = %v, %v; want false, nil", ok, err)
	}
	dir, ok, err := l.CheckoutDir(ctx, repo)
	if !ok || err != nil || dir != l.Workdir(repo) {
		t.Fatalf("CheckoutDir(repo) = %q, %v, %v; want %q", dir, ok, err, l.Workdir(repo))
	}
	var stdout, stderr bytes.Buffer
	shell := func() int {
		stdout.Reset()
		stderr.Reset()
		code, err := l.Shell(ctx, crabbox.ShellOptions{Stdin: strings.NewReader("pwd\n"), Stdout: &stdout, Stderr: &stderr, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	if code := shell(); code != 0 || !strings.Contains(stderr.String(), dir+" is not on the box") {
		t.Errorf("shell before a sync: exit %d, stderr %q; want a note that %s is missing", code, stderr.String(), dir)
	}
	if _, err := l.Run(ctx, crabbox.RunRequest{Root: repo, SyncOnly: true}); err != nil {
		t.Fatal(err)
	}
	if code := shell(); code != 0 || stdout.String() != dir+"\n" || stderr.Len() != 0 {
		t.Errorf("shell after a sync: exit %d, stdout %q, stderr %q; want %s", code, stdout.String(), stderr.String(), dir)
	}
}

func TestOpenSSHCommand(t *testing.T) {
	c := newClient(t, t.TempDir())
	l := acquire(t, c, crabbox.AcquireOptions{})
	words, err := l.OpenSSHCommand(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tg := l.Target()
	knownHosts := crabbox.StoreOf(c).KnownHostsPath(l.ID())
	want := []string{
		"ssh", "-i", crabbox.StoreOf(c).KeyPath(l.ID()), "-p", strconv.Itoa(tg.Port),
		"-o", "UserKnownHostsFile=" + knownHosts, "-o", "StrictHostKeyChecking=yes",
		"-o", "IdentitiesOnly=yes", "-o", "ForwardAgent=no", tg.User + "@" + tg.Host,
	}
	if diff := cmp.Diff(want, words); diff != "" {
		t.Errorf("OpenSSHCommand (-want +got):\n%s", diff)
	}
	body, err := os.ReadFile(knownHosts)
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := lease.ParsePublicKey(l.Claim().PinnedHostKey)
	if err != nil {
		t.Fatal(err)
	}
	addr := knownhosts.Normalize(net.JoinHostPort(tg.Host, strconv.Itoa(tg.Port)))
	if got, want := string(body), knownhosts.Line([]string{addr}, pinned)+"\n"; got != want {
		t.Errorf("known_hosts = %q, want %q", got, want)
	}
	if fi, err := os.Stat(knownHosts); err != nil || fi.Mode().Perm() != 0o600 && !isWindows() {
		t.Errorf("known_hosts mode %v (%v), want 0600", fi.Mode(), err)
	}
}

func isWindows() bool { return os.PathSeparator == '\\' }

func TestHeartbeatChangesIdleTimeout(t *testing.T) {
	c := newClient(t, t.TempDir())
	l := acquire(t, c, crabbox.AcquireOptions{IdleTimeout: time.Minute})
	before := l.ExpiresAt()
	info, err := c.Heartbeat(context.Background(), l.Slug(), crabbox.HeartbeatOptions{IdleTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := crabbox.StoreOf(c).Get(l.ID())
	if err != nil {
		t.Fatal(err)
	}
	if claim.IdleTimeout() != 10*time.Minute || !info.ExpiresAt.After(before.Add(8*time.Minute)) || !info.ExpiresAt.Equal(claim.ExpiresAt) {
		t.Errorf("after heartbeat: idle %s, expires %s (claim %s); before %s", claim.IdleTimeout(), info.ExpiresAt, claim.ExpiresAt, before)
	}
	if _, err := c.Heartbeat(context.Background(), l.ID(), crabbox.HeartbeatOptions{IdleTimeout: -time.Second}); err == nil {
		t.Error("negative idle timeout: no error")
	}
}

type row struct{ Lease, Action, Result string }

func rows(ds []crabbox.CleanupOutcome) []row {
	var out []row
	for _, d := range ds {
		out = append(out, row{d.LeaseID, string(d.Action), d.Result})
	}
	slices.SortFunc(out, func(a, b row) int { return strings.Compare(a.Lease, b.Lease) })
	return out
}

func claimIDs(t *testing.T, c *crabbox.Client) []string {
	t.Helper()
	claims, err := crabbox.StoreOf(c).List()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, cl := range claims {
		ids = append(ids, cl.ID)
	}
	slices.Sort(ids)
	return ids
}

// Cleanup keeps live leases, drops claims whose box is gone, releases failed
// acquires and never touches another client's box; a dry run changes nothing.
func TestCleanup(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	shared := crabbox.WithProviderConfig(local.Name, provider.Config{"root": root})
	c := newClient(t, t.TempDir(), shared)
	other := newClient(t, t.TempDir(), shared)

	live := acquire(t, c, crabbox.AcquireOptions{})
	gone := acquire(t, c, crabbox.AcquireOptions{})
	b, err := c.Backend(local.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.(provider.SSHLeaseBackend).ReleaseLease(ctx, provider.ReleaseRequest{Lease: gone.Target()}); err != nil {
		t.Fatal(err)
	}
	failed, err := crabbox.StoreOf(c).Create(lease.Claim{ID: lease.NewID(), Provider: local.Name, State: lease.StateFailed, CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	theirs := acquire(t, other, crabbox.AcquireOptions{})

	want := func(result, goneResult string) []row {
		return rows([]crabbox.CleanupOutcome{
			{LeaseID: live.ID(), Action: crabbox.CleanupKeep},
			{LeaseID: gone.ID(), Action: crabbox.CleanupDelete, Result: goneResult},
			{LeaseID: failed.ID, Action: crabbox.CleanupDelete, Result: result},
			{LeaseID: theirs.ID(), Action: crabbox.CleanupSkip},
		})
	}
	before := claimIDs(t, c)
	ds, err := c.Cleanup(ctx, crabbox.CleanupOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want("dry run", "dry run"), rows(ds)); diff != "" {
		t.Errorf("dry run decisions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, claimIDs(t, c)); diff != "" {
		t.Errorf("dry run changed claims (-before +after):\n%s", diff)
	}

	ds, err = c.Cleanup(ctx, crabbox.CleanupOptions{Provider: local.Name})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want("deleted", "claim dropped"), rows(ds)); diff != "" {
		t.Errorf("decisions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{live.ID()}, claimIDs(t, c)); diff != "" {
		t.Errorf("claims after cleanup (-want +got):\n%s", diff)
	}
	if _, err := other.Resolve(ctx, theirs.ID()); err != nil {
		t.Errorf("another client's lease after cleanup: %v", err)
	}
}

func TestDoctor(t *testing.T) {
	c := newClient(t, t.TempDir())
	for _, ch := range c.Doctor(context.Background(), crabbox.DoctorOptions{}) {
		if !ch.OK {
			t.Errorf("check %q failed: %s", ch.Name, ch.Detail)
		}
	}
	checks := c.Doctor(context.Background(), crabbox.DoctorOptions{Provider: "nope"})
	if last := checks[len(checks)-1]; last.OK || !strings.Contains(last.Detail, `unknown provider "nope"`) {
		t.Errorf("unknown provider check = %+v, want a failure naming it", last)
	}
}

// A heartbeat that fails changes nothing: the idle timeout it asked for is
// not left behind in the claim.
func TestFailedHeartbeatKeepsIdleTimeout(t *testing.T) {
	p := &faultyLocal{faults: []providertest.Fault{{Step: providertest.StepTouch}}}
	reg := provider.NewRegistry()
	reg.Register(p)
	c := newClient(t, t.TempDir(), crabbox.WithRegistry(reg))
	l := acquire(t, c, crabbox.AcquireOptions{Keep: true, IdleTimeout: time.Minute})
	defer c.Stop(context.Background(), l.ID())
	if _, err := c.Heartbeat(context.Background(), l.ID(), crabbox.HeartbeatOptions{IdleTimeout: 10 * time.Minute}); !errors.Is(err, providertest.ErrInjected) {
		t.Fatalf("Heartbeat = %v, want the injected touch failure", err)
	}
	claim, err := crabbox.StoreOf(c).Get(l.ID())
	if err != nil {
		t.Fatal(err)
	}
	if claim.IdleTimeout() != time.Minute {
		t.Errorf("idle timeout after a failed heartbeat = %s, want 1m", claim.IdleTimeout())
	}
}
