// Package fakekube is a fake Kubernetes API server for the tests of the
// kubernetes and kubevirt providers: the core/v1 paths the providers use
// (pods, services, secrets, nodes, /version), written from Kubernetes'
// published OpenAPI description of core/v1:
//
//	https://github.com/kubernetes/kubernetes/blob/001a778fa11f78082f945366a80e46d518b21309/api/openapi-spec/v3/api__v1_openapi.json
//
// (paths /api/v1/namespaces/{namespace}/pods[/{name}], .../services,
// .../secrets and /api/v1/nodes/{name}; the list parameters labelSelector,
// limit and continue with ListMeta.continue; the
// io.k8s.apimachinery.pkg.apis.meta.v1.Status body of every error, with
// reason and code; 201 on create, 409 AlreadyExists, 404 NotFound, 415 for
// a patch type it does not take), plus the API's documented behaviour the
// description does not carry: 403 Forbidden "exceeded quota" when a
// ResourceQuota refuses a pod, 429 TooManyRequests with Retry-After, and
// the garbage collector deleting a pod's dependents (ownerReferences).
//
// A pod runs once it is scheduled (every pod goes to the next node in
// turn) and its bootstrap Secret exists: the fake then boots a real SSH
// box from the Secret's bootstrap script on a cloudtest.Fleet, and
// MapAddress maps a Service's node port (at a node's address) or load
// balancer address to that box.
//
// KubeVirt's VirtualMachineInstances (kubevirt.io/v1) are served from
// KubeVirt's published OpenAPI description:
//
//	https://github.com/kubevirt/kubevirt/blob/00341b09120e281be174fce990980ce9d0cf7c74/api/openapi-spec/swagger.json
//
// (paths /apis/kubevirt.io/v1/ (the APIResourceList) and
// /apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances
// [/{name}] with list, create, read, patch (application/merge-patch+json)
// and delete; the list parameters labelSelector, limit and continue;
// definitions v1.VirtualMachineInstance, v1.VirtualMachineInstanceSpec
// (domain.resources.requests, domain.cpu.cores, volumes with
// containerDisk.image and cloudInitNoCloud.secretRef) and
// v1.VirtualMachineInstanceStatus (phase, nodeName, interfaces)), plus
// KubeVirt's documented behaviour: the cloud-init user data read from the
// Secret's "userdata" (or "userData") key, the VMI's labels copied to its
// virt-launcher pod (so a Service selecting them reaches the VM), and a
// ResourceQuota counting VMIs refusing one with 403 "exceeded quota". A
// VMI runs once its cloud-init Secret exists: the fake boots a real SSH
// box from the Secret's user data on the fleet and sets phase Running.
package fakekube

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// BootstrapKey is the Secret key holding a pod's bootstrap script.
const BootstrapKey = "bootstrap.sh"

// Node is a node of the fake cluster.
type Node struct {
	Name, ExternalIP, InternalIP string
}

// Create is one attempt to create a pod: its namespace and its requests.
type Create struct {
	Namespace, CPU, Memory string
}

// Server is the fake API server; serve it with httptest.
type Server struct {
	fleet *cloudtest.Fleet

	mu       sync.Mutex
	nodes    []Node
	pods     map[string]*corev1.Pod // by namespace/name
	services map[string]*corev1.Service
	secrets  map[string]*corev1.Secret
	vmis     map[string]*unstructured.Unstructured
	noKV     bool
	boxes    map[string]string // pod key -> fleet address
	creates  []Create
	full     map[Create]bool
	noBoot   bool
	lbAtPod  bool
	throttle int
	retry    string
	next     int // scheduling turn, node ports, UIDs, resource versions
}

// New returns a fake cluster with nodes, whose pods boot on fleet.
func New(fleet *cloudtest.Fleet, nodes ...Node) *Server {
	return &Server{
		fleet: fleet, nodes: nodes, pods: map[string]*corev1.Pod{}, services: map[string]*corev1.Service{},
		secrets: map[string]*corev1.Secret{}, vmis: map[string]*unstructured.Unstructured{}, boxes: map[string]string{}, full: map[Create]bool{},
	}
}

