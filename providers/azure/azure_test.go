package azure_test

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	azcloud "github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/internal/logbuf"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/azure"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeCredential hands out the fake's token.
type fakeCredential struct{}

func (fakeCredential) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: testToken, ExpiresOn: time.Now().Add(time.Hour)}, nil
}

const testRange = "198.51.100.0/24"

// env is one fake Azure subscription and a backend configured against it.
type env struct {
	arm  *fakeARM
	cfg  azure.Config
	rt   provider.Runtime
	logs *logbuf.Buffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	f := newFakeARM(t)
	logs := &logbuf.Buffer{}
	return &env{
		arm: f,
		cfg: azure.Config{
			SubscriptionID: testSubscription, SourceRange: testRange, WorkRoot: t.TempDir(), Owner: "tester",
			MapAddress: f.fleet.MapAddress, PollInterval: time.Second, BootTimeout: time.Minute,
			Credential: fakeCredential{},
			ClientOptions: arm.ClientOptions{ClientOptions: policy.ClientOptions{
				Cloud: azcloud.Configuration{Services: map[azcloud.ServiceName]azcloud.ServiceConfiguration{
					azcloud.ResourceManager: {Endpoint: f.URL, Audience: "https://management.core.windows.net/"},
				}},
				Retry: policy.RetryOptions{MaxRetries: -1},
			}},
		},
		rt: provider.Runtime{
			Clock: clockwork.NewRealClock(), HTTPClient: f.srv.Client(),
			Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		},
		logs: logs,
	}
}

// testCtx bounds a test's calls, so that a fault left armed fails the
// test instead of hanging it.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) backend(t *testing.T) *azure.Backend {
	t.Helper()
	b, err := azure.New(e.cfg, e.rt)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newRequest(t *testing.T, now time.Time) (provider.AcquireRequest, lease.Key) {
	t.Helper()
	return cloudtest.NewRequest(t, now, "azure")
}

// checkEmpty fails unless the fake subscription has no lease resource and
// no running box.
func checkEmpty(t *testing.T, f *fakeARM) {
	t.Helper()
	for _, kind := range []string{kindVM, kindNIC, kindPIP, kindDisk} {
		if left := f.names(kind); len(left) != 0 {
			t.Errorf("%s left: %v", kind, left)
		}
	}
	if r := f.fleet.Running(); len(r) != 0 {
		t.Errorf("boxes still running: %v", r)
	}
}

// TestConformance runs the provider contract against the fake ARM, with
// every VM's SSH served by a cloudtest box booted from its custom data.
func TestConformance(t *testing.T) {
	providertest.RunSSHLease(t, providertest.Harness{
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			e := newEnv(t)
			// Each OS disk its own, which snapshots copy (the checkpoint
			// part); every checkpoint is deleted again.
			e.arm.disks = t.TempDir()
			t.Cleanup(func() {
				for _, kind := range []string{kindSnap, kindImage} {
					if left := e.arm.names(kind); len(left) != 0 {
						t.Errorf("%s left: %v", kind, left)
					}
				}
			})
			return e.backend(t)
		},
		IgnoreGoroutines: cloudtest.IgnoreGoroutines(),
	})
}

