package vultr_test

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
	"github.com/vultr/govultr/v3"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/internal/logbuf"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/vultr"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is one fake Vultr account and a backend configured against it.
type env struct {
	api  *fakeAPI
	cfg  vultr.Config
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
		cfg: vultr.Config{
			APIKey: testKey, Endpoint: api.URL, WorkRoot: t.TempDir(), Owner: "tester",
			Plans: []string{"vc2-2c-4gb", "vhf-2c-4gb"}, Regions: []string{"fra", "ams"},
			MapAddress: api.fleet.MapAddress, PollInterval: time.Second, BootTimeout: time.Minute,
			ClientOptions: []func(*govultr.Client){func(c *govultr.Client) { c.SetRetryLimit(0) }},
		},
		rt: provider.Runtime{
			Clock: clockwork.NewRealClock(), HTTPClient: &http.Client{Transport: tr},
			Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		},
		logs: logs,
	}
}

func (e *env) backend(t *testing.T) *vultr.Backend {
	t.Helper()
	b, err := vultr.New(e.cfg, e.rt)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newRequest(t *testing.T, now time.Time) (provider.AcquireRequest, lease.Key) {
	t.Helper()
	return cloudtest.NewRequest(t, now, "vultr")
}

// TestConformance runs the provider contract against the fake API, with
// every instance's SSH served by a cloudtest box booted from its user data.
func TestConformance(t *testing.T) {
	providertest.RunSSHLease(t, providertest.Harness{
		NewBackend:       func(t *testing.T) provider.SSHLeaseBackend { return newEnv(t).backend(t) },
		IgnoreGoroutines: cloudtest.IgnoreGoroutines(),
	})
}

// checkEmpty fails unless the fake account has no instance and no running
// box.
func checkEmpty(t *testing.T, api *fakeAPI) {
	t.Helper()
	if s := api.instanceList(); len(s) != 0 {
		t.Errorf("instances left: %+v", s)
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
	all := e.api.instanceList()
	if len(all) != 1 {
		t.Fatalf("account has %d instances, want 1", len(all))
	}
	inst := all[0]
	name := "crabbox-" + strings.ReplaceAll(req.LeaseID, "_", "-")
	if inst.Label != name || inst.Hostname != name || inst.Plan != "vc2-2c-4gb" || inst.Region != "fra" || inst.OsID != vultr.DefaultOSID {
		t.Errorf("instance %q (%q) is %s in %s with OS %d; want %q, vc2-2c-4gb in fra, Debian 12", inst.Label, inst.Hostname, inst.Plan, inst.Region, inst.OsID, name)
	}
	bs, err := cloud.ParseUserData(e.api.userData(inst.ID))
	if err != nil {
		t.Fatal(err)
	}
	if bs.AuthorizedKey != req.PublicKey || bs.HostKey.AuthorizedKey() != target.HostKey || bs.SelfDestructAfter != req.TTL || bs.WorkRoot != e.cfg.WorkRoot {
		t.Errorf("user data: key %q host key %q self-destruct %s work root %q; want the lease key, the target's host key %q, %s and %q",
			bs.AuthorizedKey, bs.HostKey.AuthorizedKey(), bs.SelfDestructAfter, bs.WorkRoot, target.HostKey, req.TTL, e.cfg.WorkRoot)
	}
	box := e.api.fleet.Box(inst.MainIP)
	labels := labelsOf(inst)
	want := provider.LeaseTarget{
		LeaseID: req.LeaseID, Slug: req.Slug, Provider: "vultr", CloudID: inst.ID,
		Host: box.Host, Port: box.Port, User: "crabbox", HostKey: bs.HostKey.AuthorizedKey(), WorkRoot: e.cfg.WorkRoot,
		State: "ready", Labels: labels, CreatedAt: req.CreatedAt, ExpiresAt: req.ExpiresAt,
	}
	if diff := cmp.Diff(want, target); diff != "" {
		t.Errorf("target (-want +got):\n%s", diff)
	}
	for k, v := range map[string]string{
		"crabbox": "true", "created_by": "crabbox", "provider": "vultr", "lease": req.LeaseID, "slug": req.Slug,
		"owner": "tester", "server_type": "vc2-2c-4gb", "state": "ready", "ssh_port": "2222", "keep": "false", "suite": "vultr",
		"expires_at": strconvUnix(req.ExpiresAt), "ttl_secs": "5400", "idle_timeout_secs": "1800",
	} {
		if labels[k] != v {
			t.Errorf("instance tag %s=%q, want %q", k, labels[k], v)
		}
	}
	if diff := cmp.Diff([]string{"create instance", "tag instance state=ready"}, events(e.api)); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
	if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"create instance", "tag instance state=ready", "delete instance"}, events(e.api)); diff != "" {
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

// TestCapacityFallback: plans and regions are tried in order, moving on
// when the region's availability list does not offer the plan.
func TestCapacityFallback(t *testing.T) {
	tests := []struct {
		name         string
		soldOut      []string
		regions      []string
		wantAttempts []string
		wantPlan     string
		wantErr      error
	}{
		{"first fits", nil, nil, []string{"vc2-2c-4gb/fra"}, "vc2-2c-4gb", nil},
		{"next region, then next plan", []string{"vc2-2c-4gb/fra", "vc2-2c-4gb/ams"}, nil, []string{"vhf-2c-4gb/fra"}, "vhf-2c-4gb", nil},
		{"fail fast on other errors", []string{"vc2-2c-4gb/fra"}, []string{"fra", "mars"}, nil, "", provider.ErrNotFound},
		{"everything sold out", []string{"vc2-2c-4gb/fra", "vc2-2c-4gb/ams", "vhf-2c-4gb/fra", "vhf-2c-4gb/ams"}, nil, nil, "", provider.ErrCapacity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			for _, s := range tt.soldOut {
				e.api.soldOut[s] = true
			}
			if tt.regions != nil {
				e.cfg.Regions = tt.regions
			}
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
			if target.Labels["server_type"] != tt.wantPlan {
				t.Errorf("server_type tag = %q, want %q", target.Labels["server_type"], tt.wantPlan)
			}
			if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}); err != nil {
				t.Fatal(err)
			}
			checkEmpty(t, e.api)
		})
	}
}
