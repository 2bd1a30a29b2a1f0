package proxmox_test

import (
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud/tagcloudtest"
	"github.com/crabbox-dev/crabbox/providers/proxmox"
	"github.com/crabbox-dev/crabbox/providers/proxmox/internal/fakeproxmox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	testToken = "crabbox@pve!ci=5e3c1a2b-0d4f-4c6e-9a8b-7f6e5d4c3b2a"
	template  = 9000
)

var (
	sizes = [2]string{"2c4g", "4c8g"}
	nodes = [2]string{"pve1", "pve2"}
)

var vmRoute = regexp.MustCompile(`^/api2/json/nodes/[^/]+/qemu/[0-9]+(/.*)?$`)

// op classifies a request for faults: the clone creates, a VM's status
// reads, the cluster's resources list, a synchronous config tags (the
// create configures through the asynchronous one), a VM's DELETE deletes.
func op(r *http.Request) string {
	m := vmRoute.FindStringSubmatch(r.URL.Path)
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api2/json/cluster/resources":
		return tagcloudtest.OpList
	case m == nil:
		return ""
	case r.Method == http.MethodPost && m[1] == "/clone":
		return tagcloudtest.OpCreate
	case r.Method == http.MethodGet && m[1] == "/status/current":
		return tagcloudtest.OpGet
	case r.Method == http.MethodPut && m[1] == "/config":
		return tagcloudtest.OpTag
	case r.Method == http.MethodDelete && m[1] == "":
		return tagcloudtest.OpDelete
	}
	return ""
}

func errorBody(status int) string {
	return fmt.Sprintf(`{"data":null,"message":"fake %s\n"}`, http.StatusText(status))
}

// size is the fake's start of a size ("2c4g") on node.
func size(s, node string) fakeproxmox.Start {
	var cores, gib int
	if _, err := fmt.Sscanf(s, "%dc%dg", &cores, &gib); err != nil {
		panic(s)
	}
	return fakeproxmox.Start{Cores: cores, MemoryMiB: gib * 1024, Node: node}
}

