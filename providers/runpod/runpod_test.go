package runpod_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/runpod"
	"github.com/crabbox-dev/crabbox/providers/runpod/internal/fakerunpod"
	"github.com/crabbox-dev/crabbox/providers/runpod/internal/runpodapi"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testKey = "rpa_FAKEKEY0123456789"

// env is a fake RunPod API with its fleet of boxes, and how backends on
// it are configured.
type env struct {
	fleet *cloudtest.Fleet
	fake  *fakerunpod.Server
	url   string
	tr    *http.Transport
	clock clockwork.Clock
	cfg   runpod.Config
}

func newEnv(t *testing.T) *env {
	t.Helper()
	fleet := cloudtest.NewFleet(t)
	fake := fakerunpod.New(fleet, testKey)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &env{
		fleet: fleet, fake: fake, url: srv.URL, tr: tr, clock: clockwork.NewRealClock(),
		cfg: runpod.Config{
			Key: testKey, Endpoint: srv.URL, Owner: "tester", WorkRoot: t.TempDir(),
			BootTimeout: time.Minute, PollInterval: 50 * time.Millisecond,
			Retry: runpodapi.Retry{Attempts: 1},
		},
	}
}

func (e *env) backend(t *testing.T) *runpod.Backend {
	t.Helper()
	b, err := runpod.New(e.cfg, provider.Runtime{Clock: e.clock, HTTPClient: &http.Client{Transport: e.tr}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func request(t *testing.T, now time.Time) (provider.AcquireRequest, lease.Key) {
	t.Helper()
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	now = now.UTC().Truncate(time.Second)
	return provider.AcquireRequest{
		LeaseID: lease.NewID(), Slug: "gpu-crab", PublicKey: key.AuthorizedKey(),
		TTL: lease.DefaultTTL, IdleTimeout: lease.DefaultIdleTimeout,
		CreatedAt: now, ExpiresAt: now.Add(lease.DefaultIdleTimeout),
	}, key
}

// TestConformance runs the SSH-lease conformance suite against the fake:
// its pods are real SSH boxes.
func TestConformance(t *testing.T) {
	providertest.RunSSHLease(t, providertest.Harness{
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			return newEnv(t).backend(t)
		},
		IgnoreGoroutines: cloudtest.IgnoreGoroutines(),
	})
}

const gpu4090 = "NVIDIA GeForce RTX 4090"

func rollback() cloudtest.Rollback[*env] {
	return cloudtest.Rollback[*env]{
		New:      newEnv,
		UseClock: func(e *env, c clockwork.Clock) { e.clock = c },
		Backend:  func(t *testing.T, e *env) cloudtest.Backend { return e.backend(t) },
		Request:  request,
		NoBoot:   func(e *env) { e.fake.SetNoBoot() },
		Fleet:    func(e *env) *cloudtest.Fleet { return e.fleet },
		Events:   func(e *env) []string { return e.fake.Events() },
		Machines: func(e *env) []map[string]string {
			var out []map[string]string
			for _, p := range e.fake.Pods() {
				out = append(out, map[string]string{"labels": p.Env[runpod.LabelsEnv], "status": p.DesiredStatus})
			}
			return out
		},
		CheckEmpty: func(t *testing.T, e *env) {
			t.Helper()
			if pods := e.fake.Pods(); len(pods) != 0 {
				t.Errorf("pods left: %d (%s ...)", len(pods), pods[0].ID)
			}
			if boxes := e.fleet.Running(); len(boxes) != 0 {
				t.Errorf("boxes left running: %v", boxes)
			}
		},
		Noun: "pod",
	}
}

// TestAcquireRollback makes each step of an acquire fail, hang or lose
// its answer, and checks that the pod made so far is deleted.
func TestAcquireRollback(t *testing.T) {
	created := "create " + gpu4090
	made := []string{created, fakerunpod.OpDelete}
	cloudtest.RunAcquireRollback(t, rollback(), []cloudtest.RollbackStep[*env]{
		{Name: "create refused", Step: cloud.StepCreate, WantErr: provider.ErrPrecondition,
			Setup: func(e *env, _ func()) { e.fake.Fail(fakerunpod.OpCreate, http.StatusBadRequest, 1, "") }},
		{Name: "create answer lost", Step: cloud.StepCreate, WantErr: provider.ErrTransient, WantEvents: made,
			Setup: func(e *env, _ func()) { e.fake.Lose(fakerunpod.OpCreate) }},
		{Name: "create hangs", Step: cloud.StepCreate, WantErr: context.Canceled,
			Setup: func(e *env, cancel func()) { e.fake.Hang(fakerunpod.OpCreate, false, cancel) }},
		{Name: "create hangs after creating", Step: cloud.StepCreate, WantErr: context.Canceled, WantEvents: made,
			Setup: func(e *env, cancel func()) { e.fake.Hang(fakerunpod.OpCreate, true, cancel) }},
		{Name: "no GPU free", Step: cloud.StepCreate, WantErr: provider.ErrCapacity, WantEvents: nil,
			Setup: func(e *env, _ func()) {
				for _, g := range runpod.Classes()[runpod.DefaultClass].GPUTypes {
					e.fake.SetFull(g)
				}
			}},
		{Name: "address read refused", Step: cloud.StepAddress, WantErr: provider.ErrUnauthenticated, WantEvents: made,
			Setup: func(e *env, _ func()) { e.fake.Fail(fakerunpod.OpGet, http.StatusForbidden, 1, "") }},
		{Name: "address read hangs", Step: cloud.StepAddress, WantErr: context.Canceled, WantEvents: made,
			Setup: func(e *env, cancel func()) { e.fake.Hang(fakerunpod.OpGet, false, cancel) }},
		{Name: "ssh timeout", Step: cloud.StepSSH, SSH: cloudtest.SSHTimeout, WantEvents: made},
		{Name: "ssh cancelled", Step: cloud.StepSSH, SSH: cloudtest.SSHCancel, WantErr: context.Canceled, WantEvents: made},
		{Name: "bootstrap failed", Step: cloud.StepSSH, SSH: cloudtest.SSHBootstrapFails, WantEvents: made},
	})
}

// TestCancelledAcquire: a caller that gives up while RunPod creates the
// pod, through the lease store, leaves no pod, claim or key.
func TestCancelledAcquire(t *testing.T) {
	created := "create " + gpu4090
	cloudtest.RunCancelledAcquire(t, rollback(), []cloudtest.CancelStep[*env]{
		{Name: "during create", Setup: func(e *env, hung func()) { e.fake.Hang(fakerunpod.OpCreate, false, hung) }},
		{Name: "after create", Setup: func(e *env, hung func()) { e.fake.Hang(fakerunpod.OpCreate, true, hung) },
			WantEvents: []string{created, fakerunpod.OpDelete}},
		{Name: "waiting for ssh", SSH: true, WantEvents: []string{created, fakerunpod.OpDelete}},
	})
}

// TestReleaseFails: a pod that release cannot delete is stopped, no
// longer resolves, and cleanup deletes it at once, long before its end.
func TestReleaseFails(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	ctx := context.Background()
	req, _ := request(t, time.Now())
	target, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	e.fake.Fail(fakerunpod.OpDelete, http.StatusConflict, 1, "")
	if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: target}); !errors.Is(err, provider.ErrPrecondition) {
		t.Fatalf("ReleaseLease with a failing delete: %v, want ErrPrecondition", err)
	}
	if pods := e.fake.Pods(); len(pods) != 1 || pods[0].DesiredStatus != "EXITED" {
		t.Fatalf("pods after the failed release: %+v; want 1, stopped", pods)
	}
	if _, err := b.Resolve(ctx, provider.ResolveRequest{ID: req.LeaseID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Resolve of a released lease: %v, want ErrNotFound", err)
	}
	ds, err := b.Cleanup(ctx, provider.CleanupRequest{Now: req.CreatedAt, Claimed: func(string) bool { return true }})
	if err != nil || len(ds) != 1 || !ds[0].Deleted || ds[0].Reason != "state released" {
		t.Fatalf("Cleanup = %+v, %v; want the stopped pod deleted", ds, err)
	}
	want := []string{"create " + gpu4090, fakerunpod.OpStop, fakerunpod.OpDelete}
	if diff := cmp.Diff(want, e.fake.Events()); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
}

// TestRollbackDeleteFails: an acquire whose rollback cannot delete the
// pod says so and leaves it stopped, and cleanup deletes it at once.
func TestRollbackDeleteFails(t *testing.T) {
	e := newEnv(t)
	e.fake.SetNoBoot()
	e.cfg.BootTimeout = time.Nanosecond
	b := e.backend(t)
	e.fake.Fail(fakerunpod.OpDelete, http.StatusInternalServerError, 1, "")
	req, _ := request(t, time.Now())
	_, err := b.Acquire(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), "roll back") {
		t.Fatalf("Acquire err = %v, want the failed rollback reported", err)
	}
	if pods := e.fake.Pods(); len(pods) != 1 || pods[0].DesiredStatus != "EXITED" {
		t.Fatalf("pods after the failed rollback: %+v; want 1, stopped", pods)
	}
	ds, err := b.Cleanup(context.Background(), provider.CleanupRequest{Now: req.CreatedAt, Claimed: func(id string) bool { return id == req.LeaseID }})
	if err != nil || len(ds) != 1 || !ds[0].Deleted {
		t.Fatalf("Cleanup = %+v, %v; want the stopped pod deleted", ds, err)
	}
	if pods := e.fake.Pods(); len(pods) != 0 {
		t.Errorf("pods left: %+v", pods)
	}
}

