package external_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/external"
)

func exampleConfig(t *testing.T) external.Config {
	t.Helper()
	cfg, _ := json.Marshal(map[string]string{"root": t.TempDir()})
	return external.Config{Command: examplePath, ProviderConfig: cfg, Timeout: time.Minute}
}

func TestConformance(t *testing.T) {
	providertest.RunSSHLease(t, providertest.Harness{
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			b, err := external.New(exampleConfig(t), provider.Runtime{})
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
	})
}

// fakeCommand is this test binary as a provider program in the given
// mode: its path, the environment that selects the mode, and the file
// where it logs the requests it got.
func fakeCommand(t *testing.T, mode string) (exe string, env map[string]string, log string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log = filepath.Join(t.TempDir(), "requests.jsonl")
	// GORACE: a race-enabled test binary otherwise lingers a second at exit.
	return exe, map[string]string{fakeEnv: mode, fakeLogEnv: log, "GORACE": "atexit_sleep_ms=0"}, log
}

// delegatedConfig is the raw configuration of the fake program in mode as
// a delegated-run provider, with extra settings, and its request log.
func delegatedConfig(t *testing.T, mode string, extra provider.Config) (provider.Config, string) {
	t.Helper()
	exe, env, log := fakeCommand(t, mode)
	envJSON, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	cfg := provider.Config{"command": exe, "mode": external.ModeDelegatedRun, "env": string(envJSON)}
	maps.Copy(cfg, extra)
	return cfg, log
}

