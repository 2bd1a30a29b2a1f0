package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/kube"
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
		if restCfg, ns, err = kube.LoadKubeconfig(Name, cfg.Kubeconfig, cfg.Context, cfg.Endpoint); err != nil {
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
	kube.PrepareREST(restCfg, rt.Logger)
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
	if err := kube.DeleteDependents(ctx, p.cs, ns, name); err != nil {
		return err
	}
	if err := p.cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return apiError("delete pod "+ns+"/"+name, err)
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
// Service is reached (nodes caches the nodes' addresses).
func (p *pods) withAddress(ctx context.Context, pod *corev1.Pod, nodes map[string]string) (tagcloud.Machine, error) {
	m := machine(pod)
	if !m.Running {
		return m, nil
	}
	host, port, err := kube.Addresser{CS: p.cs, NodeAddress: p.cfg.NodeAddress}.ServiceAddress(ctx, pod.Namespace, pod.Name, pod.Spec.NodeName, nodes)
	if err != nil {
		return m, err
	}
	if host != "" {
		m.IPv4, m.Port = host, port
	}
	return m, nil
}

// splitID splits a machine ID "namespace/name".
func splitID(id string) (ns, name string, err error) { return kube.SplitID("pod", id) }

// apiError says what failed and wraps err with its portable kind.
var apiError = kube.APIError
