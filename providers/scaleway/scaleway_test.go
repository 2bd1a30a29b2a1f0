package scaleway_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/internal/logbuf"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/scaleway"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is one fake Scaleway project and a backend configured against it.
type env struct {
	api  *fakeAPI
	cfg  scaleway.Config
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
		cfg: scaleway.Config{
			AccessKey: testAccessKey, SecretKey: testSecretKey, ProjectID: testProject, Endpoint: api.URL,
			WorkRoot: t.TempDir(), Owner: "tester",
			CommercialTypes: []string{"DEV1-M", "GP1-XS"}, Zones: []string{"fr-par-1", "nl-ams-1"},
			MapAddress: api.fleet.MapAddress, PollInterval: time.Second, BootTimeout: time.Minute,
		},
		rt: provider.Runtime{
			Clock: clockwork.NewRealClock(), HTTPClient: &http.Client{Transport: tr},
			Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		},
		logs: logs,
	}
}

func (e *env) backend(t *testing.T) *scaleway.Backend {
	t.Helper()
	b, err := scaleway.New(e.cfg, e.rt)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newRequest(t *testing.T, now time.Time) (provider.AcquireRequest, lease.Key) {
	t.Helper()
	return cloudtest.NewRequest(t, now, "scaleway")
}

// TestConformance runs the provider contract against the fake API, with
// every instance's SSH served by a cloudtest box booted from its user data.
func TestConformance(t *testing.T) {
	providertest.RunSSHLease(t, providertest.Harness{
		NewBackend:       func(t *testing.T) provider.SSHLeaseBackend { return newEnv(t).backend(t) },
		IgnoreGoroutines: cloudtest.IgnoreGoroutines(),
		Installed:        installedDir,
	})
}

// checkEmpty fails unless the fake project has no server, no volume and no
// running box.
func checkEmpty(t *testing.T, api *fakeAPI) {
	t.Helper()
	if s := api.serverList(); len(s) != 0 {
		t.Errorf("servers left: %+v", s)
	}
	if n := api.volumeCount(); n != 0 {
		t.Errorf("%d volumes left", n)
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
	all := e.api.serverList()
	if len(all) != 1 {
		t.Fatalf("project has %d servers, want 1", len(all))
	}
	srv := all[0]
	name := "crabbox-" + strings.ReplaceAll(req.LeaseID, "_", "-")
	if srv.Name != name || srv.CommercialType != "DEV1-M" || srv.Zone != "fr-par-1" || srv.Volumes["0"].Size == nil || *srv.Volumes["0"].Size != 20_000_000_000 {
		t.Errorf("server %q is %s in %s with volume %+v; want %q, DEV1-M in fr-par-1, 20 GB", srv.Name, srv.CommercialType, srv.Zone, srv.Volumes["0"], name)
	}
	bs, err := cloud.ParseUserData(e.api.userData(srv.ID))
	if err != nil {
		t.Fatal(err)
	}
	if bs.AuthorizedKey != req.PublicKey || bs.HostKey.AuthorizedKey() != target.HostKey || bs.SelfDestructAfter != req.TTL || bs.WorkRoot != e.cfg.WorkRoot {
		t.Errorf("user data: key %q host key %q self-destruct %s work root %q; want the lease key, the target's host key %q, %s and %q",
			bs.AuthorizedKey, bs.HostKey.AuthorizedKey(), bs.SelfDestructAfter, bs.WorkRoot, target.HostKey, req.TTL, e.cfg.WorkRoot)
	}
	box := e.api.fleet.Box(srv.PublicIPs[0].Address.String())
	labels := labelsOf(srv)
	want := provider.LeaseTarget{
		LeaseID: req.LeaseID, Slug: req.Slug, Provider: "scaleway", CloudID: "fr-par-1/" + srv.ID,
		Host: box.Host, Port: box.Port, User: "crabbox", HostKey: bs.HostKey.AuthorizedKey(), WorkRoot: e.cfg.WorkRoot,
		State: "ready", Labels: labels, CreatedAt: req.CreatedAt, ExpiresAt: req.ExpiresAt,
	}
	if diff := cmp.Diff(want, target); diff != "" {
		t.Errorf("target (-want +got):\n%s", diff)
	}
	for k, v := range map[string]string{
		"crabbox": "true", "created_by": "crabbox", "provider": "scaleway", "lease": req.LeaseID, "slug": req.Slug,
		"owner": "tester", "server_type": "DEV1-M", "state": "ready", "ssh_port": "2222", "keep": "false", "suite": "scaleway",
		"expires_at": strconvUnix(req.ExpiresAt), "ttl_secs": "5400", "idle_timeout_secs": "1800",
	} {
		if labels[k] != v {
			t.Errorf("server tag %s=%q, want %q", k, labels[k], v)
		}
	}
	if diff := cmp.Diff([]string{"create server", "poweron server", "tag server state=ready"}, events(e.api)); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
	if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"create server", "poweron server", "tag server state=ready", "terminate server"}, events(e.api)); diff != "" {
		t.Errorf("release: API mutations (-want +got):\n%s", diff)
	}
	checkEmpty(t, e.api)
}

// TestAcquireFallbackPort: a box whose 2222 is firewalled is reached on 22,
// and Resolve remembers that from the ssh_port tag.
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
		t.Errorf("ssh_port tag = %q, want 22", target.Labels["ssh_port"])
	}
	got, err := b.Resolve(context.Background(), provider.ResolveRequest{ID: req.LeaseID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Host != target.Host || got.Port != target.Port {
		t.Errorf("Resolve reaches %s:%d, Acquire %s:%d", got.Host, got.Port, target.Host, target.Port)
	}
}

// TestCapacityFallback: commercial types and zones are tried in order,
// each once, moving on only when Scaleway reports no stock or no quota.
func TestCapacityFallback(t *testing.T) {
	tests := []struct {
		name         string
		capacity     map[string]string
		wantAttempts []string
		wantType     string
		wantErr      error
	}{
		{"first fits", nil, []string{"DEV1-M/fr-par-1"}, "DEV1-M", nil},
		{"next zone, then next type", map[string]string{"DEV1-M/fr-par-1": "out_of_stock", "DEV1-M/nl-ams-1": "quotas_exceeded"},
			[]string{"DEV1-M/fr-par-1", "DEV1-M/nl-ams-1", "GP1-XS/fr-par-1"}, "GP1-XS", nil},
		{"fail fast on other errors", map[string]string{"DEV1-M/fr-par-1": "out_of_stock", "DEV1-M/nl-ams-1": "invalid_arguments"},
			[]string{"DEV1-M/fr-par-1", "DEV1-M/nl-ams-1"}, "", provider.ErrPrecondition},
		{"everything full", map[string]string{"DEV1-M/fr-par-1": "out_of_stock", "DEV1-M/nl-ams-1": "out_of_stock",
			"GP1-XS/fr-par-1": "out_of_stock", "GP1-XS/nl-ams-1": "quotas_exceeded"},
			[]string{"DEV1-M/fr-par-1", "DEV1-M/nl-ams-1", "GP1-XS/fr-par-1", "GP1-XS/nl-ams-1"}, "", provider.ErrCapacity},
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
				t.Errorf("server_type tag = %q, want %q", target.Labels["server_type"], tt.wantType)
			}
			if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}); err != nil {
				t.Fatal(err)
			}
			checkEmpty(t, e.api)
		})
	}
}
