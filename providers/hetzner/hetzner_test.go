package hetzner_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/internal/logbuf"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/hetzner"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is one fake Hetzner project and a backend configured against it.
type env struct {
	api  *fakeAPI
	cfg  hetzner.Config
	rt   provider.Runtime
	logs *logbuf.Buffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	api := newFakeAPI(t)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	logs := &logbuf.Buffer{}
	return &env{
		api: api,
		cfg: hetzner.Config{
			Token: testToken, Endpoint: api.URL, WorkRoot: t.TempDir(), Owner: "tester",
			ServerTypes: []string{"cx23", "cpx22"}, Locations: []string{"fsn1", "nbg1"},
			MapAddress: api.fleet.MapAddress, PollInterval: time.Second, BootTimeout: time.Minute,
			ClientOptions: []hcloud.ClientOption{
				hcloud.WithRetryOpts(hcloud.RetryOpts{MaxRetries: 0, BackoffFunc: hcloud.ConstantBackoff(0)}),
				hcloud.WithPollOpts(hcloud.PollOpts{BackoffFunc: hcloud.ConstantBackoff(0)}),
			},
		},
		rt: provider.Runtime{
			Clock: clockwork.NewRealClock(), HTTPClient: &http.Client{Transport: tr},
			Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		},
		logs: logs,
	}
}

func (e *env) backend(t *testing.T) *hetzner.Backend {
	t.Helper()
	b, err := hetzner.New(e.cfg, e.rt)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newRequest(t *testing.T, now time.Time) (provider.AcquireRequest, lease.Key) {
	t.Helper()
	return cloudtest.NewRequest(t, now, "hetzner")
}

// TestConformance runs the provider contract against the fake API, with
// every server's SSH served by a cloudtest box booted from its user data,
// and its files (the work root and installedDir) on a disk of its own,
// which snapshots copy.
func TestConformance(t *testing.T) {
	providertest.RunSSHLease(t, providertest.Harness{
		NewBackend:       func(t *testing.T) provider.SSHLeaseBackend { return newEnv(t).backend(t) },
		IgnoreGoroutines: cloudtest.IgnoreGoroutines(),
		Installed:        installedDir,
	})
}

// events normalises the fake's mutation log: IDs dropped.
func events(api *fakeAPI) []string {
	ids := regexp.MustCompile(` \d+`)
	var out []string
	for _, e := range api.log() {
		out = append(out, ids.ReplaceAllString(e, ""))
	}
	return out
}

// checkEmpty fails unless the fake project has no server, no key and no
// running box.
func checkEmpty(t *testing.T, api *fakeAPI) {
	t.Helper()
	if s := api.serverList(); len(s) != 0 {
		t.Errorf("servers left: %+v", s)
	}
	if k := api.keyList(); len(k) != 0 {
		t.Errorf("SSH keys left: %+v", k)
	}
	if r := api.fleet.Running(); len(r) != 0 {
		t.Errorf("boxes still running: %v", r)
	}
}

func TestAcquire(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	servers, keys := e.api.serverList(), e.api.keyList()
	if len(servers) != 1 || len(keys) != 1 {
		t.Fatalf("project has %d servers and %d keys, want 1 and 1", len(servers), len(keys))
	}
	srv, key := servers[0], keys[0]
	name := "crabbox-" + strings.ReplaceAll(req.LeaseID, "_", "-")
	if srv.Name != name || key.Name != name || key.PublicKey != req.PublicKey {
		t.Errorf("server %q, key %q (%q); want both named %q with the lease key", srv.Name, key.Name, key.PublicKey, name)
	}
	if srv.ServerType.Name != "cx23" || srv.Location.Name != "fsn1" {
		t.Errorf("server is %s in %s, want cx23 in fsn1", srv.ServerType.Name, srv.Location.Name)
	}
	bs, err := cloud.ParseUserData(e.api.userData(srv.ID))
	if err != nil {
		t.Fatal(err)
	}
	if bs.AuthorizedKey != req.PublicKey || bs.HostKey.AuthorizedKey() != target.HostKey || bs.SelfDestructAfter != req.TTL || bs.WorkRoot != e.cfg.WorkRoot {
		t.Errorf("user data: key %q host key %q self-destruct %s work root %q; want the lease key, the target's host key %q, %s and %q",
			bs.AuthorizedKey, bs.HostKey.AuthorizedKey(), bs.SelfDestructAfter, bs.WorkRoot, target.HostKey, req.TTL, e.cfg.WorkRoot)
	}
	box := e.api.fleet.Box(srv.PublicNet.IPv4.IP)
	want := provider.LeaseTarget{
		LeaseID: req.LeaseID, Slug: req.Slug, Provider: "hetzner", CloudID: strconv.FormatInt(srv.ID, 10),
		Host: box.Host, Port: box.Port, User: "crabbox", HostKey: bs.HostKey.AuthorizedKey(), WorkRoot: e.cfg.WorkRoot,
		State: "ready", Labels: srv.Labels, CreatedAt: req.CreatedAt, ExpiresAt: req.ExpiresAt,
	}
	if diff := cmp.Diff(want, target); diff != "" {
		t.Errorf("target (-want +got):\n%s", diff)
	}
	for k, v := range map[string]string{
		"crabbox": "true", "created_by": "crabbox", "provider": "hetzner", "lease": req.LeaseID, "slug": req.Slug,
		"owner": "tester", "server_type": "cx23", "state": "ready", "ssh_port": "2222", "keep": "false", "suite": "hetzner",
		"expires_at": strconv.FormatInt(req.ExpiresAt.Unix(), 10), "ttl_secs": "5400", "idle_timeout_secs": "1800",
	} {
		if srv.Labels[k] != v {
			t.Errorf("server label %s=%q, want %q", k, srv.Labels[k], v)
		}
	}
	if key.Labels["lease"] != req.LeaseID || key.Labels["crabbox"] != "true" {
		t.Errorf("key labels %v lack the ownership labels", key.Labels)
	}
	if diff := cmp.Diff([]string{"create key", "create server", "label server state=ready"}, events(e.api)); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
	if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"create key", "create server", "label server state=ready", "delete server", "delete key"}, events(e.api)); diff != "" {
		t.Errorf("release: API mutations (-want +got):\n%s", diff)
	}
	checkEmpty(t, e.api)
}

