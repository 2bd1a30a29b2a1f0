package kubevirt

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/kube"
)

// Spec describes the KubeVirt provider.
func (b *Backend) Spec() provider.Spec { return spec.Clone() }

// Doctor checks, without changing anything, that the API server answers
// and accepts the credentials, that it serves KubeVirt's API group
// (kubevirt.io/v1 with virtualmachineinstances), and that VMIs can be
// listed in every namespace. It stops after a failed version read or a
// missing KubeVirt: nothing else can be known then.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	v, err := discovery.ToServerVersionInterfaceWithContext(b.vmis.cs.Discovery()).ServerVersionWithContext(ctx)
	if err != nil {
		return []provider.Check{{Name: "kubernetes API", Detail: kube.APIError("read the server version", err).Error()}}, nil
	}
	checks := []provider.Check{{Name: "kubernetes API", OK: true, Detail: "Kubernetes " + v.GitVersion}}
	kv := provider.Check{Name: "kubevirt API"}
	list, err := b.vmis.cs.Discovery().ServerResourcesForGroupVersion(GroupVersion)
	switch {
	case err != nil:
		kv.Detail = kube.APIError("read API group "+GroupVersion+" (is KubeVirt installed?)", err).Error()
	case !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == vmiResource.Resource }):
		kv.Detail = "API group " + GroupVersion + " does not serve virtualmachineinstances"
	default:
		kv.OK, kv.Detail = true, GroupVersion+" serves virtualmachineinstances"
	}
	checks = append(checks, kv)
	if !kv.OK {
		return checks, nil
	}
	for _, ns := range b.cfg.Regions {
		c := provider.Check{Name: "namespace " + ns}
		if _, err := b.vmis.res(ns).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			c.Detail = kube.APIError("list VMIs", err).Error()
		} else {
			c.OK, c.Detail = true, "VMIs can be listed"
		}
		checks = append(checks, c)
	}
	c := provider.Check{Name: "ssh exposure", OK: true, Detail: "Service type " + b.cfg.ServiceType}
	if b.cfg.ServiceType == ServiceNodePort && b.cfg.NodeAddress == "" {
		c.Detail += ": node ports reached at the VMI's node's ExternalIP, else InternalIP (reads nodes)"
	} else if b.cfg.NodeAddress != "" {
		c.Detail += ": node ports reached at " + b.cfg.NodeAddress
	}
	return append(checks, c), nil
}

// Namespaces are the namespaces the backend makes and finds VMIs in.
func (b *Backend) Namespaces() []string { return append([]string(nil), b.cfg.Regions...) }

// Server is the API server's URL.
func (b *Backend) Server() string { return b.server }
