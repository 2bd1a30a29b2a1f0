// Package kube is the cluster code the Kubernetes-based providers
// (providers/kubernetes, providers/kubevirt) share: loading the
// kubeconfig as kubectl does, the REST client settings, the portable kind
// of an API error, the SSH Service of a box and where it is reached, and
// the checks of names and image references.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// Service types: how a box's SSH port is exposed.
const (
	ServiceNodePort     = "NodePort"
	ServiceLoadBalancer = "LoadBalancer"
)

// LoadKubeconfig loads the client configuration as kubectl does (the
// file kubeconfig, else KUBECONFIG, else ~/.kube/config, else the pod's
// service account), with context and endpoint overriding the current
// context and its server when set, and the context's namespace
// ("default" when it names none). Errors name the provider.
func LoadKubeconfig(providerName, kubeconfig, context, endpoint string) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: context}
	if endpoint != "" {
		overrides.ClusterInfo.Server = endpoint
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	restCfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("%s provider: kubeconfig: %w: set the kubeconfig option or KUBECONFIG, or run in a pod with a service account: %w",
			providerName, err, provider.ErrUnauthenticated)
	}
	ns, _, err := cc.Namespace()
	if err != nil || ns == "" {
		ns = "default"
	}
	return restCfg, ns, nil
}

// PrepareREST sets crabbox's client settings on c: the API server's
// warnings logged to log (the library never prints), JSON (the API's
// described encoding, and what the tests' fakes speak) rather than
// protobuf, and a client rate limit.
func PrepareREST(c *rest.Config, log *slog.Logger) {
	c.WarningHandlerWithContext = warningLogger{log}
	c.WarningHandler = nil
	c.UserAgent = "crabbox"
	c.ContentType, c.AcceptContentTypes = "application/json", "application/json"
	if c.QPS == 0 {
		c.QPS, c.Burst = 20, 40
	}
}

// warningLogger logs the API server's warnings instead of printing them.
type warningLogger struct{ log *slog.Logger }

func (w warningLogger) HandleWarningHeaderWithContext(_ context.Context, code int, agent, text string) {
	w.log.Warn("kubernetes API warning", "code", code, "agent", agent, "text", text)
}

// APIError says what failed and wraps err with its portable kind: a
// ResourceQuota refusal is provider.ErrCapacity (the next placement is
// tried), 401 and 403 ErrUnauthenticated, 404 ErrNotFound, 409
// ErrConflict, 400 and 422 ErrPrecondition, 429, 5xx and network errors
// ErrTransient. The raw error stays reachable with errors.As.
func APIError(what string, err error) error {
	var kind error
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", what, err)
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"):
		kind = provider.ErrCapacity
	case apierrors.IsUnauthorized(err), apierrors.IsForbidden(err):
		kind = provider.ErrUnauthenticated
	case apierrors.IsNotFound(err):
		kind = provider.ErrNotFound
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		kind = provider.ErrConflict
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		kind = provider.ErrPrecondition
	case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), isServerError(err), isNetError(err):
		kind = provider.ErrTransient
	default:
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w: %w", what, kind, err)
}

func isServerError(err error) bool {
	var s apierrors.APIStatus
	return errors.As(err, &s) && s.Status().Code >= 500
}

func isNetError(err error) bool {
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue)
}

// SplitID splits a machine ID "namespace/name"; what names the object
// ("pod", "VMI") in the error.
func SplitID(what, id string) (ns, name string, err error) {
	ns, name, ok := strings.Cut(id, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%s ID %q is not namespace/name: %w", what, id, provider.ErrNotFound)
	}
	return ns, name, nil
}

// CheckImage accepts an image reference: registry, path, tag and digest
// characters only.
func CheckImage(s string) error {
	if s == "" || len(s) > 255 {
		return fmt.Errorf("%q: want 1 to 255 characters", s)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-/:@", r)) {
			return fmt.Errorf("%q: character %q does not belong in an image reference", s, r)
		}
	}
	return nil
}

// CheckDNSLabel accepts a namespace name: an RFC 1123 label.
func CheckDNSLabel(s string) error {
	if s == "" || len(s) > 63 {
		return fmt.Errorf("%q: want 1 to 63 characters", s)
	}
	for i, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' && i > 0 && i < len(s)-1) {
			return fmt.Errorf("%q: want lowercase letters, digits and inner '-'", s)
		}
	}
	return nil
}

// CheckServiceType accepts "" (NodePort) or a Service type crabbox uses.
func CheckServiceType(s string) (string, error) {
	switch s {
	case "":
		return ServiceNodePort, nil
	case ServiceNodePort, ServiceLoadBalancer:
		return s, nil
	}
	return "", fmt.Errorf("%q: want %s or %s", s, ServiceNodePort, ServiceLoadBalancer)
}

// CheckNodeAddress accepts "" or a host name or IP address.
func CheckNodeAddress(s string) error {
	if s != "" && (strings.ContainsAny(s, " /:@\t\r\n") || len(s) > 253) {
		return fmt.Errorf("%q: want a host name or IP address", s)
	}
	return nil
}