func TestAcquire(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(testCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"create public-ip", "create nic", "create vm spot", "tag vm state=ready"}, e.arm.log()); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
	base := "crabbox-" + strings.ReplaceAll(req.LeaseID, "_", "-")
	if target.CloudID != base || target.LeaseID != req.LeaseID || target.Provider != azure.Name || target.State != cloud.StateReady {
		t.Errorf("target = %+v", target)
	}
	if target.HostKey == "" || target.User != cloud.DefaultUser || target.Port == 0 {
		t.Errorf("target lacks host key, user or port: %+v", target)
	}

	// The shared network: tagged, NSG open to the source range only.
	for _, kind := range []string{kindGroup, kindVNet, kindNSG} {
		names := e.arm.names(kind)
		if len(names) != 1 {
			t.Fatalf("%s: %v, want one", kind, names)
		}
		if tags := e.arm.tags(kind, names[0]); tags["crabbox"] != "true" || tags["provider"] != "azure" {
			t.Errorf("%s %s tags = %v", kind, names[0], tags)
		}
	}
	nsg := e.arm.doc(kindNSG, azure.NSGName(testRange, cloud.DefaultPorts()))
	var ports []string
	walk(nsg, func(k, v string) {
		switch k {
		case "sourceAddressPrefix":
			if v != testRange {
				t.Errorf("NSG rule source %q, want %q", v, testRange)
			}
		case "destinationPortRange":
			ports = append(ports, v)
		}
	})
	if diff := cmp.Diff([]string{"2222", "22"}, ports, cmpSorted); diff != "" {
		t.Errorf("NSG ports (-want +got):\n%s", diff)
	}

	// The VM: spot with eviction by deletion and no price cap, password
	// login off, the lease key, cloud-init as customData, companions
	// recorded in its tags, NIC and disk deleted with it.
	vm := e.arm.doc(kindVM, base)
	props := vm["properties"].(map[string]any)
	if props["priority"] != "Spot" || props["evictionPolicy"] != "Delete" || props["billingProfile"].(map[string]any)["maxPrice"] != -1.0 {
		t.Errorf("VM spot settings: priority %v, eviction %v, billing %v", props["priority"], props["evictionPolicy"], props["billingProfile"])
	}
	osp := props["osProfile"].(map[string]any)
	linux := osp["linuxConfiguration"].(map[string]any)
	keys := linux["ssh"].(map[string]any)["publicKeys"].([]any)
	if linux["disablePasswordAuthentication"] != true || len(keys) != 1 || keys[0].(map[string]any)["keyData"] != req.PublicKey {
		t.Errorf("VM linux configuration = %v", linux)
	}
	ud, err := base64.StdEncoding.DecodeString(osp["customData"].(string))
	if err != nil {
		t.Fatal(err)
	}
	bs, err := cloud.ParseUserData(string(ud))
	if err != nil || bs.AuthorizedKey != req.PublicKey {
		t.Errorf("custom data: %+v, %v", bs, err)
	}
	if _, ok := osp["adminPassword"]; ok {
		t.Error("VM has an admin password")
	}
	tags := e.arm.tags(kindVM, base)
	want := map[string]string{azure.TagNIC: base + "-nic", azure.TagPublicIP: base + "-ip", azure.TagDisk: base + "-osdisk",
		"crabbox": "true", "created_by": "crabbox", "provider": "azure", "lease": req.LeaseID, "slug": req.Slug,
		"owner": "tester", "server_type": azure.DefaultVMSize, "state": "ready", "suite": "azure", "market": "spot"}
	for k, v := range want {
		if tags[k] != v {
			t.Errorf("VM tag %s = %q, want %q", k, tags[k], v)
		}
	}
	for _, kind := range []string{kindNIC, kindPIP} {
		for _, n := range e.arm.names(kind) {
			if tg := e.arm.tags(kind, n); tg["lease"] != req.LeaseID || tg["crabbox"] != "true" || tg["expires_at"] == "" {
				t.Errorf("%s %s tags = %v", kind, n, tg)
			}
		}
	}
	var deleteOptions []string
	walk(props, func(k, v string) {
		if k == "deleteOption" {
			deleteOptions = append(deleteOptions, v)
		}
	})
	if diff := cmp.Diff([]string{"Delete", "Delete"}, deleteOptions); diff != "" {
		t.Errorf("deleteOption of NIC and disk (-want +got):\n%s", diff)
	}

	// Resolve, List and Touch see it; release deletes in order.
	got, err := b.Resolve(testCtx(t), provider.ResolveRequest{ID: req.Slug})
	if err != nil || got.Host != target.Host || got.HostKey != target.HostKey {
		t.Errorf("Resolve by slug = %+v, %v", got, err)
	}
	later := req.CreatedAt.Add(10 * time.Minute)
	touched, err := b.Touch(testCtx(t), provider.TouchRequest{Lease: target, Now: later, ExpiresAt: later.Add(time.Hour)})
	if err != nil || !touched.ExpiresAt.Equal(later.Add(time.Hour)) {
		t.Errorf("Touch = %+v, %v", touched, err)
	}
	if err := b.ReleaseLease(testCtx(t), provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{
		"create public-ip", "create nic", "create vm spot", "tag vm state=ready", "tag vm state=ready",
		"tag nic state=released", "tag public-ip state=released", "delete vm", "delete nic", "delete disk", "delete public-ip",
	}, e.arm.log()); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
	checkEmpty(t, e.arm)
	if strings.Contains(e.logs.String(), testToken) {
		t.Error("the logs contain the access token")
	}
}