// TestAcquireFallbackPort: a box whose 2222 is firewalled is reached on 22,
// and Resolve remembers that from the ssh_port label.
func TestAcquireFallbackPort(t *testing.T) {
	e := newEnv(t)
	e.api.block = []int{2222}
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target})
	if target.Labels["ssh_port"] != "22" {
		t.Errorf("ssh_port label = %q, want 22", target.Labels["ssh_port"])
	}
	got, err := b.Resolve(context.Background(), provider.ResolveRequest{ID: req.LeaseID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Host != target.Host || got.Port != target.Port {
		t.Errorf("Resolve reaches %s:%d, Acquire %s:%d", got.Host, got.Port, target.Host, target.Port)
	}
}

// TestCapacityFallback: server types and locations are tried in order,
// each once, moving on only on capacity and limit errors.
func TestCapacityFallback(t *testing.T) {
	tests := []struct {
		name         string
		capacity     map[string]string
		wantAttempts []string
		wantType     string
		wantErr      error
	}{
		{"first fits", nil, []string{"cx23/fsn1"}, "cx23", nil},
		{"next location, then next type", map[string]string{"cx23/fsn1": "resource_unavailable", "cx23/nbg1": "resource_limit_exceeded"},
			[]string{"cx23/fsn1", "cx23/nbg1", "cpx22/fsn1"}, "cpx22", nil},
		{"placement error", map[string]string{"cx23/fsn1": "placement_error"}, []string{"cx23/fsn1", "cx23/nbg1"}, "cx23", nil},
		{"fail fast on other errors", map[string]string{"cx23/fsn1": "resource_unavailable", "cx23/nbg1": "invalid_input"},
			[]string{"cx23/fsn1", "cx23/nbg1"}, "", provider.ErrPrecondition},
		{"everything full", map[string]string{"cx23/fsn1": "resource_unavailable", "cx23/nbg1": "resource_unavailable",
			"cpx22/fsn1": "resource_unavailable", "cpx22/nbg1": "placement_error"},
			[]string{"cx23/fsn1", "cx23/nbg1", "cpx22/fsn1", "cpx22/nbg1"}, "", provider.ErrCapacity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.api.capacity = tt.capacity
			b := e.backend(t)
			req, _ := newRequest(t, time.Now())
			target, err := b.Acquire(context.Background(), req)
			if diff := cmp.Diff(tt.wantAttempts, e.api.attempts()); diff != "" {
				t.Errorf("create attempts (-want +got):\n%s", diff)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Acquire err = %v, want one matching %v", err, tt.wantErr)
				}
				if step, _ := cloud.FailedStep(err); step != cloud.StepCreate {
					t.Errorf("failed step = %q, want create", step)
				}
				checkEmpty(t, e.api)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if target.Labels["server_type"] != tt.wantType {
				t.Errorf("server_type label = %q, want %q", target.Labels["server_type"], tt.wantType)
			}
			if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}); err != nil {
				t.Fatal(err)
			}
			checkEmpty(t, e.api)
		})
	}
}
