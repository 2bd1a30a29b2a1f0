package kubevirt

import (
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Names in the VMI.
const (
	// UserDataKey is the cloud-init Secret's key holding the user data
	// (KubeVirt reads "userdata" or "userData").
	UserDataKey = "userdata"
	// PhaseRunning is the phase of a VMI whose VM runs.
	PhaseRunning = "Running"
	// diskName and cloudInitName name the VM's disks and their volumes.
	diskName      = "containerdisk"
	cloudInitName = "cloudinitdisk"
)

// vmiSpec is what a VMI of a lease is made of.
type vmiSpec struct {
	Name, Namespace, Image string
	Labels                 map[string]string
	Size                   size
}

// object is the lease's VirtualMachineInstance: the containerDisk and
// the cloud-init NoCloud disk (user data from the Secret of the same
// name) on virtio, the size's CPUs (as cores, and requested: what a ResourceQuota counts) and memory requested, one
// interface on the pod network with masquerade (the pod's ports
// forwarded to the VM, so a Service selecting the virt-launcher pod
// reaches sshd), crabbox's labels (copied by KubeVirt to the pod).
func (s vmiSpec) object() *unstructured.Unstructured {
	labels := map[string]any{}
	for k, v := range s.Labels {
		labels[k] = v
	}
	virtio := func(name string) map[string]any {
		return map[string]any{"name": name, "disk": map[string]any{"bus": "virtio"}}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": GroupVersion,
		"kind":       "VirtualMachineInstance",
		"metadata":   map[string]any{"name": s.Name, "namespace": s.Namespace, "labels": labels},
		"spec": map[string]any{
			"terminationGracePeriodSeconds": int64(30),
			"domain": map[string]any{
				"cpu":       map[string]any{"cores": s.Size.Cores},
				"resources": map[string]any{"requests": map[string]any{"cpu": strconv.FormatInt(s.Size.Cores, 10), "memory": s.Size.Memory}},
				"devices": map[string]any{
					"disks":      []any{virtio(diskName), virtio(cloudInitName)},
					"interfaces": []any{map[string]any{"name": "default", "masquerade": map[string]any{}}},
				},
			},
			"networks": []any{map[string]any{"name": "default", "pod": map[string]any{}}},
			"volumes": []any{
				map[string]any{"name": diskName, "containerDisk": map[string]any{"image": s.Image}},
				map[string]any{"name": cloudInitName, "cloudInitNoCloud": map[string]any{"secretRef": map[string]any{"name": s.Name}}},
			},
		},
	}}
}