var cmpSorted = cmp.Transformer("sort", func(in []string) []string {
	out := append([]string(nil), in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
})

// TestSpotFallsBackToRegular: every spot capacity error moves on to a
// regular VM; other errors do not.
func TestSpotFallsBackToRegular(t *testing.T) {
	for _, code := range []string{"SkuNotAvailable", "AllocationFailed", "ZonalAllocationFailed", "OverconstrainedAllocationRequest"} {
		t.Run(code, func(t *testing.T) {
			e := newEnv(t)
			e.arm.spotCapacity = code
			b := e.backend(t)
			req, _ := newRequest(t, time.Now())
			target, err := b.Acquire(testCtx(t), req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"spot", "regular"}, e.arm.attempts()); diff != "" {
				t.Errorf("create attempts (-want +got):\n%s", diff)
			}
			if target.Labels["market"] != "regular" {
				t.Errorf("market tag = %q, want regular", target.Labels["market"])
			}
			if p := e.arm.doc(kindVM, target.CloudID)["properties"].(map[string]any); p["priority"] != nil || p["billingProfile"] != nil {
				t.Errorf("regular VM has spot settings: %v %v", p["priority"], p["billingProfile"])
			}
			if err := b.ReleaseLease(testCtx(t), provider.ReleaseRequest{Lease: target}); err != nil {
				t.Fatal(err)
			}
			checkEmpty(t, e.arm)
		})
	}
	t.Run("regular market never tries spot", func(t *testing.T) {
		e := newEnv(t)
		e.cfg.Market = azure.MarketRegular
		e.arm.spotCapacity = "SkuNotAvailable"
		b := e.backend(t)
		req, _ := newRequest(t, time.Now())
		target, err := b.Acquire(testCtx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"regular"}, e.arm.attempts()); diff != "" {
			t.Errorf("create attempts (-want +got):\n%s", diff)
		}
		_ = b.ReleaseLease(testCtx(t), provider.ReleaseRequest{Lease: target})
	})
	t.Run("no capacity anywhere", func(t *testing.T) {
		e := newEnv(t)
		e.arm.spotCapacity = "SkuNotAvailable"
		e.arm.setFault("PUT "+kindVM, fault{code: "AllocationFailed", status: 409, match: "", times: 0})
		b := e.backend(t)
		req, _ := newRequest(t, time.Now())
		_, err := b.Acquire(testCtx(t), req)
		if !errors.Is(err, provider.ErrCapacity) {
			t.Errorf("err = %v, want ErrCapacity", err)
		}
		checkEmpty(t, e.arm)
	})
}

// TestRefusesForeignNetwork: a resource group, virtual network or
// security group of the right name that crabbox did not tag is not
// adopted, and nothing is created for the lease.
func TestRefusesForeignNetwork(t *testing.T) {
	for _, kind := range []string{kindGroup, kindVNet, kindNSG} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t)
			owned := map[string]any{"location": "eastus", "tags": map[string]any{"crabbox": "true"}}
			e.arm.put(kindGroup, "crabbox", owned)
			name := map[string]string{kindGroup: "crabbox", kindVNet: azure.VNetName, kindNSG: azure.NSGName(testRange, cloud.DefaultPorts())}[kind]
			e.arm.put(kind, name, map[string]any{"location": "eastus", "tags": map[string]any{"team": "data"}})
			b := e.backend(t)
			req, _ := newRequest(t, time.Now())
			_, err := b.Acquire(testCtx(t), req)
			if !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), "not tagged crabbox=true") {
				t.Fatalf("err = %v, want a refusal to adopt %s", err, name)
			}
			if step, _ := cloud.FailedStep(err); step != azure.StepNetwork {
				t.Errorf("failed step %q, want %q", step, azure.StepNetwork)
			}
			if tags := e.arm.tags(kind, name); tags["team"] != "data" || tags["crabbox"] != "" {
				t.Errorf("foreign %s retagged: %v", kind, tags)
			}
			if ev := e.arm.log(); len(ev) != 0 {
				t.Errorf("mutations: %v", ev)
			}
		})
	}
}

func TestAcquireWithoutSourceRange(t *testing.T) {
	e := newEnv(t)
	e.cfg.SourceRange = ""
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	_, err := b.Acquire(testCtx(t), req)
	if !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), "source-range") {
		t.Fatalf("err = %v, want the missing source range named", err)
	}
	if n := e.arm.names(kindGroup); len(n) != 0 {
		t.Errorf("created %v without a source range", n)
	}
}
