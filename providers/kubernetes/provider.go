// Package kubernetes is crabbox's Kubernetes provider: every lease is a
// fresh pod on the team's own cluster, through client-go, reached over
// SSH through a Service.
//
// The lifecycle is the shared one of tag clouds (providers/internal/
// tagcloud): a "size" is the pod's resource requests ("2c4g", "4c16g1gpu"),
// a "region" a namespace, the "image" a container image. Acquire creates
// the pod (crabbox's ownership labels as Kubernetes labels, the lease's
// TTL as activeDeadlineSeconds, the service account token not mounted),
// then a Secret holding the bootstrap script (the host key the client
// made, the lease key) that the pod mounts, and a Service selecting the
// pod by its lease label. Secret and Service name the pod as their owner,
// so the cluster's garbage collector deletes them with it. The pod's
// container installs sshd if the image lacks it, runs the bootstrap and
// stays up; crabbox waits for the pod to run and for sshd to answer with
// the injected host key through the Service, and labels the pod ready.
// Namespaces and sizes are tried in order while a ResourceQuota refuses
// the pod. A failed step deletes the pod, its Secret and its Service.
//
// The box is reached without a port-forward, so a lease outlives the
// process that made it: a NodePort Service is reached at its node port on
// the node-address option or the pod's node's address (ExternalIP, else
// InternalIP), a LoadBalancer Service at its load balancer's address and
// port 2222.
//
// Release deletes the pod, its Service and its Secret; cleanup deletes
// only pods carrying crabbox's labels that the caller holds a claim for,
// never by name. Lists use label selectors and pages (limit/continue).
//
// Credentials are the kubeconfig's, loaded as kubectl loads them
// (the kubeconfig option, else KUBECONFIG, else ~/.kube/config, else the
// service account of the pod crabbox runs in), with its context and
// namespace. client-go retries answers 429 and 5xx that carry
// Retry-After, up to ten times.
//
// The kubelet ends the pod at activeDeadlineSeconds (the TTL); the
// stopped pod and its Service stay until release, cleanup or the
// coordinator's maintenance loop deletes them, so the provider does not
// claim self-expiry. Kubernetes sets no lifetime cap of its own.
package kubernetes

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/kube"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
	"github.com/crabbox-dev/crabbox/providers/kubernetes/kubernetesspec"
)

// Name is the provider's registered name.
const Name = kubernetesspec.Name

// Service types.
const (
	ServiceNodePort     = kubernetesspec.ServiceNodePort
	ServiceLoadBalancer = kubernetesspec.ServiceLoadBalancer
)

// SSHPort is the port sshd listens on in the pod, and the Service's port.
const SSHPort = 2222

var kubeCloud = kubernetesspec.Cloud()

var spec = kubernetesspec.Spec()

// Config is the Kubernetes provider's typed configuration.
type Config struct {
	// Options are the provider's options: sizes, namespaces (Regions;
	// the kubeconfig context's namespace when empty), image, prepared,
	// work root, owner, boot timeout and endpoint (the API server URL,
	// overriding the kubeconfig's).
	tagcloud.Options
	// Kubeconfig is the kubeconfig file; empty means KUBECONFIG, else
	// ~/.kube/config, else the in-cluster service account.
	Kubeconfig string
	// Context is the kubeconfig context; empty means its current one.
	Context string
	// ServiceType is NodePort (default) or LoadBalancer.
	ServiceType string
	// NodeAddress is where node ports are reached; empty means the pod's
	// node's ExternalIP, else its InternalIP.
	NodeAddress string
	// GPUResource is the extended resource of a size's GPUs;
	// nvidia.com/gpu when empty.
	GPUResource string

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

// Provider is the registered Kubernetes provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the Kubernetes provider.
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
	o, a, err := kube.ParseOptions(kubeCloud, cfg)
	if err != nil {
		return Config{}, err
	}
	return Config{
		Options: o, Kubeconfig: a.Kubeconfig, Context: a.Context, ServiceType: a.ServiceType, NodeAddress: a.NodeAddress,
		GPUResource: strings.TrimSpace(cfg["gpu-resource"]),
	}, nil
}

// withDefaults fills in defaults (but the namespaces, which come from the
// kubeconfig) and validates c, naming what is wrong.
func (c Config) withDefaults() (Config, error) {
	image := c.Image
	if image == "" {
		image = kubernetesspec.DefaultImage
	}
	regions := c.Regions
	c.Image, c.Regions = "placeholder", []string{"placeholder"} // checked below, in Kubernetes' own terms
	var err error
	if c.Options, err = kubeCloud.Check(c.Options); err != nil {
		return c, err
	}
	c.Image, c.Regions = image, regions
	if err := checkImage(c.Image); err != nil {
		return c, fmt.Errorf("%s provider: option image: %w", Name, err)
	}
	for _, ns := range c.Regions {
		if err := checkDNSLabel(ns); err != nil {
			return c, fmt.Errorf("%s provider: option namespace: %w", Name, err)
		}
	}
	var err2 error
	if c.ServiceType, err2 = kube.CheckServiceType(c.ServiceType); err2 != nil {
		return c, fmt.Errorf("%s provider: option service-type: %w", Name, err2)
	}
	if c.GPUResource == "" {
		c.GPUResource = kubernetesspec.DefaultGPUResource
	}
	if err := checkResourceName(c.GPUResource); err != nil {
		return c, fmt.Errorf("%s provider: option gpu-resource: %w", Name, err)
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

var (
	checkImage    = kube.CheckImage
	checkDNSLabel = kube.CheckDNSLabel
)

// checkResourceName accepts an extended resource name like
// nvidia.com/gpu.
func checkResourceName(s string) error {
	prefix, name, ok := strings.Cut(s, "/")
	if !ok || prefix == "" || name == "" || len(s) > 253 || strings.ContainsAny(s, " \t\r\n:@") || strings.Count(s, "/") != 1 {
		return fmt.Errorf("%q: want a resource name of the form domain/name, like nvidia.com/gpu", s)
	}
	return nil
}

var (
	_ provider.Provider        = Provider{}
	_ provider.SSHLeaseBackend = (*Backend)(nil)
	_ provider.CleanupBackend  = (*Backend)(nil)
	_ provider.DoctorBackend   = (*Backend)(nil)
)
