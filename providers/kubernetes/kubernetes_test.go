package kubernetes_test

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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/internal/kube/fakekube"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud/tagcloudtest"
	"github.com/crabbox-dev/crabbox/providers/kubernetes"
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

// Ops beyond tagcloudtest's: the create of a pod's Service and Secret.
const (
	opService = "service"
	opSecret  = "secret"
)

var route = regexp.MustCompile(`^/api/v1/namespaces/[^/]+/(pods|services|secrets)(/[^/]+)?$`)

// op classifies a request for faults: a pod's POST creates, its GET
// reads, its PATCH labels, its DELETE deletes; the pods' GET lists.
func op(r *http.Request) string {
	m := route.FindStringSubmatch(r.URL.Path)
	switch {
	case m == nil:
		return ""
	case m[1] == "services" && r.Method == http.MethodPost:
		return opService
	case m[1] == "secrets" && r.Method == http.MethodPost:
		return opSecret
	case m[1] != "pods":
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
func config(t *testing.T, url string, e *tagcloudtest.Env) kubernetes.Config {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return kubernetes.Config{
		Options: tagcloudtest.Options(url, t.TempDir(), e), REST: &rest.Config{Host: url},
		HTTPClient: &http.Client{Transport: tr}, PollInterval: time.Second, CallTimeout: time.Minute,
	}
}

// newEnv starts a fake cluster (two nodes) whose pods boot on fleet and
// configures backends on it, with svcType Services.
func newEnv(t *testing.T, fleet *cloudtest.Fleet, svcType string) *env {
	fake := fakekube.New(fleet, nodes...)
	faults := &tagcloudtest.Faults{Op: op, Body: fakekube.ErrorBody}
	srv := faults.NewServer(t, fake)
	e := &env{fake: fake, url: srv.URL, Env: &tagcloudtest.Env{
		Faults: faults, Fleet: fleet, Sizes: sizes, Regions: namespaces,
		Machines: func() []string {
			var ids []string
			for _, p := range fake.Pods() {
				ids = append(ids, p.Namespace+"/"+p.Name)
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
		b, err := kubernetes.New(c, provider.Runtime{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return e
}

// orphans are the Services and Secrets whose owner pod is gone: what
// the garbage collector would delete, and the provider must not leave.
func orphans(fake *fakekube.Server) []string {
	uids := map[types.UID]bool{}
	for _, p := range fake.Pods() {
		uids[p.UID] = true
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
// suite (the fake's pods are real SSH boxes).
func TestTagCloud(t *testing.T) {
	tagcloudtest.Run(t, tagcloudtest.Harness{NewEnv: func(t *testing.T) *tagcloudtest.Env {
		return newEnv(t, cloudtest.NewFleet(t), kubernetes.ServiceNodePort).Env
	}})
}

// TestLoadBalancer: with a LoadBalancer Service the box is reached at the
// load balancer's address and the Service's port.
func TestLoadBalancer(t *testing.T) {
	e := newEnv(t, cloudtest.NewFleet(t), kubernetes.ServiceLoadBalancer)
	b := e.Backend(t, clockwork.NewRealClock())
	target, err := b.Acquire(t.Context(), tagcloudtest.NewRequest(t, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	svcs := e.fake.Services()
	if len(svcs) != 1 || len(svcs[0].Status.LoadBalancer.Ingress) != 1 {
		t.Fatalf("services %+v, want one load balancer", svcs)
	}
	host, port := e.fake.MapAddress(svcs[0].Status.LoadBalancer.Ingress[0].IP, kubernetes.SSHPort)
	if target.Host != host || target.Port != port {
		t.Errorf("target at %s:%d, want the load balancer's %s:%d", target.Host, target.Port, host, port)
	}
	if err := b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	tagcloudtest.CheckEmpty(t, e.Env)
}

// TestPod: the pod is what a cluster admin expects (the size's requests,
// the TTL as its active deadline, no service account token, the
// bootstrap from a Secret the pod owns, crabbox's labels), the Service a
// node port selecting it by lease, the box reached at the node's
// ExternalIP (else its InternalIP); release leaves nothing.
func TestPod(t *testing.T) {
	e := newEnv(t, cloudtest.NewFleet(t), kubernetes.ServiceNodePort)
	b := e.Backend(t, clockwork.NewRealClock())
	req := tagcloudtest.NewRequest(t, time.Now())
	req.Labels = map[string]string{"team": "platform"}
	target, err := b.Acquire(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	pods := e.fake.Pods()
	if len(pods) != 1 {
		t.Fatalf("pods %+v, want one", pods)
	}
	p := pods[0]
	c := p.Spec.Containers[0]
	got := map[string]string{
		"namespace": p.Namespace, "name": p.Name, "image": c.Image,
		"cpu": c.Resources.Requests.Cpu().String(), "memory": c.Resources.Requests.Memory().String(),
		"deadline": fmt.Sprint(*p.Spec.ActiveDeadlineSeconds), "token": fmt.Sprint(*p.Spec.AutomountServiceAccountToken),
		"restart": string(p.Spec.RestartPolicy), "secret": p.Spec.Volumes[0].Secret.SecretName,
		"crabbox": p.Labels["crabbox"], "provider": p.Labels["provider"], "lease": p.Labels["lease"],
		"state": p.Labels["state"], "team": p.Labels["team"], "server_type": p.Labels["server_type"],
	}
	want := map[string]string{
		"namespace": namespaces[0], "name": tagcloud.Name(req.LeaseID), "image": "debian:12",
		"cpu": "2", "memory": "4Gi", "deadline": fmt.Sprint(int64(req.TTL / time.Second)), "token": "false",
		"restart": "Never", "secret": tagcloud.Name(req.LeaseID),
		"crabbox": "true", "provider": "kubernetes", "lease": req.LeaseID, "state": "ready", "team": "platform", "server_type": "2c4g",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pod (-want +got):\n%s", diff)
	}
	svcs, secrets := e.fake.Services(), e.fake.Secrets()
	if len(svcs) != 1 || len(secrets) != 1 {
		t.Fatalf("services %d, secrets %d; want one of each", len(svcs), len(secrets))
	}
	for what, refs := range map[string][]metav1.OwnerReference{"service": svcs[0].OwnerReferences, "secret": secrets[0].OwnerReferences} {
		if len(refs) != 1 || refs[0].UID != p.UID || refs[0].Kind != "Pod" {
			t.Errorf("%s owners %+v, want the pod", what, refs)
		}
	}
	if diff := cmp.Diff(map[string]string{"crabbox": "true", "lease": req.LeaseID}, svcs[0].Spec.Selector); diff != "" {
		t.Errorf("service selector (-want +got):\n%s", diff)
	}
	if svcs[0].Spec.Type != corev1.ServiceTypeNodePort {
		t.Errorf("service type %s", svcs[0].Spec.Type)
	}
	if _, err := cloud.ParseUserData(string(secrets[0].Data[fakekube.BootstrapKey])); err != nil {
		t.Errorf("secret's bootstrap: %v", err)
	}
	node := map[string]string{"node-a": "198.18.0.1", "node-b": "10.0.0.2"}[p.Spec.NodeName]
	if host, port := e.fake.MapAddress(node, int(svcs[0].Spec.Ports[0].NodePort)); target.Host != host || target.Port != port || host != e.Fleet.Box(p.Status.PodIP).Host {
		t.Errorf("target at %s:%d, want node %s at %s:%d", target.Host, target.Port, p.Spec.NodeName, node, svcs[0].Spec.Ports[0].NodePort)
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
// pod (and whatever else was made) is deleted again.
func TestDependentFails(t *testing.T) {
	for _, o := range []string{opSecret, opService} {
		for _, status := range []int{http.StatusInternalServerError, http.StatusUnprocessableEntity} {
			t.Run(fmt.Sprint(o, status), func(t *testing.T) {
				e := newEnv(t, cloudtest.NewFleet(t), kubernetes.ServiceNodePort)
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

// TestThrottled: answers 429 with Retry-After are retried (client-go's
// retry, at most ten times), then reported as transient; a 500 without
// Retry-After is not retried.
func TestThrottled(t *testing.T) {
	e := newEnv(t, cloudtest.NewFleet(t), kubernetes.ServiceNodePort)
	b := e.Backend(t, clockwork.NewRealClock())
	e.fake.Throttle(3, "0")
	if _, err := b.List(t.Context(), provider.ListRequest{}); err != nil {
		t.Errorf("List after three answers 429: %v", err)
	}
	e.fake.Throttle(11, "0")
	if _, err := b.List(t.Context(), provider.ListRequest{}); !errors.Is(err, provider.ErrTransient) {
		t.Errorf("List after eleven answers 429 = %v, want a transient error", err)
	}
	e.fake.Throttle(0, "")
	e.Faults.Set(tagcloudtest.OpList, tagcloudtest.Fault{Status: http.StatusInternalServerError, Times: 1})
	if _, err := b.List(t.Context(), provider.ListRequest{}); !errors.Is(err, provider.ErrTransient) {
		t.Errorf("List after a 500 = %v, want a transient error", err)
	}
	if _, err := b.List(t.Context(), provider.ListRequest{}); err != nil {
		t.Errorf("List after the 500: %v", err)
	}
}

// TestPagination: List reads every page (limit/continue), and sees only
// crabbox's pods of this provider.
func TestPagination(t *testing.T) {
	e := newEnv(t, cloudtest.NewFleet(t), kubernetes.ServiceNodePort)
	now := time.Now()
	const n = kubernetes.PageSize*2 + 5
	for i := range n {
		req := tagcloudtest.NewRequest(t, now)
		l, err := cloud.NewLabels(req, cloud.LabelOptions{Provider: kubernetes.Name, Owner: "tester"})
		if err != nil {
			t.Fatal(err)
		}
		e.fake.AddPod(corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("crabbox-%03d", i), Namespace: namespaces[i%2], Labels: l}})
	}
	e.fake.AddPod(corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: namespaces[0], Labels: map[string]string{"crabbox": "true", "provider": "aws"}}})
	e.fake.AddPod(corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: namespaces[0], Labels: map[string]string{"app": "web"}}})
	got, err := e.Backend(t, clockwork.NewRealClock()).List(t.Context(), provider.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Errorf("List returned %d leases, want %d", len(got), n)
	}
}

// TestConfigure: options are checked and named when wrong; the
// kubeconfig gives the server, the credentials and the namespace; a
// missing kubeconfig is an unauthenticated error naming KUBECONFIG.
func TestConfigure(t *testing.T) {
	spec := kubernetes.Provider{}.Spec()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "config")
	const secretToken = "s3cr3t-token-value"
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://k8s.example.com:6443"}
users:
- name: u
  user: {token: `+secretToken+`}
contexts:
- name: one
  context: {cluster: c, user: u, namespace: team-a}
- name: two
  context: {cluster: c, user: u}
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
	if _, err := (kubernetes.Provider{}).Configure(cfg, provider.Runtime{}); !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), "KUBECONFIG") {
		t.Errorf("Configure without a kubeconfig: %v", err)
	}
	t.Setenv("KUBECONFIG", kubeconfig)
	for _, tc := range []struct {
		cfg     provider.Config
		wantNS  string
		wantURL string
	}{
		{provider.Config{}, "team-a", "https://k8s.example.com:6443"},
		{provider.Config{"context": "two"}, "default", "https://k8s.example.com:6443"},
		{provider.Config{"namespace": "x,y", "endpoint": "https://10.0.0.1:6443"}, "x,y", "https://10.0.0.1:6443"},
	} {
		c, err := spec.Resolve(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := (kubernetes.Provider{}).Configure(c, provider.Runtime{})
		if err != nil {
			t.Fatalf("Configure %v: %v", tc.cfg, err)
		}
		kb := b.(*kubernetes.Backend)
		if got := [2]string{strings.Join(kb.Namespaces(), ","), kb.Server()}; got != [2]string{tc.wantNS, tc.wantURL} {
			t.Errorf("Configure %v: namespaces and server %v, want %s and %s", tc.cfg, got, tc.wantNS, tc.wantURL)
		}
	}
	for key, value := range map[string]string{
		"size": "2 cores", "namespace": "Team_A", "image": "debian 12", "boot-timeout": "soon",
		"endpoint": "k8s.example.com:6443", "work-root": "rel", "service-type": "ClusterIP",
		"gpu-resource": "gpu", "node-address": "a b", "context": "nope",
	} {
		c, err := spec.Resolve(provider.Config{key: value})
		if err == nil {
			_, err = (kubernetes.Provider{}).Configure(c, provider.Runtime{})
		}
		if err == nil || !strings.Contains(err.Error(), key) && !strings.Contains(err.Error(), value) {
			t.Errorf("%s=%q: %v, want an error naming it", key, value, err)
		}
		if err != nil && strings.Contains(err.Error(), secretToken) {
			t.Errorf("%s=%q: error shows the token: %v", key, value, err)
		}
	}
	if i := indexOf(spec.Options, "endpoint"); i < 0 || spec.Options[i].Flag != "kubernetes-endpoint" {
		t.Errorf("no kubernetes-endpoint option in %+v", spec.Options)
	}
	if len(spec.Credentials) != 1 || spec.Credentials[0].Elsewhere == "" {
		t.Errorf("credentials %+v, want KUBECONFIG or elsewhere", spec.Credentials)
	}
}

func indexOf(opts []provider.Option, name string) int {
	for i, o := range opts {
		if o.Name == name {
			return i
		}
	}
	return -1
}

// TestSizes: sizes are cores and GiB with optional GPUs, requested (and
// the GPUs limited) as the gpu-resource option names.
func TestSizes(t *testing.T) {
	e := newEnv(t, cloudtest.NewFleet(t), kubernetes.ServiceNodePort)
	c := config(t, e.url, e.Env)
	c.Sizes, c.MapAddress, c.GPUResource = []string{"0.5c1g2gpu"}, e.fake.MapAddress, "amd.com/gpu"
	b, err := kubernetes.New(c, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	target, err := b.Acquire(t.Context(), tagcloudtest.NewRequest(t, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	r := e.fake.Pods()[0].Spec.Containers[0].Resources
	got := []string{r.Requests.Cpu().String(), r.Requests.Memory().String(), r.Requests.Name("amd.com/gpu", "").String(), r.Limits.Name("amd.com/gpu", "").String()}
	if diff := cmp.Diff([]string{"500m", "1Gi", "2", "2"}, got); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if err := b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"2c", "c4g", "0c4g", "2c0g", "2c4g0gpu", "2C4G"} {
		c.Sizes = []string{s}
		if _, err := kubernetes.New(c, provider.Runtime{}); err == nil || !strings.Contains(err.Error(), "size") {
			t.Errorf("size %q: %v, want an error naming the option", s, err)
		}
	}
}

// TestDoctor: the API, every namespace and the SSH exposure are checked.
func TestDoctor(t *testing.T) {
	e := newEnv(t, cloudtest.NewFleet(t), kubernetes.ServiceNodePort)
	checks, err := e.Backend(t, clockwork.NewRealClock()).(provider.DoctorBackend).Doctor(t.Context())
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
	if diff := cmp.Diff([]string{"kubernetes API", "namespace crabbox-a", "namespace crabbox-b", "ssh exposure"}, names); diff != "" {
		t.Errorf("checks (-want +got):\n%s", diff)
	}
}
