// Package kubevirtspec describes the KubeVirt provider without client-go:
// its name, environment variables, option defaults and provider.Spec. The
// provider package (providers/kubevirt) uses this Spec, and so does the
// crabbox CLI, which runs the provider as the separate program
// crabbox-provider-kubevirt and so must not link client-go to know the
// provider's flags.
package kubevirtspec

import (
	"slices"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// Name is the provider's registered name.
const Name = "kubevirt"

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
	// DefaultSizes are the VM's virtual CPUs and GiB of memory,
	// "<cores>c<GiB>g".
	DefaultSizes = "2c4g"
	// DefaultImage is the box's containerDisk: a cloud image with
	// cloud-init, packaged as a container image.
	DefaultImage = "quay.io/containerdisks/debian:12"
	// DefaultServiceType exposes sshd on a port of every node.
	DefaultServiceType = ServiceNodePort
)

// Cloud is KubeVirt as a tag cloud: the words and defaults of its
// options. A "size" is a VMI's CPUs and memory, a "region" a namespace,
// the "image" a containerDisk image. There is no token: the credentials
// are the kubeconfig's.
func Cloud() tagcloud.Cloud {
	return tagcloud.Cloud{
		Provider: Name, Name: "KubeVirt", SizeWord: "size", RegionWord: "namespace",
		Sizes: DefaultSizes, Image: DefaultImage,
		TokenEnv:  KubeconfigEnv,
		TokenHelp: "point KUBECONFIG (or the kubeconfig option) at a kubeconfig file, or run in a pod with a service account",
	}
}

// Spec describes the KubeVirt provider. Each call returns a fresh copy.
func Spec() provider.Spec {
	s := Cloud().ProviderSpec("VirtualMachineInstance", "kv")
	s.Description = "a fresh KubeVirt virtual machine (VirtualMachineInstance) per lease on your own Kubernetes cluster, " +
		"SSH through a NodePort or LoadBalancer Service (credentials from the kubeconfig: $" + KubeconfigEnv +
		", ~/.kube/config or the pod's service account)"
	s.Credentials = []provider.Credential{{Env: []string{KubeconfigEnv}, Elsewhere: "~/.kube/config, or the service account of a pod"}}
	var opts []provider.Option
	for _, o := range s.Options {
		switch o.Name {
		case "size":
			o.Help = "VM sizes to try in order, comma-separated, each virtual CPUs and GiB of memory like 2c4g " +
				"(the next one when a ResourceQuota refuses)"
		case "region":
			o.Name, o.Flag, o.Locates = "namespace", Name+"-namespace", true
			o.Help = "namespaces to try in order, comma-separated (default: the kubeconfig context's, else default)"
		case "image":
			o.Help = "containerDisk image of the VM: a cloud image with cloud-init (like " + DefaultImage + ")"
		case "prepared":
			o.Help = "the image already has sshd, git, tar and sudo: install nothing at boot"
		case "owner":
			o.Help = "owner label on VMIs (default: the OS user)"
		case "boot-timeout":
			o.Help = "how long to wait for a new VMI to run and answer SSH (image pulls and the VM's boot included)"
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
			Help: "how SSH is exposed: NodePort (a port on the VM's node) or LoadBalancer (the load balancer's address)"},
		{Name: "node-address", Flag: Name + "-node-address", Locates: true,
			Help: "host to reach node ports at, for NodePort (default: the VM's node's ExternalIP, else InternalIP)"},
	})
	return s
}
