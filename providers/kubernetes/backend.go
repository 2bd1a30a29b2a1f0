package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// Backend is the Kubernetes provider's SSH-lease backend.
type Backend struct {
	*tagcloud.Backend
	cfg    Config
	pods   *pods
	server string
}

// codec renders labels as the tag strings of the tag cloud lifecycle;
// the pods carry them as Kubernetes labels again (no split: a label value
// has at most 63 characters).
var codec = cloud.TagCodec{MaxLen: 512}

// PageSize is the limit of one page of a list.
const PageSize = 100

// New returns a backend for cfg. It reads the kubeconfig (unless
// cfg.REST is set) but makes no API call.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rt = rt.WithDefaults()
	restCfg := cfg.REST
	if restCfg == nil {
		var ns string
		if restCfg, ns, err = loadKubeconfig(cfg); err != nil {
			return nil, err
		}
		if len(cfg.Regions) == 0 {
			cfg.Regions = []string{ns}
		}
	} else {
		restCfg = rest.CopyConfig(restCfg)
	}
	if len(cfg.Regions) == 0 {
		return nil, fmt.Errorf("%s provider: no namespace: set the namespace option", Name)
	}
	// The library never prints: the API server's warnings are logged.
	restCfg.WarningHandlerWithContext = warningLogger{rt.Logger}
	restCfg.WarningHandler = nil
	restCfg.UserAgent = "crabbox"
	// JSON, the API's described encoding, rather than client-go's
	// protobuf: the same objects, and what the tests' fake speaks.
	restCfg.ContentType, restCfg.AcceptContentTypes = "application/json", "application/json"
	if restCfg.QPS == 0 {
		restCfg.QPS, restCfg.Burst = 20, 40
	}
	var cs *k8s.Clientset
	if cfg.HTTPClient != nil {
		cs, err = k8s.NewForConfigAndClient(restCfg, cfg.HTTPClient)
	} else {
		cs, err = k8s.NewForConfig(restCfg)
	}
	if err != nil {
		return nil, fmt.Errorf("%s provider: API client: %w", Name, err)
	}
	poll := cfg.PollInterval
	if poll <= 0 {
		poll = 2 * time.Second
	}
	p := &pods{cs: cs, cfg: cfg, log: rt.Logger}
	b := &Backend{cfg: cfg, pods: p, server: restCfg.Host}
	b.Backend = tagcloud.New(tagcloud.Config{
		Options: cfg.Options, Provider: Name, Codec: codec,
		Ports: []int{SSHPort}, PollInterval: poll, MapAddress: cfg.MapAddress, CallTimeout: cfg.CallTimeout,
	}, p, rt)
	return b, nil
}

// loadKubeconfig loads the client configuration as kubectl does, and the
// context's namespace ("default" when it names none).
func loadKubeconfig(cfg Config) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if cfg.Kubeconfig != "" {
		rules.ExplicitPath = cfg.Kubeconfig
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: cfg.Context}
	if cfg.Endpoint != "" {
		overrides.ClusterInfo.Server = cfg.Endpoint
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	restCfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("%s provider: kubeconfig: %w: set the kubeconfig option or KUBECONFIG, or run in a pod with a service account: %w",
			Name, err, provider.ErrUnauthenticated)
	}
	ns, _, err := cc.Namespace()
	if err != nil || ns == "" {
		ns = "default"
	}
	return restCfg, ns, nil
}

// warningLogger logs the API server's warnings instead of printing them.
type warningLogger struct{ log *slog.Logger }

func (w warningLogger) HandleWarningHeaderWithContext(_ context.Context, code int, agent, text string) {
	w.log.Warn("kubernetes API warning", "code", code, "agent", agent, "text", text)
}

// pods is the tag cloud API on the cluster: a machine is a pod (ID
// "namespace/name") with its Service's address.
type pods struct {
	cs  k8s.Interface
	cfg Config
	log *slog.Logger
}

var _ tagcloud.API = (*pods)(nil)