// Owner makes the object (apiVersion, kind, name, uid) the owner of a
// dependent, so that the garbage collector deletes the dependent with it.
func Owner(apiVersion, kind, name string, uid types.UID) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid}}
}

// Secret is a box's bootstrap Secret: data under key, crabbox's labels,
// owned by owner.
func Secret(ns, name string, owner []metav1.OwnerReference, labels map[string]string, key, data string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, OwnerReferences: owner},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{key: []byte(data)},
	}
}

// Service exposes a box's sshd (port, named portName) as a Service of
// typ, selecting the box's pod by its lease label.
func Service(ns, name string, owner []metav1.OwnerReference, labels map[string]string, typ, portName string, port int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, OwnerReferences: owner},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceType(typ),
			Selector: map[string]string{cloud.LabelCrabbox: "true", cloud.LabelLease: labels[cloud.LabelLease]},
			Ports: []corev1.ServicePort{{
				Name: portName, Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(port),
			}},
		},
	}
}

// DeleteDependents deletes the Service and the Secret named name; ones
// already gone count as deleted.
func DeleteDependents(ctx context.Context, cs k8s.Interface, ns, name string) error {
	core := cs.CoreV1()
	for _, d := range []struct {
		what string
		del  func(context.Context, string, metav1.DeleteOptions) error
	}{
		{"service", core.Services(ns).Delete},
		{"secret", core.Secrets(ns).Delete},
	} {
		if err := d.del(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return APIError("delete "+d.what+" "+ns+"/"+name, err)
		}
	}
	return nil
}

// Addresser finds where a box's Service is reached.
type Addresser struct {
	CS k8s.Interface
	// NodeAddress is where node ports are reached; empty means the box's
	// node's ExternalIP, else its InternalIP.
	NodeAddress string
}

// ServiceAddress is where the Service ns/name is reached: a node port at
// the node address (of node nodeName; nodes caches the nodes'
// addresses), or the load balancer's address and port. An empty host
// means no address yet (or no Service: not a box crabbox can reach).
func (a Addresser) ServiceAddress(ctx context.Context, ns, name, nodeName string, nodes map[string]string) (string, int, error) {
	svc, err := a.CS.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, APIError("read service "+ns+"/"+name, err)
	}
	if len(svc.Spec.Ports) == 0 {
		return "", 0, nil
	}
	switch svc.Spec.Type {
	case corev1.ServiceTypeLoadBalancer:
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if host := cmpOr(in.IP, in.Hostname); host != "" {
				return host, int(svc.Spec.Ports[0].Port), nil
			}
		}
	case corev1.ServiceTypeNodePort:
		if svc.Spec.Ports[0].NodePort == 0 {
			return "", 0, nil
		}
		host, err := a.nodeAddress(ctx, nodeName, nodes)
		if err != nil {
			return "", 0, err
		}
		return host, int(svc.Spec.Ports[0].NodePort), nil
	}
	return "", 0, nil
}

// nodeAddress is where node ports of node name are reached: the
// node-address option, else the node's ExternalIP, else its InternalIP.
func (a Addresser) nodeAddress(ctx context.Context, name string, cache map[string]string) (string, error) {
	if a.NodeAddress != "" {
		return a.NodeAddress, nil
	}
	if name == "" {
		return "", nil
	}
	if addr, ok := cache[name]; ok {
		return addr, nil
	}
	node, err := a.CS.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", APIError("read node "+name+" (or set the node-address option)", err)
	}
	var addr string
	for _, want := range []corev1.NodeAddressType{corev1.NodeExternalIP, corev1.NodeInternalIP} {
		for _, na := range node.Status.Addresses {
			if na.Type == want && addr == "" {
				addr = na.Address
			}
		}
	}
	cache[name] = addr
	return addr, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Access is how a cluster provider reaches its cluster and its boxes: the
// kubeconfig file and context, the Service type and where node ports are
// reached, trimmed as given (empty means the default).
type Access struct {
	Kubeconfig, Context, ServiceType, NodeAddress string
}

// ParseOptions parses the options the cluster providers share: c's tag
// cloud options, with the namespace option as the region, and the
// options of Access. Errors name the option that is wrong.
func ParseOptions(c tagcloud.Cloud, cfg provider.Config) (tagcloud.Options, Access, error) {
	raw := maps.Clone(cfg)
	if raw == nil {
		raw = provider.Config{}
	}
	raw["region"] = cfg["namespace"]
	o, err := c.Parse(raw)
	if err != nil {
		return tagcloud.Options{}, Access{}, err
	}
	return o, Access{
		Kubeconfig: strings.TrimSpace(cfg["kubeconfig"]), Context: strings.TrimSpace(cfg["context"]),
		ServiceType: strings.TrimSpace(cfg["service-type"]), NodeAddress: strings.TrimSpace(cfg["node-address"]),
	}, nil
}
