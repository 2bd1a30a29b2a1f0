package kubevirt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/kube"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// Backend is the KubeVirt provider's SSH-lease backend.
type Backend struct {
	*tagcloud.Backend
	cfg    Config
	vmis   *vmis
	server string
}

// codec renders labels as the tag strings of the tag cloud lifecycle;
// the VMIs carry them as Kubernetes labels again.
var codec = cloud.TagCodec{MaxLen: 512}

// PageSize is the limit of one page of a list.
const PageSize = 100

// GroupVersion is KubeVirt's API group and version.
const GroupVersion = "kubevirt.io/v1"

// vmiResource is the VirtualMachineInstance resource.
var vmiResource = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}

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
	hc := cfg.HTTPClient
	if hc == nil {
		if hc, err = rest.HTTPClientFor(restCfg); err != nil {
			return nil, fmt.Errorf("%s provider: API client: %w", Name, err)
		}
	}
	cs, err := k8s.NewForConfigAndClient(restCfg, hc)
	if err != nil {
		return nil, fmt.Errorf("%s provider: API client: %w", Name, err)
	}
	dyn, err := dynamic.NewForConfigAndClient(restCfg, hc)
	if err != nil {
		return nil, fmt.Errorf("%s provider: API client: %w", Name, err)
	}
	poll := cfg.PollInterval
	if poll <= 0 {
		poll = 2 * time.Second
	}
	v := &vmis{cs: cs, dyn: dyn, cfg: cfg, log: rt.Logger}
	b := &Backend{cfg: cfg, vmis: v, server: restCfg.Host}
	b.Backend = tagcloud.New(tagcloud.Config{
		Options: cfg.Options, Provider: Name, Codec: codec,
		Ports: []int{SSHPort}, PollInterval: poll, MapAddress: cfg.MapAddress, CallTimeout: cfg.CallTimeout,
	}, v, rt)
	return b, nil
}

// vmis is the tag cloud API on the cluster: a machine is a VMI (ID
// "namespace/name") with its Service's address.
type vmis struct {
	cs  k8s.Interface
	dyn dynamic.Interface
	cfg Config
	log *slog.Logger
}

var _ tagcloud.API = (*vmis)(nil)

func (v *vmis) res(ns string) dynamic.ResourceInterface {
	return v.dyn.Resource(vmiResource).Namespace(ns)
}

// Create creates the lease's VMI, then its cloud-init Secret and its
// Service (both owned by the VMI). When the Secret or the Service cannot
// be made, it deletes what it made before returning the error, so the
// next placement may use the name again.
func (v *vmis) Create(ctx context.Context, s tagcloud.Spec) (tagcloud.Machine, error) {
	z, err := parseSize(s.Size)
	if err != nil {
		return tagcloud.Machine{}, fmt.Errorf("size: %w: %w", err, provider.ErrPrecondition)
	}
	l := codec.Labels(s.Tags)
	obj := vmiSpec{Name: s.Name, Namespace: s.Region, Image: s.Image, Labels: l, Size: z}.object()
	vmi, err := v.res(s.Region).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return tagcloud.Machine{}, kube.APIError("create VMI "+s.Region+"/"+s.Name, err)
	}
	own := cloud.Ownership(Name, l[cloud.LabelLease])
	ns, name := vmi.GetNamespace(), vmi.GetName()
	undo := func(err error) (tagcloud.Machine, error) {
		if derr := v.delete(ctx, ns, name); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete it again: %w", derr))
		}
		return tagcloud.Machine{}, err
	}
	owner := kube.Owner(GroupVersion, "VirtualMachineInstance", name, vmi.GetUID())
	if _, err := v.cs.CoreV1().Secrets(ns).Create(ctx, kube.Secret(ns, name, owner, own, UserDataKey, s.UserData), metav1.CreateOptions{}); err != nil {
		return undo(kube.APIError("create the cloud-init secret of VMI "+ns+"/"+name, err))
	}
	if _, err := v.cs.CoreV1().Services(ns).Create(ctx, kube.Service(ns, name, owner, own, v.cfg.ServiceType, "ssh", SSHPort), metav1.CreateOptions{}); err != nil {
		return undo(kube.APIError("create the service of VMI "+ns+"/"+name, err))
	}
	return machine(vmi), nil
}

