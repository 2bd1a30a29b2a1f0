package docker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	eng "github.com/crabbox-dev/crabbox/providers/docker/internal/engine"
)

func TestConformance(t *testing.T) {
	f := engine(t)
	providertest.RunSSHLease(t, providertest.Harness{
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend { return newBackend(t, f) },
		Installed:  installedDir,
	})
}

// An agent that cannot read its lease directory on stdin (the crabbox CLI
// as agent) gets it copied into the container before the start, and its
// boxes pass the same suite.
func TestConformanceWithCopiedLease(t *testing.T) {
	f := engine(t)
	providertest.RunSSHLease(t, providertest.Harness{
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			b := newBackend(t, f)
			b.copyLease = true
			return b
		},
		Installed: installedDir,
	})
}

// installedDir is where the conformance suite writes on a box, outside
// its work root, standing for an installed package that a checkpoint
// keeps.
const installedDir = "/opt/crabbox-installed"

// acquireRequest is a request for a fresh lease expiring after ttl.
func acquireRequest(t *testing.T, ttl time.Duration) provider.AcquireRequest {
	t.Helper()
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	return provider.AcquireRequest{
		LeaseID: lease.NewID(), Slug: "docker-test", PublicKey: key.AuthorizedKey(),
		TTL: ttl, IdleTimeout: ttl, CreatedAt: now, ExpiresAt: now.Add(ttl),
	}
}

// A box whose expiry passes stops serving and its container is removed by
// the engine, with nobody running cleanup.
func TestBoxRemovesItselfAtExpiry(t *testing.T) {
	f := engine(t)
	b := newBackend(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := acquireRequest(t, 3*time.Second)
	removeLeftovers(t, b, req.LeaseID)
	target, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.cli.ContainerWait(ctx, target.CloudID, eng.WaitRemoved); err != nil {
		t.Fatalf("waiting for the expired box to be removed: %v", err)
	}
	if _, err := b.Resolve(ctx, provider.ResolveRequest{ID: req.LeaseID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Resolve after expiry: err = %v, want ErrNotFound", err)
	}
}

func TestMissingImageNamesTheBuildCommand(t *testing.T) {
	f := engine(t)
	b := newBackendWith(t, Config{Image: "crabbox-test/absent:nope", Agent: f.agent, StateDir: t.TempDir()})
	req := acquireRequest(t, time.Minute)
	removeLeftovers(t, b, req.LeaseID)
	_, err := b.Acquire(context.Background(), req)
	if !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), "crabbox image build --provider docker --tag crabbox-test/absent:nope") {
		t.Fatalf("Acquire with a missing image: err = %v, want ErrPrecondition naming `crabbox image build --provider docker --tag ...`", err)
	}
	assertNoContainer(t, b, req.LeaseID)
}

// Acquire removes its container when a step after creating it fails:
// right after the creation, and when the box never gets ready (here
// because the "agent" is busybox, which knows no `agent` command).
func TestAcquireRollsBack(t *testing.T) {
	f := engine(t)
	busybox, _ := exec.LookPath("busybox")
	for _, tc := range []struct {
		name    string
		agent   string
		hook    func(context.Context, string) error
		wantErr string
	}{
		{name: "after create", agent: f.agent, hook: func(context.Context, string) error { return errors.New("injected") }, wantErr: "injected"},
		{name: "never ready", agent: busybox, wantErr: "applet not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackendWith(t, Config{Image: f.image, Agent: tc.agent})
			b.afterCreate = tc.hook
			req := acquireRequest(t, time.Minute)
			removeLeftovers(t, b, req.LeaseID)
			if _, err := b.Acquire(context.Background(), req); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Acquire: err = %v, want one containing %q", err, tc.wantErr)
			}
			assertNoContainer(t, b, req.LeaseID)
		})
	}
}

func assertNoContainer(t *testing.T, b *Backend, id string) {
	t.Helper()
	found, err := b.boxes(context.Background(), labelLease+"="+id)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 0 {
		t.Errorf("lease %s left containers behind: %+v", id, found)
	}
}