// Create creates the lease's pod, then its bootstrap Secret and its
// Service (both owned by the pod). When the Secret or the Service cannot
// be made, it deletes what it made before returning the error, so the
// next placement may use the name again.
func (p *pods) Create(ctx context.Context, s tagcloud.Spec) (tagcloud.Machine, error) {
	z, err := parseSize(s.Size)
	if err != nil {
		return tagcloud.Machine{}, fmt.Errorf("size: %w: %w", err, provider.ErrPrecondition)
	}
	l := codec.Labels(s.Tags)
	ttl, _ := strconv.ParseInt(l[cloud.LabelTTLSecs], 10, 64)
	ps := podSpec{Name: s.Name, Namespace: s.Region, Image: s.Image, Labels: l, Size: z,
		GPUResource: p.cfg.GPUResource, Prepared: p.cfg.Prepared, Deadline: ttl}
	pod, err := p.cs.CoreV1().Pods(s.Region).Create(ctx, ps.pod(), metav1.CreateOptions{})
	if err != nil {
		return tagcloud.Machine{}, apiError("create pod "+s.Region+"/"+s.Name, err)
	}
	own := cloud.Ownership(Name, l[cloud.LabelLease])
	undo := func(err error) (tagcloud.Machine, error) {
		if derr := p.delete(ctx, pod.Namespace, pod.Name); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete it again: %w", derr))
		}
		return tagcloud.Machine{}, err
	}
	if _, err := p.cs.CoreV1().Secrets(s.Region).Create(ctx, secret(pod, own, s.UserData), metav1.CreateOptions{}); err != nil {
		return undo(apiError("create the bootstrap secret of pod "+pod.Namespace+"/"+pod.Name, err))
	}
	if _, err := p.cs.CoreV1().Services(s.Region).Create(ctx, service(pod, own, p.cfg.ServiceType), metav1.CreateOptions{}); err != nil {
		return undo(apiError("create the service of pod "+pod.Namespace+"/"+pod.Name, err))
	}
	return machine(pod), nil
}

// Get reads the pod and, while it runs, its Service's address.
func (p *pods) Get(ctx context.Context, id string) (tagcloud.Machine, error) {
	ns, name, err := splitID(id)
	if err != nil {
		return tagcloud.Machine{}, err
	}
	pod, err := p.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return tagcloud.Machine{}, apiError("read pod "+id, err)
	}
	return p.withAddress(ctx, pod, map[string]string{})
}

// List returns the pods of every namespace carrying the label of tag,
// page by page.
func (p *pods) List(ctx context.Context, tag string) ([]tagcloud.Machine, error) {
	key, value, ok := strings.Cut(tag, ":")
	if !ok {
		return nil, fmt.Errorf("list pods: tag %q is not key:value", tag)
	}
	sel := labels.SelectorFromSet(labels.Set{key: value}).String()
	nodes := map[string]string{}
	var out []tagcloud.Machine
	for _, ns := range p.cfg.Regions {
		opts := metav1.ListOptions{LabelSelector: sel, Limit: PageSize}
		for {
			list, err := p.cs.CoreV1().Pods(ns).List(ctx, opts)
			if err != nil {
				return nil, apiError("list pods in namespace "+ns, err)
			}
			for i := range list.Items {
				m, err := p.withAddress(ctx, &list.Items[i], nodes)
				if err != nil {
					return nil, err
				}
				out = append(out, m)
			}
			if opts.Continue = list.Continue; opts.Continue == "" {
				break
			}
		}
	}
	return out, nil
}

// SetTags sets the pod's labels of tags (a merge: labels of other tools
// stay).
func (p *pods) SetTags(ctx context.Context, m tagcloud.Machine, tags []string) (tagcloud.Machine, error) {
	ns, name, err := splitID(m.ID)
	if err != nil {
		return tagcloud.Machine{}, err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": codec.Labels(tags)}})
	if err != nil {
		return tagcloud.Machine{}, err
	}
	pod, err := p.cs.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return tagcloud.Machine{}, apiError("label pod "+m.ID, err)
	}
	return p.withAddress(ctx, pod, map[string]string{})
}

