package fakekube

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// vmiBox prefixes a VMI's key among the boxes.
const vmiBox = "vmi:"

// VMI phases (v1.VirtualMachineInstanceStatus.phase).
const (
	PhasePending    = "Pending"
	PhaseScheduling = "Scheduling"
	PhaseRunning    = "Running"
	PhaseFailed     = "Failed"
)

// createVMI serves the create of a VirtualMachineInstance.
func (s *Server) createVMI(w http.ResponseWriter, ns string, body []byte) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(body); err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "the object provided is unrecognized: "+err.Error(), VMIResource, "")
		return
	}
	name := u.GetName()
	if name == "" || len(name) > 63 || u.GetNamespace() != "" && u.GetNamespace() != ns || u.GetKind() != "VirtualMachineInstance" {
		writeStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf("VirtualMachineInstance %q is invalid: metadata.name, namespace or kind", name), VMIResource, name)
		return
	}
	invalid := func(field string) {
		writeStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			fmt.Sprintf("admission webhook \"virtualmachineinstances-create-validator.kubevirt.io\" denied the request: %s is required", field), VMIResource, name)
	}
	if _, ok, _ := unstructured.NestedMap(u.Object, "spec", "domain", "devices"); !ok {
		invalid("spec.domain.devices")
		return
	}
	if image, _ := vmiVolume(u, "containerDisk", "image"); image == "" {
		invalid("spec.volumes[].containerDisk.image")
		return
	}
	if secret, _ := vmiVolume(u, "cloudInitNoCloud", "secretRef", "name"); secret == "" {
		invalid("spec.volumes[].cloudInitNoCloud.secretRef.name")
		return
	}
	cpu, _, _ := unstructured.NestedString(u.Object, "spec", "domain", "resources", "requests", "cpu")
	mem, _, _ := unstructured.NestedString(u.Object, "spec", "domain", "resources", "requests", "memory")
	c := Create{Namespace: ns, CPU: cpu, Memory: mem}
	s.creates = append(s.creates, c)
	key := ns + "/" + name
	if _, ok := s.vmis[key]; ok {
		alreadyExists(w, VMIResource+".kubevirt.io", name)
		return
	}
	if s.full[c] {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
			fmt.Sprintf("virtualmachineinstances.kubevirt.io %q is forbidden: exceeded quota: vms, requested: count/virtualmachineinstances.kubevirt.io=1, used: count/virtualmachineinstances.kubevirt.io=4, limited: count/virtualmachineinstances.kubevirt.io=4", name),
			VMIResource, name)
		return
	}
	s.next++
	u.SetNamespace(ns)
	u.SetUID(types.UID(fmt.Sprintf("uid-%d", s.next)))
	u.SetResourceVersion(strconv.Itoa(s.next))
	u.SetCreationTimestamp(metav1.NewTime(time.Now().Truncate(time.Second)))
	status := map[string]any{"phase": PhaseScheduling}
	if len(s.nodes) > 0 {
		status["nodeName"] = s.nodes[s.next%len(s.nodes)].Name
	}
	u.Object["status"] = status
	s.vmis[key] = u
	s.bootVMILocked(key)
	writeJSON(w, http.StatusCreated, u)
}

// vmiVolume is the string at path under the first volume of u having
// source (containerDisk, cloudInitNoCloud).
func vmiVolume(u *unstructured.Unstructured, source string, path ...string) (string, bool) {
	vols, _, _ := unstructured.NestedSlice(u.Object, "spec", "volumes")
	for _, v := range vols {
		m, ok := v.(map[string]any)
		if !ok {
			continue
		}
		if src, ok := m[source].(map[string]any); ok {
			val, ok, _ := unstructured.NestedString(src, path...)
			return val, ok
		}
	}
	return "", false
}

// bootVMILocked starts the VMI at key once it is scheduling and its
// cloud-init Secret exists: a box from the Secret's user data (none with
// SetNoBoot), or phase Failed when the user data does not boot.
func (s *Server) bootVMILocked(key string) {
	u := s.vmis[key]
	if u == nil {
		return
	}
	if phase, _, _ := unstructured.NestedString(u.Object, "status", "phase"); phase != PhaseScheduling {
		return
	}
	name, _ := vmiVolume(u, "cloudInitNoCloud", "secretRef", "name")
	sec := s.secrets[u.GetNamespace()+"/"+name]
	if sec == nil {
		return
	}
	data := sec.Data["userdata"]
	if data == nil {
		data = sec.Data["userData"]
	}
	ip := s.fleet.NewAddress()
	if !s.noBoot {
		if err := s.fleet.Boot(ip, string(data)); err != nil {
			_ = unstructured.SetNestedField(u.Object, PhaseFailed, "status", "phase")
			_ = unstructured.SetNestedField(u.Object, err.Error(), "status", "reason")
			return
		}
		s.boxes[vmiBox+key] = ip
	}
	_ = unstructured.SetNestedField(u.Object, PhaseRunning, "status", "phase")
	_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"name": "default", "ipAddress": ip}}, "status", "interfaces")
}