// TestCapacityFallback: when RunPod has no machine with the first GPU
// type, the next is tried.
func TestCapacityFallback(t *testing.T) {
	e := newEnv(t)
	e.fake.SetFull(gpu4090)
	b := e.backend(t)
	req, _ := request(t, time.Now())
	target, err := b.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target})
	want := []string{
		gpu4090 + " x1 SECURE " + runpod.DefaultImage + " 40GB",
		"NVIDIA RTX A5000 x1 SECURE " + runpod.DefaultImage + " 40GB",
	}
	if diff := cmp.Diff(want, e.fake.Creates()); diff != "" {
		t.Errorf("creates (-want +got):\n%s", diff)
	}
	if got := target.Labels[cloud.LabelServerType]; got != "NVIDIA_RTX_A5000" {
		t.Errorf("server_type = %q, want NVIDIA_RTX_A5000", got)
	}
}

// TestClassAndPrice: a class's GPU type and count go into the create, and
// the pod's hourly price, GPU type and count into the target's labels.
func TestClassAndPrice(t *testing.T) {
	for _, tt := range []struct {
		name       string
		cfg        func(*runpod.Config)
		wantCreate string
		wantLabels map[string]string
	}{
		{"default", func(*runpod.Config) {}, gpu4090 + " x1 SECURE " + runpod.DefaultImage + " 40GB",
			map[string]string{"hourly_usd": "0.44", "gpu_count": "1", "server_type": "NVIDIA_GeForce_RTX_4090", "class": "standard"}},
		{"large-x2 community", func(c *runpod.Config) { c.Class, c.CloudType, c.ContainerDiskGB = "large-x2", "COMMUNITY", 100 },
			"NVIDIA A100 80GB PCIe x2 COMMUNITY " + runpod.DefaultImage + " 100GB",
			map[string]string{"hourly_usd": "0.44", "gpu_count": "2", "server_type": "NVIDIA_A100_80GB_PCIe", "class": "large-x2"}},
		{"gpu type and count", func(c *runpod.Config) { c.GPUTypes, c.GPUCount, c.Image = []string{"NVIDIA L4"}, 4, "example/sshd:1" },
			"NVIDIA L4 x4 SECURE example/sshd:1 40GB",
			map[string]string{"hourly_usd": "1.76", "gpu_count": "4", "server_type": "NVIDIA_L4", "class": "standard"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			tt.cfg(&e.cfg)
			b := e.backend(t)
			req, _ := request(t, time.Now())
			target, err := b.Acquire(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			defer b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target})
			if diff := cmp.Diff([]string{tt.wantCreate}, e.fake.Creates()); diff != "" {
				t.Errorf("creates (-want +got):\n%s", diff)
			}
			listed, err := b.List(context.Background(), provider.ListRequest{})
			if err != nil || len(listed) != 1 {
				t.Fatalf("List = %+v, %v", listed, err)
			}
			for _, got := range []provider.LeaseTarget{target, listed[0]} {
				for k, v := range tt.wantLabels {
					if got.Labels[k] != v {
						t.Errorf("label %s = %q, want %q", k, got.Labels[k], v)
					}
				}
			}
		})
	}
}