// The CLI dies (SIGKILL) after the container was created: its claim stays
// "acquiring" and the container half-made. The next cleanup sees that the
// acquire's process is gone, deletes the container and drops the claim.
func TestKilledAcquireIsCleanedUp(t *testing.T) {
	f := engine(t)
	stateDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), helperEnv+"=acquire", "CRABBOX_TEST_STATE="+stateDir,
		"CRABBOX_TEST_IMAGE="+f.image, "CRABBOX_TEST_AGENT="+f.agent)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	// Whatever the line says, the helper dies now, as under kill -9.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	containerID, ok := strings.CutPrefix(strings.TrimSpace(line), "created ")
	if !ok {
		t.Fatalf("helper said %q, want \"created <container>\"; stderr:\n%s", line, stderr.String())
	}

	store, err := lease.OpenStore(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 1 || claims[0].State != lease.StateAcquiring {
		t.Fatalf("claims after the kill = %+v, want one acquiring", claims)
	}
	id := claims[0].ID
	b := newBackend(t, f)
	removeLeftovers(t, b, id)
	if found, err := b.boxes(ctx, labelLease+"="+id); err != nil || len(found) != 1 || found[0].containerID != containerID {
		t.Fatalf("containers of lease %s after the kill = %+v (%v), want the created one", id, found, err)
	}

	c, err := crabbox.New(crabbox.WithStateDir(stateDir),
		crabbox.WithProviderConfig(Name, provider.Config{"image": f.image, "agent": f.agent}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	decisions, err := c.Cleanup(ctx, crabbox.CleanupOptions{Provider: Name})
	if err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	var got *crabbox.CleanupOutcome
	for i := range decisions {
		if decisions[i].LeaseID == id {
			got = &decisions[i]
		}
	}
	if got == nil || got.Action != crabbox.CleanupDelete || got.Result != "deleted" {
		t.Fatalf("cleanup decision for %s = %+v, want deleted (all: %+v)", id, got, decisions)
	}
	assertNoContainer(t, b, id)
	if claims, _ := store.List(); len(claims) != 0 {
		t.Errorf("claims after cleanup = %+v, want none", claims)
	}
	if _, err := os.Stat(filepath.Join(stateDir, Name, "acquiring", id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("acquire lock of %s after cleanup: %v, want it removed", id, err)
	}
}

// runAcquireHelper acquires a lease as the CLI would and hangs right after
// the container is created, saying so on stdout, until it is killed.
func runAcquireHelper() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "helper:", err); return 1 }
	stateDir := os.Getenv("CRABBOX_TEST_STATE")
	store, err := lease.OpenStore(stateDir)
	if err != nil {
		return fail(err)
	}
	b, err := Provider{}.Configure(provider.Config{"image": os.Getenv("CRABBOX_TEST_IMAGE"), "agent": os.Getenv("CRABBOX_TEST_AGENT")},
		provider.Runtime{StateDir: store.Dir()})
	if err != nil {
		return fail(err)
	}
	db := b.(*Backend)
	db.afterCreate = func(ctx context.Context, id string) error {
		fmt.Printf("created %s\n", id)
		<-ctx.Done() // killed here, long before
		return ctx.Err()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = store.Acquire(ctx, db, lease.Terms{Slug: "killed-crab"})
	return fail(fmt.Errorf("acquire returned: %w", err))
}

// The library's whole workflow works on a box whose image has nothing but
// a static busybox: acquire, sync a checkout, run with stdin, exit code,
// release.
func TestRunSyncsAndRuns(t *testing.T) {
	f := engine(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git to make a checkout with")
	}
	repo := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(repo, "hello.txt"), []byte("hello from the checkout\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := crabbox.New(crabbox.WithStateDir(t.TempDir()), crabbox.WithProvider("local-container"),
		crabbox.WithProviderConfig(Name, provider.Config{"image": f.image, "agent": f.agent}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	res, err := c.Run(ctx, crabbox.RunRequest{
		Root: repo, Shell: "cat hello.txt; cat /etc/os-release; id -u; wc -l; exit 7",
		Stdin: strings.NewReader("a\nb\n"), Stdout: &stdout, Stderr: &stderr,
	})
	if err != nil {
		t.Fatalf("Run: %v\nstderr:\n%s", err, stderr.String())
	}
	removeLeftovers(t, newBackend(t, f), res.LeaseID)
	want := "hello from the checkout\nNAME=\"crabbox test box\"\nID=busybox\n0\n2\n"
	if res.ExitCode != 7 || stdout.String() != want {
		t.Errorf("Run = exit %d, stdout %q; want exit 7, stdout %q (stderr %q)", res.ExitCode, stdout.String(), want, stderr.String())
	}
	if res.Provider != Name || res.Kept {
		t.Errorf("Run result: provider %q kept %v, want %q released", res.Provider, res.Kept, Name)
	}
	assertNoContainer(t, newBackend(t, f), res.LeaseID)
}

// Touch rewrites only the expiry in the box's lease record, whether it
// starts from the record a Resolve just read or reads it itself, and
// also when another client touched the box in between.
func TestTouchRewritesOnlyTheExpiry(t *testing.T) {
	f := engine(t)
	b, other := newBackend(t, f), newBackend(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := acquireRequest(t, 10*time.Minute)
	removeLeftovers(t, b, req.LeaseID)
	target, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	recordIn := func() map[string]any {
		t.Helper()
		data, err := b.readFile(ctx, target.CloudID, boxRecordPath(req.LeaseID), maxRecordSize)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	orig := recordIn()
	if orig["port"] == nil {
		t.Fatalf("the agent did not write its port into the record: %v", orig)
	}
	touch := func(what string, b *Backend, expires time.Time) {
		t.Helper()
		got, err := b.Touch(ctx, provider.TouchRequest{Lease: target, Now: time.Now(), ExpiresAt: expires})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !got.ExpiresAt.Equal(expires) || got.HostKey != target.HostKey {
			t.Errorf("%s: target expires %v with host key %q, want %v and %q", what, got.ExpiresAt, got.HostKey, expires, target.HostKey)
		}
		want := maps.Clone(orig)
		want["expiresAt"] = expires.UTC().Format(time.RFC3339Nano)
		if diff := cmp.Diff(want, recordIn()); diff != "" {
			t.Errorf("%s: record in the box (-want +got):\n%s", what, diff)
		}
	}
	later := req.ExpiresAt.Add(time.Minute)
	if _, err := b.Resolve(ctx, provider.ResolveRequest{ID: req.LeaseID}); err != nil {
		t.Fatal(err)
	}
	touch("touch after resolve", b, later)
	touch("touch after touch", b, later.Add(time.Minute))
	if _, err := b.Resolve(ctx, provider.ResolveRequest{ID: req.LeaseID}); err != nil {
		t.Fatal(err)
	}
	touch("touch by another client", other, later.Add(2*time.Minute))
	touch("touch after resolve and another's touch", b, later.Add(3*time.Minute))
	got, err := b.Resolve(ctx, provider.ResolveRequest{ID: req.LeaseID})
	if err != nil {
		t.Fatal(err)
	}
	if want := later.Add(3 * time.Minute); !got.ExpiresAt.Equal(want) {
		t.Errorf("Resolve after the touches: expires %v, want %v", got.ExpiresAt, want)
	}
}

// A warm run's Resolve, in a process of its own, reports the expiry the
// last Touch of a client sharing its state directory wrote, and the host
// key from the box's label, without reading the record out of the box:
// here the record in the box says something else, and Resolve does not
// see it. A client without that state directory reads the box.
func TestResolveUsesTheStateDirectorysRecord(t *testing.T) {
	f := engine(t)
	state := t.TempDir()
	b := newBackendWith(t, Config{Image: f.image, Agent: f.agent, StateDir: state})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := acquireRequest(t, 10*time.Minute)
	removeLeftovers(t, b, req.LeaseID)
	target, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	touched := req.ExpiresAt.Add(time.Minute)
	if _, err := b.Touch(ctx, provider.TouchRequest{Lease: target, Now: time.Now(), ExpiresAt: touched}); err != nil {
		t.Fatal(err)
	}
	inBox := req.ExpiresAt.Add(2 * time.Minute)
	stranger := newBackend(t, f)
	if _, err := stranger.Touch(ctx, provider.TouchRequest{Lease: target, Now: time.Now(), ExpiresAt: inBox}); err != nil {
		t.Fatal(err)
	}

	next := newBackendWith(t, Config{Image: f.image, Agent: f.agent, StateDir: state})
	got, err := next.Resolve(ctx, provider.ResolveRequest{ID: req.LeaseID})
	if err != nil {
		t.Fatal(err)
	}
	if !got.ExpiresAt.Equal(touched) || got.HostKey != target.HostKey {
		t.Errorf("Resolve with the state directory: expires %v, host key %q; want %v (the cached touch) and %q", got.ExpiresAt, got.HostKey, touched, target.HostKey)
	}
	fresh, err := newBackend(t, f).Resolve(ctx, provider.ResolveRequest{ID: req.LeaseID})
	if err != nil {
		t.Fatal(err)
	}
	if !fresh.ExpiresAt.Equal(inBox) || fresh.HostKey != target.HostKey {
		t.Errorf("Resolve without it: expires %v, host key %q; want %v (the box's record) and %q", fresh.ExpiresAt, fresh.HostKey, inBox, target.HostKey)
	}

	if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	if cached, _ := filepath.Glob(filepath.Join(state, "records", "*")); len(cached) != 0 {
		t.Errorf("records cached after release: %q", cached)
	}
}

// An engine that is not there fails the acquire before anything is
// recorded (CheckConfig): no lease is left, failed, for cleanup. No
// engine is needed: the socket does not exist.
func TestUnreachableEngineLeavesNothing(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "absent.sock")
	c, err := crabbox.New(crabbox.WithStateDir(t.TempDir()),
		crabbox.WithProviderConfig(Name, provider.Config{"host": "unix://" + sock, "image": "crabbox-test/absent:nope"}),
		crabbox.WithProvider(Name))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Acquire(t.Context(), crabbox.AcquireOptions{})
	if !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "cannot reach the docker engine at unix://"+sock) {
		t.Fatalf("Acquire with no engine: err = %v, want ErrTransient naming the engine", err)
	}
	if strings.Count(err.Error(), "cannot reach") != 1 {
		t.Errorf("Acquire error says it more than once: %v", err)
	}
	leases, err := c.List(t.Context())
	if err != nil || len(leases) != 0 {
		t.Errorf("leases after the failed acquire = %+v (%v), want none", leases, err)
	}
}