// VMIResource is KubeVirt's VirtualMachineInstance resource.
const VMIResource = "virtualmachineinstances"

// SetNoKubeVirt makes the cluster not serve KubeVirt's API group.
func (s *Server) SetNoKubeVirt() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noKV = true
}

// VMIs returns copies of the VMIs, sorted by namespace/name.
func (s *Server) VMIs() []unstructured.Unstructured {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []unstructured.Unstructured
	for _, k := range slices.Sorted(maps.Keys(s.vmis)) {
		out = append(out, *s.vmis[k].DeepCopy())
	}
	return out
}

// AddVMI adds a VMI as it is (labels, phase), for cleanup tests.
func (s *Server) AddVMI(v unstructured.Unstructured) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	v.SetUID(types.UID(fmt.Sprintf("uid-%d", s.next)))
	s.vmis[v.GetNamespace()+"/"+v.GetName()] = v.DeepCopy()
}

// SetNoBoot makes pods created from now on run without an SSH box.
func (s *Server) SetNoBoot() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noBoot = true
}

// SetLoadBalancerAtPod gives a LoadBalancer Service created from now on
// the address of its pod's box as its load balancer address, so that a
// client reaches the box there without an address mapper (a loopback
// fleet's box listens at its own address, on port 2222).
func (s *Server) SetLoadBalancerAtPod() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lbAtPod = true
}

// SetFull makes a ResourceQuota of namespace c.Namespace refuse pods
// requesting c.CPU and c.Memory.
func (s *Server) SetFull(c Create) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.full[c] = true
}

// Throttle answers the next n requests 429 with Retry-After retryAfter.
func (s *Server) Throttle(n int, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttle, s.retry = n, retryAfter
}

// Creates returns every attempt to create a pod, refused ones included.
func (s *Server) Creates() []Create {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.creates)
}

// Pods, Services and Secrets return copies of the objects, sorted by
// namespace/name.
func (s *Server) Pods() []corev1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	return values(s.pods)
}

func (s *Server) Services() []corev1.Service {
	s.mu.Lock()
	defer s.mu.Unlock()
	return values(s.services)
}

func (s *Server) Secrets() []corev1.Secret {
	s.mu.Lock()
	defer s.mu.Unlock()
	return values(s.secrets)
}

func values[T any](m map[string]*T) []T {
	var out []T
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, *m[k])
	}
	return out
}

// AddPod adds a pod as it is (labels, phase), for cleanup tests.
func (s *Server) AddPod(p corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	p.UID = types.UID(fmt.Sprintf("uid-%d", s.next))
	s.pods[p.Namespace+"/"+p.Name] = &p
}

// MapAddress maps a Service's address and port (a node port at a node's
// address, or a load balancer's address and port) to where its pod's box
// listens; anything else to where nothing listens.
func (s *Server) MapAddress(host string, port int) (string, int) {
	s.mu.Lock()
	box, target := s.backendLocked(host, port)
	s.mu.Unlock()
	return s.fleet.MapAddress(box, target)
}