// TestPod checks the pod a lease makes: its name, ports, no volume, the
// entrypoint and start command (no secret in them), the lease key as
// PUBLIC_KEY, the labels with the pod's end as expires_at, and the
// watchdog's deadline.
func TestPod(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	req, _ := request(t, time.Now())
	req.Labels = map[string]string{"team": "ml"}
	target, err := b.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target})
	pods := e.fake.Pods()
	if len(pods) != 1 {
		t.Fatalf("pods: %d", len(pods))
	}
	p := pods[0]
	end := req.CreatedAt.Add(req.TTL).Unix()
	if p.Name != runpod.PodName(req.LeaseID) || !cmp.Equal(p.Ports, []string{"22/tcp"}) || p.VolumeInGb != 0 {
		t.Errorf("pod %s, ports %v, volume %d GB; want %s, [22/tcp], no volume", p.Name, p.Ports, p.VolumeInGb, runpod.PodName(req.LeaseID))
	}
	if !cmp.Equal(p.DockerEntrypoint, []string{"/bin/sh", "-c"}) || len(p.DockerStartCmd) != 1 || strings.Contains(p.DockerStartCmd[0], "PRIVATE KEY") {
		t.Errorf("entrypoint %q, start command %q", p.DockerEntrypoint, p.DockerStartCmd)
	}
	if p.Env["PUBLIC_KEY"] != strings.TrimSpace(req.PublicKey) || p.Env[runpod.DeleteAtEnv] != itoa(end) {
		t.Errorf("PUBLIC_KEY %q, %s %q", p.Env["PUBLIC_KEY"], runpod.DeleteAtEnv, p.Env[runpod.DeleteAtEnv])
	}
	for _, want := range []string{"crabbox=true", "provider=runpod", "lease=" + req.LeaseID, "owner=tester", "state=ready", "team=ml", "expires_at=" + itoa(end)} {
		if !strings.Contains(","+p.Env[runpod.LabelsEnv]+",", ","+want+",") {
			t.Errorf("labels %q lack %s", p.Env[runpod.LabelsEnv], want)
		}
	}
	if !target.ExpiresAt.Equal(req.ExpiresAt) || target.User != "crabbox" || target.Host != "127.0.0.1" || target.HostKey == "" {
		t.Errorf("target %+v", target)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestLifetime: the pod's end is the lease's creation plus its TTL. A
// touch or an acquire past it is refused, not silently granted, and
// changes nothing; a touch within it is recorded without changing the pod.
func TestLifetime(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	ctx := context.Background()
	req, _ := request(t, time.Now())
	bad := req
	bad.LeaseID, bad.ExpiresAt = lease.NewID(), req.CreatedAt.Add(req.TTL+time.Minute)
	if _, err := b.Acquire(ctx, bad); !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), "past the lease's end") {
		t.Errorf("Acquire past the end: %v, want ErrPrecondition", err)
	}
	if n := e.fake.Requests(fakerunpod.OpCreate); n != 0 {
		t.Errorf("%d creates for a refused acquire", n)
	}
	target, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: target})
	now := req.CreatedAt.Add(time.Hour)
	if _, err := b.Touch(ctx, provider.TouchRequest{Lease: target, Now: now, ExpiresAt: req.CreatedAt.Add(req.TTL + time.Second)}); !errors.Is(err, provider.ErrPrecondition) ||
		!strings.Contains(err.Error(), "cannot be extended") {
		t.Errorf("Touch past the end: %v, want ErrPrecondition", err)
	}
	end := req.CreatedAt.Add(req.TTL)
	touched, err := b.Touch(ctx, provider.TouchRequest{Lease: target, Now: now, ExpiresAt: end})
	if err != nil || !touched.ExpiresAt.Equal(end) {
		t.Fatalf("Touch to the end: %v, %v", touched.ExpiresAt, err)
	}
	if diff := cmp.Diff([]string{"create " + gpu4090}, e.fake.Events()); diff != "" {
		t.Errorf("touches changed the pod (-want +got):\n%s", diff)
	}
	// Another process sees the pod's end; cleanup leaves it alone until then.
	other := e.backend(t)
	got, err := other.Resolve(ctx, provider.ResolveRequest{ID: req.LeaseID})
	if err != nil || !got.ExpiresAt.Equal(end) {
		t.Errorf("Resolve elsewhere: expires %v, %v; want the pod's end %v", got.ExpiresAt, err, end)
	}
	ds, err := other.Cleanup(ctx, provider.CleanupRequest{DryRun: true, Now: end.Add(-time.Second), Claimed: func(string) bool { return true }})
	if err != nil || len(ds) != 1 || ds[0].Delete {
		t.Errorf("Cleanup before the end: %+v, %v; want it kept", ds, err)
	}
}

