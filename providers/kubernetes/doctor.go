package kubernetes

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"

	"github.com/crabbox-dev/crabbox/provider"
)

// Spec describes the Kubernetes provider.
func (b *Backend) Spec() provider.Spec { return spec.Clone() }

// Doctor checks, without changing anything, that the API server answers
// and accepts the credentials, and that pods can be listed in every
// namespace. It stops after a failed version read: nothing else can be
// known then.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	v, err := discovery.ToServerVersionInterfaceWithContext(b.pods.cs.Discovery()).ServerVersionWithContext(ctx)
	if err != nil {
		return []provider.Check{{Name: "kubernetes API", Detail: apiError("read the server version", err).Error()}}, nil
	}
	checks := []provider.Check{{Name: "kubernetes API", OK: true, Detail: "Kubernetes " + v.GitVersion}}
	for _, ns := range b.cfg.Regions {
		c := provider.Check{Name: "namespace " + ns}
		if _, err := b.pods.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			c.Detail = apiError("list pods", err).Error()
		} else {
			c.OK, c.Detail = true, "pods can be listed"
		}
		checks = append(checks, c)
	}
	c := provider.Check{Name: "ssh exposure", OK: true, Detail: "Service type " + b.cfg.ServiceType}
	if b.cfg.ServiceType == ServiceNodePort && b.cfg.NodeAddress == "" {
		c.Detail += ": node ports reached at the pod's node's ExternalIP, else InternalIP (reads nodes)"
	} else if b.cfg.NodeAddress != "" {
		c.Detail += ": node ports reached at " + b.cfg.NodeAddress
	}
	return append(checks, c), nil
}

// Namespaces are the namespaces the backend makes and finds pods in.
func (b *Backend) Namespaces() []string { return append([]string(nil), b.cfg.Regions...) }

// Server is the API server's URL.
func (b *Backend) Server() string { return b.server }