func (s *Server) backendLocked(host string, port int) (string, int) {
	isNode := slices.ContainsFunc(s.nodes, func(n Node) bool { return host == n.ExternalIP || host == n.InternalIP })
	for _, svc := range s.services {
		if len(svc.Spec.Ports) == 0 {
			continue
		}
		sp := svc.Spec.Ports[0]
		lb := slices.ContainsFunc(svc.Status.LoadBalancer.Ingress, func(in corev1.LoadBalancerIngress) bool { return in.IP == host })
		if !(isNode && int(sp.NodePort) == port || lb && int(sp.Port) == port) {
			continue
		}
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		for k, p := range s.pods {
			if p.Namespace == svc.Namespace && sel.Matches(labels.Set(p.Labels)) && s.boxes[k] != "" {
				return s.boxes[k], sp.TargetPort.IntValue()
			}
		}
		for k, v := range s.vmis { // the virt-launcher pod carries the VMI's labels
			if v.GetNamespace() == svc.Namespace && sel.Matches(labels.Set(v.GetLabels())) && s.boxes[vmiBox+k] != "" {
				return s.boxes[vmiBox+k], sp.TargetPort.IntValue()
			}
		}
	}
	return host, port
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.throttle > 0 {
		s.throttle--
		w.Header().Set("Retry-After", s.retry)
		writeStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, "the server has received too many requests and has asked us to try again later", "", "")
		return
	}
	if r.URL.Path == "/version" && r.Method == http.MethodGet {
		writeJSON(w, http.StatusOK, version.Info{Major: "1", Minor: "35", GitVersion: "v1.35.0-fake"})
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	kv := len(parts) >= 3 && parts[0] == "apis" && parts[1] == "kubevirt.io" && parts[2] == "v1" && !s.noKV
	switch {
	case kv && len(parts) == 3 && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, metav1.APIResourceList{
			TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "kubevirt.io/v1",
			APIResources: []metav1.APIResource{{Name: VMIResource, SingularName: "virtualmachineinstance", Namespaced: true,
				Kind: "VirtualMachineInstance", ShortNames: []string{"vmi", "vmis"},
				Verbs: metav1.Verbs{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"}}},
		})
	case kv && len(parts) == 6 && parts[3] == "namespaces" && parts[5] == VMIResource:
		s.collection(w, r, parts[4], parts[5])
	case kv && len(parts) == 7 && parts[3] == "namespaces" && parts[5] == VMIResource:
		s.object(w, r, parts[4], parts[5], parts[6])
	case len(parts) == 4 && parts[0] == "api" && parts[1] == "v1" && parts[2] == "nodes" && r.Method == http.MethodGet:
		s.getNode(w, parts[3])
	case len(parts) == 5 && parts[0] == "api" && parts[1] == "v1" && parts[2] == "namespaces":
		s.collection(w, r, parts[3], parts[4])
	case len(parts) == 6 && parts[0] == "api" && parts[1] == "v1" && parts[2] == "namespaces":
		s.object(w, r, parts[3], parts[4], parts[5])
	default:
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource", "", "")
	}
}

func (s *Server) getNode(w http.ResponseWriter, name string) {
	i := slices.IndexFunc(s.nodes, func(n Node) bool { return n.Name == name })
	if i < 0 {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("nodes %q not found", name), "nodes", name)
		return
	}
	n := s.nodes[i]
	node := corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: n.Name}}
	if n.InternalIP != "" {
		node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: n.InternalIP})
	}
	if n.ExternalIP != "" {
		node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: n.ExternalIP})
	}
	writeJSON(w, http.StatusOK, node)
}

// collection serves list (GET) and create (POST) of a resource.
func (s *Server) collection(w http.ResponseWriter, r *http.Request, ns, resource string) {
	switch {
	case r.Method == http.MethodGet:
		s.list(w, r, ns, resource)
	case r.Method == http.MethodPost:
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		switch resource {
		case "pods":
			s.createPod(w, ns, body)
		case "services":
			s.createService(w, ns, body)
		case "secrets":
			s.createSecret(w, ns, body)
		case VMIResource:
			s.createVMI(w, ns, body)
		default:
			writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource", resource, "")
		}
	default:
		writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "the server does not allow this method on the requested resource", resource, "")
	}
}