// Delete deletes the pod's Service, Secret and the pod itself, the pod
// last, so that what is left is always found again by its labels.
func (p *pods) Delete(ctx context.Context, id string) error {
	ns, name, err := splitID(id)
	if err != nil {
		return err
	}
	return p.delete(ctx, ns, name)
}

func (p *pods) delete(ctx context.Context, ns, name string) error {
	core := p.cs.CoreV1()
	for _, d := range []struct {
		what string
		del  func(context.Context, string, metav1.DeleteOptions) error
	}{
		{"service", core.Services(ns).Delete},
		{"secret", core.Secrets(ns).Delete},
		{"pod", core.Pods(ns).Delete},
	} {
		if err := d.del(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return apiError("delete "+d.what+" "+ns+"/"+name, err)
		}
	}
	return nil
}

// machine is pod as a tag cloud machine, without an address.
func machine(pod *corev1.Pod) tagcloud.Machine {
	var tags []string
	for k, v := range pod.Labels {
		if cloud.CheckKey(k) == nil && !strings.Contains(k, ".") {
			tags = append(tags, codec.Tag(k, v))
		}
	}
	status := strings.ToLower(string(pod.Status.Phase))
	if status == "" {
		status = "pending"
	}
	if pod.DeletionTimestamp != nil {
		status = "terminating"
	}
	return tagcloud.Machine{
		ID: pod.Namespace + "/" + pod.Name, Tags: tags, Status: status,
		Running: pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil,
	}
}

// withAddress is the machine of pod with, while it runs, where its
// Service is reached: a node port at the node address (nodes caches the
// nodes' addresses), or the load balancer's address and port.
func (p *pods) withAddress(ctx context.Context, pod *corev1.Pod, nodes map[string]string) (tagcloud.Machine, error) {
	m := machine(pod)
	if !m.Running {
		return m, nil
	}
	svc, err := p.cs.CoreV1().Services(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return m, nil // no address: not a box crabbox can reach
	}
	if err != nil {
		return m, apiError("read service "+m.ID, err)
	}
	if len(svc.Spec.Ports) == 0 {
		return m, nil
	}
	switch svc.Spec.Type {
	case corev1.ServiceTypeLoadBalancer:
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if host := cmpOr(in.IP, in.Hostname); host != "" {
				m.IPv4, m.Port = host, int(svc.Spec.Ports[0].Port)
				break
			}
		}
	case corev1.ServiceTypeNodePort:
		if svc.Spec.Ports[0].NodePort == 0 {
			return m, nil
		}
		host, err := p.nodeAddress(ctx, pod.Spec.NodeName, nodes)
		if err != nil {
			return m, err
		}
		m.IPv4, m.Port = host, int(svc.Spec.Ports[0].NodePort)
	}
	return m, nil
}

// nodeAddress is where node ports of node name are reached: the
// node-address option, else the node's ExternalIP, else its InternalIP.
func (p *pods) nodeAddress(ctx context.Context, name string, cache map[string]string) (string, error) {
	if p.cfg.NodeAddress != "" {
		return p.cfg.NodeAddress, nil
	}
	if name == "" {
		return "", nil
	}
	if a, ok := cache[name]; ok {
		return a, nil
	}
	node, err := p.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", apiError("read node "+name+" (or set the node-address option)", err)
	}
	var addr string
	for _, want := range []corev1.NodeAddressType{corev1.NodeExternalIP, corev1.NodeInternalIP} {
		for _, a := range node.Status.Addresses {
			if a.Type == want && addr == "" {
				addr = a.Address
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

// splitID splits a machine ID "namespace/name".
func splitID(id string) (ns, name string, err error) {
	ns, name, ok := strings.Cut(id, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("pod ID %q is not namespace/name: %w", id, provider.ErrNotFound)
	}
	return ns, name, nil
}

// apiError says what failed and wraps err with its portable kind: a
// ResourceQuota refusal is provider.ErrCapacity (the next placement is
// tried), 401 and 403 ErrUnauthenticated, 404 ErrNotFound, 409
// ErrConflict, 400 and 422 ErrPrecondition, 429, 5xx and network errors
// ErrTransient. The raw error stays reachable with errors.As.
func apiError(what string, err error) error {
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
