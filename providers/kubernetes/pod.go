package kubernetes

import (
	"fmt"
	"regexp"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crabbox-dev/crabbox/providers/internal/kube"
)

// Names inside the pod.
const (
	// containerName is the box's container.
	containerName = "box"
	// bootstrapKey is the Secret's key holding the bootstrap script.
	bootstrapKey = "bootstrap.sh"
	// bootstrapDir is where the pod mounts the Secret.
	bootstrapDir = "/etc/crabbox-boot"
	// portName names the SSH port of the container and the Service.
	portName = "ssh"
)

// size is a pod's resource requests.
type size struct {
	CPU, Memory resource.Quantity
	GPUs        int64
}

var sizePattern = regexp.MustCompile(`^([0-9]+(?:\.[0-9]{1,3})?)c([0-9]+(?:\.[0-9]{1,3})?)g(?:([0-9]+)gpu)?$`)

// parseSize reads "<cores>c<GiB>g" with an optional "<n>gpu".
func parseSize(s string) (size, error) {
	m := sizePattern.FindStringSubmatch(s)
	if m == nil {
		return size{}, fmt.Errorf("%q: want CPU cores and GiB of memory like 2c4g or 0.5c1g, optionally GPUs like 4c16g1gpu", s)
	}
	cpu, err := resource.ParseQuantity(m[1])
	if err != nil || cpu.Sign() <= 0 {
		return size{}, fmt.Errorf("%q: CPU cores %q must be more than zero", s, m[1])
	}
	mem, err := resource.ParseQuantity(m[2] + "Gi")
	if err != nil || mem.Sign() <= 0 {
		return size{}, fmt.Errorf("%q: memory %qGiB must be more than zero", s, m[2])
	}
	var gpus int64
	if m[3] != "" {
		if gpus, err = strconv.ParseInt(m[3], 10, 32); err != nil || gpus < 1 {
			return size{}, fmt.Errorf("%q: GPU count %q must be at least 1", s, m[3])
		}
	}
	return size{CPU: cpu, Memory: mem, GPUs: gpus}, nil
}

// resources are the container's requests (and the GPUs' limits, which
// an extended resource needs as well).
func (z size) resources(gpuResource string) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: z.CPU, corev1.ResourceMemory: z.Memory}}
	if z.GPUs > 0 {
		q := *resource.NewQuantity(z.GPUs, resource.DecimalSI)
		r.Requests[corev1.ResourceName(gpuResource)] = q
		r.Limits = corev1.ResourceList{corev1.ResourceName(gpuResource): q}
	}
	return r
}

// startScript is the container's command, run as root by /bin/sh: it
// installs sshd when the image has none (unless prepared), runs the
// bootstrap from the Secret (which starts sshd, or on failure starts it
// with a banner saying what failed), and then keeps the container up
// until the kubelet stops it.
const startScript = `set -u
if [ "${CRABBOX_PREPARED:-0}" != 1 ] && ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then
	if command -v apt-get >/dev/null 2>&1; then
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -q && apt-get install -y -q --no-install-recommends openssh-server
	elif command -v dnf >/dev/null 2>&1; then
		dnf install -y openssh-server
	elif command -v yum >/dev/null 2>&1; then
		yum install -y openssh-server
	elif command -v zypper >/dev/null 2>&1; then
		zypper --non-interactive install openssh
	elif command -v apk >/dev/null 2>&1; then
		apk add --no-cache openssh shadow
	fi
fi
/bin/sh ` + bootstrapDir + `/` + bootstrapKey + `
trap 'exit 0' TERM INT
while :; do sleep 3600 & wait $!; done
`

// podSpec is what a pod of a lease is made of.
type podSpec struct {
	Name, Namespace, Image string
	Labels                 map[string]string
	Size                   size
	GPUResource            string
	Prepared               bool
	// Deadline is activeDeadlineSeconds: the lease's TTL.
	Deadline int64
}

// pod is the lease's pod: one root container running startScript with
// the bootstrap Secret mounted, no service account token, the TTL as its
// active deadline, never restarted.
func (s podSpec) pod() *corev1.Pod {
	no := false
	grace := int64(5)
	mode := int32(0o400)
	prepared := "0"
	if s.Prepared {
		prepared = "1"
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Labels: s.Labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: containerName, Image: s.Image,
				Command:      []string{"/bin/sh", "-c", startScript},
				Env:          []corev1.EnvVar{{Name: "CRABBOX_PREPARED", Value: prepared}},
				Ports:        []corev1.ContainerPort{{Name: portName, ContainerPort: SSHPort, Protocol: corev1.ProtocolTCP}},
				Resources:    s.Size.resources(s.GPUResource),
				VolumeMounts: []corev1.VolumeMount{{Name: "crabbox-boot", MountPath: bootstrapDir, ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "crabbox-boot", VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: s.Name, DefaultMode: &mode},
			}}},
		},
	}
	if s.Deadline > 0 {
		p.Spec.ActiveDeadlineSeconds = &s.Deadline
	}
	return p
}

// owner makes p the owner of a dependent object, so that the garbage
// collector deletes the object with the pod.
func owner(p *corev1.Pod) []metav1.OwnerReference { return kube.Owner("v1", "Pod", p.Name, p.UID) }

// secret holds the bootstrap script of pod p: the lease key and the host
// key the client made.
func secret(p *corev1.Pod, labels map[string]string, userData string) *corev1.Secret {
	return kube.Secret(p.Namespace, p.Name, owner(p), labels, bootstrapKey, userData)
}

// service exposes sshd of pod p, selected by its lease label.
func service(p *corev1.Pod, labels map[string]string, typ string) *corev1.Service {
	return kube.Service(p.Namespace, p.Name, owner(p), labels, typ, portName, SSHPort)
}