// fake returns a backend whose program is this test binary in the given
// mode, and the file where the fake logs the requests it got.
func fake(t *testing.T, mode string, edit ...func(*external.Config)) (*external.Backend, string) {
	t.Helper()
	exe, env, log := fakeCommand(t, mode)
	cfg := external.Config{Command: exe, Timeout: time.Minute, Env: env}
	for _, e := range edit {
		e(&cfg)
	}
	b, err := external.New(cfg, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	return b, log
}

// requests reads the fake's request log.
func requests(t *testing.T, log string) []external.Request {
	t.Helper()
	f, err := os.Open(log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []external.Request
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20) // write-file requests are long lines
	for sc.Scan() {
		var r external.Request
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func acquireRequest(t *testing.T) provider.AcquireRequest {
	t.Helper()
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	return provider.AcquireRequest{
		LeaseID: lease.NewID(), Slug: "tidal-lobster", PublicKey: key.AuthorizedKey(),
		TTL: time.Hour, IdleTimeout: 30 * time.Minute, CreatedAt: now, ExpiresAt: now.Add(30 * time.Minute),
		Labels: map[string]string{"team": "crabs"},
	}
}

func TestAcquireSendsDesiredLease(t *testing.T) {
	b, log := fake(t, "no-host") // any mode: the request is what matters
	req := acquireRequest(t)
	_, _ = b.Acquire(context.Background(), req)
	reqs := requests(t, log)
	if len(reqs) == 0 || reqs[0].Operation != external.OpAcquire {
		t.Fatalf("requests = %+v, want an acquire first", reqs)
	}
	got := reqs[0]
	name := external.LeaseName(req.LeaseID, req.Slug)
	if !strings.HasPrefix(name, "crabbox-tidal-lobster-") || len(name) != len("crabbox-tidal-lobster-")+8 {
		t.Errorf("name %q, want crabbox-<slug>-<8 hex>", name)
	}
	want := &external.Desired{
		LeaseID: req.LeaseID, Slug: req.Slug, Name: name, PublicKey: req.PublicKey,
		Labels:     map[string]string{"team": "crabs", "lease": req.LeaseID, "slug": req.Slug, "name": name},
		TTLSeconds: 3600, IdleTimeoutSeconds: 1800, CreatedAt: req.CreatedAt, ExpiresAt: req.ExpiresAt,
	}
	if diff := cmp.Diff(want, got.Desired); diff != "" {
		t.Errorf("desired (-want +got):\n%s", diff)
	}
	if got.ProtocolVersion != 1 {
		t.Errorf("protocolVersion = %d, want 1", got.ProtocolVersion)
	}
}

func TestAcquireRejectsAndReleases(t *testing.T) {
	tests := []struct {
		mode, wantErr, released string
	}{
		{"wrong-lease-id", `lease.leaseId is "cbx_ffffffffffff", want the ID crabbox sent`, "cbx_ffffffffffff"},
		{"no-host", "lease.ssh.host is missing", ""},
		{"reserved-label", `lease.labels.lease is "cbx_000000000000"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			b, log := fake(t, tt.mode)
			store, err := lease.OpenStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			_, err = store.Acquire(context.Background(), b, lease.Terms{Slug: "tidal-lobster"})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Acquire error = %v, want one containing %q", err, tt.wantErr)
			}
			claims, err := store.List()
			if err != nil {
				t.Fatal(err)
			}
			if len(claims) != 0 {
				t.Errorf("claims left after a rejected acquire: %+v", claims)
			}
			reqs := requests(t, log)
			acquiredID := reqs[0].Desired.LeaseID
			released := map[string]bool{}
			for _, r := range reqs {
				if r.Operation == external.OpRelease {
					released[r.Lease.LeaseID] = true
				}
			}
			want := []string{acquiredID}
			if tt.released != "" {
				want = append(want, tt.released)
			}
			for _, id := range want {
				if !released[id] {
					t.Errorf("lease %s was not released (requests: %+v)", id, reqs)
				}
			}
		})
	}
}

func TestMalformedResponses(t *testing.T) {
	tests := []struct{ mode, wantErr string }{
		{"oversize", "larger than 1048576 bytes"},
		{"badjson", "malformed response"},
		{"twojson", "more than one JSON value"},
		{"version", "protocolVersion is 2, want 1"},
		{"wrongtype", "field lease.ssh.port"},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			b, _ := fake(t, tt.mode)
			_, err := b.Resolve(context.Background(), provider.ResolveRequest{ID: "cbx_0123456789ab"})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "resolve") {
				t.Fatalf("Resolve error = %v, want one about resolve containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestNonZeroExit(t *testing.T) {
	b, _ := fake(t, "exit")
	_, err := b.Resolve(context.Background(), provider.ResolveRequest{ID: "cbx_0123456789ab"})
	if err == nil {
		t.Fatal("Resolve succeeded, want the program's failure")
	}
	for _, want := range []string{"no capacity in region", "exit status 3", "the region is full"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if !errors.Is(err, provider.ErrCapacity) {
		t.Errorf("error %v does not match provider.ErrCapacity (errorKind capacity)", err)
	}
}

func TestCallerCancelStopsProgram(t *testing.T) {
	b, _ := fake(t, "hang", func(c *external.Config) { c.Env[fakePIDEnv] = filepath.Join(t.TempDir(), "pid") })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.Resolve(ctx, provider.ResolveRequest{ID: "cbx_0123456789ab"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Resolve error = %v, want context.Canceled", err)
	}
}

func TestCleanEnvironmentAndArgs(t *testing.T) {
	t.Setenv("CRABBOX_TEST_SECRET", "hunter2")
	t.Setenv("CRABBOX_TEST_TOKEN", "pass-me")
	args := []string{"--region", "eu west", "$(echo injected)", "a;b"}
	b, _ := fake(t, "env", func(c *external.Config) {
		c.Args = args
		c.PassEnv = []string{"CRABBOX_TEST_TOKEN"}
		c.ProviderConfig = json.RawMessage(`{"region":"eu"}`)
	})
	checks, err := b.Doctor(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != 2 || !checks[0].OK || !checks[1].OK {
		t.Fatalf("doctor checks = %+v, want two passing", checks)
	}
	// The fake answers doctor with what it saw.
	var seen struct {
		Env    []string        `json:"env"`
		Args   []string        `json:"args"`
		Config json.RawMessage `json:"config"`
	}
	if err := json.Unmarshal([]byte(checks[1].Detail), &seen); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(args, seen.Args); diff != "" {
		t.Errorf("arguments (-want +got):\n%s", diff)
	}
	if string(seen.Config) != `{"region":"eu"}` {
		t.Errorf("config = %s, want the configured object", seen.Config)
	}
	allowed := append(slices.Clone(external.BaseEnv), "CRABBOX_TEST_TOKEN", fakeEnv, fakeLogEnv, "GORACE")
	for _, name := range seen.Env {
		if !slices.Contains(allowed, name) {
			t.Errorf("the program saw variable %s, which is neither allow-listed nor configured", name)
		}
	}
	if !slices.Contains(seen.Env, "CRABBOX_TEST_TOKEN") {
		t.Errorf("pass-env variable missing from %v", seen.Env)
	}
}

// TestCleanupReleasesOnlyExpiredClaimedLeases: cleanup releases claimed
// leases past their expiry, kept ones too; a kept lease stays while live.
func TestCleanupReleasesOnlyExpiredClaimedLeases(t *testing.T) {
	b, log := fake(t, "cleanup")
	claimed := func(id string) bool { return id != "cbx_000000000001" }
	ds, err := b.Cleanup(context.Background(), provider.CleanupRequest{Now: time.Now(), Claimed: claimed})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range ds {
		got[d.LeaseID] = strconv.FormatBool(d.Delete) + "/" + strconv.FormatBool(d.Deleted)
	}
	want := map[string]string{
		"cbx_000000000000": "true/true",   // expired and claimed
		"cbx_000000000001": "false/false", // another client's
		"cbx_000000000002": "false/false", // live
		"cbx_000000000003": "true/true",   // kept, but expired
		"cbx_000000000004": "false/false", // kept and live
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decisions (-want +got):\n%s", diff)
	}
	var released []string
	for _, r := range requests(t, log) {
		if r.Operation == external.OpRelease {
			released = append(released, r.Lease.LeaseID)
		}
	}
	if diff := cmp.Diff([]string{"cbx_000000000000", "cbx_000000000003"}, released); diff != "" {
		t.Errorf("released (-want +got):\n%s", diff)
	}
}