// Get reads the VMI and, while it runs, its Service's address.
func (v *vmis) Get(ctx context.Context, id string) (tagcloud.Machine, error) {
	ns, name, err := kube.SplitID("VMI", id)
	if err != nil {
		return tagcloud.Machine{}, err
	}
	vmi, err := v.res(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return tagcloud.Machine{}, kube.APIError("read VMI "+id, err)
	}
	return v.withAddress(ctx, vmi, map[string]string{})
}

// List returns the VMIs of every namespace carrying the label of tag,
// page by page.
func (v *vmis) List(ctx context.Context, tag string) ([]tagcloud.Machine, error) {
	key, value, ok := strings.Cut(tag, ":")
	if !ok {
		return nil, fmt.Errorf("list VMIs: tag %q is not key:value", tag)
	}
	sel := labels.SelectorFromSet(labels.Set{key: value}).String()
	nodes := map[string]string{}
	var out []tagcloud.Machine
	for _, ns := range v.cfg.Regions {
		opts := metav1.ListOptions{LabelSelector: sel, Limit: PageSize}
		for {
			list, err := v.res(ns).List(ctx, opts)
			if err != nil {
				return nil, kube.APIError("list VMIs in namespace "+ns, err)
			}
			for i := range list.Items {
				m, err := v.withAddress(ctx, &list.Items[i], nodes)
				if err != nil {
					return nil, err
				}
				out = append(out, m)
			}
			if opts.Continue = list.GetContinue(); opts.Continue == "" {
				break
			}
		}
	}
	return out, nil
}

// SetTags sets the VMI's labels of tags (a merge patch: labels of other
// tools stay).
func (v *vmis) SetTags(ctx context.Context, m tagcloud.Machine, tags []string) (tagcloud.Machine, error) {
	ns, name, err := kube.SplitID("VMI", m.ID)
	if err != nil {
		return tagcloud.Machine{}, err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": codec.Labels(tags)}})
	if err != nil {
		return tagcloud.Machine{}, err
	}
	vmi, err := v.res(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return tagcloud.Machine{}, kube.APIError("label VMI "+m.ID, err)
	}
	return v.withAddress(ctx, vmi, map[string]string{})
}

// Delete deletes the VMI's Service, Secret and the VMI itself, the VMI
// last, so that what is left is always found again by its labels.
func (v *vmis) Delete(ctx context.Context, id string) error {
	ns, name, err := kube.SplitID("VMI", id)
	if err != nil {
		return err
	}
	return v.delete(ctx, ns, name)
}

func (v *vmis) delete(ctx context.Context, ns, name string) error {
	if err := kube.DeleteDependents(ctx, v.cs, ns, name); err != nil {
		return err
	}
	if err := v.res(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return kube.APIError("delete VMI "+ns+"/"+name, err)
	}
	return nil
}

// machine is vmi as a tag cloud machine, without an address.
func machine(vmi *unstructured.Unstructured) tagcloud.Machine {
	var tags []string
	for k, val := range vmi.GetLabels() {
		if cloud.CheckKey(k) == nil && !strings.Contains(k, ".") {
			tags = append(tags, codec.Tag(k, val))
		}
	}
	phase, _, _ := unstructured.NestedString(vmi.Object, "status", "phase")
	status := strings.ToLower(phase)
	if status == "" {
		status = "pending"
	}
	deleting := vmi.GetDeletionTimestamp() != nil
	if deleting {
		status = "terminating"
	}
	return tagcloud.Machine{
		ID: vmi.GetNamespace() + "/" + vmi.GetName(), Tags: tags, Status: status,
		Running: phase == PhaseRunning && !deleting,
	}
}

// withAddress is the machine of vmi with, while it runs, where its
// Service is reached (nodes caches the nodes' addresses).
func (v *vmis) withAddress(ctx context.Context, vmi *unstructured.Unstructured, nodes map[string]string) (tagcloud.Machine, error) {
	m := machine(vmi)
	if !m.Running {
		return m, nil
	}
	node, _, _ := unstructured.NestedString(vmi.Object, "status", "nodeName")
	host, port, err := kube.Addresser{CS: v.cs, NodeAddress: v.cfg.NodeAddress}.ServiceAddress(ctx, vmi.GetNamespace(), vmi.GetName(), node, nodes)
	if err != nil {
		return m, err
	}
	if host != "" {
		m.IPv4, m.Port = host, port
	}
	return m, nil
}