// newEnv starts a fake Proxmox VE cluster (nodes pve1 and pve2, template
// 9000 on pve1) and configures backends on it.
func newEnv(t *testing.T, fleet *cloudtest.Fleet) (*tagcloudtest.Env, *fakeproxmox.Server, string) {
	fake := fakeproxmox.New(fleet, testToken, nodes[:]...)
	fake.AddTemplate(template, nodes[0], "debian-12-cloudinit")
	faults := &tagcloudtest.Faults{Op: op, Body: errorBody}
	srv := faults.NewServer(t, fake)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	work := t.TempDir()
	env := &tagcloudtest.Env{
		Faults: faults, Fleet: fleet, Sizes: sizes, Regions: nodes,
		Machines: func() []string {
			var ids []string
			for _, vm := range fake.VMs() {
				ids = append(ids, fmt.Sprintf("%s/%d", vm.Node, vm.VMID))
			}
			return ids
		},
		Creates: func() []string {
			var out []string
			for _, s := range fake.Starts() {
				out = append(out, fmt.Sprintf("%dc%dg/%s", s.Cores, s.MemoryMiB/1024, s.Node))
			}
			return out
		},
		NoBoot: fake.SetNoBoot,
		Full:   func(s, node string) { fake.SetFull(size(s, node)) },
	}
	env.Backend = func(t *testing.T, clock clockwork.Clock) provider.SSHLeaseBackend {
		o := tagcloudtest.Options(srv.URL, work, env)
		o.Image = fmt.Sprint(template)
		b, err := proxmox.New(proxmox.Config{
			Token: testToken, Options: o, MapAddress: fleet.MapAddress, PollInterval: time.Second,
			CallTimeout: time.Minute, NoRetries: true,
		}, provider.Runtime{Clock: clock, HTTPClient: &http.Client{Transport: tr}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return env, fake, srv.URL
}

// TestTagCloud runs the tag cloud suites against the fake: rollback at
// every step, node and size fallback, a killed acquire cleaned up, and
// the SSH-lease conformance suite (the fake's VMs are real SSH boxes).
func TestTagCloud(t *testing.T) {
	tagcloudtest.Run(t, tagcloudtest.Harness{NewEnv: func(t *testing.T) *tagcloudtest.Env {
		e, _, _ := newEnv(t, cloudtest.NewFleet(t))
		return e
	}})
}

// TestVMConfig: the clone is configured as a Proxmox user expects (the
// size's cores and memory, the lease key as cloud-init's sshkeys, DHCP,
// the guest agent), on the node asked for, with crabbox's labels as
// Proxmox tags, and released without a trace.
func TestVMConfig(t *testing.T) {
	e, fake, _ := newEnv(t, cloudtest.NewFleet(t))
	e.Full(sizes[0], nodes[0])
	b := e.Backend(t, clockwork.NewRealClock())
	req := tagcloudtest.NewRequest(t, time.Now())
	target, err := b.Acquire(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	vms := fake.VMs()
	if len(vms) != 1 {
		t.Fatalf("VMs %+v, want one", vms)
	}
	vm := vms[0]
	got := fakeproxmox.VM{Node: vm.Node, Name: vm.Name, Cores: vm.Cores, MemoryMiB: vm.MemoryMiB, SSHKeys: vm.SSHKeys, IPConfig0: vm.IPConfig0, Agent: vm.Agent, Status: vm.Status}
	want := fakeproxmox.VM{Node: nodes[1], Name: tagcloud.Name(req.LeaseID), Cores: 2, MemoryMiB: 4096,
		SSHKeys: strings.TrimSpace(req.PublicKey) + "\n", IPConfig0: "ip=dhcp", Agent: true, Status: "running"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("VM (-want +got):\n%s", diff)
	}
	for _, tag := range []string{"crabbox.true", "provider.proxmox", "lease." + req.LeaseID, "state.ready", "server_type.2c4g"} {
		if !strings.Contains(";"+vm.Tags+";", ";"+tag+";") {
			t.Errorf("tags %q lack %q", vm.Tags, tag)
		}
	}
	if target.Labels["lease"] != req.LeaseID || target.Host == "" {
		t.Errorf("target = %+v", target)
	}
	if err := b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	tagcloudtest.CheckEmpty(t, e)
}

// TestRetries: answers 429, 502, 503 and 504 are retried; a 500 is not.
func TestRetries(t *testing.T) {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			e, _, url := newEnv(t, cloudtest.NewFleet(t))
			e.Faults.Set(tagcloudtest.OpList, tagcloudtest.Fault{Status: status, Times: 2})
			b := retrying(t, e, url)
			if _, err := b.List(t.Context(), provider.ListRequest{}); err != nil {
				t.Errorf("List after two answers %d: %v", status, err)
			}
		})
	}
	e, _, url := newEnv(t, cloudtest.NewFleet(t))
	e.Faults.Set(tagcloudtest.OpList, tagcloudtest.Fault{Status: http.StatusInternalServerError, Times: 1})
	if _, err := retrying(t, e, url).List(t.Context(), provider.ListRequest{}); !errors.Is(err, provider.ErrTransient) {
		t.Errorf("List after a 500 = %v, want a transient error, not retried", err)
	}
}

// retrying is a backend on the fake at endpoint with the client's
// retries on.
func retrying(t *testing.T, e *tagcloudtest.Env, endpoint string) provider.SSHLeaseBackend {
	t.Helper()
	o := tagcloudtest.Options(endpoint, t.TempDir(), e)
	o.Image = fmt.Sprint(template)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	b, err := proxmox.New(proxmox.Config{Token: testToken, Options: o}, provider.Runtime{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConfigure: the token comes only from PROXMOX_VE_API_TOKEN, in
// Proxmox's USER@REALM!TOKENID=SECRET form, the URL from the endpoint
// option or PROXMOX_VE_ENDPOINT; every wrong option is named, and no
// error shows the token.
func TestConfigure(t *testing.T) {
	spec := proxmox.Provider{}.Spec()
	cfg, err := spec.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(proxmox.TokenEnv, "")
	t.Setenv(proxmox.EndpointEnv, "https://pve.example.com:8006")
	if _, err := (proxmox.Provider{}).Configure(cfg, provider.Runtime{}); !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), proxmox.TokenEnv) {
		t.Errorf("Configure without a token: %v", err)
	}
	t.Setenv(proxmox.TokenEnv, "root@pam=nobang-secret-value")
	if _, err := (proxmox.Provider{}).Configure(cfg, provider.Runtime{}); !errors.Is(err, provider.ErrUnauthenticated) || strings.Contains(err.Error(), "nobang-secret-value") {
		t.Errorf("Configure with a malformed token: %v, want an error without the token", err)
	}
	t.Setenv(proxmox.TokenEnv, testToken)
	if _, err := (proxmox.Provider{}).Configure(cfg, provider.Runtime{}); err != nil {
		t.Errorf("Configure with defaults and %s: %v", proxmox.EndpointEnv, err)
	}
	t.Setenv(proxmox.EndpointEnv, "")
	if _, err := (proxmox.Provider{}).Configure(cfg, provider.Runtime{}); err == nil || !strings.Contains(err.Error(), proxmox.EndpointEnv) {
		t.Errorf("Configure without an API URL: %v, want an error naming %s", err, proxmox.EndpointEnv)
	}
	for key, value := range map[string]string{
		"size": "2 cores", "region": "Node One", "image": "ubuntu", "boot-timeout": "soon",
		"endpoint": "pve.example.com:8006", "work-root": "rel", "ca-file": "/nonexistent/ca.pem",
	} {
		c, err := spec.Resolve(provider.Config{key: value, "endpoint": "https://pve.example.com:8006"})
		if key == "endpoint" {
			c, err = spec.Resolve(provider.Config{key: value})
		}
		if err == nil {
			_, err = (proxmox.Provider{}).Configure(c, provider.Runtime{})
		}
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=%q: %v, want an error naming the option", key, value, err)
		}
	}
	for _, o := range spec.Options {
		if strings.Contains(o.Name, "token") || strings.Contains(o.Name, "secret") {
			t.Errorf("option %q: the token must come only from the environment", o.Name)
		}
	}
	if i := slicesIndex(spec.Options, "endpoint"); i < 0 || spec.Options[i].Flag != "proxmox-endpoint" {
		t.Errorf("no proxmox-endpoint option in %+v", spec.Options)
	}
}

func slicesIndex(opts []provider.Option, name string) int {
	for i, o := range opts {
		if o.Name == name {
			return i
		}
	}
	return -1
}

// TestAPIToken: the fake refuses a wrong token, and the provider reports
// that as unauthenticated (doctor and lease operations) without showing
// the token.
func TestAPIToken(t *testing.T) {
	e, _, url := newEnv(t, cloudtest.NewFleet(t))
	o := tagcloudtest.Options(url, t.TempDir(), e)
	o.Image = fmt.Sprint(template)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	const wrong = "crabbox@pve!ci=00000000-0000-0000-0000-000000000000"
	b, err := proxmox.New(proxmox.Config{Token: wrong, Options: o, NoRetries: true}, provider.Runtime{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	checks, err := b.Doctor(t.Context())
	if err != nil || len(checks) != 1 || checks[0].OK || strings.Contains(checks[0].Detail, "00000000-0000") {
		t.Errorf("Doctor = %+v, %v; want one failed API check without the secret", checks, err)
	}
	if _, err := b.List(t.Context(), provider.ListRequest{}); !errors.Is(err, provider.ErrUnauthenticated) {
		t.Errorf("List with a wrong token = %v, want ErrUnauthenticated", err)
	}
	good := e.Backend(t, clockwork.NewRealClock()).(provider.DoctorBackend)
	checks, err = good.Doctor(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		if !c.OK {
			t.Errorf("doctor check %s failed: %s", c.Name, c.Detail)
		}
	}
	if len(checks) != 4 {
		t.Errorf("doctor checks %+v, want the API, the template and two nodes", checks)
	}
}

// TestTagsAreProxmoxTags: every label the lifecycle writes is a Proxmox
// tag, and a caller's label that cannot be one fails the acquire before
// anything is made.
func TestTagsAreProxmoxTags(t *testing.T) {
	e, fake, _ := newEnv(t, cloudtest.NewFleet(t))
	b := e.Backend(t, clockwork.NewRealClock())
	req := tagcloudtest.NewRequest(t, time.Now())
	req.Labels = map[string]string{"team": "platform"}
	target, err := b.Acquire(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if target.Labels["team"] != "platform" {
		t.Errorf("labels %v lack team=platform", target.Labels)
	}
	for _, vm := range fake.VMs() {
		if !strings.Contains(vm.Tags, "team.platform") {
			t.Errorf("VM tags %q lack team.platform", vm.Tags)
		}
	}
	if err := b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	tagcloudtest.CheckEmpty(t, e)
}

// TestCAFile: the API's certificate is checked; --proxmox-ca-file adds
// the CA that signed it (as a fresh install's pve-root-ca.pem does).
func TestCAFile(t *testing.T) {
	fake := fakeproxmox.New(cloudtest.NewFleet(t), testToken, nodes[:]...)
	srv := httptest.NewTLSServer(fake)
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "pve-root-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	doctor := func(caFile string) provider.Check {
		t.Helper()
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		b, err := proxmox.New(proxmox.Config{Token: testToken, CAFile: caFile, NoRetries: true,
			Options: tagcloud.Options{Endpoint: srv.URL, Image: fmt.Sprint(template), Owner: "tester"}},
			provider.Runtime{HTTPClient: &http.Client{Transport: tr}})
		if err != nil {
			t.Fatal(err)
		}
		checks, err := b.Doctor(t.Context())
		if err != nil || len(checks) == 0 {
			t.Fatalf("Doctor = %+v, %v", checks, err)
		}
		return checks[0]
	}
	if c := doctor(""); c.OK || !strings.Contains(c.Detail, "certificate") {
		t.Errorf("without the CA: %+v, want a failed certificate check", c)
	}
	if c := doctor(ca); !c.OK {
		t.Errorf("with the CA: %+v, want the token accepted", c)
	}
	bad := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(bad, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := proxmox.New(proxmox.Config{Token: testToken, CAFile: bad, Options: tagcloud.Options{Endpoint: srv.URL}}, provider.Runtime{}); err == nil || !strings.Contains(err.Error(), "ca-file") {
		t.Errorf("a CA file without a certificate: %v, want an error naming ca-file", err)
	}
}