// TestCleanupLeavesOthers: pods not made by crabbox, and crabbox pods of
// other owners without a claim, are never deleted.
func TestCleanupLeavesOthers(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	ctx := context.Background()
	hc := &http.Client{Transport: e.tr}
	body := `{"name":"crabbox-notebook","imageName":"runpod/pytorch:latest","gpuTypeIds":["NVIDIA L4"],"env":{"CRABBOX_LABELS":"crabbox=true"}}`
	r, _ := http.NewRequest(http.MethodPost, e.url+"/pods", strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := hc.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create a foreign pod: %s", resp.Status)
	}
	req, _ := request(t, time.Now())
	target, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: target})
	ds, err := b.Cleanup(ctx, provider.CleanupRequest{Now: time.Now().Add(48 * time.Hour), Claimed: func(string) bool { return false }})
	if err != nil || len(ds) != 1 || ds[0].Delete || ds[0].LeaseID != req.LeaseID {
		t.Fatalf("Cleanup = %+v, %v; want only the crabbox pod considered, and kept", ds, err)
	}
	if n := len(e.fake.Pods()); n != 2 {
		t.Errorf("%d pods left, want 2", n)
	}
}

// TestConfig: bad options are refused, naming the option, and the key
// comes only from RUNPOD_API_KEY.
func TestConfig(t *testing.T) {
	spec := runpod.Provider{}.Spec()
	for _, tt := range []struct {
		opt, value, want string
	}{
		{"class", "huge", `option class: "huge" is not a class`},
		{"cloud-type", "private", `option cloud-type: "PRIVATE": want SECURE or COMMUNITY`},
		{"gpu-count", "0", "option gpu-count: 0 is not a positive number"},
		{"gpu-count", "x", `"x"`},
		{"container-disk", "5", "option container-disk: 5 GB"},
		{"data-center", "EU RO", "option data-center"},
		{"image", "bad image", "option image"},
		{"endpoint", "ftp://x", "option endpoint"},
		{"work-root", "relative", "option work-root"},
		{"boot-timeout", "soon", "boot-timeout"},
	} {
		t.Run(tt.opt+"="+tt.value, func(t *testing.T) {
			t.Setenv(runpod.KeyEnv, testKey)
			cfg, err := spec.Resolve(provider.Config{tt.opt: tt.value})
			if err == nil {
				_, err = runpod.Provider{}.Configure(cfg, provider.Runtime{})
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
	t.Run("no key", func(t *testing.T) {
		t.Setenv(runpod.KeyEnv, "")
		cfg, err := spec.Resolve(provider.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := (runpod.Provider{}).Configure(cfg, provider.Runtime{}); !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), runpod.KeyEnv) {
			t.Errorf("err = %v, want ErrUnauthenticated naming %s", err, runpod.KeyEnv)
		}
	})
	t.Run("defaults", func(t *testing.T) {
		t.Setenv(runpod.KeyEnv, testKey)
		cfg, err := spec.Resolve(provider.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := (runpod.Provider{}).Configure(cfg, provider.Runtime{}); err != nil {
			t.Errorf("Configure with the defaults: %v", err)
		}
		if o, ok := spec.Option("endpoint"); !ok || !o.Locates {
			t.Errorf("endpoint option %+v: want one that locates leases", o)
		}
		if got := spec.MissingCredentials(func(string) string { return "" }); len(got) != 1 || got[0].Env[0] != runpod.KeyEnv {
			t.Errorf("missing credentials %+v", got)
		}
	})
}

// TestDoctor: the doctor reads the pods and reports a refused key.
func TestDoctor(t *testing.T) {
	e := newEnv(t)
	checks, err := e.backend(t).Doctor(context.Background())
	if err != nil || len(checks) != 2 || !checks[0].OK {
		t.Errorf("Doctor = %+v, %v", checks, err)
	}
	e.cfg.Key = "rpa_WRONG"
	checks, err = e.backend(t).Doctor(context.Background())
	if err != nil || len(checks) != 1 || checks[0].OK || !strings.Contains(checks[0].Detail, "401") || strings.Contains(checks[0].Detail, "rpa_WRONG") {
		t.Errorf("Doctor with a wrong key = %+v, %v", checks, err)
	}
}