// list serves a list with labelSelector, limit and continue: objects in
// name order, continue the base64 of the last name returned.
func (s *Server) list(w http.ResponseWriter, r *http.Request, ns, resource string) {
	q := r.URL.Query()
	sel, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "unable to parse requirement: "+err.Error(), resource, "")
		return
	}
	limit := 0
	if l := q.Get("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 0 {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "invalid limit "+l, resource, "")
			return
		}
	}
	after := ""
	if c := q.Get("continue"); c != "" {
		b, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "continue key is not valid: illegal base64 data", resource, "")
			return
		}
		after = string(b)
	}
	meta := func(o metav1.Object) (string, map[string]string) { return o.GetName(), o.GetLabels() }
	var names []string
	var objs []any
	add := func(o metav1.Object, v any) {
		name, l := meta(o)
		if o.GetNamespace() == ns && sel.Matches(labels.Set(l)) && name > after {
			names = append(names, name)
			objs = append(objs, v)
		}
	}
	switch resource {
	case "pods":
		for _, p := range s.pods {
			add(p, *p)
		}
	case "services":
		for _, v := range s.services {
			add(v, *v)
		}
	case "secrets":
		for _, v := range s.secrets {
			add(v, *v)
		}
	case VMIResource:
		for _, v := range s.vmis {
			add(v, v.Object)
		}
	default:
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource", resource, "")
		return
	}
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(names[a], names[b]) })
	lm := metav1.ListMeta{ResourceVersion: strconv.Itoa(s.next)}
	if limit > 0 && len(order) > limit {
		order = order[:limit]
		lm.Continue = base64.RawURLEncoding.EncodeToString([]byte(names[order[limit-1]]))
	}
	items := make([]any, 0, len(order))
	for _, i := range order {
		items = append(items, objs[i])
	}
	kind := map[string]string{"pods": "PodList", "services": "ServiceList", "secrets": "SecretList", VMIResource: "VirtualMachineInstanceList"}[resource]
	apiVersion := "v1"
	if resource == VMIResource {
		apiVersion = "kubevirt.io/v1"
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": kind, "apiVersion": apiVersion, "metadata": lm, "items": items})
}

// newMeta fills in what the API server sets on a created object.
func (s *Server) newMeta(m *metav1.ObjectMeta, ns string) {
	s.next++
	m.Namespace = ns
	m.UID = types.UID(fmt.Sprintf("uid-%d", s.next))
	m.ResourceVersion = strconv.Itoa(s.next)
	m.CreationTimestamp = metav1.NewTime(time.Now().Truncate(time.Second))
}

// checkNew decodes a created object's body, or answers why not.
func checkNew(w http.ResponseWriter, body []byte, v any, m *metav1.ObjectMeta, ns, resource string) bool {
	if err := json.Unmarshal(body, v); err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "the object provided is unrecognized: "+err.Error(), resource, "")
		return false
	}
	if m.Name == "" || len(m.Name) > 253 || strings.ToLower(m.Name) != m.Name || (m.Namespace != "" && m.Namespace != ns) {
		writeStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf("%s %q is invalid: metadata.name or namespace", resource, m.Name), resource, m.Name)
		return false
	}
	return true
}

func alreadyExists(w http.ResponseWriter, resource, name string) {
	writeStatus(w, http.StatusConflict, metav1.StatusReasonAlreadyExists, fmt.Sprintf("%s %q already exists", resource, name), resource, name)
}

func (s *Server) createPod(w http.ResponseWriter, ns string, body []byte) {
	var p corev1.Pod
	if !checkNew(w, body, &p, &p.ObjectMeta, ns, "pods") {
		return
	}
	if len(p.Spec.Containers) == 0 || p.Spec.Containers[0].Image == "" {
		writeStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf("Pod %q is invalid: spec.containers[0].image: Required value", p.Name), "pods", p.Name)
		return
	}
	req := p.Spec.Containers[0].Resources.Requests
	c := Create{Namespace: ns, CPU: req.Cpu().String(), Memory: req.Memory().String()}
	s.creates = append(s.creates, c)
	key := ns + "/" + p.Name
	if _, ok := s.pods[key]; ok {
		alreadyExists(w, "pods", p.Name)
		return
	}
	if s.full[c] {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
			fmt.Sprintf("pods %q is forbidden: exceeded quota: compute, requested: requests.cpu=%s,requests.memory=%s, used: requests.cpu=16,requests.memory=64Gi, limited: requests.cpu=16,requests.memory=64Gi", p.Name, c.CPU, c.Memory),
			"pods", p.Name)
		return
	}
	s.newMeta(&p.ObjectMeta, ns)
	p.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
	if len(s.nodes) > 0 {
		p.Spec.NodeName = s.nodes[s.next%len(s.nodes)].Name
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodPending}
	s.pods[key] = &p
	s.bootLocked(key)
	writeJSON(w, http.StatusCreated, p)
}

