package kubevirt_test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/internal/kube/fakekube"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud/tagcloudtest"
	"github.com/crabbox-dev/crabbox/providers/kubevirt"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, ignoreGoroutines()...) }

func ignoreGoroutines() []goleak.Option {
	return append(cloudtest.IgnoreGoroutines(), goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"))
}

var (
	sizes      = [2]string{"2c4g", "4c8g"}
	namespaces = [2]string{"crabbox-a", "crabbox-b"}
	nodes      = []fakekube.Node{
		{Name: "node-a", ExternalIP: "198.18.0.1", InternalIP: "10.0.0.1"},
		{Name: "node-b", InternalIP: "10.0.0.2"},
	}
)

// Ops beyond tagcloudtest's: the create of a VMI's Service and Secret.
const (
	opService = "service"
	opSecret  = "secret"
)

var route = regexp.MustCompile(`^/(?:api/v1|apis/kubevirt\.io/v1)/namespaces/[^/]+/(virtualmachineinstances|services|secrets|pods)(/[^/]+)?$`)

// op classifies a request for faults: a VMI's POST creates, its GET
// reads, its PATCH labels, its DELETE deletes; the VMIs' GET lists.
func op(r *http.Request) string {
	m := route.FindStringSubmatch(r.URL.Path)
	switch {
	case m == nil:
		return ""
	case m[1] == "services" && r.Method == http.MethodPost:
		return opService
	case m[1] == "secrets" && r.Method == http.MethodPost:
		return opSecret
	case m[1] != fakekube.VMIResource:
		return ""
	case m[2] == "" && r.Method == http.MethodPost:
		return tagcloudtest.OpCreate
	case m[2] == "" && r.Method == http.MethodGet:
		return tagcloudtest.OpList
	case r.Method == http.MethodGet:
		return tagcloudtest.OpGet
	case r.Method == http.MethodPatch:
		return tagcloudtest.OpTag
	case r.Method == http.MethodDelete:
		return tagcloudtest.OpDelete
	}
	return ""
}

// requests are the fake's words for a size's requests.
func requests(size, ns string) fakekube.Create {
	var cores, gib int
	if _, err := fmt.Sscanf(size, "%dc%dg", &cores, &gib); err != nil {
		panic(size)
	}
	return fakekube.Create{Namespace: ns, CPU: fmt.Sprint(cores), Memory: fmt.Sprintf("%dGi", gib)}
}

type env struct {
	*tagcloudtest.Env
	fake *fakekube.Server
	url  string
}

// config is a backend configuration on the fake at url.
func config(t *testing.T, url string, e *tagcloudtest.Env) kubevirt.Config {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return kubevirt.Config{
		Options: tagcloudtest.Options(url, t.TempDir(), e), REST: &rest.Config{Host: url},
		HTTPClient: &http.Client{Transport: tr}, PollInterval: time.Second, CallTimeout: time.Minute,
	}
}

// newEnv starts a fake cluster with KubeVirt (two nodes) whose VMIs boot
// on fleet and configures backends on it, with svcType Services.
func newEnv(t *testing.T, fleet *cloudtest.Fleet, svcType string) *env {
	fake := fakekube.New(fleet, nodes...)
	faults := &tagcloudtest.Faults{Op: op, Body: fakekube.ErrorBody}
	srv := faults.NewServer(t, fake)
	e := &env{fake: fake, url: srv.URL, Env: &tagcloudtest.Env{
		Faults: faults, Fleet: fleet, Sizes: sizes, Regions: namespaces,
		Machines: func() []string {
			var ids []string
			for _, v := range fake.VMIs() {
				ids = append(ids, v.GetNamespace()+"/"+v.GetName())
			}
			return append(ids, orphans(fake)...)
		},
		NoBoot: fake.SetNoBoot,
		Full:   func(size, ns string) { fake.SetFull(requests(size, ns)) },
	}}
	e.Creates = func() []string {
		var out []string
		for _, c := range fake.Creates() {
			for _, s := range sizes {
				if r := requests(s, c.Namespace); r == c {
					out = append(out, s+"/"+c.Namespace)
				}
			}
		}
		return out
	}
	e.Backend = func(t *testing.T, clock clockwork.Clock) provider.SSHLeaseBackend {
		c := config(t, srv.URL, e.Env)
		c.MapAddress, c.ServiceType = fake.MapAddress, svcType
		b, err := kubevirt.New(c, provider.Runtime{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return e
}

// orphans are the Services and Secrets whose owner VMI is gone: what the
// garbage collector would delete, and the provider must not leave.
func orphans(fake *fakekube.Server) []string {
	uids := map[types.UID]bool{}
	for _, v := range fake.VMIs() {
		uids[v.GetUID()] = true
	}
	owned := func(refs []metav1.OwnerReference) bool { return len(refs) == 1 && uids[refs[0].UID] }
	var out []string
	for _, s := range fake.Services() {
		if !owned(s.OwnerReferences) {
			out = append(out, "service "+s.Namespace+"/"+s.Name)
		}
	}
	for _, s := range fake.Secrets() {
		if !owned(s.OwnerReferences) {
			out = append(out, "secret "+s.Namespace+"/"+s.Name)
		}
	}
	return out
}

// TestTagCloud runs the tag cloud suites against the fake with NodePort
// Services: rollback at every step, namespace and size fallback on quota
// refusals, a killed acquire cleaned up, and the SSH-lease conformance
// suite (the fake's VMIs are real SSH boxes booted from their cloud-init
// user data).
func TestTagCloud(t *testing.T) {
	tagcloudtest.Run(t, tagcloudtest.Harness{NewEnv: func(t *testing.T) *tagcloudtest.Env {
		return newEnv(t, cloudtest.NewFleet(t), kubevirt.ServiceNodePort).Env
	}})
}

// TestVMI: the VMI is what a cluster admin expects (the containerDisk,
// the size's CPUs and memory, the cloud-init disk from a Secret the VMI
// owns holding crabbox's bootstrap with the power-off at the TTL,
// crabbox's labels), the Service a node port selecting it by lease, the
// box reached at the node's address; release leaves nothing.
func TestVMI(t *testing.T) {
	e := newEnv(t, cloudtest.NewFleet(t), kubevirt.ServiceNodePort)
	b := e.Backend(t, clockwork.NewRealClock())
	req := tagcloudtest.NewRequest(t, time.Now())
	req.Labels = map[string]string{"team": "platform"}
	target, err := b.Acquire(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	vmis := e.fake.VMIs()
	if len(vmis) != 1 {
		t.Fatalf("VMIs %+v, want one", vmis)
	}
	v := vmis[0]
	str := func(path ...string) string {
		s, _, _ := unstructured.NestedFieldNoCopy(v.Object, path...)
		return fmt.Sprint(s)
	}
	vols, _, _ := unstructured.NestedSlice(v.Object, "spec", "volumes")
	l := v.GetLabels()
	got := map[string]string{
		"namespace": v.GetNamespace(), "name": v.GetName(), "volumes": fmt.Sprint(vols),
		"cores": str("spec", "domain", "cpu", "cores"), "cpu": str("spec", "domain", "resources", "requests", "cpu"),
		"memory":  str("spec", "domain", "resources", "requests", "memory"),
		"crabbox": l["crabbox"], "provider": l["provider"], "lease": l["lease"],
		"state": l["state"], "team": l["team"], "server_type": l["server_type"],
	}
	name := tagcloud.Name(req.LeaseID)
	want := map[string]string{
		"namespace": namespaces[0], "name": name,
		"volumes": fmt.Sprint([]any{
			map[string]any{"name": "containerdisk", "containerDisk": map[string]any{"image": "quay.io/containerdisks/debian:12"}},
			map[string]any{"name": "cloudinitdisk", "cloudInitNoCloud": map[string]any{"secretRef": map[string]any{"name": name}}},
		}),
		"cores": "2", "cpu": "2", "memory": "4Gi",
		"crabbox": "true", "provider": "kubevirt", "lease": req.LeaseID, "state": "ready", "team": "platform", "server_type": "2c4g",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("VMI (-want +got):\n%s", diff)
	}
	svcs, secrets := e.fake.Services(), e.fake.Secrets()
	if len(svcs) != 1 || len(secrets) != 1 {
		t.Fatalf("services %d, secrets %d; want one of each", len(svcs), len(secrets))
	}
	for what, refs := range map[string][]metav1.OwnerReference{"service": svcs[0].OwnerReferences, "secret": secrets[0].OwnerReferences} {
		if len(refs) != 1 || refs[0].UID != v.GetUID() || refs[0].Kind != "VirtualMachineInstance" || refs[0].APIVersion != "kubevirt.io/v1" {
			t.Errorf("%s owners %+v, want the VMI", what, refs)
		}
	}
	if diff := cmp.Diff(map[string]string{"crabbox": "true", "lease": req.LeaseID}, svcs[0].Spec.Selector); diff != "" {
		t.Errorf("service selector (-want +got):\n%s", diff)
	}
	ud := string(secrets[0].Data[kubevirt.UserDataKey])
	if _, err := cloud.ParseUserData(ud); err != nil {
		t.Errorf("secret's user data: %v", err)
	}
	if !strings.Contains(ud, "poweroff") {
		t.Errorf("the user data does not power the VM off at the TTL")
	}
	node := map[string]string{"node-a": "198.18.0.1", "node-b": "10.0.0.2"}[str("status", "nodeName")]
	if host, port := e.fake.MapAddress(node, int(svcs[0].Spec.Ports[0].NodePort)); target.Host != host || target.Port != port {
		t.Errorf("target at %s:%d, want node %s:%d", target.Host, target.Port, node, svcs[0].Spec.Ports[0].NodePort)
	}
	if target.HostKey == "" || target.Labels["team"] != "platform" {
		t.Errorf("target %+v lacks the pinned host key or the caller's label", target)
	}
	if err := b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	tagcloudtest.CheckEmpty(t, e.Env)
}

// TestDependentFails: when the Secret or the Service cannot be made, the
// VMI (and whatever else was made) is deleted again.
func TestDependentFails(t *testing.T) {
	for _, o := range []string{opSecret, opService} {
		for _, status := range []int{http.StatusInternalServerError, http.StatusUnprocessableEntity} {
			t.Run(fmt.Sprint(o, status), func(t *testing.T) {
				e := newEnv(t, cloudtest.NewFleet(t), kubevirt.ServiceNodePort)
				e.Faults.Set(o, tagcloudtest.Fault{Status: status})
				_, err := e.Backend(t, clockwork.NewRealClock()).Acquire(t.Context(), tagcloudtest.NewRequest(t, time.Now()))
				if step, ok := cloud.FailedStep(err); !ok || step != cloud.StepCreate {
					t.Errorf("Acquire = %v, want a failed create", err)
				}
				if len(e.fake.Creates()) != 1 {
					t.Errorf("creates %v, want one: not a capacity error", e.fake.Creates())
				}
				tagcloudtest.CheckEmpty(t, e.Env)
			})
		}
	}
}

// TestThrottled: answers 429 with Retry-After are retried, then reported
// as transient.
func TestThrottled(t *testing.T) {
	e := newEnv(t, cloudtest.NewFleet(t), kubevirt.ServiceNodePort)
	b := e.Backend(t, clockwork.NewRealClock())
	e.fake.Throttle(3, "0")
	if _, err := b.List(t.Context(), provider.ListRequest{}); err != nil {
		t.Errorf("List after three answers 429: %v", err)
	}
	e.fake.Throttle(11, "0")
	if _, err := b.List(t.Context(), provider.ListRequest{}); !errors.Is(err, provider.ErrTransient) {
		t.Errorf("List after eleven answers 429 = %v, want a transient error", err)
	}
}

// TestPagination: List reads every page (limit/continue), and sees only
// crabbox's VMIs of this provider.
func TestPagination(t *testing.T) {
	e := newEnv(t, cloudtest.NewFleet(t), kubevirt.ServiceNodePort)
	now := time.Now()
	add := func(name, ns string, l map[string]string) {
		u := unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance"}}
		u.SetName(name)
		u.SetNamespace(ns)
		u.SetLabels(l)
		e.fake.AddVMI(u)
	}
	const n = kubevirt.PageSize*2 + 5
	for i := range n {
		l, err := cloud.NewLabels(tagcloudtest.NewRequest(t, now), cloud.LabelOptions{Provider: kubevirt.Name, Owner: "tester"})
		if err != nil {
			t.Fatal(err)
		}
		add(fmt.Sprintf("crabbox-%03d", i), namespaces[i%2], l)
	}
	add("other", namespaces[0], map[string]string{"crabbox": "true", "provider": "kubernetes"})
	add("app", namespaces[0], map[string]string{"app": "web"})
	got, err := e.Backend(t, clockwork.NewRealClock()).List(t.Context(), provider.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Errorf("List returned %d leases, want %d", len(got), n)
	}
}

// TestDoctor: the API, KubeVirt's API group, every namespace and the SSH
// exposure are checked; without KubeVirt the doctor says so and stops.
func TestDoctor(t *testing.T) {
	e := newEnv(t, cloudtest.NewFleet(t), kubevirt.ServiceNodePort)
	b := e.Backend(t, clockwork.NewRealClock()).(provider.DoctorBackend)
	checks, err := b.Doctor(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range checks {
		names = append(names, c.Name)
		if !c.OK {
			t.Errorf("check %s failed: %s", c.Name, c.Detail)
		}
	}
	if diff := cmp.Diff([]string{"kubernetes API", "kubevirt API", "namespace crabbox-a", "namespace crabbox-b", "ssh exposure"}, names); diff != "" {
		t.Errorf("checks (-want +got):\n%s", diff)
	}
	e.fake.SetNoKubeVirt()
	checks, err = b.Doctor(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != 2 || !checks[0].OK || checks[1].OK || !strings.Contains(checks[1].Detail, "kubevirt.io/v1") {
		t.Errorf("checks without KubeVirt %+v, want the kubevirt API check failed, naming the group", checks)
	}
}

// TestConfigure: options are checked and named when wrong; the
// kubeconfig gives the server and the namespace; a missing kubeconfig is
// an unauthenticated error naming KUBECONFIG.
func TestConfigure(t *testing.T) {
	spec := kubevirt.Provider{}.Spec()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "config")
	const secretToken = "s3cr3t-token-value"
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://k8s.example.com:6443"}}]
users: [{name: u, user: {token: `+secretToken+`}}]
contexts: [{name: one, context: {cluster: c, user: u, namespace: team-a}}]
current-context: one
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", filepath.Join(dir, "missing"))
	t.Setenv("HOME", dir)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	cfg, err := spec.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (kubevirt.Provider{}).Configure(cfg, provider.Runtime{}); !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), "KUBECONFIG") {
		t.Errorf("Configure without a kubeconfig: %v", err)
	}
	t.Setenv("KUBECONFIG", kubeconfig)
	c, err := spec.Resolve(provider.Config{"endpoint": "https://10.0.0.1:6443"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := (kubevirt.Provider{}).Configure(c, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	kb := b.(*kubevirt.Backend)
	if got := [2]string{strings.Join(kb.Namespaces(), ","), kb.Server()}; got != [2]string{"team-a", "https://10.0.0.1:6443"} {
		t.Errorf("namespaces and server %v", got)
	}
	for key, value := range map[string]string{
		"size": "0.5c1g", "namespace": "Team_A", "image": "debian 12", "boot-timeout": "soon",
		"endpoint": "k8s.example.com:6443", "service-type": "ClusterIP", "node-address": "a b", "context": "nope",
	} {
		c, err := spec.Resolve(provider.Config{key: value})
		if err == nil {
			_, err = (kubevirt.Provider{}).Configure(c, provider.Runtime{})
		}
		if err == nil || !strings.Contains(err.Error(), key) && !strings.Contains(err.Error(), value) {
			t.Errorf("%s=%q: %v, want an error naming it", key, value, err)
		}
		if err != nil && strings.Contains(err.Error(), secretToken) {
			t.Errorf("%s=%q: error shows the token: %v", key, value, err)
		}
	}
	if !hasFlag(spec.Options, "kubevirt-endpoint") || len(spec.Credentials) != 1 {
		t.Errorf("spec options %+v, credentials %+v: want kubevirt-endpoint and KUBECONFIG", spec.Options, spec.Credentials)
	}
}

func hasFlag(opts []provider.Option, flag string) bool {
	for _, o := range opts {
		if o.Flag == flag {
			return true
		}
	}
	return false
}
