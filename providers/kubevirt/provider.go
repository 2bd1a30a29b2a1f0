// Package kubevirt is crabbox's KubeVirt provider: every lease is a fresh
// virtual machine, a VirtualMachineInstance (kubevirt.io/v1), on the
// team's own Kubernetes cluster running KubeVirt, reached over SSH
// through a Service.
//
// The lifecycle is the shared one of tag clouds (providers/internal/
// tagcloud): a "size" is the VM's virtual CPUs and memory ("2c4g"), a
// "region" a namespace, the "image" a containerDisk (a cloud image
// packaged as a container image, like quay.io/containerdisks/debian:12).
// Acquire creates the VMI (crabbox's ownership labels as Kubernetes
// labels, the containerDisk and a cloudInitNoCloud disk whose user data
// comes from a Secret), then that Secret, holding crabbox's bootstrap
// (the host key the client made, the lease key, the power-off at the
// TTL), and a Service selecting the VM by its lease label (KubeVirt
// copies a VMI's labels to its virt-launcher pod, and the pod network's
// masquerade binding forwards the pod's ports to the VM). Secret and
// Service name the VMI as their owner, so the cluster's garbage collector
// deletes them with it. crabbox waits for the VMI to run and for sshd to
// answer with the injected host key through the Service, and labels the
// VMI ready. Namespaces and sizes are tried in order while a
// ResourceQuota refuses the VMI. A failed step deletes the VMI, its
// Secret and its Service.
//
// A NodePort Service is reached at its node port on the node-address
// option or the VMI's node's address (ExternalIP, else InternalIP), a
// LoadBalancer Service at its load balancer's address and port 22.
//
// A VMI has no active deadline: the bootstrap powers the VM off at the
// lease's TTL, as on the VM clouds, and the VMI then stays, stopped
// (phase Succeeded), until release, cleanup (expired VMIs this owner
// claimed) or the coordinator's maintenance loop deletes it. Release
// deletes the Service, the Secret and the VMI; cleanup deletes only VMIs
// carrying crabbox's labels that the caller holds a claim for, never by
// name. Lists use label selectors and pages (limit/continue).
//
// Credentials are the kubeconfig's, loaded as kubectl loads them, as for
// the kubernetes provider (providers/internal/kube). VMIs are read and
// written with client-go's dynamic client as unstructured objects: no
// KubeVirt Go module. client-go retries answers 429 and 5xx that carry
// Retry-After, up to ten times. KubeVirt sets no lifetime cap of its own.
package kubevirt

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"k8s.io/client-go/rest"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/kube"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
	"github.com/crabbox-dev/crabbox/providers/kubevirt/kubevirtspec"
)

// Name is the provider's registered name.
const Name = kubevirtspec.Name

// Service types.
const (
	ServiceNodePort     = kubevirtspec.ServiceNodePort
	ServiceLoadBalancer = kubevirtspec.ServiceLoadBalancer
)

// SSHPort is the port sshd listens on in the VM, and the Service's port.
const SSHPort = 22

var kvCloud = kubevirtspec.Cloud()

var spec = kubevirtspec.Spec()

// Config is the KubeVirt provider's typed configuration.
type Config struct {
	// Options are the provider's options: sizes, namespaces (Regions;
	// the kubeconfig context's namespace when empty), image (a
	// containerDisk), prepared, work root, owner, boot timeout and
	// endpoint (the API server URL, overriding the kubeconfig's).
	tagcloud.Options
	// Kubeconfig is the kubeconfig file; empty means KUBECONFIG, else
	// ~/.kube/config, else the in-cluster service account.
	Kubeconfig string
	// Context is the kubeconfig context; empty means its current one.
	Context string
	// ServiceType is NodePort (default) or LoadBalancer.
	ServiceType string
	// NodeAddress is where node ports are reached; empty means the VMI's
	// node's ExternalIP, else its InternalIP.
	NodeAddress string

	// The fields below have no option: only a Go program sets them.

	// REST, if set, is the API server's client configuration, used
	// instead of the kubeconfig (Kubeconfig, Context and Endpoint are
	// ignored then). Regions must be set with it.
	REST *rest.Config
	// HTTPClient, if set with REST, carries the requests.
	HTTPClient *http.Client
	// PollInterval is the longest pause of the waits; 2 seconds when zero.
	PollInterval time.Duration
	// MapAddress, if set, rewrites a Service's address and port to where
	// crabbox connects (a NAT, or a test's fake box).
	MapAddress func(host string, port int) (string, int)
	// CallTimeout bounds every API call; tagcloud.DefaultCallTimeout
	// when zero.
	CallTimeout time.Duration
}