func (s *Server) createSecret(w http.ResponseWriter, ns string, body []byte) {
	var v corev1.Secret
	if !checkNew(w, body, &v, &v.ObjectMeta, ns, "secrets") {
		return
	}
	key := ns + "/" + v.Name
	if _, ok := s.secrets[key]; ok {
		alreadyExists(w, "secrets", v.Name)
		return
	}
	s.newMeta(&v.ObjectMeta, ns)
	v.TypeMeta = metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"}
	s.secrets[key] = &v
	for k := range s.pods {
		s.bootLocked(k)
	}
	for k := range s.vmis {
		s.bootVMILocked(k)
	}
	writeJSON(w, http.StatusCreated, v)
}

func (s *Server) createService(w http.ResponseWriter, ns string, body []byte) {
	var v corev1.Service
	if !checkNew(w, body, &v, &v.ObjectMeta, ns, "services") {
		return
	}
	if len(v.Spec.Ports) == 0 {
		writeStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf("Service %q is invalid: spec.ports: Required value", v.Name), "services", v.Name)
		return
	}
	key := ns + "/" + v.Name
	if _, ok := s.services[key]; ok {
		alreadyExists(w, "services", v.Name)
		return
	}
	s.newMeta(&v.ObjectMeta, ns)
	v.TypeMeta = metav1.TypeMeta{Kind: "Service", APIVersion: "v1"}
	switch v.Spec.Type {
	case corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		for i := range v.Spec.Ports {
			if v.Spec.Ports[i].NodePort == 0 {
				v.Spec.Ports[i].NodePort = int32(30000 + s.next%2768)
			}
		}
	}
	if v.Spec.Type == corev1.ServiceTypeLoadBalancer {
		ip := s.fleet.NewAddress()
		if s.lbAtPod {
			sel := labels.SelectorFromSet(v.Spec.Selector)
			for k, p := range s.pods {
				if p.Namespace == ns && sel.Matches(labels.Set(p.Labels)) && s.boxes[k] != "" {
					ip = s.boxes[k]
				}
			}
		}
		v.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	}
	s.services[key] = &v
	writeJSON(w, http.StatusCreated, v)
}

// bootLocked starts the pod at key once it is pending and its bootstrap
// Secret exists: a box from the Secret's script (none with SetNoBoot), or
// phase Failed when the script does not boot.
func (s *Server) bootLocked(key string) {
	p := s.pods[key]
	if p == nil || p.Status.Phase != corev1.PodPending || len(p.Spec.Volumes) == 0 || p.Spec.Volumes[0].Secret == nil {
		return
	}
	sec := s.secrets[p.Namespace+"/"+p.Spec.Volumes[0].Secret.SecretName]
	if sec == nil {
		return
	}
	ip := s.fleet.NewAddress()
	if !s.noBoot {
		if err := s.fleet.Boot(ip, string(sec.Data[BootstrapKey])); err != nil {
			p.Status.Phase, p.Status.Message = corev1.PodFailed, err.Error()
			return
		}
		s.boxes[key] = ip
	}
	p.Status.Phase, p.Status.PodIP = corev1.PodRunning, ip
	for _, n := range s.nodes {
		if n.Name == p.Spec.NodeName {
			p.Status.HostIP = n.InternalIP
		}
	}
}

// object serves get, patch and delete of one object.
func (s *Server) object(w http.ResponseWriter, r *http.Request, ns, resource, name string) {
	key := ns + "/" + name
	var obj any
	var meta metav1.Object
	switch resource {
	case "pods":
		if p := s.pods[key]; p != nil {
			obj, meta = p, &p.ObjectMeta
		}
	case "services":
		if v := s.services[key]; v != nil {
			obj, meta = v, &v.ObjectMeta
		}
	case "secrets":
		if v := s.secrets[key]; v != nil {
			obj, meta = v, &v.ObjectMeta
		}
	case VMIResource:
		if v := s.vmis[key]; v != nil {
			obj, meta = v, v
		}
	}
	if obj == nil {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("%s %q not found", resource, name), resource, name)
		return
	}
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, obj)
	case http.MethodPatch:
		s.patch(w, r, meta, obj, resource)
	case http.MethodDelete:
		s.deleteLocked(resource, key)
		writeJSON(w, http.StatusOK, obj)
	default:
		writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "the server does not allow this method on the requested resource", resource, name)
	}
}

