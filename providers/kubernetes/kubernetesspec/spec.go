// Package kubernetesspec describes the Kubernetes provider without
// client-go: its name, environment variables, option defaults and
// provider.Spec. The provider package (providers/kubernetes) uses this
// Spec, and so does the crabbox CLI, which runs the provider as the
// separate program crabbox-provider-kubernetes and so must not link
// client-go to know the provider's flags.
package kubernetesspec

import (
	"slices"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// Name is the provider's registered name.
const Name = "kubernetes"

// KubeconfigEnv is kubectl's list of kubeconfig files, used when the
// kubeconfig option is not set.
const KubeconfigEnv = "KUBECONFIG"

// Service types: how the box's SSH port is exposed.
const (
	ServiceNodePort     = "NodePort"
	ServiceLoadBalancer = "LoadBalancer"
)

// Defaults of the provider's options.
const (
	// DefaultSizes are CPU cores and GiB of memory requested for the
	// pod, "<cores>c<GiB>g", optionally with GPUs, "4c16g1gpu".
	DefaultSizes = "2c4g"
	// DefaultImage is the box's container image: any image with /bin/sh
	// and a package manager (sshd, git, tar, curl and sudo are installed
	// at boot unless the image is prepared).
	DefaultImage = "debian:12"
	// DefaultServiceType exposes sshd on a port of every node.
	DefaultServiceType = ServiceNodePort
	// DefaultGPUResource is the extended resource a size's GPUs request.
	DefaultGPUResource = "nvidia.com/gpu"
)

// Cloud is Kubernetes as a tag cloud: the words and defaults of its
// options. A "size" is a pod's resource requests, a "region" a namespace,
// the "image" a container image. There is no token: the credentials are
// the kubeconfig's.
func Cloud() tagcloud.Cloud {
	return tagcloud.Cloud{
		Provider: Name, Name: "Kubernetes", SizeWord: "size", RegionWord: "namespace",
		Sizes: DefaultSizes, Image: DefaultImage,
		TokenEnv:  KubeconfigEnv,
		TokenHelp: "point KUBECONFIG (or the kubeconfig option) at a kubeconfig file, or run in a pod with a service account",
	}
}

// Spec describes the Kubernetes provider. Each call returns a fresh copy.
func Spec() provider.Spec {
	s := Cloud().ProviderSpec("pod", "k8s")
	s.Description = "a fresh pod per lease on your own Kubernetes cluster, SSH through a NodePort or LoadBalancer Service " +
		"(credentials from the kubeconfig: $" + KubeconfigEnv + ", ~/.kube/config or the pod's service account)"
	s.Credentials = []provider.Credential{{Env: []string{KubeconfigEnv}, Elsewhere: "~/.kube/config, or the service account of a pod"}}
	var opts []provider.Option
	for _, o := range s.Options {
		switch o.Name {
		case "size":
			o.Help = "pod sizes to try in order, comma-separated, each CPU cores and GiB of memory requested like 2c4g, " +
				"0.5c1g, or with GPUs like 4c16g1gpu (the next one when a ResourceQuota refuses)"
		case "region":
			o.Name, o.Flag, o.Locates = "namespace", Name+"-namespace", true
			o.Help = "namespaces to try in order, comma-separated (default: the kubeconfig context's, else default)"
		case "image":
			o.Help = "container image of the box, run as root (sshd, git, tar, curl and sudo are installed at boot unless prepared)"
		case "prepared":
			o.Help = "the image already has sshd, git, tar and sudo: install nothing at boot"
		case "owner":
			o.Help = "owner label on pods (default: the OS user)"
		case "boot-timeout":
			o.Help = "how long to wait for a new pod to run and answer SSH (image pulls included)"
		case "endpoint":
			o.Help = "API endpoint URL of the API server, overriding the kubeconfig cluster's (like https://10.0.0.1:6443)"
		}
		opts = append(opts, o)
	}
	s.Options = slices.Concat(opts, []provider.Option{
		{Name: "kubeconfig", Flag: Name + "-kubeconfig", Locates: true,
			Help: "kubeconfig file (default: $" + KubeconfigEnv + ", else ~/.kube/config, else the pod's service account)"},
		{Name: "context", Flag: Name + "-context", Locates: true, Help: "kubeconfig context (default: its current context)"},
		{Name: "service-type", Flag: Name + "-service-type", Default: DefaultServiceType,
			Help: "how SSH is exposed: NodePort (a port on the pod's node) or LoadBalancer (the load balancer's address)"},
		{Name: "node-address", Flag: Name + "-node-address", Locates: true,
			Help: "host to reach node ports at, for NodePort (default: the pod's node's ExternalIP, else InternalIP)"},
		{Name: "gpu-resource", Flag: Name + "-gpu-resource", Default: DefaultGPUResource,
			Help: "extended resource name of a size's GPUs"},
	})
	return s
}