// Provider is the registered KubeVirt provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the KubeVirt provider.
func (Provider) Spec() provider.Spec { return spec.Clone() }

// Configure parses cfg (already merged with the Spec's defaults) and
// returns a Backend. It reads the kubeconfig but makes no API call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	b, err := New(c, rt)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// ParseConfig turns the provider's raw options into a Config, naming the
// option that is wrong.
func ParseConfig(cfg provider.Config) (Config, error) {
	o, a, err := kube.ParseOptions(kvCloud, cfg)
	if err != nil {
		return Config{}, err
	}
	return Config{
		Options: o, Kubeconfig: a.Kubeconfig, Context: a.Context, ServiceType: a.ServiceType, NodeAddress: a.NodeAddress,
	}, nil
}

// withDefaults fills in defaults (but the namespaces, which come from the
// kubeconfig) and validates c, naming what is wrong.
func (c Config) withDefaults() (Config, error) {
	image := c.Image
	if image == "" {
		image = kubevirtspec.DefaultImage
	}
	regions := c.Regions
	c.Image, c.Regions = "placeholder", []string{"placeholder"} // checked below, in Kubernetes' own terms
	var err error
	if c.Options, err = kvCloud.Check(c.Options); err != nil {
		return c, err
	}
	c.Image, c.Regions = image, regions
	if err := kube.CheckImage(c.Image); err != nil {
		return c, fmt.Errorf("%s provider: option image: %w", Name, err)
	}
	for _, ns := range c.Regions {
		if err := kube.CheckDNSLabel(ns); err != nil {
			return c, fmt.Errorf("%s provider: option namespace: %w", Name, err)
		}
	}
	if c.ServiceType, err = kube.CheckServiceType(c.ServiceType); err != nil {
		return c, fmt.Errorf("%s provider: option service-type: %w", Name, err)
	}
	if err := kube.CheckNodeAddress(c.NodeAddress); err != nil {
		return c, fmt.Errorf("%s provider: option node-address: %w", Name, err)
	}
	for _, s := range c.Sizes {
		if _, err := parseSize(s); err != nil {
			return c, fmt.Errorf("%s provider: option size: %w", Name, err)
		}
	}
	return c, nil
}

// size is a VM's virtual CPUs and memory.
type size struct {
	Cores  int64
	Memory string // a Kubernetes quantity, like "4Gi"
}

var sizePattern = regexp.MustCompile(`^([0-9]+)c([0-9]+)g$`)

// parseSize reads "<cores>c<GiB>g".
func parseSize(s string) (size, error) {
	m := sizePattern.FindStringSubmatch(s)
	if m == nil {
		return size{}, fmt.Errorf("%q: want virtual CPUs and GiB of memory like 2c4g", s)
	}
	cores, err := strconv.ParseInt(m[1], 10, 32)
	if err != nil || cores < 1 || cores > 1024 {
		return size{}, fmt.Errorf("%q: virtual CPUs %q must be 1 to 1024", s, m[1])
	}
	gib, err := strconv.ParseInt(m[2], 10, 32)
	if err != nil || gib < 1 || gib > 1<<16 {
		return size{}, fmt.Errorf("%q: memory %qGiB must be 1 to 65536", s, m[2])
	}
	return size{Cores: cores, Memory: strconv.FormatInt(gib, 10) + "Gi"}, nil
}

var (
	_ provider.Provider        = Provider{}
	_ provider.SSHLeaseBackend = (*Backend)(nil)
	_ provider.CleanupBackend  = (*Backend)(nil)
	_ provider.DoctorBackend   = (*Backend)(nil)
)