// patch applies a JSON merge patch (RFC 7386) of metadata.labels and
// metadata.annotations; other fields are not patched by the fake.
func (s *Server) patch(w http.ResponseWriter, r *http.Request, meta metav1.Object, obj any, resource string) {
	if ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); ct != string(types.MergePatchType) {
		writeStatus(w, http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType, "the body of the request was in an unknown format - accepted media types include: application/merge-patch+json", resource, meta.GetName())
		return
	}
	var p struct {
		Metadata struct {
			Labels      map[string]*string `json:"labels"`
			Annotations map[string]*string `json:"annotations"`
		} `json:"metadata"`
	}
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = json.Unmarshal(body, &p)
	}
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "error decoding patch: "+err.Error(), resource, meta.GetName())
		return
	}
	merge := func(dst map[string]string, src map[string]*string) map[string]string {
		for k, v := range src {
			if dst == nil {
				dst = map[string]string{}
			}
			if v == nil {
				delete(dst, k)
			} else {
				dst[k] = *v
			}
		}
		return dst
	}
	meta.SetLabels(merge(meta.GetLabels(), p.Metadata.Labels))
	meta.SetAnnotations(merge(meta.GetAnnotations(), p.Metadata.Annotations))
	s.next++
	meta.SetResourceVersion(strconv.Itoa(s.next))
	writeJSON(w, http.StatusOK, obj)
}

// deleteLocked deletes an object; a pod's box stops, and the pod's
// dependents go as the garbage collector would delete them.
func (s *Server) deleteLocked(resource, key string) {
	switch resource {
	case "services":
		delete(s.services, key)
	case "secrets":
		delete(s.secrets, key)
	case "pods":
		p := s.pods[key]
		delete(s.pods, key)
		s.collectLocked(key, p.UID)
	case VMIResource:
		v := s.vmis[key]
		delete(s.vmis, key)
		s.collectLocked(vmiBox+key, v.GetUID())
	}
}

// collectLocked stops the box at boxKey and deletes the dependents of
// the object with uid, as the garbage collector would.
func (s *Server) collectLocked(boxKey string, uid types.UID) {
	if ip := s.boxes[boxKey]; ip != "" {
		delete(s.boxes, boxKey)
		_ = s.fleet.Halt(ip)
	}
	owned := func(refs []metav1.OwnerReference) bool {
		return slices.ContainsFunc(refs, func(o metav1.OwnerReference) bool { return o.UID == uid })
	}
	maps.DeleteFunc(s.services, func(_ string, v *corev1.Service) bool { return owned(v.OwnerReferences) })
	maps.DeleteFunc(s.secrets, func(_ string, v *corev1.Secret) bool { return owned(v.OwnerReferences) })
}

// ErrorBody is the Status body of an error with code, as the API server
// writes it.
func ErrorBody(code int) string {
	b, _ := json.Marshal(status(code, reasons[code], "fake "+http.StatusText(code), "", ""))
	return string(b)
}

var reasons = map[int]metav1.StatusReason{
	http.StatusBadRequest: metav1.StatusReasonBadRequest, http.StatusUnauthorized: metav1.StatusReasonUnauthorized,
	http.StatusForbidden: metav1.StatusReasonForbidden, http.StatusNotFound: metav1.StatusReasonNotFound,
	http.StatusConflict: metav1.StatusReasonConflict, http.StatusUnprocessableEntity: metav1.StatusReasonInvalid,
	http.StatusTooManyRequests: metav1.StatusReasonTooManyRequests, http.StatusInternalServerError: metav1.StatusReasonInternalError,
	http.StatusServiceUnavailable: metav1.StatusReasonServiceUnavailable, http.StatusGatewayTimeout: metav1.StatusReasonTimeout,
}

func status(code int, reason metav1.StatusReason, msg, kind, name string) metav1.Status {
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code),
	}
	if kind != "" || name != "" {
		st.Details = &metav1.StatusDetails{Name: name, Kind: kind}
	}
	return st
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg, kind, name string) {
	writeJSON(w, code, status(code, reason, msg, kind, name))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(ErrorBody(http.StatusInternalServerError))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
